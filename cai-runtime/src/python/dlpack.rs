//! DLPack (dlpack.h 1.3) both ways, and its rules: which devices caijit launches on, a
//! DLPack tensor as a CAI view, a CAI view as a DLPack tensor, and the stream handshake of
//! each direction. The C structs, capsules and the C exchange API of producer types
//! (`__dlpack_c_exchange_api__`) are FFI, in `sys`; this module re-exports what callers
//! need of them, as safe functions over owned values.
//!
//! # Rationale
//! A consumer asks a producer's `__dlpack__(stream=S)` to order its pending work before
//! `S`; caijit asks for the stream its launch runs on, so that the view it imports carries
//! that stream and the stream protocol needs no special case. Inside a graph capture the
//! producer's wait would be an edge to a stream outside the capture, which invalidates it:
//! then caijit asks for `-1` (no ordering) and the view carries no stream, as caijit
//! leaves out its own edges to streams outside a capture ([`import_stream`]).
//!
//! An export is the other side: the consumer's stream waits for the array's pending work
//! ([`order_export`]), and when the consumer releases the tensor the array's stream waits
//! for the consumer's, so the array is not freed under the consumer's last use of it
//! ([`ConsumerStream`]).

use smallvec::SmallVec;

use crate::cai::{exported_ptr, ArrayView, DType, StreamRef};
use crate::error::{Error, Result};
use crate::runtime::{Context, Stream, StreamOwner};

pub use crate::sys::dlpack::{
    consume_capsule, export_capsule, layouts, read_capsule, DLDataType, DLDevice, DLPackVersion, ExchangeApi, ExportTensor, OnRelease,
    TensorInfo, DLTENSOR, DLTENSOR_VERSIONED, EXCHANGE_API, FLAG_IS_COPIED, FLAG_READ_ONLY, KDL_CPU, KDL_CUDA, KDL_CUDA_HOST,
    KDL_CUDA_MANAGED, VERSION,
};

/// Where a DLPack tensor's memory is, as caijit sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// Device memory of this CUDA device.
    Device(usize),
    /// CUDA managed memory allocated for this device: launched on, on that device.
    Managed(usize),
    /// Host memory (CPU, or pinned host memory): never launched on, never copied.
    Host,
    /// Any other device (another vendor's, or a CUDA device with a negative id).
    Other,
}

impl Memory {
    pub fn of(d: DLDevice) -> Memory {
        match d.device_type {
            KDL_CUDA => usize::try_from(d.device_id).map_or(Memory::Other, Memory::Device),
            KDL_CUDA_MANAGED => usize::try_from(d.device_id).map_or(Memory::Other, Memory::Managed),
            KDL_CPU | KDL_CUDA_HOST => Memory::Host,
            _ => Memory::Other,
        }
    }

    /// The device a launch on it runs on, as the tensor names it; `None` for memory caijit
    /// does not launch on. Every DLPack path (capsules and the exchange API) reads it here.
    pub fn device(self) -> Option<usize> {
        match self {
            Memory::Device(d) | Memory::Managed(d) => Some(d),
            Memory::Host | Memory::Other => None,
        }
    }
}

/// The DLPack device of caijit's memory on device `ordinal` (`kDLCUDA`).
pub fn cuda_device(ordinal: usize) -> DLDevice {
    DLDevice { device_type: KDL_CUDA, device_id: ordinal as i32 }
}

/// A DLPack tensor as a CAI view carrying `stream` (strides in elements become bytes; an
/// empty tensor's pointer is 0, as CAI writes it: [`exported_ptr`]). `Err` says why not.
pub fn view_of(t: &TensorInfo, stream: Option<StreamRef>) -> std::result::Result<ArrayView, String> {
    let dtype = DType::from_dlpack(t.dtype.code, t.dtype.bits, t.dtype.lanes).ok_or_else(|| {
        format!("DLPack dtype code {} with {} bits and {} lanes is not supported", t.dtype.code, t.dtype.bits, t.dtype.lanes)
    })?;
    // (plain loops: this runs per tensor per launch on the exchange API path)
    let mut shape = SmallVec::<[usize; 4]>::new();
    for &n in &t.shape {
        shape.push(usize::try_from(n).map_err(|_| format!("DLPack shape {:?} has a negative extent", t.shape))?);
    }
    let item = dtype.itemsize() as i64;
    let strides = match &t.strides {
        None => None,
        Some(s) => {
            let mut bytes = SmallVec::<[i64; 4]>::new();
            for &x in s {
                bytes.push(x.checked_mul(item).ok_or_else(|| format!("DLPack stride {x} overflows in bytes"))?);
            }
            Some(bytes)
        }
    };
    ArrayView::new(exported_ptr(t.data, &shape), &shape, strides.as_deref(), dtype, t.readonly, stream)
        .map_err(|e| in_dlpack_terms(&e.to_string()))
}

