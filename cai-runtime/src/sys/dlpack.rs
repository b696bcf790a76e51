//! DLPack's C structs (dlpack.h 1.3) and the raw work on them: reading a producer's
//! `dltensor` / `dltensor_versioned` capsule, exporting caijit memory as a capsule, and the
//! C exchange API (`__dlpack_c_exchange_api__`, a `DLPackExchangeAPI` table read once per
//! type). Everything here hands out owned, plain Rust values; the rules that use them
//! (which devices and dtypes a launch accepts, which stream it orders against) live above.

use std::ffi::{c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyType};
use smallvec::SmallVec;

/// `kDLCPU`, `kDLCUDA`, `kDLCUDAHost`, `kDLCUDAManaged`.
pub const KDL_CPU: i32 = 1;
pub const KDL_CUDA: i32 = 2;
pub const KDL_CUDA_HOST: i32 = 3;
pub const KDL_CUDA_MANAGED: i32 = 13;
/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
pub const FLAG_READ_ONLY: u64 = 1;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the tensor is a copy the producer made for this export.
pub const FLAG_IS_COPIED: u64 = 1 << 1;
/// The DLPack version caijit's exports declare, and the exchange API version it reads.
pub const VERSION: DLPackVersion = DLPackVersion { major: 1, minor: 3 };

/// Capsule names of the Python specification.
pub const DLTENSOR: &CStr = c"dltensor";
pub const DLTENSOR_VERSIONED: &CStr = c"dltensor_versioned";
pub const EXCHANGE_API: &CStr = c"dlpack_exchange_api";

/// The deepest `ndim` read from a producer (caijit's own limit is lower and checked above).
const MAX_NDIM: i32 = 64;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

impl DLTensor {
    const EMPTY: DLTensor = DLTensor {
        data: ptr::null_mut(),
        device: DLDevice { device_type: 0, device_id: 0 },
        ndim: 0,
        dtype: DLDataType { code: 0, bits: 0, lanes: 0 },
        shape: ptr::null_mut(),
        strides: ptr::null_mut(),
        byte_offset: 0,
    };
}

#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    pub flags: u64,
    pub dl_tensor: DLTensor,
}

#[repr(C)]
#[derive(Debug)]
pub struct DLPackExchangeAPIHeader {
    pub version: DLPackVersion,
    pub prev_api: *mut DLPackExchangeAPIHeader,
}

type SetError = Option<unsafe extern "C" fn(*mut c_void, *const std::ffi::c_char, *const std::ffi::c_char)>;

#[repr(C)]
#[derive(Debug)]
pub struct DLPackExchangeAPI {
    pub header: DLPackExchangeAPIHeader,
    pub managed_tensor_allocator:
        Option<unsafe extern "C" fn(*mut DLTensor, *mut *mut DLManagedTensorVersioned, *mut c_void, SetError) -> c_int>,
    pub managed_tensor_from_py_object_no_sync: Option<unsafe extern "C" fn(*mut c_void, *mut *mut DLManagedTensorVersioned) -> c_int>,
    pub managed_tensor_to_py_object_no_sync: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned, *mut *mut c_void) -> c_int>,
    pub dltensor_from_py_object_no_sync: Option<unsafe extern "C" fn(*mut c_void, *mut DLTensor) -> c_int>,
    pub current_work_stream: Option<unsafe extern "C" fn(i32, i32, *mut *mut c_void) -> c_int>,
}

