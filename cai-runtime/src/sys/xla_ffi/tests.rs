//! Tests of the XLA FFI binding, with a call frame made by hand.

use super::*;

struct Echo;
impl Serve for Echo {
    const ATTRIBUTES: [&'static str; 2] = ["id", "text"];
    const TRAITS: u32 = TRAIT_COMMAND_BUFFER_COMPATIBLE;
    fn instantiate(_: &Attributes<'_>) -> Result<(), String> {
        Ok(())
    }
    fn serve(_: &FfiCall<'_>) -> Result<(), String> {
        Ok(())
    }
}

fn empty_frame(extension: *mut ExtensionBase) -> CallFrame {
    let bufs =
        || Buffers { struct_size: ARGS_SIZE, extension_start: ptr::null_mut(), size: 0, types: ptr::null_mut(), values: ptr::null_mut() };
    CallFrame {
        struct_size: CALL_FRAME_SIZE,
        extension_start: extension,
        api: ptr::null(),
        ctx: ptr::null_mut(),
        stage: 3,
        args: bufs(),
        rets: bufs(),
        attrs: Attrs {
            struct_size: ATTRS_SIZE,
            extension_start: ptr::null_mut(),
            size: 0,
            types: ptr::null_mut(),
            names: ptr::null_mut(),
            attrs: ptr::null_mut(),
        },
        future: ptr::null_mut(),
    }
}

#[test]
fn answers_the_metadata_query_with_its_version_and_traits() {
    let mut m = Metadata {
        struct_size: METADATA_SIZE,
        api_version: ApiVersion { struct_size: API_VERSION_SIZE, extension_start: ptr::null_mut(), major_version: 0, minor_version: 0 },
        traits: 0,
        state_type_id: 0,
    };
    let mut ext = MetadataExtension {
        extension_base: ExtensionBase { struct_size: METADATA_EXTENSION_SIZE, kind: EXTENSION_METADATA, next: ptr::null_mut() },
        metadata: &mut m,
    };
    let mut frame = empty_frame(&mut ext.extension_base);
    assert!(handler::<Echo>(&mut frame).is_null());
    assert_eq!((m.api_version.major_version, m.api_version.minor_version), API_VERSION);
    assert_eq!(m.traits, TRAIT_COMMAND_BUFFER_COMPATIBLE);
    assert_eq!(m.state_type_id, 0);
}

#[test]
fn reads_the_string_attributes() {
    let (id, text, other) = ("id", "text", "other");
    let (v_id, v_other) = ("0123abc", "x");
    let mut spans = [
        ByteSpan { ptr: other.as_ptr().cast(), len: other.len() },
        ByteSpan { ptr: text.as_ptr().cast(), len: text.len() },
        ByteSpan { ptr: id.as_ptr().cast(), len: id.len() },
    ];
    let mut values = [
        ByteSpan { ptr: v_other.as_ptr().cast(), len: v_other.len() },
        ByteSpan { ptr: ptr::null(), len: 0 },
        ByteSpan { ptr: v_id.as_ptr().cast(), len: v_id.len() },
    ];
    let mut types = [ATTR_STRING, ATTR_STRING, ATTR_STRING];
    let (s0, rest) = spans.split_at_mut(1);
    let (s1, s2) = rest.split_at_mut(1);
    let mut names = [s0.as_mut_ptr(), s1.as_mut_ptr(), s2.as_mut_ptr()];
    let (w0, rest) = values.split_at_mut(1);
    let (w1, w2) = rest.split_at_mut(1);
    let mut attrs = [w0.as_mut_ptr().cast::<c_void>(), w1.as_mut_ptr().cast(), w2.as_mut_ptr().cast()];
    let mut a = Attrs {
        struct_size: ATTRS_SIZE,
        extension_start: ptr::null_mut(),
        size: 3,
        types: types.as_mut_ptr(),
        names: names.as_mut_ptr(),
        attrs: attrs.as_mut_ptr(),
    };
    assert_eq!(attributes::<Echo>(&a).unwrap(), [Some(&b"0123abc"[..]), Some(&b""[..])]);
    a.size = 1;
    assert_eq!(attributes::<Echo>(&a).unwrap(), [None, None]);
    // A named attribute of another type is an error, not a silent absence.
    a.size = 3;
    types[2] = ATTR_SCALAR;
    let mut a2 = Attrs { types: types.as_mut_ptr(), ..a };
    a2.size = 3;
    assert!(attributes::<Echo>(&a2).unwrap_err().contains("not a string"));
}

#[test]
fn a_call_without_an_api_table_is_refused_without_unwinding() {
    let mut frame = empty_frame(ptr::null_mut());
    // No API to make an error with: the handler returns null rather than crash.
    assert!(handler::<Echo>(&mut frame).is_null());
    assert!(matches!(decode::<Echo>(&frame), Err(Failure::Message(_, m)) if m.contains("no API table")));
}

// A fake XLA: an API table whose functions answer with fixed values, and a server that
// records what it was given.
mod fake {
    use super::*;
    use std::cell::RefCell;