/// A view's error (worded for the `__cuda_array_interface__` keys) in a DLPack tensor's
/// terms.
fn in_dlpack_terms(message: &str) -> String {
    [("data'] pointer", "data pointer"), ("shape']", "shape"), ("strides']", "strides")]
        .iter()
        .fold(message.to_string(), |m, (key, field)| {
            m.replace(&format!("__cuda_array_interface__['{key}"), &format!("the tensor's {field}"))
        })
}

/// The DLPack tensor of a view on `device` (strides in elements; DLPack's dtype).
pub fn tensor_of(view: &ArrayView, device: DLDevice, readonly: bool) -> ExportTensor {
    let item = view.dtype().itemsize() as i64;
    let (code, bits, lanes) = view.dtype().dlpack();
    ExportTensor {
        data: exported_ptr(view.ptr(), view.shape()),
        device,
        dtype: DLDataType { code, bits, lanes },
        shape: view.shape().iter().map(|&n| n as i64).collect(),
        strides: view.strides().iter().map(|&s| s / item).collect(),
        readonly,
    }
}

/// What to ask a DLPack producer for when a launch will run on `stream` (a CAI value), and
/// the producer stream the imported view carries: `(stream, Some(stream))`, or `(-1, None)`
/// while `stream` is being captured into a graph (see the module's rationale). A stream the
/// driver cannot answer for (the per-thread default stream of a thread without a current
/// context) is no capture of caijit's to keep: the producer is asked as usual.
pub fn import_stream(stream: u64) -> Result<(i64, Option<u64>)> {
    if Stream::borrowed(stream)?.is_capturing().unwrap_or(false) {
        return Ok((-1, None));
    }
    Ok((stream as i64, Some(stream)))
}

/// The consumer's stream of an export, as `__dlpack__(stream=...)` names it (`None`: the
/// legacy default stream); `Ok(None)` for `-1` (no ordering). A value that names no stream
/// is an error.
pub fn consumer_stream_value(stream: Option<i64>) -> Result<Option<u64>> {
    match stream.unwrap_or(1) {
        -1 => Ok(None),
        0 => Err(Error::argument("__dlpack__(stream=0) is ambiguous; pass 1 (legacy) or 2 (per-thread)")),
        s if s < -1 => Err(Error::argument(format!(
            "__dlpack__(stream={s}): a CUDA stream is a handle, 1 (legacy), 2 (per-thread) or -1 (no ordering)"
        ))),
        s => Ok(Some(s as u64)),
    }
}

