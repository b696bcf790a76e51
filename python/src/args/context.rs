//! What one launch's arguments share: the producers' current streams (each asked at most
//! once per launch), the stream DLPack producers are asked to order their work before, and
//! which conversion paths the arguments may take.

use crate::timing::{self, Phase};
use cai_runtime::cai::StreamRef;
use cai_runtime::python::capi::IntptrFn;
use cai_runtime::python::dlpack::ExchangeApi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use super::PyArg;
use crate::errors::{PyCaiError, PyCaiResult};

/// Which paths a conversion may take: all (a launch), or one forced for tests that
/// compare a fast path with the generic one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Path {
    #[default]
    Auto,
    /// Only the exchange API (else the generic paths).
    Exchange,
    /// Only the attribute-reading fast path of a known type (else the generic paths).
    Known,
    /// Neither: `__cuda_array_interface__`, then `__dlpack__`.
    Generic,
    /// `__dlpack__` only.
    Dlpack,
}

impl Path {
    pub fn parse(s: Option<&str>) -> PyCaiResult<Path> {
        Ok(match s {
            None | Some("auto") => Path::Auto,
            Some("exchange") => Path::Exchange,
            Some("known") => Path::Known,
            Some("generic") | Some("cai") => Path::Generic,
            Some("dlpack") => Path::Dlpack,
            Some(other) => return Err(PyCaiError::argument(format!("no conversion path {other:?}"))),
        })
    }
}

/// Per-launch facts shared by all arguments (each read at most once per launch).
#[derive(Default)]
pub struct ArgContext {
    cupy_stream: Option<StreamRef>,
    /// PyTorch's current stream on a device.
    torch_stream: Option<(usize, StreamRef)>,
    /// An exchange API producer's current work stream: (table, device type, device, stream).
    exchange_stream: Option<(usize, i32, usize, StreamRef)>,
    /// The stream the launch will use when it was given (CAI value); DLPack producers are
    /// asked to order their work before it.
    explicit_stream: Option<u64>,
    /// The stream the launch will use when none was given: the one stream the other
    /// arrays carry, when they agree ([`ArgContext::imply_stream`]); DLPack producers are
    /// asked for it.
    implied_stream: Option<u64>,
    /// What DLPack producers are asked for, and the stream their views carry (decided
    /// once per launch, at the first DLPack import).
    dlpack_request: Option<(i64, Option<u64>)>,
    /// The conversion paths arguments may take.
    pub path: Path,
    /// The arguments kept until the launch's work is done ([`ArgContext::keep`]).
    kept: Vec<Py<PyAny>>,
}

impl ArgContext {
    pub fn new(explicit_stream: Option<u64>) -> Self {
        ArgContext { explicit_stream, ..Default::default() }
    }

    /// While a caijit graph captures (on any thread), keep `obj`, an argument of a launch
    /// or op, until the launch's work is done: when the launch was captured, that is as long
    /// as the graph ([`release_after`](super::release_after) keeps it with the graph).
    /// Otherwise nothing.
    #[inline]
    pub fn keep(&mut self, obj: &Bound<'_, PyAny>) {
        if cai_runtime::graph::capturing_anywhere() {
            self.kept.push(obj.clone().unbind());
        }
    }

    /// The arguments [`ArgContext::keep`] kept.
    pub fn take_kept(&mut self) -> Vec<Py<PyAny>> {
        std::mem::take(&mut self.kept)
    }

    /// What DLPack producers are asked for (`__dlpack__(stream=...)`), and the producer
    /// stream the imported view carries: the runtime's rule
    /// ([`import_stream`](cai_runtime::python::dlpack::import_stream)) for the stream the
    /// launch will run on (its explicit stream, else the one its other arrays imply, else
    /// the legacy default stream), asked once per launch.
    pub fn dlpack_stream(&mut self) -> PyCaiResult<(i64, Option<u64>)> {
        if let Some(asked) = self.dlpack_request {
            return Ok(asked);
        }
        let stream = self.explicit_stream.or(self.implied_stream).unwrap_or(1);
        let asked = cai_runtime::python::dlpack::import_stream(stream)?;
        self.dlpack_request = Some(asked);
        Ok(asked)
    }

