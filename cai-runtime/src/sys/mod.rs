//! The one module that calls cudarc's raw (`sys`) layers, loads CUDA libraries, and holds
//! `unsafe` code. Everything above it is safe Rust.
//!
//! cudarc's dynamic loader panics when a library is missing. caijit never lets it get that
//! far: each library is loaded here first, and its functions are reachable only through a
//! token ([`Driver`], [`Nvrtc`]) that exists once the load succeeded. Once a library is
//! loaded by absolute path, cudarc's own `dlopen` of the same soname resolves to it.
//!
//! This layer does not validate arguments (wgpu-hal's rule); callers above it do. The one
//! check here is a truncation check of a module image handed over without a copy: a CUBIN
//! must hold every byte its headers name ([`Driver::load_module`]).

use std::borrow::Cow;
use std::ffi::{c_char, c_uint, c_void, CStr};
use std::path::Path;
use std::ptr;
use std::sync::OnceLock;

use cudarc::driver::sys as cu;

/// C functions other extensions export through Cython's capsules (feature `python`).
#[cfg(feature = "python")]
pub(crate) mod capi;
/// What a stream's capture is; objects kept alive by a graph being captured (graph user
/// objects).
mod capture;
/// DLPack's structs, capsules and C exchange API (Python objects, so feature `python`).
#[cfg(feature = "python")]
pub(crate) mod dlpack;
/// The running Python frame's code and instruction (launch call sites; feature `python`).
#[cfg(feature = "python")]
pub(crate) mod frame;
/// CUDA graphs: capture, kernel nodes, instantiation, parameter updates, launches.
mod graph;
/// Loading shared libraries for the life of the process.
mod library;
/// Device memory: the stream-ordered pool, allocations, copies and pointer queries.
mod memory;
/// NVRTC's error type (its calls: `nvrtc.rs`, or `no_nvrtc.rs` without the feature).
mod nvrtc_error;
/// NVTX ranges through NVTX's injection interface.
pub(crate) mod nvtx;
/// Timing events (profiling).
mod timing;
pub(crate) mod xla_ffi;

/// NVRTC, behind the `nvrtc` feature. Without it, a stand-in of the same names whose
/// `Nvrtc` token cannot exist (an empty enum): no path can reach a compiler call, and
/// loading answers why.
#[cfg_attr(feature = "nvrtc", path = "nvrtc.rs")]
#[cfg_attr(not(feature = "nvrtc"), path = "no_nvrtc.rs")]
mod nvrtc;
/// cudarc's own types, as `interop` takes them from cudarc's users (slices and streams).
pub(crate) mod cudarc_types {
    pub use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};
}
pub(crate) use library::load_library;
pub(crate) use nvrtc::{load_nvrtc, Nvrtc, LEFT_OUT as NVRTC_LEFT_OUT};
pub use nvrtc_error::NvrtcError;

// ---------------------------------------------------------------------------------------
// The process

/// The effective user id of this process (to check who owns the cache directory).
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

// ---------------------------------------------------------------------------------------
// The CUDA driver

/// Proof that the CUDA driver is loaded and initialised; the only way to call it.
#[derive(Debug)]
pub(crate) struct Driver {
    _private: (),
}

/// A failed driver call: the call's name, its `CUresult` and the driver's description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverError {
    pub call: &'static str,
    pub code: u32,
    pub name: String,
    pub message: String,
}

impl std::error::Error for DriverError {}

impl std::fmt::Display for DriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {} ({}): {}", self.call, self.name, self.code, self.message)
    }
}

/// The first bytes of an ELF file (a CUBIN).
const ELF_MAGIC: &[u8] = b"\x7fELF";

