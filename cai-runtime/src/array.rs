//! `DeviceArray`: caijit's own device memory, stream-ordered, exported with its stream.
//!
//! Memory comes from caijit's caching allocator of the device, and goes back to it for the
//! array's stream when the array is dropped: work enqueued there later runs after every
//! use of the array, so only that stream reuses it at once ([`Context::empty_cache`] gives
//! kept memory back to the driver).
//! The array exports that stream in its CAI descriptor: any consumer that synchronises
//! with it sees the array's data; caijit's own launches order themselves
//! against it (and it against them) by the stream protocol, so it stays the stream after
//! which the array is idle.

use std::sync::{Arc, OnceLock};

use crate::cai::{ArrayView, DType, Descriptor};
use crate::error::{Error, Result};
use crate::runtime::{Allocation, Context, Stream};

/// Device memory owned by caijit: a C-ordered array of any dtype and shape.
#[derive(Debug)]
pub struct DeviceArray {
    ctx: Arc<Context>,
    /// Pointer, shape, dtype and stream, validated once at allocation, marked as caijit's
    /// own memory: what every launch reads (borrowed, never rebuilt).
    layout: ArrayView,
    /// `None` for an empty array.
    memory: Option<Allocation>,
    stream: Arc<Stream>,
    /// The thread that allocated the array on the per-thread default stream, which names a
    /// different stream on every thread.
    per_thread_home: Option<std::thread::ThreadId>,
}

/// The export opt-outs (docs/stream-protocol.md), read once: `CAIJIT_CAI_EXPORT_STREAM=0` exports
/// `stream: None`; `CAIJIT_CAI_EXPORT_VERSION=2` exports version 2 (which has no stream).
/// They change what consumers are told, never how caijit orders its own launches.
fn export_options() -> (bool, i64) {
    static OPTIONS: OnceLock<(bool, i64)> = OnceLock::new();
    *OPTIONS.get_or_init(|| {
        let stream = std::env::var("CAIJIT_CAI_EXPORT_STREAM").map_or(true, |v| v != "0");
        let version = if std::env::var("CAIJIT_CAI_EXPORT_VERSION").is_ok_and(|v| v == "2") { 2 } else { 3 };
        (stream, version)
    })
}

impl DeviceArray {
    /// Uninitialised memory for `shape` elements of `dtype`, allocated on `stream`.
    pub fn empty(ctx: &Arc<Context>, shape: &[usize], dtype: DType, stream: &Arc<Stream>) -> Result<DeviceArray> {
        Self::allocated(ctx, shape, dtype, stream, |bytes| ctx.alloc(bytes, stream))
    }

    /// [`DeviceArray::empty`] on `stream`, for work on `writer` to write: held by the graph
    /// `writer` may be capturing ([`Context::alloc_written_on`]).
    pub(crate) fn empty_written_on(
        ctx: &Arc<Context>,
        shape: &[usize],
        dtype: DType,
        stream: &Arc<Stream>,
        writer: &Stream,
    ) -> Result<DeviceArray> {
        Self::allocated(ctx, shape, dtype, stream, |bytes| ctx.alloc_written_on(bytes, stream, writer))
    }

    fn allocated(
        ctx: &Arc<Context>,
        shape: &[usize],
        dtype: DType,
        stream: &Arc<Stream>,
        alloc: impl FnOnce(usize) -> Result<Allocation>,
    ) -> Result<DeviceArray> {
        if let Some(o) = stream.device().filter(|&o| o != ctx.ordinal()) {
            return Err(Error::argument(format!("the stream is on device {o}; the array would be on device {}", ctx.ordinal())));
        }
        let overflow = || Error::argument(format!("shape {shape:?} of {dtype} overflows"));
        let size = shape
            .iter()
            .try_fold(1usize, |a, &n| a.checked_mul(n))
            .and_then(|n| n.checked_mul(dtype.itemsize()))
            .filter(|&bytes| i64::try_from(bytes).is_ok())
            .ok_or_else(overflow)?;
        let memory = if size == 0 { None } else { Some(alloc(size)?) };
        let ptr = memory.as_ref().map_or(0, |m| m.ptr);
        // `contiguous` fails only on the overflow ruled out above (or a null pointer for a
        // non-empty array, which the allocator never returns).
        let layout = ArrayView::contiguous(ptr, shape, dtype, false)
            .map_err(|_| overflow())?
            .with_stream(Some(stream.stream_ref()))
            .owned_by_caijit(true);
        let per_thread_home = stream.is_per_thread().then(|| std::thread::current().id());
        Ok(DeviceArray { ctx: ctx.clone(), layout, memory, stream: stream.clone(), per_thread_home })
    }