    /// Without an explicit stream, the launch runs on the one stream its arrays carry, if
    /// they agree, else on the legacy default stream: `others` (the arguments converted
    /// before the DLPack-only ones) decide it, and the DLPack producers are asked for it.
    /// Inside `torch.cuda.graph` that is the capturing stream (PyTorch's current one),
    /// never the legacy stream, which a capture forbids.
    pub fn imply_stream<'a>(&mut self, others: impl Iterator<Item = &'a PyArg>) {
        let mut common = None;
        for s in others.filter_map(|a| a.view()?.stream()) {
            match common {
                None => common = Some(s.to_cai()),
                Some(c) if c != s.to_cai() => {
                    common = None;
                    break;
                }
                Some(_) => {}
            }
        }
        // Not the per-thread default stream: the DLPack handshake has no value for it that
        // PyTorch accepts. The producer is then asked for the legacy stream, as when the
        // arrays disagree, and the launch orders the two.
        self.implied_stream = common.filter(|&s| s != 2);
        self.dlpack_request = None;
    }

    /// The stream CuPy's `__cuda_array_interface__` would export now: its current stream
    /// (the null stream is the legacy default stream: [`StreamRef::from_raw`]), from the C
    /// function CuPy's own export calls (`cupy_backends.cuda.stream.get_current_stream_ptr`,
    /// through Cython's C API) where this CuPy exports it, else
    /// `cupy.cuda.get_current_stream().ptr`.
    pub fn cupy_stream(&mut self, py: Python<'_>) -> PyResult<StreamRef> {
        static C_FUNCTION: PyOnceLock<Option<IntptrFn>> = PyOnceLock::new();
        static CURRENT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        if let Some(s) = self.cupy_stream {
            return Ok(s);
        }
        let probe = timing::start();
        let c_function = C_FUNCTION.get_or_init(py, || {
            let module = py.import("cupy_backends.cuda.stream").ok()?;
            IntptrFn::from_pyx_capi(&module, "get_current_stream_ptr")
        });
        let ptr: u64 = match c_function {
            Some(f) => f.call(py)? as u64,
            None => {
                let f = CURRENT
                    .get_or_try_init(py, || -> PyResult<_> { Ok(py.import("cupy.cuda")?.getattr("get_current_stream")?.unbind()) })?;
                f.bind(py).call0()?.getattr(intern!(py, "ptr"))?.extract()?
            }
        };
        let s = StreamRef::from_raw(ptr);
        self.cupy_stream = Some(s);
        probe.stop(Phase::ProducerStream);
        Ok(s)
    }

    /// PyTorch's current stream on `device`, on which PyTorch enqueues a tensor's work and
    /// frees its memory for reuse (its default stream, handle 0, is the legacy stream).
    /// A tensor carries it as its producer stream, so a launch on another stream gets both
    /// edges: the reverse edge keeps PyTorch's caching allocator from handing a temporary's
    /// memory to new work before the kernel has read it.
    pub fn torch_stream(&mut self, py: Python<'_>, device: usize) -> PyResult<StreamRef> {
        static CURRENT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        if let Some((_, s)) = self.torch_stream.filter(|(d, _)| *d == device) {
            return Ok(s);
        }
        let probe = timing::start();
        let f = CURRENT.get_or_try_init(py, || -> PyResult<_> {
            Ok(py.import("torch")?.getattr("_C")?.getattr("_cuda_getCurrentRawStream")?.unbind())
        })?;
        let s = StreamRef::from_raw(f.bind(py).call1((device,))?.extract()?);
        self.torch_stream = Some((device, s));
        probe.stop(Phase::ProducerStream);
        Ok(s)
    }

    /// An exchange API producer's current work stream on a device, asked once per launch
    /// per (producer, device).
    pub fn exchange_stream(&mut self, py: Python<'_>, api: &ExchangeApi, device_type: i32, device: usize) -> PyResult<StreamRef> {
        let id = api.id();
        if let Some((_, _, _, s)) = self.exchange_stream.filter(|&(a, t, d, _)| a == id && t == device_type && d == device) {
            return Ok(s);
        }
        let probe = timing::start();
        let s = StreamRef::from_raw(api.current_work_stream(py, device_type, device as i32)?);
        self.exchange_stream = Some((id, device_type, device, s));
        probe.stop(Phase::ProducerStream);
        Ok(s)
    }
}
