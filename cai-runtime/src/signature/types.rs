//! Parameter types as C++ spells them: a kernel's, as declared (read from the source) or as
//! compiled (demangled from its lowered name).

use std::fmt;

use crate::cai::DType;

/// The element or value type of a parameter, as declared.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CType {
    /// A type caijit can pass from an array dtype or a scalar.
    Scalar(DType),
    /// A template type parameter (`T`), before substitution.
    TemplateParam(String),
    /// Any other named type: a struct, `void`, an enum, an unknown typedef.
    Named(String),
}

impl fmt::Display for CType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CType::Scalar(d) => f.write_str(d.cpp_name()),
            CType::TemplateParam(n) | CType::Named(n) => f.write_str(n),
        }
    }
}

/// The rank of a `caijit::Array<T, N>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Rank {
    Fixed(usize),
    TemplateParam(String),
}

/// A parameter type, as declared or as compiled.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ParamType {
    /// `T*` / `const T*` (and `T[]`, `T[N]`).
    Pointer { elem: CType, is_const: bool },
    /// `caijit::Array<T, N>` / `caijit::Array<const T, N>`.
    Array { elem: CType, is_const: bool, rank: Rank },
    /// A value: scalar or struct.
    Value(CType),
}

impl fmt::Display for ParamType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = |is_const: &bool| if *is_const { "const " } else { "" };
        match self {
            ParamType::Pointer { elem, is_const } => write!(f, "{}{elem}*", c(is_const)),
            ParamType::Array { elem, is_const, rank } => {
                let r = match rank {
                    Rank::Fixed(n) => n.to_string(),
                    Rank::TemplateParam(p) => p.clone(),
                };
                write!(f, "caijit::Array<{}{elem}, {r}>", c(is_const))
            }
            ParamType::Value(t) => write!(f, "{t}"),
        }
    }
}
