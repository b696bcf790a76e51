//! The one module that calls cudarc's raw (`sys`) layers, loads CUDA libraries, and holds
//! `unsafe` code. Everything above it is safe Rust.
//!
//! cudarc's dynamic loader panics when a library is missing. caijit never lets it get that
//! far: each library is loaded here first, and its functions are reachable only through a
//! token ([`Driver`], [`Nvrtc`]) that exists once the load succeeded. Once a library is
//! loaded by absolute path, cudarc's own `dlopen` of the same soname resolves to it.
//!
//! This layer does not validate arguments (wgpu-hal's rule); callers above it do.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::path::Path;
use std::ptr;
use std::sync::OnceLock;

use cudarc::driver::sys as cu;
use cudarc::nvrtc::sys as nv;

/// C functions other extensions export through Cython's capsules (feature `python`).
#[cfg(feature = "python")]
pub(crate) mod capi;
/// Objects kept alive by a graph being captured (graph user objects).
mod capture;
/// DLPack's structs, capsules and C exchange API (Python objects, so feature `python`).
#[cfg(feature = "python")]
pub(crate) mod dlpack;
/// The running Python frame's code and instruction (launch call sites; feature `python`).
#[cfg(feature = "python")]
pub(crate) mod frame;
/// NVTX ranges through NVTX's injection interface.
pub(crate) mod nvtx;
/// Timing events (profiling).
mod timing;
pub(crate) mod xla_ffi;

// ---------------------------------------------------------------------------------------
// Loading libraries

/// Load a shared library by absolute path or soname and keep it loaded for the process.
pub(crate) fn load_library(name: &Path) -> Result<(), String> {
    open_library(name).map(drop)
}