    /// `(dtype, pointer, dims)` of a buffer.
    pub type Seen = Vec<(i32, u64, Vec<i64>)>;
    /// Arguments, results, first attribute, stream and device of a call.
    pub type Served = (Seen, Seen, Option<Vec<u8>>, u64, i32);

    thread_local! {
        /// Arguments, results, attribute, stream and device of the last call served.
        pub static SEEN: RefCell<Option<Served>> = const { RefCell::new(None) };
        pub static ERROR: RefCell<Option<(c_int, String)>> = const { RefCell::new(None) };
    }

    pub extern "C" fn error_create(args: *mut ErrorCreateArgs) -> *mut Error {
        // SAFETY: the handler passes a valid args struct with a NUL-terminated message.
        let (code, message) = unsafe { ((*args).errc, std::ffi::CStr::from_ptr((*args).message).to_string_lossy().into_owned()) };
        ERROR.with_borrow_mut(|e| *e = Some((code, message)));
        std::ptr::NonNull::<Error>::dangling().as_ptr()
    }

    pub extern "C" fn stream_get(args: *mut StreamGetArgs) -> *mut Error {
        // SAFETY: the handler passes a valid args struct.
        unsafe { (*args).stream = 0x5151 as *mut c_void };
        ptr::null_mut()
    }

    pub extern "C" fn device_ordinal_get(args: *mut DeviceOrdinalGetArgs) -> *mut Error {
        // SAFETY: the handler passes a valid args struct.
        unsafe { (*args).device_ordinal = 1 };
        ptr::null_mut()
    }

    pub fn api() -> Api {
        Api {
            struct_size: API_SIZE,
            extension_start: ptr::null_mut(),
            api_version: ApiVersion { struct_size: API_VERSION_SIZE, extension_start: ptr::null_mut(), major_version: 0, minor_version: 3 },
            internal_api: ptr::null(),
            error_create: Some(error_create),
            error_get_message: None,
            error_destroy: None,
            handler_register: None,
            stream_get: Some(stream_get),
            type_register: None,
            execution_context_get: None,
            state_set: None,
            state_get: None,
            device_memory_allocate: None,
            device_memory_free: None,
            thread_pool_schedule: None,
            thread_pool_num_threads: None,
            future_create: None,
            future_set_available: None,
            future_set_error: None,
            run_id_get: None,
            device_ordinal_get: Some(device_ordinal_get),
        }
    }

