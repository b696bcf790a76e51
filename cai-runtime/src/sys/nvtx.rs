//! NVTX ranges without libnvToolsExt: the client side of NVTX v3's injection protocol.
//!
//! NVTX v3 is header-only: an application's calls go through tables of function pointers
//! that stay empty (every call a no-op) until a tool's injection library fills them. The
//! tool is named by `NVTX_INJECTION64_PATH` (Nsight Systems and Nsight Compute set it);
//! its `InitializeInjectionNvtx2` is handed a function that returns export tables, asks
//! through it for each module's table of slots, and writes its own functions into them.
//! This module is that client: the tables, the export-table function, and the load of
//! the injection library on first use. Only the core module's `nvtxRangePushA` and
//! `nvtxRangePop` are ever called; the other modules' tables exist (empty) because tools
//! ask for them.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::Acquire};
use std::sync::OnceLock;

/// `NVTX_VERSION` of the headers this client follows.
const NVTX_VERSION: u32 = 3;
/// Slots per module (the header's `NVTX_CBID_*_SIZE`), by module id 1..=6: core, CUDA,
/// OpenCL, CUDA runtime, core2 (domains), sync.
const MODULE_SIZES: [usize; 6] = [16, 9, 15, 7, 16, 7];
/// Core module slots.
const CORE_RANGE_PUSH_A: usize = 9;
const CORE_RANGE_POP: usize = 11;
/// Export table ids.
const ETID_CALLBACKS: u32 = 1;
const ETID_VERSIONINFO: u32 = 3;

/// The slots a tool writes its functions into (0: none), per module; index 0 unused.
struct Slots {
    modules: Vec<Box<[AtomicUsize]>>,
    /// Per module, the table handed to the tool: a pointer to each slot, null first and last.
    tables: Vec<Box<[*mut c_void]>>,
}

// SAFETY: the tables hold pointers into `modules`' boxes, which live (leaked) for the
// process and are only written through atomics (or by the tool during initialisation,
// which happens once, under `OnceLock`, before any reader sees the slots).
unsafe impl Send for Slots {}
// SAFETY: as above.
unsafe impl Sync for Slots {}

static SLOTS: OnceLock<Slots> = OnceLock::new();

fn slots() -> &'static Slots {
    SLOTS.get_or_init(|| {
        let modules: Vec<Box<[AtomicUsize]>> = MODULE_SIZES.iter().map(|&n| (0..n).map(|_| AtomicUsize::new(0)).collect()).collect();
        let tables = modules
            .iter()
            .map(|m| {
                let mut t: Vec<*mut c_void> = vec![std::ptr::null_mut()];
                t.extend(m.iter().skip(1).map(|s| s.as_ptr() as *mut c_void));
                t.push(std::ptr::null_mut());
                t.into_boxed_slice()
            })
            .collect();
        Slots { modules, tables }
    })
}

#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: unsafe extern "C" fn(c_int, *mut *mut *mut c_void, *mut c_uint) -> c_int,
}

#[repr(C)]
struct ExportTableVersionInfo {
    struct_size: usize,
    version: u32,
    reserved0: u32,
    set_injection_nvtx_version: extern "C" fn(u32),
}

static CALLBACKS: ExportTableCallbacks =
    ExportTableCallbacks { struct_size: std::mem::size_of::<ExportTableCallbacks>(), get_module_function_table };

static VERSION_INFO: ExportTableVersionInfo = ExportTableVersionInfo {
    struct_size: std::mem::size_of::<ExportTableVersionInfo>(),
    version: NVTX_VERSION,
    reserved0: 0,
    set_injection_nvtx_version,
};

extern "C" fn set_injection_nvtx_version(_version: u32) {}