/// [`load_library`], handing out the library.
fn open_library(name: &Path) -> Result<&'static libloading::Library, String> {
    // SAFETY: loading runs the library's initialisers; the libraries loaded here (NVRTC,
    // its builtins, the CUDA driver) have no initialisers with preconditions on the caller.
    let lib = unsafe { libloading::Library::new(name.as_os_str()) }.map_err(|e| {
        // libloading puts dlerror()'s text in the source chain.
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message = format!("{message}: {s}");
            source = s.source();
        }
        message
    })?;
    // Never unloaded: cudarc resolves symbols from it for the life of the process.
    Ok(Box::leak(Box::new(lib)))
}

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

    pub fn load_module(&self, image: &[u8]) -> Result<RawModule, DriverError> {
        // The image must be NUL-terminated for PTX; CUBIN is self-delimiting. Copy to be safe.
        let mut owned = Vec::with_capacity(image.len() + 1);
        owned.extend_from_slice(image);
        owned.push(0);
        let mut m = ptr::null_mut();
        // SAFETY: a context is current (callers ensure it); the image outlives the call.
        check("cuModuleLoadData", unsafe { cu::cuModuleLoadData(&mut m, owned.as_ptr() as *const c_void) })?;
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

    /// Launch after the caller checked every argument against the kernel's compiled
    /// parameter list (`launch::marshal`): `params[i]` points at exactly parameter `i`'s
    /// bytes. Device pointers inside come from validated CAI descriptors. Plain launches go
    /// through `cuLaunchKernel`; thread-block clusters and cooperative launches through
    /// `cuLaunchKernelEx`.
    pub fn launch_checked(
        &self,
        f: RawFunction,
        cfg: &LaunchConfig,
        stream: RawStream,
        params: &mut [*mut c_void],
    ) -> Result<(), DriverError> {
        let ([gx, gy, gz], [bx, by, bz]) = (cfg.grid, cfg.block);
        if cfg.cluster.is_none() && !cfg.cooperative {
            // SAFETY: the parameter values were laid out from the kernel's own parameter list
            // (sizes cross-checked against the PTX and the driver), so the driver reads exactly
            // the bytes the kernel declares; what the kernel does with device pointers is the
            // CAI producer's promise that they are valid for the array's extent.
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
        // SAFETY: as above for the parameters; `config` and `attrs` outlive the call, and
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
    pub fn destroy_owned_stream(&self, s: RawStream) -> Result<(), DriverError> {
        // SAFETY: callers pass only streams from `stream_create` and drop their handle.
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

    /// A stream-ordered memory pool on device `ordinal` that keeps what is freed into it
    /// (release threshold: unlimited) until [`Driver::mem_pool_trim`], as CuPy's and
    /// PyTorch's caching allocators do. The default pool returns freed memory to the system
    /// at every synchronisation, so the next allocation maps pages again (~80 µs on the H200).
    pub fn mem_pool_create(&self, ordinal: i32) -> Result<RawPool, DriverError> {
        // SAFETY: CUmemPoolProps is a plain C struct for which all-zero bytes are valid (no
        // handle types, no size limit, default usage).
        let mut props: cu::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type_ = cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = ordinal;
        let mut pool = ptr::null_mut();
        // SAFETY: valid out-pointer and properties; the pool lives for the process.
        check("cuMemPoolCreate", unsafe { cu::cuMemPoolCreate(&mut pool, &props) })?;
        let mut threshold = u64::MAX;
        // SAFETY: a live pool; the release threshold's value type is cuuint64_t.
        check("cuMemPoolSetAttribute", unsafe {
            cu::cuMemPoolSetAttribute(pool, cu::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, (&mut threshold as *mut u64).cast())
        })?;
        Ok(RawPool(pool))
    }

    /// Release the pool's unused memory to the system, keeping at least `keep` bytes.
    pub fn mem_pool_trim(&self, pool: RawPool, keep: usize) -> Result<(), DriverError> {
        // SAFETY: a live pool; trimming never touches memory in use.
        check("cuMemPoolTrimTo", unsafe { cu::cuMemPoolTrimTo(pool.0, keep) })
    }

    pub fn mem_alloc_async(&self, bytes: usize, pool: RawPool, s: RawStream) -> Result<u64, DriverError> {
        let mut p = 0;
        // SAFETY: valid out-pointer and live pool; the memory is owned by the caller from here on.
        check("cuMemAllocFromPoolAsync", unsafe { cu::cuMemAllocFromPoolAsync(&mut p, bytes, pool.0, s.0) })?;
        Ok(p)
    }

    // The calls below take device memory that `array::DeviceArray` owns: it passes only
    // its own allocation, with sizes within it, and frees it once (in `Drop`).

    /// Free an allocation of [`Driver::mem_alloc_async`], ordered after the work on `s`.
    pub fn free_owned_async(&self, ptr: u64, s: RawStream) -> Result<(), DriverError> {
        // SAFETY: the owner gives the allocation up; work already enqueued on `s` (and on
        // streams `s` waits for) completes before the memory is reused.
        check("cuMemFreeAsync", unsafe { cu::cuMemFreeAsync(ptr, s.0) })
    }

    /// Copy `bytes` from device memory at `src` to device memory at `dst`, on `s`.
    pub fn copy_device_to_device(&self, dst: u64, src: u64, bytes: usize, s: RawStream) -> Result<(), DriverError> {
        // SAFETY: the caller (`launch::copy_contiguous`) passes the pointers of validated,
        // C-contiguous CAI views of at least `bytes` bytes on the current context's device,
        // the destination writable; their owners keep them alive until the copy has run (the
        // CAI contract, as for a kernel's arguments).
        check("cuMemcpyDtoDAsync", unsafe { cu::cuMemcpyDtoDAsync_v2(dst, src, bytes, s.0) })
    }

    /// Copy host bytes into owned device memory of at least `src.len()` bytes. Pageable
    /// sources are staged before the call returns, so `src` may be dropped afterwards.
    pub fn copy_to_owned(&self, dst: u64, src: &[u8], s: RawStream) -> Result<(), DriverError> {
        // SAFETY: `dst` is owned device memory at least `src.len()` long (caller's invariant).
        check("cuMemcpyHtoDAsync", unsafe { cu::cuMemcpyHtoDAsync_v2(dst, src.as_ptr() as *const c_void, src.len(), s.0) })?;
        // A pageable copy may still read `src` until the stream reaches it.
        self.stream_synchronize(s)
    }

    /// Copy owned device memory into `dst`, waiting for the copy (and the work before it on
    /// `s`) to finish. A host synchronisation, never on the launch path.
    pub fn copy_from_owned(&self, dst: &mut [u8], src: u64, s: RawStream) -> Result<(), DriverError> {
        // SAFETY: `src` is owned device memory at least `dst.len()` long; `dst` is not read
        // before the synchronisation below.
        check("cuMemcpyDtoHAsync", unsafe { cu::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr() as *mut c_void, src, dst.len(), s.0) })?;
        self.stream_synchronize(s)
    }

    /// Set owned device memory to zero bytes.
    pub fn zero_owned(&self, dst: u64, bytes: usize, s: RawStream) -> Result<(), DriverError> {
        // SAFETY: `dst` is owned device memory at least `bytes` long.
        check("cuMemsetD8Async", unsafe { cu::cuMemsetD8Async(dst, 0, bytes, s.0) })
    }

    /// The device ordinal owning `ptr`, `None` when the driver does not know the pointer
    /// (host memory). Never called with a null pointer.
    pub fn pointer_device(&self, ptr: u64) -> Result<Option<i32>, DriverError> {
        debug_assert!(ptr != 0);
        let mut ordinal: c_int = -1;
        // SAFETY: the out-pointer has the attribute's type (int).
        let r = unsafe {
            cu::cuPointerGetAttribute(
                &mut ordinal as *mut c_int as *mut c_void,
                cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                ptr,
            )
        };
        if r == cu::CUresult::CUDA_ERROR_INVALID_VALUE {
            return Ok(None);
        }
        check("cuPointerGetAttribute(DEVICE_ORDINAL)", r)?;
        Ok(Some(ordinal))
    }

    /// The allocation `[start, end)` that contains `ptr`, when the driver knows one.
    pub fn pointer_range(&self, ptr: u64) -> Option<(u64, u64)> {
        use cu::CUpointer_attribute::*;
        let (mut start, mut size): (cu::CUdeviceptr, usize) = (0, 0);
        // SAFETY: each out-pointer has its attribute's type (CUdeviceptr, size_t).
        let ok = unsafe {
            cu::cuPointerGetAttribute(&mut start as *mut cu::CUdeviceptr as *mut c_void, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr)
                == cu::CUresult::CUDA_SUCCESS
                && cu::cuPointerGetAttribute(&mut size as *mut usize as *mut c_void, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr)
                    == cu::CUresult::CUDA_SUCCESS
        };
        let end = start.checked_add(size as u64)?;
        (ok && start <= ptr && ptr < end).then_some((start, end))
    }

    pub fn mem_info(&self) -> Result<(usize, usize), DriverError> {
        let (mut free, mut total) = (0, 0);
        // SAFETY: valid out-pointers; a context is current.
        check("cuMemGetInfo", unsafe { cu::cuMemGetInfo_v2(&mut free, &mut total) })?;
        Ok((free, total))
    }
}

// ---------------------------------------------------------------------------------------
// NVRTC

/// Proof that NVRTC is loaded; the only way to call it.
#[derive(Debug)]
pub(crate) struct Nvrtc {
    _private: (),
}

static NVRTC: OnceLock<Nvrtc> = OnceLock::new();

/// Load NVRTC from `name` (a path or a soname) and hand out the token.
///
/// cudarc resolves NVRTC's symbols by `dlopen`ing its candidate sonames; once a library of
/// that soname (`libnvrtc.so.13`, `libnvrtc.so.12`) is loaded here, those resolve to it.
pub(crate) fn load_nvrtc(name: &Path) -> Result<&'static Nvrtc, String> {
    let file = name.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    if !file.starts_with("libnvrtc.so") {
        return Err(format!("{} is not named like NVRTC (libnvrtc.so*)", name.display()));
    }
    let ours = open_library(name)?;
    // cudarc calls NVRTC through the library it opens by soname. It must be this one, with
    // every function caijit calls: otherwise another libnvrtc.so would be called (and a
    // missing function would panic inside cudarc).
    let theirs = std::panic::catch_unwind(|| {
        // SAFETY: opening a library by soname; cudarc keeps it for the process.
        unsafe { nv::culib() }
    })
    .map_err(|_| format!("{} is loaded, but cudarc finds no NVRTC by its soname", name.display()))?;
    for symbol in NVRTC_FUNCTIONS {
        // SAFETY: looking symbols up calls nothing; the addresses are only compared.
        let (a, b) = unsafe { (ours.get::<*const c_void>(symbol.as_bytes()), theirs.get::<*const c_void>(symbol.as_bytes())) };
        match (a, b) {
            (Ok(a), Ok(b)) if *a == *b => {}
            (Err(_), _) => return Err(format!("{} has no {symbol}: not a usable NVRTC", name.display())),
            _ => {
                return Err(format!(
                    "{} is loaded, but NVRTC's functions would be called from another libnvrtc.so found first on the loader's search path (LD_LIBRARY_PATH?)",
                    name.display()
                ))
            }
        }
    }
    Ok(NVRTC.get_or_init(|| Nvrtc { _private: () }))
}

/// The NVRTC functions caijit calls.
const NVRTC_FUNCTIONS: [&str; 15] = [
    "nvrtcVersion",
    "nvrtcGetNumSupportedArchs",
    "nvrtcGetSupportedArchs",
    "nvrtcCreateProgram",
    "nvrtcDestroyProgram",
    "nvrtcAddNameExpression",
    "nvrtcCompileProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetPTXSize",
    "nvrtcGetPTX",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
    "nvrtcGetLoweredName",
    "nvrtcGetErrorString",
];

/// A failed NVRTC call: the call's name, its `nvrtcResult` and NVRTC's description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvrtcError {
    pub call: &'static str,
    pub code: i32,
    pub name: String,
    pub message: String,
}