    pub struct Record;
    impl Serve for Record {
        const ATTRIBUTES: [&'static str; 2] = ["caijit_fingerprint", "caijit_launch"];
        const TRAITS: u32 = 0;
        fn instantiate(attributes: &Attributes<'_>) -> Result<(), String> {
            match attributes[0] {
                Some(b"13") => Err("unlucky at instantiation".into()),
                _ => Ok(()),
            }
        }
        fn serve(call: &FfiCall<'_>) -> Result<(), String> {
            let list = |b: &[BufferRef<'_>]| b.iter().map(|b| (b.dtype, b.ptr, b.dims.to_vec())).collect::<Vec<_>>();
            let first = call.attributes[0].map(<[u8]>::to_vec);
            SEEN.with_borrow_mut(|s| *s = Some((list(&call.args), list(&call.rets), first, call.stream.0 as u64, call.device)));
            match call.attributes[0] {
                Some(b"13") => Err("unlucky".into()),
                Some(b"666") => panic!("a bug"),
                _ => Ok(()),
            }
        }
    }
}

/// Run the handler at `stage` on a frame with two argument buffers, one result, the
/// string attribute `caijit_fingerprint` and an integer attribute.
fn call_with_attribute(value: &str, stage: c_int) -> *mut Error {
    let api = fake::api();
    let (mut d0, mut d1, mut d2) = ([4i64], [2i64, 3], [4i64]);
    let b = |dtype, data: u64, dims: &mut [i64]| Buffer {
        struct_size: BUFFER_SIZE,
        extension_start: ptr::null_mut(),
        dtype,
        data: data as *mut c_void,
        rank: dims.len() as i64,
        dims: dims.as_mut_ptr(),
    };
    let (mut x, mut y, mut out) = (b(dtype::F32, 0x1000, &mut d0), b(dtype::S32, 0x2000, &mut d1), b(dtype::F32, 0x3000, &mut d2));
    let mut arg_types = [ARG_BUFFER, ARG_BUFFER];
    let mut args = [(&mut x as *mut Buffer).cast::<c_void>(), (&mut y as *mut Buffer).cast()];
    let mut ret_types = [ARG_BUFFER];
    let mut rets = [(&mut out as *mut Buffer).cast::<c_void>()];
    let (other, name) = ("other", "caijit_fingerprint");
    let mut spans = [ByteSpan { ptr: name.as_ptr().cast(), len: name.len() }, ByteSpan { ptr: other.as_ptr().cast(), len: other.len() }];
    let mut text = ByteSpan { ptr: value.as_ptr().cast(), len: value.len() };
    let mut w = 5i32;
    let mut scalar = Scalar { dtype: dtype::S32, value: (&mut w as *mut i32).cast() };
    let mut attr_types = [ATTR_STRING, ATTR_SCALAR];
    let (s0, s1) = spans.split_at_mut(1);
    let mut names = [s0.as_mut_ptr(), s1.as_mut_ptr()];
    let mut attrs = [(&mut text as *mut ByteSpan).cast::<c_void>(), (&mut scalar as *mut Scalar).cast()];
    let mut frame = empty_frame(ptr::null_mut());
    frame.api = &api;
    frame.stage = stage;
    frame.args = Buffers {
        struct_size: ARGS_SIZE,
        extension_start: ptr::null_mut(),
        size: 2,
        types: arg_types.as_mut_ptr(),
        values: args.as_mut_ptr(),
    };
    frame.rets = Buffers {
        struct_size: ARGS_SIZE,
        extension_start: ptr::null_mut(),
        size: 1,
        types: ret_types.as_mut_ptr(),
        values: rets.as_mut_ptr(),
    };
    frame.attrs = Attrs {
        struct_size: ATTRS_SIZE,
        extension_start: ptr::null_mut(),
        size: 2,
        types: attr_types.as_mut_ptr(),
        names: names.as_mut_ptr(),
        attrs: attrs.as_mut_ptr(),
    };
    handler::<fake::Record>(&mut frame)
}

#[test]
fn decodes_buffers_the_attribute_the_stream_and_the_device() {
    assert!(call_with_attribute("7", STAGE_EXECUTE).is_null());
    let seen = fake::SEEN.with_borrow_mut(|s| s.take()).unwrap();
    assert_eq!(seen.0, vec![(dtype::F32, 0x1000, vec![4]), (dtype::S32, 0x2000, vec![2, 3])]);
    assert_eq!(seen.1, vec![(dtype::F32, 0x3000, vec![4])]);
    assert_eq!((seen.2, seen.3, seen.4), (Some(b"7".to_vec()), 0x5151, 1));
}

#[test]
fn failures_and_panics_become_xla_errors() {
    assert!(!call_with_attribute("13", STAGE_EXECUTE).is_null());
    assert_eq!(fake::ERROR.with_borrow_mut(|e| e.take()), Some((ERROR_INVALID_ARGUMENT, "unlucky".to_string())));
    assert!(!call_with_attribute("666", STAGE_EXECUTE).is_null());
    let (code, message) = fake::ERROR.with_borrow_mut(|e| e.take()).unwrap();
    assert_eq!(code, ERROR_INTERNAL);
    assert!(message.contains("panicked"), "{message}");
}

#[test]
fn the_instantiate_stage_gets_the_attributes_and_other_stages_do_nothing() {
    assert!(call_with_attribute("7", STAGE_INSTANTIATE).is_null());
    assert!(!call_with_attribute("13", STAGE_INSTANTIATE).is_null());
    let (code, message) = fake::ERROR.with_borrow_mut(|e| e.take()).unwrap();
    assert_eq!((code, message.as_str()), (ERROR_INVALID_ARGUMENT, "unlucky at instantiation"));
    fake::SEEN.with_borrow_mut(|s| *s = None);
    for stage in [1, 2] {
        assert!(call_with_attribute("13", stage).is_null());
    }
    assert!(fake::SEEN.with_borrow_mut(|s| s.take()).is_none(), "prepare and initialize serve nothing");
}
