//! Optional per-phase timing of the launch path (`CAIJIT_PHASE_TIMES=1`, read by [`init`]):
//! where a launch's host time goes. Each layer names and counts its own phases: the runtime
//! the steps of [`crate::kernel::Kernel::launch`] ([`Phase`], the `launch.*` sub-phases),
//! the Python binding its argument routes and the rest of a `kernel[...](*args)` call (its
//! own table, made with [`phases!`](crate::phases)). One switch turns them all on. Off, each
//! probe costs one relaxed load; on, two clock reads. caijit's `_native.phase_times()`
//! reads (and optionally resets) the totals; `python/benchmarks/probe_launch.py` prints
//! them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// One phase's totals: its name, the passes counted and the nanoseconds spent.
#[derive(Debug)]
pub struct PhaseTotals {
    name: &'static str,
    count: AtomicU64,
    nanos: AtomicU64,
}

impl PhaseTotals {
    pub const fn new(name: &'static str) -> Self {
        PhaseTotals { name, count: AtomicU64::new(0), nanos: AtomicU64::new(0) }
    }

    /// `(name, count, total nanoseconds)`; `reset` zeroes them after reading.
    pub fn read(&self, reset: bool) -> (&'static str, u64, u64) {
        if reset {
            (self.name, self.count.swap(0, Ordering::Relaxed), self.nanos.swap(0, Ordering::Relaxed))
        } else {
            (self.name, self.count.load(Ordering::Relaxed), self.nanos.load(Ordering::Relaxed))
        }
    }
}

/// A layer's phases: each names the totals it adds to.
pub trait Timed: Copy {
    fn totals(self) -> &'static PhaseTotals;
}

/// Declare a layer's phases: an enum `$phase` (each variant documented, with its name as
/// `phase_times` shows it) implementing [`Timed`], and a static table `$table` of their
/// [`PhaseTotals`], in declaration order.
#[macro_export]
macro_rules! phases {
    ($(#[$meta:meta])* $vis:vis enum $phase:ident in $table:ident { $($(#[doc = $doc:literal])* $variant:ident = $name:literal,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        $vis enum $phase { $($(#[doc = $doc])* $variant,)* }

        /// Every phase's totals, indexed by the phase.
        $vis static $table: [$crate::stats::timing::PhaseTotals; [$($name),*].len()] =
            [$($crate::stats::timing::PhaseTotals::new($name)),*];

        impl $crate::stats::timing::Timed for $phase {
            #[inline]
            fn totals(self) -> &'static $crate::stats::timing::PhaseTotals {
                &$table[self as usize]
            }
        }
    };
}

phases! {
    /// The steps of [`crate::kernel::Kernel::launch`].
    pub enum Phase in TOTALS {
        /// The arity check, the launch configuration's check, and the parameter buffer's
        /// checks and packing (`marshal`).
        LaunchCheck = "launch.check",
        /// Releasing finished DLPack holders (`collect_released`) and making the context
        /// current (`Context::bind`).
        LaunchBind = "launch.bind",
        /// Each array's device, the producer streams, the launch stream and the capture checks.
        LaunchScan = "launch.scan",
        /// The stream protocol's events: taking them from the pool, recording and waiting
        /// (forward and reverse edges), giving them back.
        LaunchEvents = "launch.events",
        /// The driver's launch call itself (`cuLaunchKernel` / `cuLaunchKernelEx`).
        LaunchDriver = "launch.driver",
    }
}

phases! {
    /// What a kernel's first launch pays before it: its code and its loading.
    pub enum LoadPhase in LOAD_TOTALS {
        /// A program's compiled code found or made (`compile::compile`): a memory hit, a
        /// bundle's, the disk cache's, or NVRTC's.
        Compile = "module.compile",
        /// Loading a module's code into a context (`cuModuleLoadData`), once per module.
        ModuleLoad = "module.load",
        /// Finding a kernel in its loaded module and checking its parameters and
        /// attributes with the driver, once per kernel.
        KernelLoad = "module.kernel",
        /// Reading a source's kernel declarations (once per process per source; a
        /// dispatcher's are read when it is made, before any compilation).
        Declarations = "module.declarations",
        /// Opening a kernel bundle: its header, table of contents, metadata and lookup
        /// table (part of `module.compile` for the bundles opened at a first lookup).
        BundleOpen = "module.bundle_open",
        /// A program's bundle key: its headers found and hashed with it (part of
        /// `module.compile`, once per lookup in the loaded bundles).
        BundleKey = "module.bundle_key",
        /// A bundled program made ready: its code and description read, checked and
        /// inflated, and its kernels described (part of `module.compile`).
        BundleRead = "module.bundle_read",
    }
}

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
    pub fn stop(self, phase: impl Timed) {
        if let Some(t) = self.0 {
            let totals = phase.totals();
            totals.count.fetch_add(1, Ordering::Relaxed);
            totals.nanos.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }

    /// Add the time to `phase` without counting a pass: for a phase timed in several
    /// pieces (the last piece's [`Probe::stop`] counts it once).
    #[inline]
    pub fn stop_uncounted(self, phase: impl Timed) {
        if let Some(t) = self.0 {
            phase.totals().nanos.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }
}

/// `(name, count, total nanoseconds)` of every runtime phase; `reset` zeroes them after
/// reading.
pub fn totals(reset: bool) -> Vec<(&'static str, u64, u64)> {
    TOTALS.iter().chain(&LOAD_TOTALS).map(|t| t.read(reset)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    phases! {
        /// Phases only this test times (the launch path's may be timed by other tests).
        enum Probed in PROBED {
            /// The first.
            One = "test.one",
            /// The second.
            Two = "test.two",
        }
    }

    #[test]
    fn probes_count_their_phase_while_timing_is_on() {
        assert_eq!(PROBED.iter().map(|t| t.read(false).0).collect::<Vec<_>>(), ["test.one", "test.two"]);
        set_enabled(true);
        start().stop(Probed::Two);
        start().stop_uncounted(Probed::Two);
        set_enabled(false);
        start().stop(Probed::Two);
        assert_eq!(Probed::One.totals().read(true), ("test.one", 0, 0));
        let (_, count, _) = Probed::Two.totals().read(true);
        assert_eq!(count, 1);
        assert_eq!(Probed::Two.totals().read(false), ("test.two", 0, 0));
    }

    #[test]
    fn the_launch_steps_are_named_under_launch() {
        assert!(TOTALS.iter().all(|t| t.name.starts_with("launch.")));
        assert!(LOAD_TOTALS.iter().all(|t| t.name.starts_with("module.")));
        assert_eq!(Phase::LaunchDriver.totals().name, "launch.driver");
    }
}