impl std::fmt::Display for NvrtcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {} ({}): {}", self.call, self.name, self.code, self.message)
    }
}

impl std::error::Error for NvrtcError {}

/// Text NVRTC cannot take (a NUL byte inside), refused before the call as NVRTC would.
fn nul_byte(call: &'static str, what: &str) -> NvrtcError {
    let code = nv::nvrtcResult::NVRTC_ERROR_INVALID_INPUT;
    NvrtcError { call, code: code as i32, name: format!("{code:?}"), message: format!("{what} contains a NUL byte") }
}

fn nv_check(call: &'static str, r: nv::nvrtcResult) -> Result<(), NvrtcError> {
    if r == nv::nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any value.
    let s = unsafe { CStr::from_ptr(nv::nvrtcGetErrorString(r)) };
    Err(NvrtcError { call, code: r as i32, name: format!("{r:?}"), message: s.to_string_lossy().into_owned() })
}

/// An NVRTC program, destroyed on drop.
pub(crate) struct NvProgram {
    prog: nv::nvrtcProgram,
}

impl Drop for NvProgram {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed once.
        // A failure cannot be reported from drop and leaks nothing worse than the program.
        let _ = unsafe { nv::nvrtcDestroyProgram(&mut self.prog) };
    }
}

impl Nvrtc {
    pub fn version(&self) -> Result<(i32, i32), NvrtcError> {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: NVRTC is loaded; valid out-pointers.
        nv_check("nvrtcVersion", unsafe { nv::nvrtcVersion(&mut major, &mut minor) })?;
        Ok((major, minor))
    }

