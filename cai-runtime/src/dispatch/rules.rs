//! What a dispatcher decides, as functions of their own: the device a launch runs on, the
//! overload a launch's argument types select, and how a template instance is named.

use crate::cai::DType;
use crate::compile::KernelInfo;
use crate::error::{Error, Result};
use crate::launch::Arg;
use crate::runtime::Stream;
use crate::signature::ArgType;

/// A template argument of an explicit instance
/// ([`Dispatcher::instance`](crate::dispatch::Dispatcher::instance)): a type, as a
/// dtype's C++ type (`float`, `__half`, `caijit::complex<double>`), or an integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TemplateArg {
    Type(DType),
    Int(i64),
}

impl std::fmt::Display for TemplateArg {
    /// As the name expression spells it: [`DType::cpp_name`], or the number.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemplateArg::Type(d) => f.write_str(d.cpp_name()),
            // The literal 9223372036854775808 does not fit a `long long`: its negation is
            // no constant NVRTC can match to an integer parameter.
            TemplateArg::Int(i64::MIN) => f.write_str("(-9223372036854775807LL - 1)"),
            TemplateArg::Int(n) => write!(f, "{n}"),
        }
    }
}

impl From<DType> for TemplateArg {
    fn from(d: DType) -> Self {
        TemplateArg::Type(d)
    }
}

impl From<i64> for TemplateArg {
    fn from(n: i64) -> Self {
        TemplateArg::Int(n)
    }
}

/// The name expression of the instance `name<args>` (`axpy<float>`, `k<__half, 4>`): how
/// [`Dispatcher::instance`](crate::dispatch::Dispatcher::instance) names it, and what a
/// bundle of such instances is baked with.
pub fn template_instance(name: &str, args: &[TemplateArg]) -> String {
    let list: Vec<String> = args.iter().map(TemplateArg::to_string).collect();
    crate::signature::instance_expression(name, &list)
}

/// Which device a launch on `args` runs on: the device of its first non-empty array, else
/// the stream's, else 0 (without asking the driver when there is one device). The one rule
/// every launch follows (Rust's and Python's launches, the ops). An array whose device had
/// to be asked of the driver becomes [`Arg::ArrayOn`], so the launch does not ask again.
pub fn launch_device(args: &mut [Arg<'_>], stream: Option<&Stream>) -> Result<usize> {
    if crate::runtime::device_count()? <= 1 {
        return Ok(0);
    }
    for a in args.iter_mut() {
        let device = match *a {
            Arg::ArrayOn(v, d) if !v.is_empty() => Some(d),
            Arg::Array(v) if !v.is_empty() => {
                let asked = crate::runtime::pointer_device(v.ptr())?;
                if let Some(d) = asked {
                    *a = Arg::ArrayOn(v, d);
                }
                asked
            }
            _ => None,
        };
        if let Some(d) = device {
            return Ok(d);
        }
    }
    match stream {
        Some(s) => Ok(s.device_from_driver()?.unwrap_or(0)),
        None => Ok(0),
    }
}

/// The overload cast that names this overload: `(void(*)(float*, int))ns::k`.
pub fn overload_cast(k: &KernelInfo) -> String {
    let types: Vec<&str> = k.params.iter().map(|p| p.cpp_type.as_str()).collect();
    format!("(void(*)({})){}", types.join(", "), k.qualified_name)
}

/// The lowered name of the one overload whose parameters admit the launch's argument types.
pub fn pick_overload(candidates: Vec<&KernelInfo>, types: &[ArgType]) -> Result<String> {
    let fits: Vec<&KernelInfo> = candidates.iter().copied().filter(|k| admits(k, types)).collect();
    match fits.as_slice() {
        [one] => Ok(one.lowered_name.clone()),
        [] => Err(Error::argument(format!(
            "no overload of this kernel takes these arguments ({types:?}); it has: {}",
            overload_list(candidates.iter().copied())
        ))),
        many => Err(Error::argument(format!(
            "the arguments fit several overloads ({}); pass typed scalars (e.g. numpy.float32) or name one with an overload cast",
            overload_list(many.iter().copied())
        ))),
    }
}

/// Whether a kernel's parameters take arguments of `types`, one each.
pub fn admits(k: &KernelInfo, types: &[ArgType]) -> bool {
    k.params.len() == types.len() && k.params.iter().zip(types).all(|(p, t)| p.kind.admits(t))
}

/// Overloads as messages name them ([`KernelInfo::display_name`]).
pub fn overload_list<'a>(ks: impl Iterator<Item = &'a KernelInfo>) -> String {
    ks.map(KernelInfo::display_name).collect::<Vec<_>>().join(", ")
}
