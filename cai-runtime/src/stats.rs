//! Process-wide counters that tests and users read (`caijit.stats()`).

pub mod timing;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($($name:ident: $doc:literal),* $(,)?) => {
        /// The counters, as atomics.
        #[derive(Debug, Default)]
        pub struct Counters { $(#[doc = $doc] pub $name: AtomicU64,)* }

        /// A snapshot of the counters.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct Stats { $(#[doc = $doc] pub $name: u64,)* }

        impl Counters {
            pub const fn new() -> Self { Self { $($name: AtomicU64::new(0),)* } }
            pub fn snapshot(&self) -> Stats { Stats { $($name: self.$name.load(Relaxed),)* } }
        }

        impl Stats {
            /// `(name, value)` pairs, in declaration order.
            pub fn entries(&self) -> Vec<(&'static str, u64)> { vec![$((stringify!($name), self.$name),)*] }
        }
    };
}

counters! {
    launches: "Kernel launches enqueued.",
    copies: "Device-to-device copies enqueued (contiguous copies, by the stream protocol).",
    compiles: "NVRTC compilations run (cache misses).",
    memory_cache_hits: "Compilations answered from the in-memory cache.",
    disk_cache_hits: "Compilations answered from the disk cache.",
    disk_cache_corrupt: "Disk cache entries found corrupt, recompiled and replaced.",
    disk_cache_errors: "Disk cache reads or writes that failed (compilation went on without the cache).",
    disk_cache_untrusted_keys: "Compilations kept out of the disk cache because caijit could not name every header NVRTC may read (a computed include, one name for two files, ...).",
    untrusted_compiles: "NVRTC compilations run untrusted: with NVRTC's own search path, because caijit could not hand it every header in memory; never stored on disk nor kept in memory.",
    trusted_fallbacks: "Trusted compilations (every header in memory, no search path) in which NVRTC asked for a header caijit had not found, compiled again untrusted.",
    bundle_hits: "Programs made ready from a loaded kernel bundle instead of NVRTC (once per process per program and architecture).",
    bundle_skips: "Loaded bundles passed over for a program they hold but cannot serve (a damaged record or section), with a warning naming the bundle; NVRTC compiled the program instead.",
    waits: "Launch-stream waits on a producer stream (before a launch).",
    reverse_waits: "Producer-stream waits on the launch stream (after a launch).",
    host_syncs: "Host synchronisations caijit made itself: never on a successful launch; only the fallbacks that keep memory safe when an edge cannot be enqueued, frees of per-thread-stream arrays on another thread, and giving kept memory back (empty_cache, an out-of-memory retry: one per stream or event waited for).",
    events_created: "CUDA events created (the pool reuses them).",
    modules_loaded: "Modules loaded into a context.",
    tunings: "Autotunings measured on the GPU (a result read from memory or the disk is none).",
    tune_launches: "Launches made to time autotuning candidates (warm-up included).",
    graph_replays: "Replays of caijit graphs (`caijit.graph`, `cai_runtime::graph`), each one graph launch or child-graph node.",
    graph_node_updates: "Kernel nodes of caijit graphs given new parameters by a replay's rebinding (one driver call each).",
}

/// The process's counters.
pub static COUNTERS: Counters = Counters::new();

/// Read every counter.
pub fn stats() -> Stats {
    COUNTERS.snapshot()
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}
