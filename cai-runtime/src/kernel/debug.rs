//! Bounds-checked debug instances of kernels (`caijit.debug(True)`, `CAIJIT_DEBUG=1`).
//!
//! A debug instance is the kernel's program compiled again with `CAIJIT_BOUNDS_CHECK`
//! defined: a define like any other, so a separate cache entry. In it, `caijit::Array`'s
//! accessors check every index against the shape and write the first violation of a launch
//! to the module's `caijit_bounds_record` (kernels/include/caijit/array.cuh); after the
//! launch, [`Kernel::take_bounds_record`] reads and clears it (and the launch layer names
//! the argument whose data pointer it recorded).
//!
//! # Limitations
//! Raw pointer parameters cannot be checked (a pointer carries no extent). Only kernels
//! compiled from a program in this process ([`Context::compile`]) have a debug instance;
//! one loaded from a compiled image alone launches unchecked.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::{Arc, LazyLock, Mutex};

use super::loaded::{Kernel, Module};
use crate::compile::Program;
use crate::error::Result;
use crate::runtime::Context;
use crate::sync::OnceMap;

/// The define that makes a debug instance.
pub const BOUNDS_CHECK: &str = "CAIJIT_BOUNDS_CHECK";
const RECORD: &CStr = c"caijit_bounds_record";
const WORDS: usize = 21;

/// The program each module compiled in this process came from, by cache key (what a
/// debug instance is compiled from).
static PROGRAMS: LazyLock<Mutex<HashMap<String, Arc<Program>>>> = LazyLock::new(Default::default);
/// Debug instances by device, module key and lowered name.
static TWINS: LazyLock<OnceMap<(usize, String, String), Arc<Kernel>>> = LazyLock::new(Default::default);

/// Keep the program a module with `key` was compiled from. One module may serve several
/// programs: a bundled program serves each program of its family whose name expressions
/// it holds (they differ in nothing else), under one key; their name expressions are kept
/// together, so that the debug instance of any of its kernels is compiled with its own.
pub(super) fn remember(key: &str, program: &Program) {
    let mut programs = crate::sync::lock(&PROGRAMS);
    match programs.get_mut(key) {
        Some(kept) if program.name_expressions.iter().any(|e| !kept.name_expressions.contains(e)) => {
            let mut all = (**kept).clone();
            for e in &program.name_expressions {
                if !all.name_expressions.contains(e) {
                    all.name_expressions.push(e.clone());
                }
            }
            *kept = Arc::new(all);
        }
        Some(_) => {}
        None => {
            programs.insert(key.to_string(), Arc::new(program.clone()));
        }
    }
}

fn is_debug_program(p: &Program) -> bool {
    p.defines.iter().any(|(n, _)| n == BOUNDS_CHECK)
}

impl Kernel {
    /// Whether this is a bounds-checked debug instance.
    pub fn is_debug_instance(&self) -> bool {
        self.module.ctx_program().is_some_and(|p| is_debug_program(&p))
    }

    /// The bounds-checked debug instance of this kernel: itself if it is one; `None` when
    /// its program is unknown (loaded from a compiled image alone).
    pub fn debug_instance(&self) -> Result<Option<Arc<Kernel>>> {
        let Some(program) = self.module.ctx_program() else { return Ok(None) };
        if is_debug_program(&program) {
            return Ok(None);
        }
        let ctx: &Arc<Context> = self.context();
        let key = (ctx.ordinal(), self.module.compiled.key.clone(), self.info.lowered_name.clone());
        TWINS
            .get_or_try_insert_with(key, || {
                let debug = (*program).clone().define(BOUNDS_CHECK, Some("1".into()));
                ctx.compile(&debug)?.kernel(&self.info.lowered_name)
            })
            .map(Some)
    }
}

impl Module {
    fn ctx_program(&self) -> Option<Arc<Program>> {
        crate::sync::lock(&PROGRAMS).get(&self.compiled.key).cloned()
    }
}

/// Words of the bounds record (kernels/include/caijit/array.cuh): word 0 set, 1 data
/// pointer, 2 rank, 3 dimension (-1: a flat index), 4 the flat index, 5 to 12 the
/// indices, 13 to 20 the shape.
pub type BoundsRecord = [i64; WORDS];

impl Kernel {
    /// After a launch of this debug instance on `stream` (CAI value): wait for it, read
    /// the bounds record and, if an access was out of bounds, clear it and return it.
    pub(crate) fn take_bounds_record(&self, stream: u64) -> Result<Option<BoundsRecord>> {
        let d = self.context().bind()?;
        let Some((ptr, size)) = d.module_global(self.module.raw, RECORD)? else { return Ok(None) };
        let stream = crate::sys::RawStream::from_cai(stream);
        d.stream_synchronize(stream)?;
        let mut bytes = [0u8; WORDS * 8];
        let n = bytes.len().min(size);
        // SAFETY: `ptr` is the module's global of `size` ≥ `n` bytes, which lives as long
        // as the module `self` holds; the copy is waited for.
        #[allow(unsafe_code)]
        let copied = unsafe { d.copy_from_owned(&mut bytes[..n], ptr, stream) };
        copied?;
        let mut w = [0i64; WORDS];
        for (i, word) in w.iter_mut().enumerate() {
            *word = i64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        }
        if w[0] == 0 {
            return Ok(None);
        }
        // SAFETY: as above, `n` bytes of the module's global, and the write is waited for
        // below while `self` holds the module.
        #[allow(unsafe_code)]
        let zeroed = unsafe { d.zero_owned(ptr, n, stream) };
        zeroed?;
        d.stream_synchronize(stream)?;
        Ok(Some(w))
    }
}
