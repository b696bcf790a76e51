//! The part of XLA's FFI C ABI (`xla/ffi/api/c_api.h`, API version 0.3) that caijit's
//! handler uses, and the `extern "C"` handler itself.
//!
//! XLA calls a registered handler with a call frame: argument and result buffers, sorted
//! attributes, and an API table to ask for the CUDA stream and device the call runs on.
//! The handler here decodes the frame into safe values ([`FfiCall`]) and hands them to a
//! [`Serve`] implementation above this layer (the launch layer's `xla` module); it never
//! unwinds into XLA: every failure, a panic included, becomes an `XLA_FFI_Error` made with
//! the API's own `XLA_FFI_Error_Create`.
//!
//! Only the fields caijit reads or writes are named; every struct keeps the header's
//! layout, asserted below at compile time and against the header itself by the CPU tests
//! (`python/tests/test_jax_lowering.py` compiles a C file with the header).

use std::ffi::{c_char, c_int, c_void, CString};
use std::mem::{offset_of, size_of};
use std::ptr;

use smallvec::SmallVec;

use super::RawStream;

/// `XLA_FFI_API_MAJOR` / `XLA_FFI_API_MINOR` of the header these structs follow: what the
/// handler reports in its metadata (XLA accepts handlers from 0.1 up to its own version).
pub(crate) const API_VERSION: (c_int, c_int) = (0, 3);

/// `XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE`.
pub(crate) const TRAIT_COMMAND_BUFFER_COMPATIBLE: u32 = 1;

const EXTENSION_METADATA: c_int = 1;
/// `XLA_FFI_ExecutionStage_INSTANTIATE` and `XLA_FFI_ExecutionStage_EXECUTE`.
const STAGE_INSTANTIATE: c_int = 0;
const STAGE_EXECUTE: c_int = 3;
const ERROR_INVALID_ARGUMENT: c_int = 3;
const ERROR_INTERNAL: c_int = 13;
const ATTR_STRING: c_int = 4;
#[cfg(test)]
const ATTR_SCALAR: c_int = 3;
const ARG_BUFFER: c_int = 1;

/// XLA's data type codes (`XLA_FFI_DataType`) for the types caijit kernels take.
pub(crate) mod dtype {
    pub const PRED: i32 = 1;
    pub const S8: i32 = 2;
    pub const S16: i32 = 3;
    pub const S32: i32 = 4;
    pub const S64: i32 = 5;
    pub const U8: i32 = 6;
    pub const U16: i32 = 7;
    pub const U32: i32 = 8;
    pub const U64: i32 = 9;
    pub const F16: i32 = 10;
    pub const F32: i32 = 11;
    pub const F64: i32 = 12;
    pub const C64: i32 = 15;
    pub const BF16: i32 = 16;
    pub const C128: i32 = 18;
}

#[repr(C)]
pub struct ExtensionBase {
    pub struct_size: usize,
    pub kind: c_int,
    pub next: *mut ExtensionBase,
}

#[repr(C)]
pub struct ApiVersion {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub major_version: c_int,
    pub minor_version: c_int,
}

/// Opaque: made by `XLA_FFI_Error_Create`, owned by XLA once returned.
#[repr(C)]
pub struct Error {
    _opaque: [u8; 0],
}

/// Opaque per-call context.
#[repr(C)]
pub struct ExecutionContext {
    _opaque: [u8; 0],
}

#[repr(C)]
pub struct ErrorCreateArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub message: *const c_char,
    pub errc: c_int,
}

#[repr(C)]
pub struct Buffer {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub dtype: c_int,
    pub data: *mut c_void,
    pub rank: i64,
    pub dims: *mut i64,
}

#[repr(C)]
pub struct ByteSpan {
    pub ptr: *const c_char,
    pub len: usize,
}

#[repr(C)]
pub struct Scalar {
    pub dtype: c_int,
    pub value: *mut c_void,
}

