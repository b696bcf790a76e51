//! The one error type of the signature readers: each variant carries what was wrong.

/// A failure to read or reconcile a kernel's parameters.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// A lowered name that is mangled but cannot be demangled.
    #[error("cannot demangle {lowered}: {reason}")]
    Demangle { lowered: String, reason: String },
    /// A demangled name with no parameter list.
    #[error("no parameter list in {demangled}")]
    NoParameterList { demangled: String },
    /// A `.entry` with no closing parenthesis.
    #[error("unterminated .entry {entry} in the PTX")]
    PtxEntry { entry: String },
    /// A `.param` of a `.entry` that is not `.param [.align N] .TYPE name[[N]]`.
    #[error("cannot read PTX parameter `{decl}` of {entry}")]
    PtxParam { entry: String, decl: String },
    /// The compiled types and the PTX disagree on the number of parameters.
    #[error("kernel `{kernel}`: the compiler's signature has {declared} parameters but the PTX has {compiled}")]
    Arity { kernel: String, declared: usize, compiled: usize },
    /// A parameter whose type caijit cannot pass (a reference), whose type and PTX disagree
    /// (kind, size or alignment), or that cannot be laid out.
    #[error("kernel `{kernel}` parameter {index}{} (`{ctype}`): {reason}", .name.as_ref().map(|n| format!(" `{n}`")).unwrap_or_default())]
    Param { kernel: String, index: usize, name: Option<String>, ctype: String, reason: String },
    /// The parameters do not fit in the address space.
    #[error("kernel `{kernel}`: the parameters take more than {} bytes", usize::MAX)]
    TooLarge { kernel: String },
    /// A launch with the wrong number of arguments for a template to deduce from.
    #[error("kernel `{kernel}` takes {expected} arguments, got {got}")]
    ArgumentCount { kernel: String, expected: usize, got: usize },
    /// Two arguments deduce different values for one template parameter.
    #[error("template parameter {param} of `{kernel}` is {first} from an earlier argument but {second} from argument {index}")]
    Conflict { kernel: String, param: String, first: String, second: String, index: usize },
    /// A template parameter that no argument deduces and that has no default.
    #[error("cannot deduce template parameter {param} of `{kernel}` from the arguments; pass a typed scalar (e.g. numpy.float32) or call .specialize(\"{kernel}<...>\")")]
    CannotDeduce { kernel: String, param: String },
}

impl SignatureError {
    /// The kernel named in the error as `kernel` (a probe's lowered name) becomes `name`,
    /// and parameter names come from `names` where the error has none.
    pub fn for_kernel(self, name: &str, names: &[Option<String>]) -> SignatureError {
        let named = |index: usize, n: Option<String>| n.or_else(|| names.get(index).cloned().flatten());
        match self {
            SignatureError::Param { index, name: n, ctype, reason, .. } => {
                SignatureError::Param { kernel: name.into(), index, name: named(index, n), ctype, reason }
            }
            SignatureError::Arity { declared, compiled, .. } => SignatureError::Arity { kernel: name.into(), declared, compiled },
            SignatureError::TooLarge { .. } => SignatureError::TooLarge { kernel: name.into() },
            e => e,
        }
    }
}

/// An error about one parameter is an argument error carrying its index, name and C++ type.
impl From<SignatureError> for crate::error::Error {
    fn from(e: SignatureError) -> crate::error::Error {
        match e {
            SignatureError::Param { kernel, index, name, ctype, reason } => crate::error::Error::argument_at(
                index,
                name.as_deref(),
                &ctype,
                format!("kernel `{kernel}` cannot take this parameter: {reason}"),
            ),
            e => crate::error::Error::argument(e.to_string()),
        }
    }
}
