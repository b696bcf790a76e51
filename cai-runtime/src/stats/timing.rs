//! Optional per-phase timing of the launch path (`CAIJIT_PHASE_TIMES=1`, read by [`init`]):
//! where a launch's host time goes, per argument route (the Python layer) and per step of
//! [`crate::kernel::Kernel::launch`] (the `launch.*` sub-phases, inside the `launch` phase).
//! Off, each probe costs one relaxed load; on, two clock reads. caijit's
//! `_native.phase_times()` reads (and optionally resets) the totals;
//! `python/benchmarks/probe_launch.py` prints them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// The phases timed. Argument conversion is split by the route the argument took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Phase {
    /// Type lookup and conversion of one argument, by route.
    ArgScalar,
    ArgCaijit,
    ArgExchange,
    ArgCupy,
    ArgTorch,
    ArgNumba,
    ArgInterface,
    ArgCai,
    ArgDlpack,
    /// The producers' current streams (exchange API, CuPy, PyTorch), once per launch.
    ProducerStream,
    /// Which device the launch runs on.
    Device,
    /// The compiled kernel for the device (and deduced template types).
    Resolve,
    /// `cai_runtime` launch: checks, parameter packing, stream ordering, `cuLaunchKernel`
    /// (with the GIL released around it, in the Python layer).
    Launch,
    /// Inside `Launch`: `Kernel::launch` itself, without releasing and retaking the GIL.
    LaunchRuntime,
    /// Inside `LaunchRuntime`: the arity check, the launch configuration's check, and the
    /// parameter buffer's checks and packing (`marshal`).
    LaunchCheck,
    /// Releasing finished DLPack holders (`collect_released`) and making the context
    /// current (`Context::bind`).
    LaunchBind,
    /// Each array's device, the producer streams, the launch stream and the capture checks.
    LaunchScan,
    /// The stream protocol's events: taking them from the pool, recording and waiting
    /// (forward and reverse edges), giving them back.
    LaunchEvents,
    /// The driver's launch call itself (`cuLaunchKernel` / `cuLaunchKernelEx`).
    LaunchDriver,
    /// Handing DLPack capsules to the context until the launch's work is done.
    Release,
    /// The whole `kernel[...](*args)` call from Rust's entry to its return.
    Total,
}

const NAMES: [&str; 21] = [
    "arg.scalar",
    "arg.caijit",
    "arg.exchange",
    "arg.cupy",
    "arg.torch",
    "arg.numba",
    "arg.interface",
    "arg.cai",
    "arg.dlpack",
    "producer_stream",
    "device",
    "resolve",
    "launch",
    "launch.runtime",
    "launch.check",
    "launch.bind",
    "launch.scan",
    "launch.events",
    "launch.driver",
    "release",
    "total",
];

const _: () = assert!(Phase::Total as usize + 1 == NAMES.len());

static COUNTS: [AtomicU64; NAMES.len()] = [const { AtomicU64::new(0) }; NAMES.len()];
static NANOS: [AtomicU64; NAMES.len()] = [const { AtomicU64::new(0) }; NAMES.len()];
static ON: AtomicBool = AtomicBool::new(false);

/// Read `CAIJIT_PHASE_TIMES` (caijit calls it at module import).
pub fn init() {
    if std::env::var("CAIJIT_PHASE_TIMES").is_ok_and(|v| v == "1") {
        ON.store(true, Ordering::Relaxed);
    }
}

/// Whether timing is on: one relaxed load on the launch path.
#[inline]
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

pub fn set_enabled(on: bool) {
    ON.store(on, Ordering::Relaxed);
}

/// A running measurement: `start` when timing is on, recorded by `stop`.
#[must_use]
pub struct Probe(Option<Instant>);

#[inline]
pub fn start() -> Probe {
    Probe(enabled().then(Instant::now))
}

impl Probe {
    #[inline]
    pub fn stop(self, phase: Phase) {
        if let Some(t) = self.0 {
            let ns = t.elapsed().as_nanos() as u64;
            COUNTS[phase as usize].fetch_add(1, Ordering::Relaxed);
            NANOS[phase as usize].fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// Add the time to `phase` without counting a pass: for a phase timed in several
    /// pieces (the last piece's [`Probe::stop`] counts it once).
    #[inline]
    pub fn stop_uncounted(self, phase: Phase) {
        if let Some(t) = self.0 {
            NANOS[phase as usize].fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }
}

/// `(name, count, total nanoseconds)` of every phase; `reset` zeroes them after reading.
pub fn totals(reset: bool) -> Vec<(&'static str, u64, u64)> {
    NAMES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let (c, n) = if reset {
                (COUNTS[i].swap(0, Ordering::Relaxed), NANOS[i].swap(0, Ordering::Relaxed))
            } else {
                (COUNTS[i].load(Ordering::Relaxed), NANOS[i].load(Ordering::Relaxed))
            };
            (*name, c, n)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_have_distinct_names_and_the_launch_steps_nest_under_launch() {
        let mut names = NAMES.to_vec();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), NAMES.len());
        assert_eq!(NAMES[Phase::Launch as usize], "launch");
        assert_eq!(NAMES[Phase::LaunchDriver as usize], "launch.driver");
        assert_eq!(NAMES[Phase::Total as usize], "total");
    }
}
