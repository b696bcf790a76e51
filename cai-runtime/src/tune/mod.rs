//! Autotuning: of several launch configurations (and template instances) of one kernel,
//! the fastest for a tuning key, measured on the GPU, remembered on disk, and launched.
//!
//! # Examples
//! ```no_run
//! use cai_runtime::cai::{ArrayView, DType};
//! use cai_runtime::compile::Program;
//! use cai_runtime::dispatch::Dispatcher;
//! use cai_runtime::launch::{Arg, LaunchConfig};
//! use cai_runtime::tune::{Candidate, Tuner};
//! # let x = ArrayView::contiguous(0x7f00_0000_0000, &[1 << 20], DType::F32, true)?;
//! # let y = ArrayView::contiguous(0x7f00_1000_0000, &[1 << 20], DType::F32, false)?;
//! let d = Dispatcher::new(Program::new(r#"extern "C" __global__ void scale(const float* x, float* y, int n) {
//!     int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2.f * x[i]; }"#), Some("scale"))?;
//! let n = 1 << 20;
//! let candidates: Vec<Candidate> = [128u32, 256, 512]
//!     .iter()
//!     .map(|&b| Candidate::new(LaunchConfig::new([(n as u32).div_ceil(b), 1, 1], [b, 1, 1])).labelled(format!("block={b}")))
//!     .collect();
//! let tuner = Tuner::new();
//! let args = [Arg::Array(&x), Arg::Array(&y), Arg::untyped(n as i64)];
//! tuner.launch(&d, "n=2^20", &candidates, &args, None)?; // tuned once, then remembered
//! # Ok::<(), cai_runtime::Error>(())
//! ```
//!
//! # Rationale
//! A candidate is timed on scratch copies of the arrays the kernel may write (the caller's
//! data never changes), on a stream of the tuner's own, after a warm-up launch, by events
//! around batches of launches until the samples agree (`measure.rs`). The winner is the
//! smallest median, ties within 2 % going to the candidate declared first
//! ([`choice::choose`]), so that processes agree. A candidate that cannot be compiled or
//! launched (too many registers, too much shared memory) is skipped with its reason.
//!
//! A result is kept in memory and on disk (the disk cache's `autotune/` folder), under a
//! key made of the kernel's program (its source, options and headers' contents: editing
//! the kernel re-tunes it, and only it), the kernel's name, the device model, the tuning
//! key and the candidates: a second process launches the winner without a timing launch
//! (`stats().tune_launches` stays 0). Processes of one job tuning the same key take turns
//! on a lock beside the file: one tunes, the others read its result.
//!
//! # Limitations
//! Tuning synchronises with the GPU (it waits for its own events) and is refused while a
//! stream it would use is being captured into a graph, unless the result is known already.
//! `CAIJIT_AUTOTUNE=0` turns tuning off: the first candidate is launched, untimed.

mod candidate;
pub mod choice;
mod measure;
pub mod store;
mod tuner;

pub use candidate::Candidate;
pub use choice::{choose, Timing, Trial};
pub use store::Record;
pub use tuner::{Source, Tuned, Tuner};
