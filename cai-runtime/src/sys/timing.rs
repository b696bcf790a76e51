//! Driver calls only diagnostics make: events that record time, for `caijit.profile()`
//! (created only while profiling: the launch path's pooled events disable timing, which
//! makes them cheaper), and the address of a module's `__device__` variable (the
//! bounds-check record of debug instances).

use std::ptr;

use super::{check, cu, Driver, DriverError, RawEvent};

impl Driver {
    /// An event that records time (`CU_EVENT_DEFAULT`).
    pub fn event_create_timed(&self) -> Result<RawEvent, DriverError> {
        let mut e = ptr::null_mut();
        // SAFETY: valid out-pointer; a context is current.
        check("cuEventCreate", unsafe { cu::cuEventCreate(&mut e, cu::CUevent_flags::CU_EVENT_DEFAULT as std::ffi::c_uint) })?;
        Ok(RawEvent(e))
    }

    /// Block until the work before `e`'s last record has finished.
    pub fn event_synchronize(&self, e: RawEvent) -> Result<(), DriverError> {
        // SAFETY: a live event handle.
        check("cuEventSynchronize", unsafe { cu::cuEventSynchronize(e.0) })
    }

    /// Milliseconds between two completed timing events (drivers of CUDA 12.8+, which
    /// export `cuEventElapsedTime_v2`; `None` on older ones).
    pub fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> Result<Option<f32>, DriverError> {
        if !self.has("cuEventElapsedTime_v2") {
            return Ok(None);
        }
        let mut ms = 0f32;
        // SAFETY: valid out-pointer; both events are live timing events that have completed.
        check("cuEventElapsedTime", unsafe { cu::cuEventElapsedTime_v2(&mut ms, start.0, end.0) })?;
        Ok(Some(ms))
    }
}

impl Driver {
    /// The address and size of the `__device__` variable `name` of a loaded module; `None`
    /// when the module has none of that name.
    pub fn module_global(&self, module: super::RawModule, name: &std::ffi::CStr) -> Result<Option<(u64, usize)>, DriverError> {
        let (mut ptr, mut size) = (0u64, 0usize);
        // SAFETY: valid out-pointers; the module is loaded and the name NUL-terminated.
        let r = unsafe { cu::cuModuleGetGlobal_v2(&mut ptr, &mut size, module.0, name.as_ptr()) };
        if r == cu::CUresult::CUDA_ERROR_NOT_FOUND {
            return Ok(None);
        }
        check("cuModuleGetGlobal", r)?;
        Ok(Some((ptr, size)))
    }
}