/// `XLA_FFI_Args` and `XLA_FFI_Rets` share this layout.
#[repr(C)]
pub struct Buffers {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub size: i64,
    pub types: *mut c_int,
    pub values: *mut *mut c_void,
}

#[repr(C)]
pub struct Attrs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub size: i64,
    pub types: *mut c_int,
    pub names: *mut *mut ByteSpan,
    pub attrs: *mut *mut c_void,
}

#[repr(C)]
pub struct CallFrame {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub api: *const Api,
    pub ctx: *mut ExecutionContext,
    pub stage: c_int,
    pub args: Buffers,
    pub rets: Buffers,
    pub attrs: Attrs,
    pub future: *mut c_void,
}

#[repr(C)]
pub struct StreamGetArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub ctx: *mut ExecutionContext,
    pub stream: *mut c_void,
}

#[repr(C)]
pub struct DeviceOrdinalGetArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub ctx: *mut ExecutionContext,
    pub device_ordinal: i32,
}

#[repr(C)]
pub struct Metadata {
    pub struct_size: usize,
    pub api_version: ApiVersion,
    pub traits: u32,
    pub state_type_id: i64,
}

#[repr(C)]
pub struct MetadataExtension {
    pub extension_base: ExtensionBase,
    pub metadata: *mut Metadata,
}

type ApiFn = Option<unsafe extern "C" fn(*mut c_void) -> *mut Error>;

/// `XLA_FFI_Api`: a table of functions; caijit calls `XLA_FFI_Error_Create`,
/// `XLA_FFI_Stream_Get` and `XLA_FFI_DeviceOrdinal_Get`.
#[repr(C)]
pub struct Api {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub api_version: ApiVersion,
    pub internal_api: *const c_void,
    pub error_create: Option<unsafe extern "C" fn(*mut ErrorCreateArgs) -> *mut Error>,
    pub error_get_message: ApiFn,
    pub error_destroy: ApiFn,
    pub handler_register: ApiFn,
    pub stream_get: Option<unsafe extern "C" fn(*mut StreamGetArgs) -> *mut Error>,
    pub type_register: ApiFn,
    pub execution_context_get: ApiFn,
    pub state_set: ApiFn,
    pub state_get: ApiFn,
    pub device_memory_allocate: ApiFn,
    pub device_memory_free: ApiFn,
    pub thread_pool_schedule: ApiFn,
    pub thread_pool_num_threads: ApiFn,
    pub future_create: ApiFn,
    pub future_set_available: ApiFn,
    pub future_set_error: ApiFn,
    pub run_id_get: ApiFn,
    pub device_ordinal_get: Option<unsafe extern "C" fn(*mut DeviceOrdinalGetArgs) -> *mut Error>,
}

/// `XLA_FFI_STRUCT_SIZE(T, last)`: the offset of the last field plus its size.
macro_rules! struct_size {
    ($t:ty, $last:ident, $last_ty:ty) => {
        offset_of!($t, $last) + size_of::<$last_ty>()
    };
}

pub(crate) const EXTENSION_BASE_SIZE: usize = struct_size!(ExtensionBase, next, usize);
pub(crate) const API_VERSION_SIZE: usize = struct_size!(ApiVersion, minor_version, c_int);
pub(crate) const ERROR_CREATE_ARGS_SIZE: usize = struct_size!(ErrorCreateArgs, errc, c_int);
pub(crate) const BUFFER_SIZE: usize = struct_size!(Buffer, dims, usize);
pub(crate) const ARGS_SIZE: usize = struct_size!(Buffers, values, usize);
pub(crate) const ATTRS_SIZE: usize = struct_size!(Attrs, attrs, usize);
pub(crate) const CALL_FRAME_SIZE: usize = struct_size!(CallFrame, attrs, Attrs);
pub(crate) const STREAM_GET_ARGS_SIZE: usize = struct_size!(StreamGetArgs, stream, usize);
pub(crate) const DEVICE_ORDINAL_GET_ARGS_SIZE: usize = struct_size!(DeviceOrdinalGetArgs, device_ordinal, i32);
pub(crate) const METADATA_SIZE: usize = struct_size!(Metadata, traits, u32);
pub(crate) const METADATA_EXTENSION_SIZE: usize = struct_size!(MetadataExtension, metadata, usize);
/// The API table up to `XLA_FFI_Stream_Get` (API 0.1) and up to `XLA_FFI_DeviceOrdinal_Get`.
const API_SIZE_WITH_STREAM: usize = struct_size!(Api, stream_get, usize);
pub(crate) const API_SIZE: usize = struct_size!(Api, device_ordinal_get, usize);