/// # Safety
/// `out_table` and `out_size` are null or valid for one write each (the tool's promise).
unsafe extern "C" fn get_module_function_table(module: c_int, out_table: *mut *mut *mut c_void, out_size: *mut c_uint) -> c_int {
    let Some(i) = usize::try_from(module).ok().and_then(|m| m.checked_sub(1)).filter(|&i| i < MODULE_SIZES.len()) else {
        return 0;
    };
    let s = slots();
    if !out_size.is_null() {
        // SAFETY: non-null, valid for a write (the caller's promise).
        unsafe { *out_size = MODULE_SIZES[i] as c_uint };
    }
    if !out_table.is_null() {
        // SAFETY: as above; the table lives for the process.
        unsafe { *out_table = s.tables[i].as_ptr() as *mut *mut c_void };
    }
    1
}

extern "C" fn get_export_table(id: u32) -> *const c_void {
    match id {
        ETID_CALLBACKS => &CALLBACKS as *const ExportTableCallbacks as *const c_void,
        ETID_VERSIONINFO => &VERSION_INFO as *const ExportTableVersionInfo as *const c_void,
        _ => std::ptr::null(),
    }
}

type InitializeInjection = unsafe extern "C" fn(extern "C" fn(u32) -> *const c_void) -> c_int;

/// Load the tool named by `NVTX_INJECTION64_PATH` once; `Err` says why no tool is attached
/// (none named is `Ok(false)`).
fn attach() -> &'static Result<bool, String> {
    static ATTACHED: OnceLock<Result<bool, String>> = OnceLock::new();
    ATTACHED.get_or_init(|| {
        let Some(path) = std::env::var_os("NVTX_INJECTION64_PATH").filter(|p| !p.is_empty()) else { return Ok(false) };
        let lib = super::library::open_library(Path::new(&path))?;
        let s = slots();
        // SAFETY: the symbol, if present, has the type NVTX's headers declare for it.
        let init = unsafe { lib.get::<InitializeInjection>(b"InitializeInjectionNvtx2\0") }
            .map_err(|e| format!("{}: no InitializeInjectionNvtx2: {e}", Path::new(&path).display()))?;
        // SAFETY: the tool's entry point, called once with the export-table function, as
        // the NVTX headers do; it writes only into the slots our tables point to.
        let ok = unsafe { init(get_export_table) } != 0;
        if !ok {
            for m in &s.modules {
                for slot in m.iter() {
                    slot.store(0, std::sync::atomic::Ordering::Release);
                }
            }
        }
        Ok(ok)
    })
}

/// Whether a tool is attached (loading the one `NVTX_INJECTION64_PATH` names, once);
/// `Err` says why the one named could not be.
pub(crate) fn tool() -> Result<bool, String> {
    attach().clone()
}

/// An NVTX range on this thread, ended when dropped. Without a tool, nothing happens.
#[must_use]
pub(crate) struct Range {
    pushed: bool,
}

impl Range {
    /// Push a range named `name` (`nvtxRangePushA`).
    pub(crate) fn push(name: &CStr) -> Range {
        if !matches!(attach(), Ok(true)) {
            return Range { pushed: false };
        }
        let f = slots().modules[0][CORE_RANGE_PUSH_A].load(Acquire);
        if f == 0 {
            return Range { pushed: false };
        }
        // SAFETY: the tool wrote a `int (*)(const char*)` into this slot (the core
        // module's RangePushA); `name` is NUL-terminated and outlives the call.
        let push: unsafe extern "C" fn(*const c_char) -> c_int = unsafe { std::mem::transmute::<usize, _>(f) };
        // SAFETY: as above.
        unsafe { push(name.as_ptr()) };
        Range { pushed: true }
    }
}

impl Drop for Range {
    fn drop(&mut self) {
        if !self.pushed {
            return;
        }
        let f = slots().modules[0][CORE_RANGE_POP].load(Acquire);
        if f != 0 {
            // SAFETY: the tool wrote a `int (*)(void)` into this slot (RangePop).
            let pop: unsafe extern "C" fn() -> c_int = unsafe { std::mem::transmute::<usize, _>(f) };
            // SAFETY: as above; pops the range this guard pushed on this thread.
            unsafe { pop() };
        }
    }
}
