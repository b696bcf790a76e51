//! The driver and the devices it lists: versions, the device count (and the one-device
//! shortcut), the guard that makes a context current, and which device owns a pointer.

use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::sys::{self, Ctx, Driver, RawEvent};

pub(crate) fn driver() -> Result<&'static Driver> {
    sys::driver().map_err(Error::CudaNotAvailable)
}

/// The CUDA driver's version (`13000` for 13.0).
pub fn driver_version() -> Result<i32> {
    Ok(driver()?.version()?)
}

/// Whether the driver cross-checks every loaded kernel's parameters (count, offsets and
/// sizes) against caijit's layout: drivers of CUDA 12.4 and newer can.
pub fn driver_checks_parameters() -> Result<bool> {
    Ok(driver()?.has_param_info())
}

/// Number of CUDA devices (read once: it cannot change within a process).
pub fn device_count() -> Result<usize> {
    static COUNT: OnceLock<usize> = OnceLock::new();
    if let Some(&n) = COUNT.get() {
        return Ok(n);
    }
    let n = driver()?.device_count()? as usize;
    Ok(*COUNT.get_or_init(|| n))
}

/// The device of any device memory when that needs no question: `Some(0)` when the process
/// sees one device, or none (no driver: launches then fail with their own error); `None`
/// with several, where each pointer's device must be asked (or told by its producer).
pub fn sole_device() -> Option<usize> {
    match device_count() {
        Ok(n) if n > 1 => None,
        _ => Some(0),
    }
}

/// Events taken from a context's pool for one launch (inline for up to four).
pub(crate) type Events = smallvec::SmallVec<[RawEvent; 4]>;

/// The driver, with a context made current by [`Context::bind`] (see there).
pub(crate) struct Current {
    pub(super) driver: &'static Driver,
    pub(super) previous: Option<Ctx>,
}

impl std::ops::Deref for Current {
    type Target = Driver;
    fn deref(&self) -> &Driver {
        self.driver
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        if let Some(previous) = self.previous {
            // A failure here is the driver's sticky error, reported by the next call.
            let _ = self.driver.restore_current(previous);
        }
    }
}

/// Allocations recently found to be device memory, per thread: `[start, end)`.
const KNOWN_RANGES: usize = 16;
thread_local! {
    static KNOWN: std::cell::RefCell<([(u64, u64); KNOWN_RANGES], usize)> =
        const { std::cell::RefCell::new(([(0, 0); KNOWN_RANGES], 0)) };
}

/// The device ordinal owning `ptr`, `None` when it is not device memory; a context must be
/// current.
///
/// With one device every device allocation is on device 0, so an address inside an
/// allocation already seen is answered from a small per-thread table without asking the
/// driver (`cuPointerGetAttribute` costs about 0.1 µs per array: `python/benchmarks/probe_launch.py`
/// splits a launch by phase). The check exists to refuse
/// host arrays; a stale entry answers "device 0" for device memory freed since, which is
/// what the driver said of it while it was allocated (a pointer freed just after the query
/// is no different). With several devices a freed range may come back on another device,
/// so every pointer is asked.
pub(crate) fn device_of(d: &Driver, ptr: u64) -> Result<Option<i32>> {
    if device_count()? != 1 {
        return Ok(d.pointer_device(ptr)?);
    }
    if KNOWN.with_borrow(|(ranges, _)| ranges.iter().any(|&(lo, hi)| lo <= ptr && ptr < hi)) {
        return Ok(Some(0));
    }
    let device = d.pointer_device(ptr)?;
    if device == Some(0) {
        if let Some(range) = d.pointer_range(ptr) {
            KNOWN.with_borrow_mut(|(ranges, next)| {
                ranges[*next] = range;
                *next = (*next + 1) % KNOWN_RANGES;
            });
        }
    }
    Ok(device)
}