// The header's layout on 64-bit Linux (LP64), as `XLA_FFI_STRUCT_SIZE` computes it. The
// CPU tests check every entry of `layout()` against the header compiled by a C compiler.
const _: () = {
    assert!(size_of::<usize>() == 8, "the XLA FFI binding assumes a 64-bit target");
    assert!(EXTENSION_BASE_SIZE == 24);
    assert!(API_VERSION_SIZE == 24);
    assert!(ERROR_CREATE_ARGS_SIZE == 28);
    assert!(BUFFER_SIZE == 48 && offset_of!(Buffer, dtype) == 16 && offset_of!(Buffer, data) == 24);
    assert!(offset_of!(Buffer, rank) == 32 && offset_of!(Buffer, dims) == 40);
    assert!(ARGS_SIZE == 40 && ATTRS_SIZE == 48);
    assert!(offset_of!(CallFrame, api) == 16 && offset_of!(CallFrame, ctx) == 24 && offset_of!(CallFrame, stage) == 32);
    assert!(offset_of!(CallFrame, args) == 40 && offset_of!(CallFrame, rets) == 80 && offset_of!(CallFrame, attrs) == 120);
    assert!(CALL_FRAME_SIZE == 168);
    assert!(size_of::<ByteSpan>() == 16 && size_of::<Scalar>() == 16 && offset_of!(Scalar, value) == 8);
    assert!(STREAM_GET_ARGS_SIZE == 32 && DEVICE_ORDINAL_GET_ARGS_SIZE == 28);
    assert!(offset_of!(Metadata, api_version) == 8 && offset_of!(Metadata, traits) == 32 && METADATA_SIZE == 36);
    assert!(METADATA_EXTENSION_SIZE == 32);
    assert!(offset_of!(Api, api_version) == 16 && offset_of!(Api, error_create) == 48 && offset_of!(Api, stream_get) == 80);
    assert!(API_SIZE == 192);
};

