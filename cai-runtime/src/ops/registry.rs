//! The op registry: each op of the library as data (its name, and how it takes strided
//! inputs), the elementwise unary ops' table, and the binary operations.

use crate::cai::DType;
use crate::error::{Error, Result};

/// How an op takes input arrays that are not C-contiguous: a property of its kernel's
/// parameters, written beside the op's name so that an op call applies it, not the caller.
/// (A wrong entry cannot go unnoticed: a launch refuses a strided view for a `T*` parameter.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strided {
    /// The kernel reads any strides (its inputs are `caijit::Array<T, N>` parameters): views
    /// are passed as they are, broadcast and negative strides included.
    Any,
    /// The kernel reads C order (`T*` parameters): a strided input is first copied into a
    /// C-ordered temporary on the launch stream, which is freed, stream-ordered, after the op.
    Copy,
    /// The op works in place on C-ordered memory and a copy would lose its writes: a
    /// strided array is an error.
    Refuse,
}

/// An op of the kernel library: the name its errors and its Python function carry, its
/// strided-input policy, and whether its kernels may write an output that is exactly one of
/// their inputs (elementwise: each element is read before it is written, by one thread).
/// Any other overlap of `out` with an input is written through a temporary, as NumPy does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpSpec {
    pub name: &'static str,
    pub strided: Strided,
    pub in_place: bool,
}

const fn spec(name: &'static str, strided: Strided, in_place: bool) -> OpSpec {
    OpSpec { name, strided, in_place }
}

pub(crate) const AXPY: OpSpec = spec("axpy", Strided::Copy, true);
pub(crate) const SCALE: OpSpec = spec("scale", Strided::Copy, true);
pub(crate) const FILL: OpSpec = spec("fill", Strided::Refuse, true);
pub(crate) const CAST: OpSpec = spec("cast", Strided::Copy, true);
pub(crate) const ASCONTIGUOUS: OpSpec = spec("ascontiguous", Strided::Any, true);
pub(crate) const TRANSPOSE: OpSpec = spec("transpose", Strided::Copy, false);
pub(crate) const SOFTMAX: OpSpec = spec("softmax", Strided::Copy, false);
/// The binary operations' policy ([`BinaryOp::spec`]): `binary_broadcast` reads any strides.
const BINARY: Strided = Strided::Any;
/// The reductions' policy ([`Reduction::spec`]).
const REDUCE: Strided = Strided::Copy;

/// The ops with a function of their own (the binary operations, the reductions and the
/// elementwise unary ops are listed by [`registry`] from their tables).
const OWN: [OpSpec; 7] = [AXPY, SCALE, FILL, CAST, ASCONTIGUOUS, TRANSPOSE, SOFTMAX];

/// Every op of the library, with its strided-input policy.
pub fn registry() -> impl Iterator<Item = OpSpec> {
    let binary = BinaryOp::ALL.into_iter().map(BinaryOp::spec);
    let reductions = [Reduction::Sum, Reduction::Max].into_iter().map(Reduction::spec);
    OWN.into_iter().chain(binary).chain(reductions).chain(UNARY_OPS.iter().map(UnaryOp::spec))
}

/// An elementwise op `out = f(x)` of the kernel library's registry. Adding one is a file and
/// an entry of [`UNARY_OPS`]: `kernels/ops/<name>.cu` defines
/// `template <typename T> __global__ void unary(const T* x, T* out, long long n)`
/// (usually a functor and `caijit::map`, see `abs.cu`); [`unary`](super::unary) launches
/// it, and the Python binding (`caijit.ops.<name>`) is made from the table.
#[derive(Clone, Copy, Debug)]
pub struct UnaryOp {
    /// The op's name and its file's name (`kernels/ops/<name>.cu`).
    pub name: &'static str,
    /// One line for the docs (`caijit.ops.<name>.__doc__`).
    pub doc: &'static str,
    /// Whether it is defined for a dtype ([`UnaryOp::dtypes`] lists them).
    pub supports: fn(DType) -> bool,
    /// How it takes strided inputs: [`Strided::Copy`] for the `unary(const T* x, ...)`
    /// kernel every entry defines.
    pub strided: Strided,
}

/// Every dtype but bool and the complex ones.
fn real_number(d: DType) -> bool {
    !matches!(d, DType::Bool | DType::C64 | DType::C128)
}

impl UnaryOp {
    /// The dtypes it is defined for, in [`DType::ALL`]'s order.
    pub fn dtypes(&self) -> impl Iterator<Item = DType> + '_ {
        DType::ALL.into_iter().filter(|&d| (self.supports)(d))
    }

    pub fn spec(&self) -> OpSpec {
        spec(self.name, self.strided, true)
    }
}

/// The registry of elementwise unary ops.
pub const UNARY_OPS: &[UnaryOp] =
    &[UnaryOp { name: "abs", doc: "``out = |x|``, elementwise (real types).", supports: real_number, strided: Strided::Copy }];

