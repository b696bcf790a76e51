//! The library's kernels as [`Dispatcher`]s: one per (library file, kernel), made when it is
//! first used. An op names an instance by its template arguments (dtypes and numbers) and
//! the kernel's dispatcher compiles, loads and caches it, per device and template
//! arguments ([`Dispatcher::instance`]), as it does every launch's instances.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use super::registry::UNARY_OPS;
use crate::compile::{Program, OPS};
use crate::dispatch::{Dispatcher, TemplateArg};
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::runtime::Context;

/// The kernels of each library file but the unary ops' (each of which defines one kernel,
/// `unary`; [`UNARY_OPS`]).
const KERNELS: &[(&str, &[&str])] = &[
    ("elementwise", &["axpy", "scale", "fill", "cast", "binary_contiguous", "binary_broadcast"]),
    ("strided_copy", &["strided_copy", "strided_scatter"]),
    ("transpose", &["transpose"]),
    ("reduce", &["reduce_partial", "reduce_final", "reduce_rows"]),
    ("softmax", &["softmax_rows_reg", "softmax_rows"]),
];

/// The library's dispatchers by (file, kernel), each made on first use.
type Table = HashMap<(&'static str, &'static str), OnceLock<Dispatcher>>;

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let unary = UNARY_OPS.iter().map(|op| (op.name, "unary"));
        let others = KERNELS.iter().flat_map(|(file, kernels)| kernels.iter().map(move |k| (*file, *k)));
        unary.chain(others).map(|key| (key, OnceLock::new())).collect()
    })
}

/// Every (file, kernel) of the library.
#[cfg(test)]
pub(crate) fn kernels() -> impl Iterator<Item = (&'static str, &'static str)> {
    table().keys().copied()
}

/// The program of library file `file` (`kernels/ops/<file>.cu`), named `<file>.cu`: what
/// its kernels' instances are compiled from, each with its one name expression.
fn program(file: &str) -> Result<Program> {
    match OPS.iter().find(|(n, _)| *n == file) {
        Some((_, source)) => Ok(Program::new(*source).name(format!("{file}.cu"))),
        None => Err(Error::argument(format!("the kernel library has no file {file}.cu"))),
    }
}

/// The dispatcher of kernel `name` of library file `file`.
pub(crate) fn dispatcher(file: &'static str, name: &'static str) -> Result<&'static Dispatcher> {
    let Some(slot) = table().get(&(file, name)) else {
        return Err(Error::argument(format!("the kernel library has no kernel `{name}` in {file}.cu")));
    };
    if let Some(d) = slot.get() {
        return Ok(d);
    }
    // Each is a template its file declares once, in no namespace (a test checks it): its
    // dispatcher reads the file's declarations only if something other than an explicit
    // instance asks (a first op from a bundle then parses nothing).
    let made = Dispatcher::template(program(file)?, name);
    Ok(slot.get_or_init(|| made))
}

/// The loaded instance `name<targs>` of library file `file`'s kernel `name`, on `ctx`'s
/// device: its dispatcher's, cached there per device and template arguments (a call looks
/// it up without writing its name expression).
pub(crate) fn kernel(ctx: &Arc<Context>, file: &'static str, name: &'static str, targs: &[TemplateArg]) -> Result<Arc<Kernel>> {
    dispatcher(file, name)?.instance(ctx, targs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cai::DType;

    #[test]
    fn every_library_kernel_is_a_template_its_file_declares() {
        let mut n = 0;
        for (file, name) in kernels() {
            let d = dispatcher(file, name).unwrap();
            // What `Dispatcher::template` takes on trust, read from the file.
            let read = Dispatcher::new(d.program().clone(), Some(name)).unwrap();
            assert!(read.is_deduced_template() && !read.is_overloaded(), "{file}.cu: `{name}`");
            let decl = read.declaration().map(|d| d.qualified_name());
            assert_eq!(decl.as_deref(), Some(name), "{file}.cu: `{name}` is declared once, in no namespace");
            assert!(d.is_deduced_template() && !d.is_overloaded() && d.by_argument_types(), "{file}.cu: `{name}`");
            assert_eq!((d.name(), d.program().name.as_str()), (name, format!("{file}.cu").as_str()));
            assert!(std::ptr::eq(d, dispatcher(file, name).unwrap()), "one dispatcher per kernel");
            n += 1;
        }
        assert_eq!(n, UNARY_OPS.len() + KERNELS.iter().map(|(_, k)| k.len()).sum::<usize>());
        assert!(dispatcher("elementwise", "no_such_kernel").unwrap_err().to_string().contains("no kernel `no_such_kernel`"));
    }

    #[test]
    fn an_instance_is_the_program_with_its_one_name_expression() {
        let axpy = dispatcher("elementwise", "axpy").unwrap();
        let (program, name) = axpy.explicit_instance_for(&[TemplateArg::Type(DType::F16)]).unwrap();
        assert_eq!(name, "axpy<__half>");
        // What `specialize` compiles for it (with the header of `__half`), and what the
        // library's bundle is baked from (`library_programs`).
        let source = OPS.iter().find(|(f, _)| *f == "elementwise").unwrap().1;
        let expected = Program::new(source).name("elementwise.cu").including(&["cuda_fp16.h"]).name_expression("axpy<__half>");
        assert_eq!(program, expected);
        let (_, name) = dispatcher("reduce", "reduce_rows")
            .unwrap()
            .explicit_instance_for(&[DType::F16.into(), DType::F32.into(), DType::I64.into()])
            .unwrap();
        assert_eq!(name, "reduce_rows<__half, float, long long>");
        let (_, name) =
            dispatcher("strided_copy", "strided_copy").unwrap().explicit_instance_for(&[DType::C64.into(), TemplateArg::Int(8)]).unwrap();
        assert_eq!(name, "strided_copy<caijit::complex<float>, 8>");
    }
}