/// Make the consumer's stream wait for the pending work of an array living on `own` (in
/// `ctx`), without blocking the host. Returns whether there was anything to order (the
/// consumer named a stream, and not the array's own): only then must the array's stream
/// wait for the consumer's at release ([`ConsumerStream`]).
pub fn order_export(ctx: &Context, own: &Stream, consumer: Option<u64>) -> Result<bool> {
    match consumer {
        Some(c) if c != own.handle() => {
            ctx.order_streams(&Stream::borrowed(c)?, own)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// The consumer's stream of an export, as the release of the tensor names it: the release
/// may come much later, on any thread, after the consumer let go of its stream.
pub enum ConsumerStream {
    /// The legacy default stream, or a handle with the consumer library's stream object
    /// that owns it (CuPy's or PyTorch's current stream, which a consumer passes): held
    /// from the export to the release, so the handle cannot be destroyed in between.
    Named(Stream),
    /// The per-thread default stream of the exporting thread: on another thread "2" names
    /// another stream, so a release there waits for the device instead (a counted host
    /// synchronisation, as the free of a per-thread array on another thread does).
    PerThread(std::thread::ThreadId),
}

impl ConsumerStream {
    /// The consumer stream `handle` (a CAI value), kept alive by `owner` when one is known;
    /// without one, the consumer's promise that it outlives the tensor (CuPy's
    /// `ExternalStream` rule).
    pub fn of(handle: u64, owner: Option<StreamOwner>) -> Result<ConsumerStream> {
        Ok(match (handle, owner) {
            (2, _) => ConsumerStream::PerThread(std::thread::current().id()),
            (1, _) => ConsumerStream::Named(Stream::legacy()),
            (h, Some(owner)) => ConsumerStream::Named(Stream::borrowed_from(h, owner)?),
            (h, None) => ConsumerStream::Named(Stream::borrowed(h)?),
        })
    }

    /// Make the array's stream `own` (in `ctx`) wait for the work enqueued so far on the
    /// consumer's.
    pub fn order_after(self, ctx: &Context, own: &Stream) -> Result<()> {
        match self {
            ConsumerStream::Named(s) => ctx.order_streams(own, &s),
            ConsumerStream::PerThread(t) if t == std::thread::current().id() => ctx.order_streams(own, &Stream::per_thread()),
            ConsumerStream::PerThread(_) => ctx.synchronize(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_error_is_worded_for_a_dlpack_tensor() {
        let null = crate::cai::ArrayView::new(0, &[4], None, DType::F32, false, None).unwrap_err().to_string();
        let said = in_dlpack_terms(&null);
        assert!(said.starts_with("the tensor's data pointer is null") && !said.contains("__cuda_array_interface__"), "{said}");
    }

    #[test]
    fn devices_are_read_once_by_one_rule() {
        let dev = |device_type, device_id| Memory::of(DLDevice { device_type, device_id });
        assert_eq!(dev(KDL_CUDA, 1), Memory::Device(1));
        assert_eq!(dev(KDL_CUDA, -1), Memory::Other);
        assert_eq!(dev(KDL_CUDA_MANAGED, 1), Memory::Managed(1));
        assert_eq!(dev(KDL_CUDA_MANAGED, -1), Memory::Other);
        assert_eq!(dev(KDL_CPU, 0), Memory::Host);
        assert_eq!(dev(KDL_CUDA_HOST, 0), Memory::Host);
        assert_eq!(dev(4, 0), Memory::Other);
        assert!(Memory::Managed(0).device().is_some() && Memory::Device(0).device().is_some() && Memory::Other.device().is_none());
        assert_eq!((Memory::Device(3).device(), Memory::Managed(3).device(), Memory::Host.device()), (Some(3), Some(3), None));
        assert_eq!(Memory::of(cuda_device(2)), Memory::Device(2));
    }

    #[test]
    fn consumer_stream_values_name_a_stream_or_are_refused() {
        assert_eq!(consumer_stream_value(None).unwrap(), Some(1));
        assert_eq!(consumer_stream_value(Some(-1)).unwrap(), None);
        assert_eq!(consumer_stream_value(Some(2)).unwrap(), Some(2));
        assert_eq!(consumer_stream_value(Some(0xabc0)).unwrap(), Some(0xabc0));
        assert!(consumer_stream_value(Some(0)).unwrap_err().to_string().contains("ambiguous"));
        assert!(consumer_stream_value(Some(-2)).unwrap_err().to_string().contains("stream=-2"));
    }

    #[test]
    fn tensors_and_views_convert_both_ways() {
        let t = TensorInfo {
            data: 0x7f00_0000_0000,
            device: cuda_device(0),
            dtype: DLDataType { code: 2, bits: 32, lanes: 1 },
            shape: SmallVec::from_slice(&[2, 3]),
            strides: Some(SmallVec::from_slice(&[1, 2])),
            readonly: true,
        };
        let v = view_of(&t, None).unwrap();
        assert_eq!((v.shape(), v.strides(), v.dtype(), v.readonly()), (&[2, 3][..], &[4, 8][..], DType::F32, true));
        let back = tensor_of(&v, t.device, true);
        assert_eq!((back.data, &back.shape[..], &back.strides[..]), (t.data, &[2, 3][..], &[1, 2][..]));
        let empty = TensorInfo { shape: SmallVec::from_slice(&[0]), strides: None, ..t.clone() };
        assert_eq!(view_of(&empty, None).unwrap().ptr(), 0);
        let negative = TensorInfo { shape: SmallVec::from_slice(&[-1]), strides: None, ..t.clone() };
        assert!(view_of(&negative, None).unwrap_err().contains("negative extent"));
        let odd = TensorInfo { dtype: DLDataType { code: 2, bits: 32, lanes: 4 }, ..t };
        assert!(view_of(&odd, None).unwrap_err().contains("4 lanes"));
    }
}
