//! The driver's device memory calls: the stream-ordered pool, allocations and frees,
//! copies, and what a pointer is.

use std::ffi::{c_int, c_void};
use std::ptr;

use super::{check, cu, Driver, DriverError, RawPool, RawStream};

impl Driver {
    /// A stream-ordered memory pool on device `ordinal` that keeps what is freed into it
    /// (release threshold: unlimited) until [`Driver::mem_pool_trim`], as CuPy's and
    /// PyTorch's caching allocators do. The default pool returns freed memory to the system
    /// at every synchronisation, so the next allocation maps pages again (tens of µs on the H200:
    /// `python/benchmarks/probe_first_alloc.py`).
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

    /// `bytes` of device memory (`cuMemAlloc`): a segment of caijit's caching allocator.
    pub fn mem_alloc(&self, bytes: usize) -> Result<u64, DriverError> {
        let mut p = 0;
        // SAFETY: valid out-pointer; a context is current; the memory is owned by the caller.
        check("cuMemAlloc", unsafe { cu::cuMemAlloc_v2(&mut p, bytes) })?;
        Ok(p)
    }

    // The calls below write or free device memory at a raw address, which the driver
    // cannot check: each is `unsafe`, and its caller says in a `// SAFETY:` line why the
    // range is valid (caijit's own allocations: `array::DeviceArray`, module globals; CAI
    // views, by their producers' promise).

    /// Free an allocation of [`Driver::mem_alloc_async`], ordered after the work on `s`.
    ///
    /// # Safety
    /// `ptr` is an allocation of [`Driver::mem_alloc_async`] that is freed once and not used
    /// afterwards, except by work already enqueued on `s` (or on streams `s` waits for).
    pub unsafe fn free_owned_async(&self, ptr: u64, s: RawStream) -> Result<(), DriverError> {
        // SAFETY: the owner gives the allocation up (`# Safety`); work already enqueued on
        // `s` completes before the memory is reused.
        check("cuMemFreeAsync", unsafe { cu::cuMemFreeAsync(ptr, s.0) })
    }

    /// Give a segment of [`Driver::mem_alloc`] back to the driver.
    ///
    /// # Safety
    /// `ptr` is an allocation of [`Driver::mem_alloc`], freed once, with no work pending on
    /// it (the device was synchronised since its last use) and no use afterwards.
    pub unsafe fn free_segment(&self, ptr: u64) -> Result<(), DriverError> {
        // SAFETY: the owner gives the idle segment up (`# Safety`).
        check("cuMemFree", unsafe { cu::cuMemFree_v2(ptr) })
    }

    /// Copy `bytes` from device memory at `src` to device memory at `dst`, on `s`.
    ///
    /// # Safety
    /// `[src, src + bytes)` is readable and `[dst, dst + bytes)` writable device memory,
    /// both valid until the copy has run on `s`.
    pub unsafe fn copy_device_to_device(&self, dst: u64, src: u64, bytes: usize, s: RawStream) -> Result<(), DriverError> {
        // SAFETY: both ranges are valid for the copy (`# Safety`).
        check("cuMemcpyDtoDAsync", unsafe { cu::cuMemcpyDtoDAsync_v2(dst, src, bytes, s.0) })
    }

    /// Copy host bytes into owned device memory of at least `src.len()` bytes. Pageable
    /// sources are staged before the call returns, so `src` may be dropped afterwards.
    ///
    /// # Safety
    /// `[dst, dst + src.len())` is device memory the caller owns, valid until the copy has
    /// run on `s`.
    pub unsafe fn copy_to_owned(&self, dst: u64, src: &[u8], s: RawStream) -> Result<(), DriverError> {
        // SAFETY: `dst` is owned device memory at least `src.len()` long (`# Safety`); `src`
        // is read before the synchronisation below returns.
        check("cuMemcpyHtoDAsync", unsafe { cu::cuMemcpyHtoDAsync_v2(dst, src.as_ptr() as *const c_void, src.len(), s.0) })?;
        // A pageable copy may still read `src` until the stream reaches it.
        self.stream_synchronize(s)
    }

    /// Copy owned device memory into `dst`, waiting for the copy (and the work before it on
    /// `s`) to finish. A host synchronisation, never on the launch path.
    ///
    /// # Safety
    /// `[src, src + dst.len())` is readable device memory, valid until the copy has run.
    pub unsafe fn copy_from_owned(&self, dst: &mut [u8], src: u64, s: RawStream) -> Result<(), DriverError> {
        // SAFETY: `src` is device memory at least `dst.len()` long (`# Safety`); `dst` is not read
        // before the synchronisation below.
        check("cuMemcpyDtoHAsync", unsafe { cu::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr() as *mut c_void, src, dst.len(), s.0) })?;
        self.stream_synchronize(s)
    }

    /// Set owned device memory to zero bytes.
    ///
    /// # Safety
    /// `[dst, dst + bytes)` is device memory the caller owns, valid until the write has run
    /// on `s`.
    pub unsafe fn zero_owned(&self, dst: u64, bytes: usize, s: RawStream) -> Result<(), DriverError> {
        // SAFETY: `dst` is owned device memory at least `bytes` long (`# Safety`).
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