/// `(name, value)` of every size and offset above, and of the enum values the handler
/// reads, named as the header names them, for the test that compiles the header
/// (`"XLA_FFI_CallFrame.args"` is an `offsetof`, `"XLA_FFI_CallFrame_STRUCT_SIZE"` a struct
/// size, `"XLA_FFI_AttrType_STRING"` an enumerator).
pub fn layout() -> Vec<(&'static str, usize)> {
    vec![
        ("XLA_FFI_Extension_Base_STRUCT_SIZE", EXTENSION_BASE_SIZE),
        ("XLA_FFI_Api_Version_STRUCT_SIZE", API_VERSION_SIZE),
        ("XLA_FFI_Error_Create_Args_STRUCT_SIZE", ERROR_CREATE_ARGS_SIZE),
        ("XLA_FFI_Error_Create_Args.errc", offset_of!(ErrorCreateArgs, errc)),
        ("XLA_FFI_Buffer_STRUCT_SIZE", BUFFER_SIZE),
        ("XLA_FFI_Buffer.dtype", offset_of!(Buffer, dtype)),
        ("XLA_FFI_Buffer.data", offset_of!(Buffer, data)),
        ("XLA_FFI_Buffer.rank", offset_of!(Buffer, rank)),
        ("XLA_FFI_Buffer.dims", offset_of!(Buffer, dims)),
        ("XLA_FFI_Args_STRUCT_SIZE", ARGS_SIZE),
        ("XLA_FFI_Args.size", offset_of!(Buffers, size)),
        ("XLA_FFI_Args.types", offset_of!(Buffers, types)),
        ("XLA_FFI_Args.args", offset_of!(Buffers, values)),
        ("XLA_FFI_Rets_STRUCT_SIZE", ARGS_SIZE),
        ("XLA_FFI_Rets.rets", offset_of!(Buffers, values)),
        ("XLA_FFI_Attrs_STRUCT_SIZE", ATTRS_SIZE),
        ("XLA_FFI_Attrs.size", offset_of!(Attrs, size)),
        ("XLA_FFI_Attrs.types", offset_of!(Attrs, types)),
        ("XLA_FFI_Attrs.names", offset_of!(Attrs, names)),
        ("XLA_FFI_Attrs.attrs", offset_of!(Attrs, attrs)),
        ("XLA_FFI_ByteSpan.len", offset_of!(ByteSpan, len)),
        ("XLA_FFI_Scalar.value", offset_of!(Scalar, value)),
        ("XLA_FFI_CallFrame_STRUCT_SIZE", CALL_FRAME_SIZE),
        ("XLA_FFI_CallFrame.api", offset_of!(CallFrame, api)),
        ("XLA_FFI_CallFrame.ctx", offset_of!(CallFrame, ctx)),
        ("XLA_FFI_CallFrame.stage", offset_of!(CallFrame, stage)),
        ("XLA_FFI_CallFrame.args", offset_of!(CallFrame, args)),
        ("XLA_FFI_CallFrame.rets", offset_of!(CallFrame, rets)),
        ("XLA_FFI_CallFrame.attrs", offset_of!(CallFrame, attrs)),
        ("XLA_FFI_CallFrame.future", offset_of!(CallFrame, future)),
        ("XLA_FFI_Stream_Get_Args_STRUCT_SIZE", STREAM_GET_ARGS_SIZE),
        ("XLA_FFI_Stream_Get_Args.ctx", offset_of!(StreamGetArgs, ctx)),
        ("XLA_FFI_Stream_Get_Args.stream", offset_of!(StreamGetArgs, stream)),
        ("XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE", DEVICE_ORDINAL_GET_ARGS_SIZE),
        ("XLA_FFI_DeviceOrdinal_Get_Args.device_ordinal", offset_of!(DeviceOrdinalGetArgs, device_ordinal)),
        ("XLA_FFI_Metadata_STRUCT_SIZE", METADATA_SIZE),
        ("XLA_FFI_Metadata.api_version", offset_of!(Metadata, api_version)),
        ("XLA_FFI_Metadata.traits", offset_of!(Metadata, traits)),
        ("XLA_FFI_Metadata_Extension_STRUCT_SIZE", METADATA_EXTENSION_SIZE),
        ("XLA_FFI_Metadata_Extension.metadata", offset_of!(MetadataExtension, metadata)),
        ("XLA_FFI_Api.api_version", offset_of!(Api, api_version)),
        ("XLA_FFI_Api.XLA_FFI_Error_Create", offset_of!(Api, error_create)),
        ("XLA_FFI_Api.XLA_FFI_Stream_Get", offset_of!(Api, stream_get)),
        ("XLA_FFI_Api.XLA_FFI_DeviceOrdinal_Get", offset_of!(Api, device_ordinal_get)),
        ("XLA_FFI_Api_STRUCT_SIZE", API_SIZE),
        ("XLA_FFI_AttrType_STRING", ATTR_STRING as usize),
        ("XLA_FFI_ExecutionStage_INSTANTIATE", STAGE_INSTANTIATE as usize),
        ("XLA_FFI_ExecutionStage_EXECUTE", STAGE_EXECUTE as usize),
    ]
}