    /// Zero-filled.
    pub fn zeros(ctx: &Arc<Context>, shape: &[usize], dtype: DType, stream: &Arc<Stream>) -> Result<DeviceArray> {
        let a = Self::empty(ctx, shape, dtype, stream)?;
        if a.nbytes() > 0 {
            let d = ctx.bind()?;
            // SAFETY: `a` owns its `nbytes` from `ptr`, allocated on `stream`, and lives
            // (until it is freed ordered after this write on its stream) past this call.
            #[allow(unsafe_code)]
            let zeroed = unsafe { d.zero_owned(a.ptr(), a.nbytes(), stream.raw()) };
            zeroed?;
        }
        Ok(a)
    }

    /// A copy of `bytes` (exactly `nbytes` of `shape` × `dtype`).
    pub fn from_bytes(ctx: &Arc<Context>, shape: &[usize], dtype: DType, bytes: &[u8], stream: &Arc<Stream>) -> Result<DeviceArray> {
        let a = Self::empty(ctx, shape, dtype, stream)?;
        if bytes.len() != a.nbytes() {
            return Err(Error::argument(format!("{} bytes given for shape {shape:?} of {dtype}, which needs {}", bytes.len(), a.nbytes())));
        }
        if !bytes.is_empty() {
            let d = ctx.bind()?;
            // SAFETY: `a` owns `nbytes` = `bytes.len()` bytes from `ptr` (checked above), and
            // its free is ordered after this copy on its stream.
            #[allow(unsafe_code)]
            let copied = unsafe { d.copy_to_owned(a.ptr(), bytes, stream.raw()) };
            copied?;
        }
        Ok(a)
    }

    /// Copy to the host after the work pending on the array's stream.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.nbytes()];
        self.copy_to_host(&mut out)?;
        Ok(out)
    }

    /// Copy into `out` (exactly [`nbytes`](Self::nbytes) long) after the work pending on the
    /// array's stream.
    pub fn copy_to_host(&self, out: &mut [u8]) -> Result<()> {
        if out.len() != self.nbytes() {
            return Err(Error::argument(format!(
                "copying a {n}-byte array to the host needs {n} bytes, not {}",
                out.len(),
                n = self.nbytes()
            )));
        }
        if out.is_empty() {
            return Ok(());
        }
        let d = self.ctx.bind()?;
        if self.on_another_threads_stream() {
            d.ctx_synchronize()?; // its stream cannot be named here: wait for the device
        }
        // SAFETY: the array owns `nbytes` = `out.len()` bytes from `ptr`, and `self` is
        // borrowed (not freed) until the copy has finished (it waits).
        #[allow(unsafe_code)]
        let copied = unsafe { d.copy_from_owned(out, self.ptr(), self.stream.raw()) };
        Ok(copied?)
    }

    /// Whether the array lives on the per-thread default stream of another thread: `2`
    /// names a different stream on every thread, so the array's stream cannot be named here.
    fn on_another_threads_stream(&self) -> bool {
        self.per_thread_home.is_some_and(|home| home != std::thread::current().id())
    }

    /// Refuse to hand the array to work on this thread when its stream cannot be named here
    /// (see [`DeviceArray::to_bytes`] for the one use that waits instead): no stream edge
    /// could order that work against the array's.
    pub fn check_usable_here(&self) -> Result<()> {
        if self.on_another_threads_stream() {
            return Err(Error::argument(
                "the array lives on the per-thread default stream of another thread (stream 2 names a different stream on every thread): use it on the thread that made it, or allocate it on a stream object",
            ));
        }
        Ok(())
    }

    pub fn ptr(&self) -> u64 {
        self.layout.ptr()
    }
    pub fn shape(&self) -> &[usize] {
        self.layout.shape()
    }
    pub fn dtype(&self) -> DType {
        self.layout.dtype()
    }
    pub fn size(&self) -> usize {
        self.layout.size()
    }
    pub fn nbytes(&self) -> usize {
        self.layout.nbytes()
    }
    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The array as a launch argument: C-contiguous, with its stream.
    pub fn view(&self) -> ArrayView {
        self.layout.clone()
    }

    /// [`DeviceArray::view`] without a copy: what a launch reads of the array.
    pub fn as_view(&self) -> &ArrayView {
        &self.layout
    }

    /// The CUDA Array Interface caijit exports for the array: the view's, less what the
    /// export opt-outs withhold.
    pub fn descriptor(&self) -> Descriptor {
        let (stream, version) = export_options();
        let mut d = self.as_view().to_descriptor();
        if !stream || version < 3 {
            d.stream = None;
        }
        d.version = version;
        d
    }
}

/// An owning device array as the data field of a `#[derive(CudaArrayInterface)]` struct.
impl crate::cai::DataField for DeviceArray {
    fn device_ptr(&self) -> u64 {
        self.ptr()
    }
}

impl Drop for DeviceArray {
    fn drop(&mut self) {
        // Drop never panics; a failed free is reported by the next driver call (sticky
        // errors) or leaks this allocation at worst. On another thread's per-thread
        // default stream (which cannot be named here) the free waits for the device.
        if let Some(memory) = &self.memory {
            self.ctx.free(memory, &self.stream, self.on_another_threads_stream());
        }
    }
}