/// `(size, align, [field offsets])` of each struct, for the layout test against dlpack.h.
pub fn layouts() -> Vec<(&'static str, usize, usize, Vec<usize>)> {
    use std::mem::{align_of, offset_of, size_of};
    vec![
        ("DLPackVersion", size_of::<DLPackVersion>(), align_of::<DLPackVersion>(), vec![0, offset_of!(DLPackVersion, minor)]),
        ("DLDevice", size_of::<DLDevice>(), align_of::<DLDevice>(), vec![0, offset_of!(DLDevice, device_id)]),
        (
            "DLDataType",
            size_of::<DLDataType>(),
            align_of::<DLDataType>(),
            vec![0, offset_of!(DLDataType, bits), offset_of!(DLDataType, lanes)],
        ),
        (
            "DLTensor",
            size_of::<DLTensor>(),
            align_of::<DLTensor>(),
            vec![
                offset_of!(DLTensor, data),
                offset_of!(DLTensor, device),
                offset_of!(DLTensor, ndim),
                offset_of!(DLTensor, dtype),
                offset_of!(DLTensor, shape),
                offset_of!(DLTensor, strides),
                offset_of!(DLTensor, byte_offset),
            ],
        ),
        (
            "DLManagedTensor",
            size_of::<DLManagedTensor>(),
            align_of::<DLManagedTensor>(),
            vec![offset_of!(DLManagedTensor, dl_tensor), offset_of!(DLManagedTensor, manager_ctx), offset_of!(DLManagedTensor, deleter)],
        ),
        (
            "DLManagedTensorVersioned",
            size_of::<DLManagedTensorVersioned>(),
            align_of::<DLManagedTensorVersioned>(),
            vec![
                offset_of!(DLManagedTensorVersioned, version),
                offset_of!(DLManagedTensorVersioned, manager_ctx),
                offset_of!(DLManagedTensorVersioned, deleter),
                offset_of!(DLManagedTensorVersioned, flags),
                offset_of!(DLManagedTensorVersioned, dl_tensor),
            ],
        ),
        (
            "DLPackExchangeAPIHeader",
            size_of::<DLPackExchangeAPIHeader>(),
            align_of::<DLPackExchangeAPIHeader>(),
            vec![offset_of!(DLPackExchangeAPIHeader, version), offset_of!(DLPackExchangeAPIHeader, prev_api)],
        ),
        (
            "DLPackExchangeAPI",
            size_of::<DLPackExchangeAPI>(),
            align_of::<DLPackExchangeAPI>(),
            vec![
                offset_of!(DLPackExchangeAPI, header),
                offset_of!(DLPackExchangeAPI, managed_tensor_allocator),
                offset_of!(DLPackExchangeAPI, managed_tensor_from_py_object_no_sync),
                offset_of!(DLPackExchangeAPI, managed_tensor_to_py_object_no_sync),
                offset_of!(DLPackExchangeAPI, dltensor_from_py_object_no_sync),
                offset_of!(DLPackExchangeAPI, current_work_stream),
            ],
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// Reading a tensor

/// What a consumer reads of a DLPack tensor, copied out of the producer's structs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// `data + byte_offset`.
    pub data: u64,
    pub device: DLDevice,
    pub dtype: DLDataType,
    pub shape: SmallVec<[i64; 4]>,
    /// In elements; `None`: compact row-major.
    pub strides: Option<SmallVec<[i64; 4]>>,
    pub readonly: bool,
}

/// Copy a tensor's facts out of `t`.
///
/// # Safety
/// `t` was filled by a producer: `shape` (and `strides` when non-null) point to `ndim`
/// readable `int64_t`s, alive for this call.
unsafe fn read_tensor(t: &DLTensor, readonly: bool) -> Result<TensorInfo, String> {
    if !(0..=MAX_NDIM).contains(&t.ndim) {
        return Err(format!("a DLPack tensor with ndim {}", t.ndim));
    }
    let n = t.ndim as usize;
    let read = |p: *const i64, what: &str| -> Result<SmallVec<[i64; 4]>, String> {
        if n == 0 {
            return Ok(SmallVec::new());
        }
        if p.is_null() {
            return Err(format!("a DLPack tensor of ndim {n} with a null {what} pointer"));
        }
        // SAFETY: the caller guarantees `n` readable int64_t behind a non-null pointer.
        Ok(SmallVec::from_slice(unsafe { std::slice::from_raw_parts(p, n) }))
    };
    let shape = read(t.shape, "shape")?;
    let strides = if t.strides.is_null() { None } else { Some(read(t.strides, "strides")?) };
    let data = (t.data as usize as u64)
        .checked_add(t.byte_offset)
        .ok_or_else(|| format!("a DLPack tensor's data {:p} + byte_offset {} overflows", t.data, t.byte_offset))?;
    Ok(TensorInfo { data, device: t.device, dtype: t.dtype, shape, strides, readonly })
}

/// The tensor of an unconsumed `dltensor` or `dltensor_versioned` capsule (left unconsumed:
/// the capsule keeps the memory alive, and its destructor calls the deleter).
pub fn read_capsule(obj: &Bound<'_, PyAny>) -> Result<TensorInfo, String> {
    let Ok(capsule) = obj.cast::<PyCapsule>() else {
        let name = obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        return Err(format!("__dlpack__() returned a {name}, not a capsule"));
    };
    if capsule.is_valid_checked(Some(DLTENSOR_VERSIONED)) {
        let p = capsule.pointer_checked(Some(DLTENSOR_VERSIONED)).map_err(|e| e.to_string())?;
        let m = p.cast::<DLManagedTensorVersioned>();
        // SAFETY: a valid capsule named "dltensor_versioned" holds a DLManagedTensorVersioned
        // (the Python specification), owned by the capsule while it is unconsumed; we hold a
        // reference to the capsule and the GIL, so nothing frees it during the read.
        let (version, flags) = unsafe { ((*m.as_ptr()).version, (*m.as_ptr()).flags) };
        if version.major != 1 {
            return Err(format!("DLPack version {}.{} is not supported (caijit reads 1.x)", version.major, version.minor));
        }
        if flags & FLAG_IS_COPIED != 0 {
            return Err("the producer exported a copy (DLPack's IS_COPIED flag): a kernel's writes would be lost, and caijit never \
                        works on implicit copies"
                .into());
        }
        // SAFETY: as above; a 1.x producer filled dl_tensor by the 1.x layout.
        return unsafe { read_tensor(&(*m.as_ptr()).dl_tensor, flags & FLAG_READ_ONLY != 0) };
    }
    if capsule.is_valid_checked(Some(DLTENSOR)) {
        let p = capsule.pointer_checked(Some(DLTENSOR)).map_err(|e| e.to_string())?;
        let m = p.cast::<DLManagedTensor>();
        // SAFETY: a valid capsule named "dltensor" holds a DLManagedTensor owned by the
        // capsule while unconsumed; the reference we hold and the GIL keep it alive.
        return unsafe { read_tensor(&(*m.as_ptr()).dl_tensor, false) };
    }
    Err("__dlpack__() did not return an unconsumed DLPack capsule".into())
}

// ---------------------------------------------------------------------------------------
// The C exchange API

/// A producer type's `DLPackExchangeAPI` table (version 1.3 or a later 1.x), read once per
/// type: the table lives for the process (the specification requires it; caijit also keeps
/// the capsule that points to it).
#[derive(Clone, Copy, Debug)]
pub struct ExchangeApi {
    api: NonNull<DLPackExchangeAPI>,
}

// SAFETY: the table is immutable and lives for the process; its functions are called with
// the GIL held (which `tensor` and `current_work_stream` require through `Python`/`Bound`).
unsafe impl Send for ExchangeApi {}
// SAFETY: as above.
unsafe impl Sync for ExchangeApi {}

/// Fetch and clear the Python error a producer's C function set (a `SystemError` when it
/// returned failure without setting one).
fn producer_error(py: Python<'_>, what: &str) -> PyErr {
    PyErr::take(py).unwrap_or_else(|| pyo3::exceptions::PySystemError::new_err(format!("{what} failed without an exception")))
}

impl ExchangeApi {
    /// The table `ty.__dlpack_c_exchange_api__` points to; `Ok(None)` when the type has
    /// none, `Err` (why) when it has one caijit cannot use (another capsule, a major
    /// version other than 1 and no 1.x in its `prev_api` chain, a required function
    /// missing).
    pub fn of_type(ty: &Bound<'_, PyType>) -> Result<Option<ExchangeApi>, String> {
        let attr = match ty.getattr(pyo3::intern!(ty.py(), "__dlpack_c_exchange_api__")) {
            Ok(a) => a,
            Err(_) => return Ok(None),
        };
        let capsule = attr.cast::<PyCapsule>().map_err(|_| "__dlpack_c_exchange_api__ is not a capsule".to_string())?;
        let p = capsule
            .pointer_checked(Some(EXCHANGE_API))
            .map_err(|_| "__dlpack_c_exchange_api__ is not a capsule named \"dlpack_exchange_api\"".to_string())?;
        // The table must outlive every use: keep its capsule for the process too.
        std::mem::forget(attr.clone().unbind());
        let mut header = p.cast::<DLPackExchangeAPIHeader>();
        for _ in 0..16 {
            // SAFETY: the capsule (or a prev_api link of a table) points to a
            // DLPackExchangeAPIHeader that lives for the process (dlpack.h 1.3).
            let h = unsafe { header.as_ref() };
            if h.version.major == 1 {
                if h.version.minor < 3 {
                    return Err(format!("DLPack exchange API {}.{} predates 1.3", h.version.major, h.version.minor));
                }
                let api = header.cast::<DLPackExchangeAPI>();
                // SAFETY: a 1.x (x >= 3) header begins a DLPackExchangeAPI of the 1.3 layout.
                let table = unsafe { api.as_ref() };
                if table.managed_tensor_from_py_object_no_sync.is_none() || table.current_work_stream.is_none() {
                    return Err("the DLPack exchange API lacks a required function".into());
                }
                return Ok(Some(ExchangeApi { api }));
            }
            match NonNull::new(h.prev_api) {
                Some(prev) => header = prev,
                None => return Err(format!("DLPack exchange API {}.{} (caijit reads 1.x)", h.version.major, h.version.minor)),
            }
        }
        Err("the DLPack exchange API's prev_api chain is too long".into())
    }

    fn table(&self) -> &DLPackExchangeAPI {
        // SAFETY: checked in `of_type`; the table lives for the process.
        unsafe { self.api.as_ref() }
    }

    /// The table's address: one per producer library.
    pub fn id(&self) -> usize {
        self.api.as_ptr() as usize
    }

    pub fn version(&self) -> DLPackVersion {
        self.table().header.version
    }

    /// Whether the producer offers the borrowing `dltensor_from_py_object_no_sync`.
    pub fn borrows(&self) -> bool {
        self.table().dltensor_from_py_object_no_sync.is_some()
    }

    /// The tensor `obj` (an instance of the type the table came from, or of a subclass)
    /// views, without stream synchronisation. `Ok(Err(why))` when the producer's tensor
    /// cannot be read by caijit; `Err` when the producer raised.
    ///
    /// Through `dltensor_from_py_object_no_sync` when offered (nothing is owned; the facts
    /// are copied before control returns to Python), else through
    /// `managed_tensor_from_py_object_no_sync`, whose tensor is released (its deleter called)
    /// once read: `obj` itself keeps the memory alive while the launch holds it.
    pub fn tensor(&self, obj: &Bound<'_, PyAny>) -> PyResult<Result<TensorInfo, String>> {
        let py = obj.py();
        let table = self.table();
        if let Some(f) = table.dltensor_from_py_object_no_sync {
            let mut t = DLTensor::EMPTY;
            // SAFETY: `obj` is a live object (a Bound with the GIL held) of the table's type;
            // `t` is a writable DLTensor on our stack.
            let rc = unsafe { f(obj.as_ptr().cast(), &mut t) };
            if rc != 0 {
                return Err(producer_error(py, "dltensor_from_py_object_no_sync"));
            }
            // SAFETY: on success the producer filled `t`; its shape and strides stay valid
            // until control returns to the producer, which does not happen during the read.
            return Ok(unsafe { read_tensor(&t, false) });
        }
        let f = table.managed_tensor_from_py_object_no_sync.expect("checked in of_type");
        let mut m: *mut DLManagedTensorVersioned = ptr::null_mut();
        // SAFETY: as above; `m` is a writable out-pointer.
        let rc = unsafe { f(obj.as_ptr().cast(), &mut m) };
        if rc != 0 {
            return Err(producer_error(py, "managed_tensor_from_py_object_no_sync"));
        }
        let Some(m) = NonNull::new(m) else {
            return Ok(Err("managed_tensor_from_py_object_no_sync returned no tensor".into()));
        };
        /// Calls the tensor's deleter when dropped (on every path out of the read).
        struct Owned(NonNull<DLManagedTensorVersioned>);
        impl Drop for Owned {
            fn drop(&mut self) {
                // SAFETY: the producer handed us this tensor's ownership; it is released once.
                unsafe {
                    if let Some(d) = (*self.0.as_ptr()).deleter {
                        d(self.0.as_ptr());
                    }
                }
            }
        }
        let owned = Owned(m);
        // SAFETY: an owned, live DLManagedTensorVersioned (the producer's contract).
        let managed = unsafe { &*owned.0.as_ptr() };
        if managed.version.major != 1 {
            return Ok(Err(format!("DLPack version {}.{} is not supported", managed.version.major, managed.version.minor)));
        }
        if managed.flags & FLAG_IS_COPIED != 0 {
            return Ok(Err("the producer exported a copy (DLPack's IS_COPIED flag)".into()));
        }
        // SAFETY: a 1.x tensor; its shape and strides live until the deleter runs (after this).
        Ok(unsafe { read_tensor(&managed.dl_tensor, managed.flags & FLAG_READ_ONLY != 0) })
    }

    /// The producer's current work stream on a device (a raw `CUstream`; 0 is the legacy
    /// default stream, or none for a CPU device).
    pub fn current_work_stream(&self, py: Python<'_>, device_type: i32, device_id: i32) -> PyResult<u64> {
        let f = self.table().current_work_stream.expect("checked in of_type");
        let mut s: *mut c_void = ptr::null_mut();
        // SAFETY: the GIL is held (`py`); `s` is a writable out-pointer.
        let rc = unsafe { f(device_type, device_id, &mut s) };
        if rc != 0 {
            return Err(producer_error(py, "current_work_stream"));
        }
        Ok(s as usize as u64)
    }
}

// ---------------------------------------------------------------------------------------
// Export

/// What an exported tensor describes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportTensor {
    pub data: u64,
    pub device: DLDevice,
    pub dtype: DLDataType,
    pub shape: Vec<i64>,
    /// In elements.
    pub strides: Vec<i64>,
    pub readonly: bool,
}

/// Called once when an exported tensor is released: `true` when a consumer took it and
/// called the deleter, `false` when the capsule died unconsumed.
pub type OnRelease = Box<dyn FnOnce(bool) + Send>;

/// What an export keeps alive beside its struct.
struct Keep {
    _shape: Vec<i64>,
    _strides: Vec<i64>,
    on_release: Option<OnRelease>,
}

impl Keep {
    fn release(mut self, used: bool) {
        if let Some(f) = self.on_release.take() {
            // A deleter is called from C: a panic must not unwind into the consumer.
            let _ = catch_unwind(AssertUnwindSafe(|| f(used)));
        }
    }
}

#[repr(C)]
struct Legacy {
    managed: DLManagedTensor,
    keep: Keep,
}

#[repr(C)]
struct Versioned {
    managed: DLManagedTensorVersioned,
    keep: Keep,
}

unsafe extern "C" fn delete_legacy(m: *mut DLManagedTensor) {
    if !m.is_null() {
        // SAFETY: `m` is the first field of a boxed `Legacy` made by `export_capsule`, whose
        // deleter is called once (by the consumer that took it, or the capsule destructor).
        let b = unsafe { Box::from_raw(m.cast::<Legacy>()) };
        b.keep.release(true);
    }
}

unsafe extern "C" fn delete_versioned(m: *mut DLManagedTensorVersioned) {
    if !m.is_null() {
        // SAFETY: as in `delete_legacy`, for a boxed `Versioned`.
        let b = unsafe { Box::from_raw(m.cast::<Versioned>()) };
        b.keep.release(true);
    }
}

/// Frees a capsule's tensor when the capsule dies unconsumed (a consumer that took the
/// tensor renamed the capsule and calls the deleter itself).
unsafe extern "C" fn destroy_capsule(capsule: *mut ffi::PyObject) {
    // SAFETY: called by CPython with the GIL held on a capsule being destroyed; IsValid
    // sets no error, and GetPointer is called only with the name IsValid confirmed.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, DLTENSOR_VERSIONED.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(capsule, DLTENSOR_VERSIONED.as_ptr());
            if !p.is_null() {
                Box::from_raw(p.cast::<Versioned>()).keep.release(false);
            }
        } else if ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr());
            if !p.is_null() {
                Box::from_raw(p.cast::<Legacy>()).keep.release(false);
            }
        }
    }
}