    /// Architectures NVRTC can target (`90` for sm_90).
    pub fn supported_archs(&self) -> Result<Vec<i32>, NvrtcError> {
        let mut n = 0;
        // SAFETY: valid out-pointer.
        nv_check("nvrtcGetNumSupportedArchs", unsafe { nv::nvrtcGetNumSupportedArchs(&mut n) })?;
        let mut archs = vec![0; n.max(0) as usize];
        // SAFETY: the buffer holds exactly the number of entries NVRTC reported.
        nv_check("nvrtcGetSupportedArchs", unsafe { nv::nvrtcGetSupportedArchs(archs.as_mut_ptr()) })?;
        Ok(archs)
    }

    /// Create a program from `source` with in-memory headers `(include name, contents)`.
    pub fn create_program(&self, source: &str, name: &str, headers: &[(String, String)]) -> Result<NvProgram, NvrtcError> {
        let cstr = |s: &str, what: &str| CString::new(s).map_err(|_| nul_byte("nvrtcCreateProgram", what));
        let src = cstr(source, "the source")?;
        let name = cstr(name, "the program name")?;
        let contents: Vec<CString> = headers.iter().map(|(_, c)| cstr(c, "a header")).collect::<Result<_, _>>()?;
        let names: Vec<CString> = headers.iter().map(|(n, _)| cstr(n, "a header name")).collect::<Result<_, _>>()?;
        let contents_ptrs: Vec<*const c_char> = contents.iter().map(|c| c.as_ptr()).collect();
        let names_ptrs: Vec<*const c_char> = names.iter().map(|c| c.as_ptr()).collect();
        let mut prog = ptr::null_mut();
        // SAFETY: every pointer refers to a live NUL-terminated string; NVRTC copies them.
        nv_check("nvrtcCreateProgram", unsafe {
            nv::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                headers.len() as c_int,
                contents_ptrs.as_ptr(),
                names_ptrs.as_ptr(),
            )
        })?;
        Ok(NvProgram { prog })
    }
}