/// For a CUBIN (a 64-bit little-endian ELF file, by its magic), whether the driver may be
/// handed it as it is: it holds every byte its headers name (its program and section
/// tables, each segment's and section's bytes, its section-name table), and each string
/// table ends in NUL, so that no read the headers direct runs past the slice. A truncation
/// check, not a validation of the code. `Some(Err(why))` when it fails; `None`: not an ELF
/// file (PTX text, or anything else, which is handed over NUL-terminated).
pub(crate) fn binary_extent(image: &[u8]) -> Option<Result<(), String>> {
    if !image.starts_with(ELF_MAGIC) {
        return None;
    }
    // Little-endian fields; `None` past the end.
    let field = |at: u64, n: usize| -> Option<u64> {
        let at = usize::try_from(at).ok()?;
        let b = image.get(at..at.checked_add(n)?)?;
        Some(b.iter().rev().fold(0u64, |v, &x| v << 8 | x as u64))
    };
    let len = image.len() as u64;
    // `size` bytes from `at` lie within the image.
    let within = |at: Option<u64>, size: Option<u64>| matches!(at.zip(size), Some((a, s)) if a.checked_add(s).is_some_and(|e| e <= len));
    // The ELF header (64 bytes) of a 64-bit little-endian file, then its tables.
    let fits = image.len() >= 64 && image[4..6] == [2, 1] && {
        let at = |i: u64, n: usize| field(i, n).unwrap_or(0); // (within the header)
        let (phoff, phentsize, phnum) = (at(32, 8), at(54, 2), at(56, 2));
        let (shoff, shentsize, shnum, shstrndx) = (at(40, 8), at(58, 2), at(60, 2), at(62, 2));
        // ELF64's record sizes: program headers of 56 bytes, section headers of 64. No
        // extended numbering (a section count of 0 with a table, or an escaped index).
        (phnum == 0 || phentsize == 56)
            && (shnum == 0 || shentsize == 64)
            && (shnum > 0 || shoff == 0)
            && (shnum == 0 || shstrndx < shnum)
            && within(Some(phoff), Some(phentsize * phnum))
            && within(Some(shoff), Some(shentsize * shnum))
            // Each segment's bytes in the file, and each section's (SHT_NOBITS, 8, has
            // none); a string table (SHT_STRTAB, 3) ends in NUL.
            && (0..phnum).all(|i| {
                let p = phoff + i * phentsize;
                within(field(p + 8, 8), field(p + 32, 8))
            })
            && (0..shnum).all(|i| {
                let s = shoff + i * shentsize;
                let (kind, offset, size) = (field(s + 4, 4), field(s + 24, 8), field(s + 32, 8));
                // (The last byte of a string table, once the table is known to lie within.)
                let last = || offset.zip(size).and_then(|(o, n)| field(o.checked_add(n.checked_sub(1)?)?, 1));
                kind == Some(8) || (within(offset, size) && (kind != Some(3) || size == Some(0) || last() == Some(0)))
            })
    };
    Some(match fits {
        true => Ok(()),
        false => {
            Err("its ELF headers name bytes past its end, a string table lacks its NUL, or it is no 64-bit little-endian ELF file".into())
        }
    })
}