/// One argument or result buffer of a call, as XLA laid it out (row-major, dense).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BufferRef<'a> {
    /// `XLA_FFI_DataType` code (see [`dtype`]).
    pub dtype: i32,
    pub ptr: u64,
    pub dims: &'a [i64],
}

/// The string attributes named by [`Serve::ATTRIBUTES`], in that order, when present.
pub(crate) type Attributes<'a> = [Option<&'a [u8]>; 2];

/// A decoded call: what [`Serve::serve`] gets.
#[derive(Debug)]
pub(crate) struct FfiCall<'a> {
    pub args: SmallVec<[BufferRef<'a>; 8]>,
    pub rets: SmallVec<[BufferRef<'a>; 8]>,
    pub attributes: Attributes<'a>,
    /// XLA's CUDA stream for this call.
    pub stream: RawStream,
    /// XLA's device ordinal for this call (the CUDA device ordinal).
    pub device: i32,
}

/// What the handler does with a decoded call (implemented above this layer).
pub(crate) trait Serve {
    /// The string attributes the handler reads.
    const ATTRIBUTES: [&'static str; 2];
    /// Handler traits reported in the metadata.
    const TRAITS: u32;
    /// The instantiate stage: XLA builds the call into a program (at compilation or
    /// deserialization), with its attributes and no buffers, stream or device.
    fn instantiate(attributes: &Attributes<'_>) -> Result<(), String>;
    /// Serve one call; `Err` is reported to XLA as an invalid-argument error.
    fn serve(call: &FfiCall<'_>) -> Result<(), String>;
}

/// Why a call failed: a message to make an error of, or an error XLA's own API returned
/// (handed back to XLA, which owns it).
enum Failure {
    Message(c_int, String),
    Xla(*mut Error),
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Message(ERROR_INVALID_ARGUMENT, message)
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Self {
        Failure::from(message.to_string())
    }
}

/// The XLA FFI handler (`XLA_FFI_Handler`) for `S`. Answers XLA's metadata query at
/// registration, and serves instantiate- and execute-stage calls (registered for both; the
/// other stages do nothing); returns null on success.
pub(crate) extern "C" fn handler<S: Serve>(frame: *mut CallFrame) -> *mut Error {
    if frame.is_null() {
        return ptr::null_mut();
    }
    let outcome = std::panic::catch_unwind(|| {
        // SAFETY: XLA passes a valid call frame, live for the duration of this call; the
        // first two fields (size and extension chain) exist in every version of it.
        let (size, extension) = unsafe { ((*frame).struct_size, (*frame).extension_start) };
        if !extension.is_null() {
            // SAFETY: a non-null extension chain starts with an `XLA_FFI_Extension_Base`.
            let kind = unsafe { (*extension).kind };
            if kind == EXTENSION_METADATA {
                return metadata::<S>(extension.cast()).map_err(Failure::from);
            }
        }
        if size < CALL_FRAME_SIZE {
            return Err(Failure::from(format!(
                "XLA's call frame has {size} bytes; caijit needs {CALL_FRAME_SIZE} (XLA FFI API {}.{}): check the installed jaxlib",
                API_VERSION.0, API_VERSION.1
            )));
        }
        // SAFETY: the frame has at least the fields of API 0.3 (size checked above).
        let f = unsafe { &*frame };
        match f.stage {
            STAGE_INSTANTIATE => {
                if f.api.is_null() {
                    return Err("XLA passed no API table".into());
                }
                S::instantiate(&attributes::<S>(&f.attrs)?).map_err(Failure::from)
            }
            STAGE_EXECUTE => {
                let call = decode::<S>(f)?;
                S::serve(&call).map_err(Failure::from)
            }
            // Prepare and initialize: nothing to do.
            _ => Ok(()),
        }
    });
    let (code, message) = match outcome {
        Ok(Ok(())) => return ptr::null_mut(),
        Ok(Err(Failure::Xla(e))) => return e,
        Ok(Err(Failure::Message(code, message))) => (code, message),
        Err(_) => (ERROR_INTERNAL, "caijit's XLA FFI handler panicked (a bug in caijit; please report it)".to_string()),
    };
    // SAFETY: as above: a valid frame whose `api` field exists in every version.
    let api = unsafe { (*frame).api };
    make_error(api, code, &message)
}

/// Fill XLA's metadata query: the API version of these bindings and `S`'s traits.
fn metadata<S: Serve>(extension: *mut MetadataExtension) -> Result<(), String> {
    // SAFETY: the chain's first element has type `XLA_FFI_Extension_Metadata`, so it is a
    // metadata extension; its base's size says how many of its fields exist.
    let ext = unsafe { &mut *extension };
    if ext.extension_base.struct_size < METADATA_EXTENSION_SIZE || ext.metadata.is_null() {
        return Err("XLA's metadata query is smaller than API 0.3's: check the installed jaxlib".into());
    }
    // SAFETY: a non-null metadata pointer of a checked extension points to XLA's metadata.
    let m = unsafe { &mut *ext.metadata };
    if m.struct_size < METADATA_SIZE {
        return Err(format!("XLA's metadata struct has {} bytes; caijit needs {METADATA_SIZE}", m.struct_size));
    }
    m.api_version.struct_size = API_VERSION_SIZE;
    m.api_version.extension_start = ptr::null_mut();
    m.api_version.major_version = API_VERSION.0;
    m.api_version.minor_version = API_VERSION.1;
    m.traits = S::TRAITS;
    Ok(())
}

/// Read the buffers, the attribute, the stream and the device of an execute-stage call.
fn decode<'f, S: Serve>(f: &'f CallFrame) -> Result<FfiCall<'f>, Failure> {
    if f.api.is_null() {
        return Err("XLA passed no API table".into());
    }
    // SAFETY: a non-null `api` points to XLA's API table for the life of the process.
    let api = unsafe { &*f.api };
    let args = buffers(&f.args, "argument")?;
    let rets = buffers(&f.rets, "result")?;
    let attributes = attributes::<S>(&f.attrs)?;

    if api.struct_size < API_SIZE_WITH_STREAM {
        return Err("XLA's API table has no XLA_FFI_Stream_Get".into());
    }
    let stream_get = api.stream_get.ok_or("XLA's API table has no XLA_FFI_Stream_Get")?;
    let mut sa = StreamGetArgs { struct_size: STREAM_GET_ARGS_SIZE, extension_start: ptr::null_mut(), ctx: f.ctx, stream: ptr::null_mut() };
    // SAFETY: XLA's own function, called with this call's context and a valid args struct.
    let err = unsafe { stream_get(&mut sa) };
    if !err.is_null() {
        // XLA's own error (no stream: a platform other than CUDA) goes back to XLA.
        return Err(Failure::Xla(err));
    }

    let device = if api.struct_size >= API_SIZE {
        match api.device_ordinal_get {
            Some(get) => {
                let mut da = DeviceOrdinalGetArgs {
                    struct_size: DEVICE_ORDINAL_GET_ARGS_SIZE,
                    extension_start: ptr::null_mut(),
                    ctx: f.ctx,
                    device_ordinal: 0,
                };
                // SAFETY: as above.
                let err = unsafe { get(&mut da) };
                if !err.is_null() {
                    return Err(Failure::Xla(err));
                }
                da.device_ordinal
            }
            None => return Err("XLA's API table has no XLA_FFI_DeviceOrdinal_Get".into()),
        }
    } else {
        return Err("XLA's API table has no XLA_FFI_DeviceOrdinal_Get (the installed jaxlib is too old for caijit.jax)".into());
    };
    Ok(FfiCall { args, rets, attributes, stream: RawStream(sa.stream as _), device })
}

fn buffers<'f>(b: &'f Buffers, what: &str) -> Result<SmallVec<[BufferRef<'f>; 8]>, String> {
    let n = usize::try_from(b.size).map_err(|_| format!("XLA passed {} {what}s", b.size))?;
    let mut out = SmallVec::new();
    for i in 0..n {
        // SAFETY: `types` and `values` have `size` entries (the header's contract).
        let (kind, value) = unsafe { (*b.types.add(i), *b.values.add(i)) };
        if kind != ARG_BUFFER {
            return Err(format!("{what} {i} is not a buffer (XLA FFI type {kind})"));
        }
        // SAFETY: a buffer entry points to an `XLA_FFI_Buffer`, live for the call.
        let buf = unsafe { &*(value as *const Buffer) };
        let rank = usize::try_from(buf.rank).map_err(|_| format!("{what} {i} has rank {}", buf.rank))?;
        let dims: &[i64] = if rank == 0 || buf.dims.is_null() {
            &[]
        } else {
            // SAFETY: `dims` has `rank` entries, live for the call.
            unsafe { std::slice::from_raw_parts(buf.dims, rank) }
        };
        out.push(BufferRef { dtype: buf.dtype, ptr: buf.data as u64, dims });
    }
    Ok(out)
}

/// The string attributes `S::ATTRIBUTES` of a call, each if present.
fn attributes<'f, S: Serve>(a: &'f Attrs) -> Result<Attributes<'f>, String> {
    let mut out: Attributes<'f> = [None; 2];
    let n = usize::try_from(a.size).map_err(|_| format!("XLA passed {} attributes", a.size))?;
    for i in 0..n {
        // SAFETY: `types`, `names` and `attrs` have `size` entries; each name is a byte span.
        let (kind, span, value) = unsafe { (*a.types.add(i), &**a.names.add(i), *a.attrs.add(i)) };
        // SAFETY: a byte span's `ptr` has `len` bytes, live for the call.
        let key = unsafe { bytes(span) };
        let Some(slot) = S::ATTRIBUTES.iter().position(|n| n.as_bytes() == key) else { continue };
        if kind != ATTR_STRING {
            return Err(format!("attribute {:?} is not a string (XLA FFI attribute type {kind})", S::ATTRIBUTES[slot]));
        }
        // SAFETY: a string attribute points to an `XLA_FFI_ByteSpan`, live for the call.
        out[slot] = Some(unsafe { bytes(&*(value as *const ByteSpan)) });
    }
    Ok(out)
}