/// A `dltensor` (or, `versioned`, a `dltensor_versioned`) capsule of `t`. `on_release`
/// runs once when the tensor is released (see [`OnRelease`]); until then the capsule (or
/// its consumer) owns it.
pub fn export_capsule<'py>(py: Python<'py>, t: ExportTensor, versioned: bool, on_release: OnRelease) -> PyResult<Bound<'py, PyAny>> {
    let mut keep = Keep { _shape: t.shape, _strides: t.strides, on_release: Some(on_release) };
    let tensor = DLTensor {
        data: t.data as usize as *mut c_void,
        device: t.device,
        ndim: i32::try_from(keep._shape.len()).map_err(|_| pyo3::exceptions::PyValueError::new_err("too many dimensions"))?,
        dtype: t.dtype,
        shape: keep._shape.as_mut_ptr(),
        strides: keep._strides.as_mut_ptr(),
        byte_offset: 0,
    };
    let (pointer, name) = if versioned {
        let managed = DLManagedTensorVersioned {
            version: VERSION,
            manager_ctx: ptr::null_mut(),
            deleter: Some(delete_versioned),
            flags: if t.readonly { FLAG_READ_ONLY } else { 0 },
            dl_tensor: tensor,
        };
        (Box::into_raw(Box::new(Versioned { managed, keep })).cast::<c_void>(), DLTENSOR_VERSIONED)
    } else {
        let managed = DLManagedTensor { dl_tensor: tensor, manager_ctx: ptr::null_mut(), deleter: Some(delete_legacy) };
        (Box::into_raw(Box::new(Legacy { managed, keep })).cast::<c_void>(), DLTENSOR)
    };
    // (The Vecs' heap buffers do not move when `keep` moves into the box.)
    let pointer = NonNull::new(pointer).expect("a box is not null");
    // SAFETY: `pointer` is a leaked box that `destroy_capsule` (unconsumed) or the deleter
    // (consumed) frees exactly once; `name` is static; the destructor may run on any thread
    // that holds the GIL.
    let made = unsafe { PyCapsule::new_with_pointer_and_destructor(py, pointer, name, Some(destroy_capsule)) };
    match made {
        Ok(c) => Ok(c.into_any()),
        Err(e) => {
            // SAFETY: no capsule owns the box: free it here (not used by any consumer).
            unsafe {
                if versioned {
                    Box::from_raw(pointer.as_ptr().cast::<Versioned>()).keep.release(false);
                } else {
                    Box::from_raw(pointer.as_ptr().cast::<Legacy>()).keep.release(false);
                }
            }
            Err(e)
        }
    }
}