fn check(call: &'static str, r: cu::CUresult) -> Result<(), DriverError> {
    if r == cu::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut s: *const c_char = ptr::null();
    // SAFETY: cuGetErrorString writes a pointer to a static string (or leaves it null).
    unsafe { cu::cuGetErrorString(r, &mut s) };
    let message = if s.is_null() {
        "unknown error".to_string()
    } else {
        // SAFETY: non-null results point to NUL-terminated static strings.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    };
    Err(DriverError { call, code: r as u32, name: format!("{r:?}"), message })
}

static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();

/// Load and initialise the driver once; `Err` explains what was tried.
pub(crate) fn driver() -> Result<&'static Driver, String> {
    DRIVER
        .get_or_init(|| {
            let mut tried = Vec::new();
            let mut loaded = false;
            for name in ["libcuda.so.1", "libcuda.so"] {
                match load_library(Path::new(name)) {
                    Ok(()) => {
                        loaded = true;
                        break;
                    }
                    Err(e) => tried.push(format!("{name}: {e}")),
                }
            }
            if !loaded {
                return Err(format!("no CUDA driver was found (tried {})", tried.join("; ")));
            }
            // SAFETY: the driver library is loaded; cuInit(0) has no other precondition.
            check("cuInit", unsafe { cu::cuInit(0) }).map_err(|e| format!("the CUDA driver is present but {e}"))?;
            Ok(Driver { _private: () })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Whether `code` is the driver's `CUDA_ERROR_OUT_OF_MEMORY`.
pub fn is_out_of_memory(code: u32) -> bool {
    code == cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY as u32
}

/// Whether `code` is one of the driver's stream-capture errors
/// (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` .. `CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD`).
pub fn is_capture_error(code: u32) -> bool {
    (cu::CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED as u32..=cu::CUresult::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD as u32)
        .contains(&code)
}

/// Driver handle types: plain identifiers of driver objects, `Copy`, and usable from any
/// thread (the driver API guarantees it, and synchronises access to the objects behind
/// them internally).
macro_rules! driver_handles {
    ($($(#[$meta:meta])* $name:ident($vis:vis $raw:ty);)*) => {$(
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub(crate) struct $name($vis $raw);
        // SAFETY: a driver handle is an identifier the driver API lets any thread use.
        unsafe impl Send for $name {}
        // SAFETY: as above; the driver synchronises access to the object internally.
        unsafe impl Sync for $name {}
    )*};
}

driver_handles! {
    /// A primary context handle (retained for the process's life, shared with other libraries).
    Ctx(cu::CUcontext);
    /// A raw stream handle: null is the legacy default stream.
    RawStream(pub cu::CUstream);
    RawEvent(cu::CUevent);
    RawModule(cu::CUmodule);
    RawFunction(cu::CUfunction);
    /// A device memory pool (created once per device, kept for the process's life).
    RawPool(cu::CUmemoryPool);
    /// A graph (owned by whoever ended its capture; destroyed with `Driver::graph_destroy`).
    RawGraph(cu::CUgraph);
    /// An executable graph (destroyed with `Driver::graph_exec_destroy`).
    RawGraphExec(cu::CUgraphExec);
    /// A node of a graph (lives as long as its graph).
    RawNode(cu::CUgraphNode);
}

impl Ctx {
    pub fn is_null(self) -> bool {
        self.0.is_null()
    }
}

impl RawStream {
    /// From a CAI-style value: 1 → legacy (`CU_STREAM_LEGACY`), 2 → per-thread, else the handle.
    pub fn from_cai(value: u64) -> RawStream {
        RawStream(value as usize as cu::CUstream)
    }
    pub fn as_u64(self) -> u64 {
        self.0 as usize as u64
    }
}

/// Attributes of a loaded kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelAttributes {
    pub num_regs: i32,
    pub max_threads_per_block: i32,
    pub shared_size_bytes: i32,
    pub const_size_bytes: i32,
    pub local_size_bytes: i32,
    pub max_dynamic_shared_size_bytes: i32,
}

/// Grid, block and dynamic shared memory of a launch; optionally thread-block cluster
/// dimensions (sm_90+) and a cooperative launch (`cuLaunchKernelEx`). Constructors and
/// checks: `crate::launch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub cluster: Option<[u32; 3]>,
    pub cooperative: bool,
}

/// Capture state of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Capture {
    None,
    Active,
    Invalidated,
}

impl Driver {
    pub fn version(&self) -> Result<i32, DriverError> {
        let mut v = 0;
        // SAFETY: the driver is initialised (token); `v` is a valid out-pointer.
        check("cuDriverGetVersion", unsafe { cu::cuDriverGetVersion(&mut v) })?;
        Ok(v)
    }

    pub fn device_count(&self) -> Result<i32, DriverError> {
        let mut n = 0;
        // SAFETY: the driver is initialised; `n` is a valid out-pointer.
        check("cuDeviceGetCount", unsafe { cu::cuDeviceGetCount(&mut n) })?;
        Ok(n)
    }

    fn device(&self, ordinal: i32) -> Result<cu::CUdevice, DriverError> {
        let mut d = 0;
        // SAFETY: valid out-pointer; an invalid ordinal is reported as an error.
        check("cuDeviceGet", unsafe { cu::cuDeviceGet(&mut d, ordinal) })?;
        Ok(d)
    }

    pub fn device_name(&self, ordinal: i32) -> Result<String, DriverError> {
        let dev = self.device(ordinal)?;
        let mut buf = [0 as c_char; 256];
        // SAFETY: the buffer holds 256 bytes and its length is passed.
        check("cuDeviceGetName", unsafe { cu::cuDeviceGetName(buf.as_mut_ptr(), 256, dev) })?;
        // SAFETY: the driver NUL-terminates the name within the buffer.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
    }

    pub fn device_attribute(&self, ordinal: i32, attr: cu::CUdevice_attribute) -> Result<i32, DriverError> {
        let dev = self.device(ordinal)?;
        let mut v = 0;
        // SAFETY: valid out-pointer and device.
        check("cuDeviceGetAttribute", unsafe { cu::cuDeviceGetAttribute(&mut v, attr, dev) })?;
        Ok(v)
    }

    pub fn sm_count(&self, ordinal: i32) -> Result<i32, DriverError> {
        self.device_attribute(ordinal, cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    }

    pub fn compute_capability(&self, ordinal: i32) -> Result<(i32, i32), DriverError> {
        use cu::CUdevice_attribute::*;
        Ok((
            self.device_attribute(ordinal, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            self.device_attribute(ordinal, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ))
    }

    pub fn primary_context(&self, ordinal: i32) -> Result<Ctx, DriverError> {
        let dev = self.device(ordinal)?;
        let mut ctx = ptr::null_mut();
        // SAFETY: valid out-pointer; the retained context is never released (process lifetime),
        // which is how CuPy, PyTorch and Numba hold the same primary context.
        check("cuDevicePrimaryCtxRetain", unsafe { cu::cuDevicePrimaryCtxRetain(&mut ctx, dev) })?;
        Ok(Ctx(ctx))
    }

    /// Make `ctx` current on this thread; returns the context it replaced (null when none
    /// was current) when that was another one, so that the caller can put it back.
    pub fn make_current(&self, ctx: Ctx) -> Result<Option<Ctx>, DriverError> {
        let mut cur = ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("cuCtxGetCurrent", unsafe { cu::cuCtxGetCurrent(&mut cur) })?;
        if cur == ctx.0 {
            return Ok(None);
        }
        // SAFETY: `ctx` is a retained primary context.
        check("cuCtxSetCurrent", unsafe { cu::cuCtxSetCurrent(ctx.0) })?;
        Ok(Some(Ctx(cur)))
    }

    /// Make a context that was current before (or none: null) current again.
    pub fn restore_current(&self, ctx: Ctx) -> Result<(), DriverError> {
        // SAFETY: `ctx` is null or was current on this thread a moment ago; its owner
        // (another library or caijit) keeps it alive while it is its thread's current context.
        check("cuCtxSetCurrent", unsafe { cu::cuCtxSetCurrent(ctx.0) })
    }

    /// Load `image`: a CUBIN, which says its own length and is handed to the driver as it is
    /// once [`binary_extent`] has checked it, or PTX text (then copied with the NUL the
    /// driver reads up to, unless it ends in one).
    pub fn load_module(&self, image: &[u8]) -> Result<RawModule, DriverError> {
        let self_delimited = match binary_extent(image) {
            Some(Ok(())) => true,
            Some(Err(why)) => {
                return Err(DriverError {
                    call: "cuModuleLoadData",
                    code: cu::CUresult::CUDA_ERROR_INVALID_IMAGE as u32,
                    name: "CUDA_ERROR_INVALID_IMAGE".into(),
                    message: format!("the image ({} bytes) is not whole: {why}", image.len()),
                })
            }
            None => false,
        };
        let terminated: Cow<'_, [u8]> = if self_delimited || image.last() == Some(&0) {
            Cow::Borrowed(image)
        } else {
            let mut owned = Vec::with_capacity(image.len() + 1);
            owned.extend_from_slice(image);
            owned.push(0);
            Cow::Owned(owned)
        };
        let mut m = ptr::null_mut();
        // SAFETY: a context is current (callers ensure it); the image outlives the call, and
        // the driver reads no further than its ELF headers say (checked above), or than its NUL.
        check("cuModuleLoadData", unsafe { cu::cuModuleLoadData(&mut m, terminated.as_ptr() as *const c_void) })?;
        Ok(RawModule(m))
    }

    pub fn get_function(&self, module: RawModule, name: &CStr) -> Result<RawFunction, DriverError> {
        let mut f = ptr::null_mut();
        // SAFETY: the module is loaded and the name is NUL-terminated.
        check("cuModuleGetFunction", unsafe { cu::cuModuleGetFunction(&mut f, module.0, name.as_ptr()) })?;
        Ok(RawFunction(f))
    }

    /// Whether this driver exports `symbol` (cudarc panics when a missing one is called).
    fn has(&self, symbol: &str) -> bool {
        // SAFETY: the driver library is loaded (this token exists); looking a symbol up
        // has no other precondition and calls nothing.
        unsafe { cu::culib().get::<*const c_void>(symbol.as_bytes()).is_ok() }
    }

    /// Whether the driver can say what parameters a loaded kernel has (CUDA 12.4+).
    pub fn has_param_info(&self) -> bool {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| self.has("cuFuncGetParamInfo"))
    }

    /// `(offset, size)` of parameter `index` as the loaded code declares it; `None` past the
    /// end. Only where [`Driver::has_param_info`].
    pub fn param_info(&self, f: RawFunction, index: usize) -> Result<Option<(usize, usize)>, DriverError> {
        debug_assert!(self.has_param_info());
        let (mut off, mut size) = (0usize, 0usize);
        // SAFETY: valid function and out-pointers.
        let r = unsafe { cu::cuFuncGetParamInfo(f.0, index, &mut off, &mut size) };
        if r == cu::CUresult::CUDA_ERROR_INVALID_VALUE {
            return Ok(None);
        }
        check("cuFuncGetParamInfo", r)?;
        Ok(Some((off, size)))
    }

    pub fn func_attributes(&self, f: RawFunction) -> Result<KernelAttributes, DriverError> {
        use cu::CUfunction_attribute::*;
        let get = |a| {
            let mut v = 0;
            // SAFETY: valid function and out-pointer.
            check("cuFuncGetAttribute", unsafe { cu::cuFuncGetAttribute(&mut v, a, f.0) }).map(|_| v)
        };
        Ok(KernelAttributes {
            num_regs: get(CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            max_threads_per_block: get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            shared_size_bytes: get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
            const_size_bytes: get(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)?,
            local_size_bytes: get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
            max_dynamic_shared_size_bytes: get(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)?,
        })
    }

    pub fn set_max_dynamic_shared(&self, f: RawFunction, bytes: i32) -> Result<(), DriverError> {
        // SAFETY: valid function; the driver validates the value.
        check("cuFuncSetAttribute", unsafe {
            cu::cuFuncSetAttribute(f.0, cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes)
        })
    }

    /// Block size that maximises occupancy (`cuOccupancyMaxPotentialBlockSize`).
    pub fn occupancy_block_size(&self, f: RawFunction, dynamic_smem: usize) -> Result<(i32, i32), DriverError> {
        let (mut grid, mut block) = (0, 0);
        // SAFETY: valid function and out-pointers; no block-size callback is passed.
        check("cuOccupancyMaxPotentialBlockSize", unsafe {
            cu::cuOccupancyMaxPotentialBlockSize(&mut grid, &mut block, f.0, None, dynamic_smem, 0)
        })?;
        Ok((grid, block))
    }

    /// Launch `f` on `stream`. Plain launches go through `cuLaunchKernel`; thread-block
    /// clusters and cooperative launches through `cuLaunchKernelEx`.
    ///
    /// # Safety
    /// The driver reads each parameter's bytes through `params` and the kernel then
    /// dereferences the device pointers among them, so the caller guarantees that:
    /// - `f` is a function of a module loaded in the current context, and `stream` a live
    ///   stream of that context (or a default stream);
    /// - `params` has one pointer per parameter of `f`, `params[i]` pointing at exactly
    ///   parameter `i`'s bytes (as `params::marshal` lays them out from the kernel's own
    ///   parameter list) and valid until the call returns;
    /// - every device pointer among those bytes is valid, for the extent and access the
    ///   kernel makes of it, until the kernel has run on `stream` (for a CAI array: its
    ///   producer's promise; for an XLA buffer: XLA's).
    pub unsafe fn launch_checked(
        &self,
        f: RawFunction,
        cfg: &LaunchConfig,
        stream: RawStream,
        params: &mut [*mut c_void],
    ) -> Result<(), DriverError> {
        let ([gx, gy, gz], [bx, by, bz]) = (cfg.grid, cfg.block);
        if cfg.cluster.is_none() && !cfg.cooperative {
            // SAFETY: the caller upholds `# Safety`: `f`, `stream` and every parameter's bytes
            // are what the kernel declares; the extra-options pointer is null (none).
            return check("cuLaunchKernel", unsafe {
                cu::cuLaunchKernel(f.0, gx, gy, gz, bx, by, bz, cfg.shared_mem, stream.0, params.as_mut_ptr(), ptr::null_mut())
            });
        }
        use cu::CUlaunchAttributeID::*;
        let mut attrs: Vec<cu::CUlaunchAttribute> = Vec::with_capacity(2);
        if let Some([x, y, z]) = cfg.cluster {
            let mut value = cu::CUlaunchAttributeValue { pad: [0; 64] };
            value.clusterDim = cu::CUlaunchAttributeValue_union__bindgen_ty_1 { x, y, z };
            attrs.push(cu::CUlaunchAttribute { id: CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, pad: [0; 4], value });
        }
        if cfg.cooperative {
            let mut value = cu::CUlaunchAttributeValue { pad: [0; 64] };
            value.cooperative = 1;
            attrs.push(cu::CUlaunchAttribute { id: CU_LAUNCH_ATTRIBUTE_COOPERATIVE, pad: [0; 4], value });
        }
        let config = cu::CUlaunchConfig {
            gridDimX: gx,
            gridDimY: gy,
            gridDimZ: gz,
            blockDimX: bx,
            blockDimY: by,
            blockDimZ: bz,
            sharedMemBytes: cfg.shared_mem,
            hStream: stream.0,
            attrs: attrs.as_mut_ptr(),
            numAttrs: attrs.len() as c_uint,
        };
        // SAFETY: as above for `f`, `stream` and the parameters; `config` and `attrs` outlive the call, and
        // every attribute's value is the union member its id names.
        check("cuLaunchKernelEx", unsafe { cu::cuLaunchKernelEx(&config, f.0, params.as_mut_ptr(), ptr::null_mut()) })
    }

    /// The unique id of the capture `s` belongs to (0 when not capturing).
    pub fn capture_id(&self, s: RawStream) -> Result<u64, DriverError> {
        static HAS_V3: OnceLock<bool> = OnceLock::new();
        let mut status = cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut id = 0;
        let r = if *HAS_V3.get_or_init(|| self.has("cuStreamGetCaptureInfo_v3")) {
            // SAFETY: valid out-pointers; the optional outputs are null, which the API allows.
            unsafe {
                cu::cuStreamGetCaptureInfo_v3(s.0, &mut status, &mut id, ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), ptr::null_mut())
            }
        } else {
            // Drivers before CUDA 12.3: the first version, which every driver since 10.1
            // exports (cudarc binds only the newest for CUDA 13, so it is looked up here).
            type V1 = unsafe extern "C" fn(cu::CUstream, *mut cu::CUstreamCaptureStatus, *mut u64) -> cu::CUresult;
            // SAFETY: the driver is loaded; the symbol has exactly the V1 signature (cuda.h
            // of CUDA 10.1-12.x), and the out-pointers are valid.
            unsafe {
                match cu::culib().get::<V1>(b"cuStreamGetCaptureInfo") {
                    Ok(v1) => v1(s.0, &mut status, &mut id),
                    Err(_) => cu::CUresult::CUDA_ERROR_NOT_SUPPORTED,
                }
            }
        };
        check("cuStreamGetCaptureInfo", r)?;
        Ok(if status == cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE { id } else { 0 })
    }

    pub fn stream_create(&self, non_blocking: bool) -> Result<RawStream, DriverError> {
        let mut s = ptr::null_mut();
        let flags = if non_blocking { cu::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint } else { 0 };
        // SAFETY: valid out-pointer; a context is current.
        check("cuStreamCreate", unsafe { cu::cuStreamCreate(&mut s, flags) })?;
        Ok(RawStream(s))
    }

    /// Destroy a stream that caijit created. The caller gives up `s`; pending work on it
    /// still completes (the driver defers the release).
    ///
    /// # Safety
    /// `s` came from [`Driver::stream_create`] and is destroyed once: no handle to it is
    /// used afterwards (a destroyed handle may name another stream later).
    pub unsafe fn destroy_owned_stream(&self, s: RawStream) -> Result<(), DriverError> {
        // SAFETY: the caller owns `s` and gives it up (`# Safety`).
        check("cuStreamDestroy", unsafe { cu::cuStreamDestroy_v2(s.0) })
    }

    /// The context a stream belongs to (the current one for the default streams).
    pub fn stream_context(&self, s: RawStream) -> Result<Ctx, DriverError> {
        let mut ctx = ptr::null_mut();
        // SAFETY: valid out-pointer; the handle is one the caller holds.
        check("cuStreamGetCtx", unsafe { cu::cuStreamGetCtx(s.0, &mut ctx) })?;
        Ok(Ctx(ctx))
    }

    /// Block the host until `s` is idle. Never called on the launch path.
    pub fn stream_synchronize(&self, s: RawStream) -> Result<(), DriverError> {
        // SAFETY: any stream handle the caller holds; errors are reported.
        check("cuStreamSynchronize", unsafe { cu::cuStreamSynchronize(s.0) })
    }

    pub fn stream_capture_status(&self, s: RawStream) -> Result<Capture, DriverError> {
        let mut st = cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: valid out-pointer.
        check("cuStreamIsCapturing", unsafe { cu::cuStreamIsCapturing(s.0, &mut st) })?;
        Ok(match st {
            cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => Capture::None,
            cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => Capture::Active,
            _ => Capture::Invalidated,
        })
    }

    pub fn event_create(&self) -> Result<RawEvent, DriverError> {
        let mut e = ptr::null_mut();
        let flags = cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
        // SAFETY: valid out-pointer; a context is current.
        check("cuEventCreate", unsafe { cu::cuEventCreate(&mut e, flags) })?;
        Ok(RawEvent(e))
    }

    pub fn event_record(&self, e: RawEvent, s: RawStream) -> Result<(), DriverError> {
        // SAFETY: live event and stream handles.
        check("cuEventRecord", unsafe { cu::cuEventRecord(e.0, s.0) })
    }

    /// Whether the work before `e`'s last record has finished (`cuEventQuery`; never blocks).
    pub fn event_done(&self, e: RawEvent) -> Result<bool, DriverError> {
        // SAFETY: a live event handle.
        let r = unsafe { cu::cuEventQuery(e.0) };
        if r == cu::CUresult::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        check("cuEventQuery", r).map(|_| true)
    }

    /// Run `f` with this thread's stream-capture mode relaxed: calls that a global-mode
    /// capture on another thread forbids (`cuEventQuery`, say) are then legal here.
    pub fn relaxed_capture<R>(&self, f: impl FnOnce() -> R) -> R {
        let mut mode = cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: valid in/out pointer; the previous mode is written back below.
        let swapped = unsafe { cu::cuThreadExchangeStreamCaptureMode(&mut mode) } == cu::CUresult::CUDA_SUCCESS;
        let r = f();
        if swapped {
            // SAFETY: as above; restores the mode the thread had.
            unsafe { cu::cuThreadExchangeStreamCaptureMode(&mut mode) };
        }
        r
    }

    /// Block the host until every stream of the current context is idle. Never called on
    /// the launch path.
    pub fn ctx_synchronize(&self) -> Result<(), DriverError> {
        // SAFETY: a context is current (callers bind one); errors are reported.
        check("cuCtxSynchronize", unsafe { cu::cuCtxSynchronize() })
    }

    pub fn stream_wait_event(&self, s: RawStream, e: RawEvent) -> Result<(), DriverError> {
        // SAFETY: live event and stream handles.
        check("cuStreamWaitEvent", unsafe { cu::cuStreamWaitEvent(s.0, e.0, 0) })
    }
}

#[cfg(test)]
mod tests;
