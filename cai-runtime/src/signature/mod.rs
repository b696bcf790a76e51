//! What each kernel's parameters are. The compiler decides; the source only names.
//!
//! # Examples
//! ```
//! use cai_runtime::signature::{layout_compiled, ptx_entries, types_from_lowered, ParamKind};
//! let ptx = ".visible .entry _Z1kPKfi(.param .u64 _Z1kPKfi_param_0, .param .u32 _Z1kPKfi_param_1)";
//! let (_, types) = types_from_lowered("_Z1kPKfi")?.unwrap();
//! let entries = ptx_entries(ptx)?;
//! let params = layout_compiled("k", &types, &[Some("x".into()), Some("n".into())], &entries["_Z1kPKfi"])?;
//! assert!(matches!(params[0].kind, ParamKind::Pointer { is_const: true, .. }));
//! assert_eq!((params[1].offset, params[1].size), (8, 4));
//! # Ok::<(), cai_runtime::signature::SignatureError>(())
//! ```
//!
//! # Rationale
//! NVRTC does not report parameter types, but it reports names that encode them:
//! - a C++ kernel's lowered (mangled) name, demangled ([`types_from_lowered`]): the exact,
//!   preprocessed, typedef-resolved parameter list of the instance compiled;
//! - for an `extern "C"` kernel (whose symbol is its plain name), the lowered name of a
//!   *probe*: an empty template kernel instantiated with the kernel's function type
//!   (`caijit_probe_<decltype(&scale)>`), demangled the same way ([`probe_types`]);
//! - the PTX `.entry` ([`ptx_entries`]): each parameter's type class (`.f32`, `.u32`, `.u64`,
//!   `.b8[]`), size and alignment as compiled.
//!
//! The demangled types give each parameter's *kind*, the PTX its *layout*; they are
//! cross-checked ([`layout_compiled`]) and a disagreement is an error naming the parameter.
//! The source is read by a tokenizer ([`parse_kernels`]) only to find kernel names,
//! namespaces, template parameters (for deduction, [`deduce`]) and parameter names.
//!
//! # Limitations
//! What the tokenizer cannot read becomes a note ([`Declarations::notes`]), not an error:
//! a kernel made by a macro is still compiled and launchable when named by a name
//! expression. Arrays are `T*`, `const T*` and `caijit::Array<T, N>`; a type named
//! `Array` in another namespace is a struct.

mod decl;
mod deduce;
mod demangle;
mod error;
mod layout;
mod ptx;
mod tokens;
mod types;

pub use decl::{declarations, parse_kernels, scalar_from_cpp, Declarations, KernelDecl, TemplateParam};
pub use deduce::{deduce, headers_for, instance_expression, ArgType, Instance};
pub use demangle::{demangled, mangled_qualified_name, probe_expression, probe_types, types_from_lowered, PROBE_SOURCE, PROBE_TEMPLATE};
pub use error::SignatureError;
pub use layout::{array_param_size, layout, layout_compiled, ArrayLayout, ParamKind, ParamLayout};
pub use ptx::{ptx_entries, ptx_entries_each, PtxClass, PtxParam};
pub use types::{CType, ParamType, Rank};