/// Consume a capsule as a DLPack consumer does (rename it `used_dltensor[_versioned]` and
/// call the deleter): what `torch.from_dlpack` does with a capsule once its tensor dies,
/// for tests of exports without a GPU library. Returns whether it was consumed.
pub fn consume_capsule(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    let Ok(capsule) = obj.cast::<PyCapsule>() else { return Ok(false) };
    if capsule.is_valid_checked(Some(DLTENSOR_VERSIONED)) {
        let p = capsule.pointer_checked(Some(DLTENSOR_VERSIONED))?.cast::<DLManagedTensorVersioned>();
        // SAFETY: a valid, unconsumed capsule we hold; renaming it first hands its tensor's
        // ownership to us, released once through its deleter.
        unsafe {
            if ffi::PyCapsule_SetName(capsule.as_ptr(), c"used_dltensor_versioned".as_ptr()) != 0 {
                return Err(producer_error(obj.py(), "PyCapsule_SetName"));
            }
            if let Some(d) = (*p.as_ptr()).deleter {
                d(p.as_ptr());
            }
        }
        return Ok(true);
    }
    if capsule.is_valid_checked(Some(DLTENSOR)) {
        let p = capsule.pointer_checked(Some(DLTENSOR))?.cast::<DLManagedTensor>();
        // SAFETY: as above, for a legacy capsule.
        unsafe {
            if ffi::PyCapsule_SetName(capsule.as_ptr(), c"used_dltensor".as_ptr()) != 0 {
                return Err(producer_error(obj.py(), "PyCapsule_SetName"));
            }
            if let Some(d) = (*p.as_ptr()).deleter {
                d(p.as_ptr());
            }
        }
        return Ok(true);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes and offsets of dlpack.h 1.3 on a 64-bit target (LP64).
    #[test]
    fn layouts_match_dlpack_h() {
        let expected: &[(&str, usize, usize, &[usize])] = &[
            ("DLPackVersion", 8, 4, &[0, 4]),
            ("DLDevice", 8, 4, &[0, 4]),
            ("DLDataType", 4, 2, &[0, 1, 2]),
            ("DLTensor", 48, 8, &[0, 8, 16, 20, 24, 32, 40]),
            ("DLManagedTensor", 64, 8, &[0, 48, 56]),
            ("DLManagedTensorVersioned", 80, 8, &[0, 8, 16, 24, 32]),
            ("DLPackExchangeAPIHeader", 16, 8, &[0, 8]),
            ("DLPackExchangeAPI", 56, 8, &[0, 16, 24, 32, 40, 48]),
        ];
        let got = layouts();
        assert_eq!(got.len(), expected.len());
        for ((name, size, align, offsets), (ename, esize, ealign, eoffsets)) in got.iter().zip(expected) {
            assert_eq!((name, size, align, offsets.as_slice()), (ename, esize, ealign, *eoffsets));
        }
    }
}