/// The op of [`UNARY_OPS`] named `name`.
pub fn unary_op(name: &str) -> Result<&'static UnaryOp> {
    UNARY_OPS.iter().find(|o| o.name == name).ok_or_else(|| {
        let known: Vec<&str> = UNARY_OPS.iter().map(|o| o.name).collect();
        Error::argument(format!("no unary op named {name:?} (the library has {})", known.join(", ")))
    })
}

/// The elementwise operations of [`binary`](super::binary).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BinaryOp {
    // The discriminants are the kernels' operation codes.
    Add = 0,
    Subtract = 1,
    Multiply = 2,
    /// Integer division truncates, as in C++.
    Divide = 3,
    Maximum = 4,
    Minimum = 5,
}

impl BinaryOp {
    /// Every operation, in code order.
    pub const ALL: [BinaryOp; 6] =
        [BinaryOp::Add, BinaryOp::Subtract, BinaryOp::Multiply, BinaryOp::Divide, BinaryOp::Maximum, BinaryOp::Minimum];

    /// The operation named as NumPy names its ufunc (`"add"`, `"maximum"`, ...).
    pub fn from_name(name: &str) -> Option<BinaryOp> {
        Self::ALL.into_iter().find(|op| op.name() == name)
    }

    /// NumPy's name of the operation.
    pub const fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Subtract => "subtract",
            BinaryOp::Multiply => "multiply",
            BinaryOp::Divide => "divide",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
        }
    }

    pub const fn spec(self) -> OpSpec {
        spec(self.name(), BINARY, true)
    }
}

/// The reductions of [`Call::reduce`](super::Call::reduce) ([`sum`](super::sum), [`max`](super::max)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// The sum (16-bit floats accumulate in float32, integers in 64 bits).
    Sum,
    Max,
}

impl Reduction {
    /// The reduction named as `caijit.ops` names it (`"sum"`, `"max"`).
    pub fn from_name(name: &str) -> Result<Reduction> {
        match name {
            "sum" => Ok(Reduction::Sum),
            "max" => Ok(Reduction::Max),
            _ => Err(Error::argument(format!("no reduction {name:?} (sum or max)"))),
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Reduction::Sum => "sum",
            Reduction::Max => "max",
        }
    }

    pub const fn spec(self) -> OpSpec {
        spec(self.name(), REDUCE, false)
    }
}

/// Which axes a reduction reduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Axis {
    /// Every axis: one element.
    All,
    /// The last axis: the array's shape without it.
    Last,
}

impl Axis {
    /// `None`, or an axis index counted as NumPy counts it (`-1` or `ndim - 1`: the last
    /// axis), of an array of rank `ndim`; other axes are refused (the kernels reduce rows).
    pub fn from_index(what: &str, axis: Option<i64>, ndim: usize) -> Result<Axis> {
        match axis {
            None => Ok(Axis::All),
            Some(a) if a == -1 || a == ndim as i64 - 1 => Ok(Axis::Last),
            Some(_) => Err(Error::argument(format!("{what}: axis must be None or the last axis"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_ops_are_named_as_numpy_names_them() {
        for (code, op) in BinaryOp::ALL.into_iter().enumerate() {
            assert_eq!(op as usize, code);
            assert_eq!(BinaryOp::from_name(op.name()), Some(op));
        }
        assert_eq!(BinaryOp::from_name("power"), None);
    }

    #[test]
    fn the_registry_names_each_op_once_with_its_policy() {
        let all: Vec<OpSpec> = registry().collect();
        let mut names: Vec<&str> = all.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len(), "an op is registered twice: {all:?}");
        let policy = |name: &str| all.iter().find(|s| s.name == name).map(|s| s.strided);
        // Kernels over `caijit::Array` take views as they are; pointer kernels get copies;
        // `fill` writes its array in place.
        assert_eq!(policy("add"), Some(Strided::Any));
        assert_eq!(policy("ascontiguous"), Some(Strided::Any));
        for name in ["axpy", "scale", "cast", "transpose", "softmax", "sum", "max", "abs"] {
            assert_eq!(policy(name), Some(Strided::Copy), "{name}");
        }
        assert_eq!(policy("fill"), Some(Strided::Refuse));
    }

    #[test]
    fn axes_are_none_or_the_last() {
        assert_eq!(Axis::from_index("sum", None, 2).unwrap(), Axis::All);
        assert_eq!(Axis::from_index("sum", Some(-1), 2).unwrap(), Axis::Last);
        assert_eq!(Axis::from_index("sum", Some(1), 2).unwrap(), Axis::Last);
        let e = Axis::from_index("sum", Some(0), 2).unwrap_err().to_string();
        assert!(e.contains("sum: axis must be None or the last axis"), "{e}");
        assert!(Reduction::from_name("mean").unwrap_err().to_string().contains("sum or max"));
    }
}
