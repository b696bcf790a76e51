//! The binding's launch phases for `CAIJIT_PHASE_TIMES`: each argument's conversion by the
//! route it took, the producers' streams, the launch device, the kernel's lookup, the launch
//! call with the GIL released around it, DLPack releases and the whole call. The binding
//! alone starts and stops them, so they are counted here; the runtime counts the steps
//! inside its launch (`launch.*`), and one switch (`cai_runtime::stats::timing`) turns both
//! on.

pub use cai_runtime::stats::timing::{init, set_enabled, start};

cai_runtime::phases! {
    /// The phases of a `kernel[...](*args)` call outside the runtime's launch.
    pub enum Phase in TOTALS {
        /// Type lookup and conversion of one argument, by route.
        ArgScalar = "arg.scalar",
        ArgCaijit = "arg.caijit",
        ArgExchange = "arg.exchange",
        ArgCupy = "arg.cupy",
        ArgTorch = "arg.torch",
        ArgNumba = "arg.numba",
        ArgInterface = "arg.interface",
        ArgCai = "arg.cai",
        ArgDlpack = "arg.dlpack",
        /// The producers' current streams (exchange API, CuPy, PyTorch), once per launch.
        ProducerStream = "producer_stream",
        /// Which device the launch runs on.
        Device = "device",
        /// The compiled kernel for the device (and deduced template types).
        Resolve = "resolve",
        /// `cai_runtime` launch: checks, parameter packing, stream ordering, `cuLaunchKernel`
        /// (with the GIL released around it).
        Launch = "launch",
        /// Inside `Launch`: `Kernel::launch` itself, without releasing and retaking the GIL
        /// (the runtime's `launch.*` steps are inside it).
        LaunchRuntime = "launch.runtime",
        /// Handing DLPack capsules to the context until the launch's work is done.
        Release = "release",
        /// The whole `kernel[...](*args)` call from Rust's entry to its return.
        Total = "total",
    }
}

/// `(name, count, total nanoseconds)` of every phase, the binding's and the runtime's;
/// `reset` zeroes them after reading.
pub fn totals(reset: bool) -> Vec<(&'static str, u64, u64)> {
    TOTALS.iter().map(|t| t.read(reset)).chain(cai_runtime::stats::timing::totals(reset)).collect()
}
