//! Parsing `#[cai(...)]` attributes, collecting every error (serde's `Ctxt` pattern).

use proc_macro2::Span;
use syn::{Attribute, Field, LitInt, LitStr, Path, Type};

/// Errors gathered while parsing and checking; reported together.
#[derive(Default)]
pub struct Errors(Vec<syn::Error>);

impl Errors {
    pub fn push(&mut self, e: syn::Error) {
        self.0.push(e);
    }
    pub fn spanned(&mut self, span: Span, msg: impl std::fmt::Display) {
        self.0.push(syn::Error::new(span, msg));
    }
    pub fn finish(self) -> Result<(), syn::Error> {
        let mut it = self.0.into_iter();
        match it.next() {
            None => Ok(()),
            Some(mut first) => {
                for e in it {
                    first.combine(e);
                }
                Err(first)
            }
        }
    }
}

#[derive(Default)]
pub struct Container {
    /// `#[cai(python)]`: a `__cuda_array_interface__` getter and `FromPyObject` (pyo3).
    pub python: Option<Span>,
    pub dtype: Option<Type>,
    pub krate: Option<Path>,
    pub size: Option<LitInt>,
    pub align: Option<LitInt>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Data,
    Shape,
    Strides,
    Stream,
    Readonly,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Data => "data",
            Role::Shape => "shape",
            Role::Strides => "strides",
            Role::Stream => "stream",
            Role::Readonly => "readonly",
        }
    }
}

#[derive(Default)]
pub struct FieldAttrs {
    pub role: Option<(Role, Span)>,
    pub offset: Option<LitInt>,
}

fn is_cai(a: &Attribute) -> bool {
    a.path().is_ident("cai")
}

pub fn container(attrs: &[Attribute], errors: &mut Errors) -> Container {
    let mut c = Container::default();
    for a in attrs.iter().filter(|a| is_cai(a)) {
        let r = a.parse_nested_meta(|meta| {
            if meta.path.is_ident("dtype") {
                c.dtype = Some(meta.value()?.parse::<Type>()?);
            } else if meta.path.is_ident("crate") {
                let s: LitStr = meta.value()?.parse()?;
                c.krate = Some(s.parse()?);
            } else if meta.path.is_ident("python") {
                c.python = Some(meta.path.segments[0].ident.span());
            } else if meta.path.is_ident("size") {
                c.size = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("align") {
                c.align = Some(meta.value()?.parse()?);
            } else {
                return Err(
                    meta.error("unknown cai attribute; expected `dtype = T`, `python`, `crate = \"path\"`, `size = N` or `align = N`")
                );
            }
            Ok(())
        });
        if let Err(e) = r {
            errors.push(e);
        }
    }
    c
}

pub fn field(f: &Field, errors: &mut Errors) -> FieldAttrs {
    let mut out = FieldAttrs::default();
    for a in f.attrs.iter().filter(|a| is_cai(a)) {
        let r = a.parse_nested_meta(|meta| {
            let role = [
                ("data", Role::Data),
                ("shape", Role::Shape),
                ("strides", Role::Strides),
                ("stream", Role::Stream),
                ("readonly", Role::Readonly),
            ]
            .into_iter()
            .find(|(n, _)| meta.path.is_ident(n))
            .map(|(_, r)| r);
            if let Some(role) = role {
                if let Some((prev, _)) = out.role {
                    return Err(meta.error(format!("this field is already marked `{}`", prev.name())));
                }
                out.role = Some((role, meta.path.segments[0].ident.span()));
            } else if meta.path.is_ident("offset") {
                out.offset = Some(meta.value()?.parse()?);
            } else {
                return Err(meta
                    .error("unknown cai field attribute; expected one of `data`, `shape`, `strides`, `stream`, `readonly`, `offset = N`"));
            }
            Ok(())
        });
        if let Err(e) = r {
            errors.push(e);
        }
    }
    out
}