/// The bytes of a span (none for an empty one, whose pointer may be null).
///
/// # Safety
/// A non-empty span's `ptr` points to `len` bytes that live as long as the span.
unsafe fn bytes(span: &ByteSpan) -> &[u8] {
    if span.len == 0 || span.ptr.is_null() {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(span.ptr as *const u8, span.len) }
}

/// An `XLA_FFI_Error` made by XLA's own `XLA_FFI_Error_Create` (null when XLA gave no API
/// table to make one with).
fn make_error(api: *const Api, code: c_int, message: &str) -> *mut Error {
    if api.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: a non-null `api` is XLA's table, live for the process.
    let Some(create) = (unsafe { &*api }).error_create else { return ptr::null_mut() };
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    let mut args =
        ErrorCreateArgs { struct_size: ERROR_CREATE_ARGS_SIZE, extension_start: ptr::null_mut(), message: text.as_ptr(), errc: code };
    // SAFETY: XLA's own function with a valid args struct; it copies the message.
    unsafe { create(&mut args) }
}

/// The handler's address, for a PyCapsule that `jax.ffi.register_ffi_target` takes.
pub(crate) fn handler_address<S: Serve>() -> *mut c_void {
    handler::<S> as *const () as *mut c_void
}

#[cfg(test)]
mod tests;