impl NvProgram {
    pub fn add_name_expression(&mut self, expr: &str) -> Result<(), NvrtcError> {
        let e = CString::new(expr).map_err(|_| nul_byte("nvrtcAddNameExpression", "a name expression"))?;
        // SAFETY: live program; NVRTC copies the string.
        nv_check("nvrtcAddNameExpression", unsafe { nv::nvrtcAddNameExpression(self.prog, e.as_ptr()) })
    }

    /// Compile; `Ok(false)` when NVRTC reports a compilation error (see [`NvProgram::log`]).
    pub fn compile(&mut self, options: &[String]) -> Result<bool, NvrtcError> {
        let opts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()).map_err(|_| nul_byte("nvrtcCompileProgram", &format!("option {o:?}"))))
            .collect::<Result<_, _>>()?;
        let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        // SAFETY: live program; option strings outlive the call.
        let r = unsafe { nv::nvrtcCompileProgram(self.prog, ptrs.len() as c_int, ptrs.as_ptr()) };
        match r {
            nv::nvrtcResult::NVRTC_SUCCESS => Ok(true),
            nv::nvrtcResult::NVRTC_ERROR_COMPILATION => Ok(false),
            other => nv_check("nvrtcCompileProgram", other).map(|()| false),
        }
    }

    fn read(
        &self,
        what: &'static str,
        size: unsafe fn(nv::nvrtcProgram, *mut usize) -> nv::nvrtcResult,
        get: unsafe fn(nv::nvrtcProgram, *mut c_char) -> nv::nvrtcResult,
    ) -> Result<Vec<u8>, NvrtcError> {
        let mut n = 0usize;
        // SAFETY: live program and valid out-pointer.
        nv_check(what, unsafe { size(self.prog, &mut n) })?;
        let mut buf = vec![0u8; n];
        if n > 0 {
            // SAFETY: the buffer holds the size NVRTC reported.
            nv_check(what, unsafe { get(self.prog, buf.as_mut_ptr() as *mut c_char) })?;
        }
        Ok(buf)
    }

    pub fn log(&self) -> Result<String, NvrtcError> {
        let mut b = self.read("nvrtcGetProgramLog", nv::nvrtcGetProgramLogSize, nv::nvrtcGetProgramLog)?;
        while b.last() == Some(&0) {
            b.pop();
        }
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    pub fn ptx(&self) -> Result<String, NvrtcError> {
        let mut b = self.read("nvrtcGetPTX", nv::nvrtcGetPTXSize, nv::nvrtcGetPTX)?;
        while b.last() == Some(&0) {
            b.pop();
        }
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    /// The CUBIN, or `None` when the program was compiled for a virtual architecture.
    pub fn cubin(&self) -> Result<Option<Vec<u8>>, NvrtcError> {
        let b = self.read("nvrtcGetCUBIN", nv::nvrtcGetCUBINSize, nv::nvrtcGetCUBIN)?;
        Ok((!b.is_empty()).then_some(b))
    }

    pub fn lowered_name(&self, expr: &str) -> Result<String, NvrtcError> {
        let e = CString::new(expr).map_err(|_| nul_byte("nvrtcAddNameExpression", "a name expression"))?;
        let mut out: *const c_char = ptr::null();
        // SAFETY: live, compiled program; NVRTC returns a pointer owned by the program.
        nv_check("nvrtcGetLoweredName", unsafe { nv::nvrtcGetLoweredName(self.prog, e.as_ptr(), &mut out) })?;
        if out.is_null() {
            let code = nv::nvrtcResult::NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID;
            let message = format!("NVRTC has no lowered name for {expr:?}");
            return Err(NvrtcError { call: "nvrtcGetLoweredName", code: code as i32, name: format!("{code:?}"), message });
        }
        // SAFETY: non-null results are NUL-terminated and live as long as the program.
        Ok(unsafe { CStr::from_ptr(out) }.to_string_lossy().into_owned())
    }
}
