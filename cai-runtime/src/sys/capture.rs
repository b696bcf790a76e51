//! Objects kept alive by a CUDA graph that is being captured: a graph user object whose
//! destructor hands the object back to caijit once the graph, and every executable graph
//! made from it, is gone (and their launches have finished).

use std::ffi::c_void;
use std::ptr;

use cudarc::driver::sys as cu;

use super::{check, Driver, DriverError, RawNode, RawStream};

/// What a graph hands back when it is destroyed: called once, on a thread of the driver's,
/// where it must not call CUDA (it only moves its object to a list caijit drains later).
pub(crate) type OnGraphDestroyed = Box<dyn FnOnce() + Send>;

/// The destructor of a user object made by [`Driver::keep_with_capture`].
///
/// # Safety
/// `payload` is a pointer from `Box::into_raw(Box<OnGraphDestroyed>)`, passed once.
unsafe extern "C" fn destroy(payload: *mut c_void) {
    // SAFETY: the driver calls the destructor once, with the pointer given at creation,
    // which came from `Box::into_raw` of exactly this type.
    let f = unsafe { Box::from_raw(payload.cast::<OnGraphDestroyed>()) };
    // A panic must not unwind into the driver.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
}

/// What the driver says of a stream's capture (`cuStreamGetCaptureInfo`).
pub(crate) struct CaptureInfo {
    /// Whether the stream is being captured (an invalidated capture is not).
    pub active: bool,
    pub id: u64,
    /// The graph being captured (null when none).
    pub graph: cu::CUgraph,
    deps: *const cu::CUgraphNode,
    count: usize,
}

impl CaptureInfo {
    /// The capture's current dependencies: the nodes the next captured operation will
    /// follow (read before the next operation on the stream, which may move them).
    pub fn deps(&self) -> &[cu::CUgraphNode] {
        if self.deps.is_null() || self.count == 0 {
            return &[];
        }
        // SAFETY: the driver said `deps` holds `count` nodes, valid until the next operation
        // on the stream; the slice lives no longer than `self`, read right after the query.
        unsafe { std::slice::from_raw_parts(self.deps, self.count) }
    }

    /// The node the last captured operation made: the capture's one dependency.
    pub fn last_node(&self) -> Option<RawNode> {
        match self.deps() {
            &[node] => Some(RawNode(node)),
            _ => None,
        }
    }
}

impl Driver {
    /// The capture `s` belongs to, its graph and current dependencies
    /// (`cuStreamGetCaptureInfo_v3`, or the second version on drivers of CUDA 11.3-12.2).
    pub(crate) fn capture_info(&self, s: RawStream) -> Result<CaptureInfo, DriverError> {
        let mut status = cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let (mut id, mut count) = (0u64, 0usize);
        let mut graph: cu::CUgraph = ptr::null_mut();
        let mut deps: *const cu::CUgraphNode = ptr::null();
        static HAS_V3: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let r = if *HAS_V3.get_or_init(|| self.has("cuStreamGetCaptureInfo_v3")) {
            // SAFETY: valid out-pointers; the edge-data output is null, which the API allows.
            unsafe { cu::cuStreamGetCaptureInfo_v3(s.0, &mut status, &mut id, &mut graph, &mut deps, ptr::null_mut(), &mut count) }
        } else {
            // Drivers of CUDA 11.3-12.2: the second version (cudarc binds only the newest).
            type V2 = unsafe extern "C" fn(
                cu::CUstream,
                *mut cu::CUstreamCaptureStatus,
                *mut u64,
                *mut cu::CUgraph,
                *mut *const cu::CUgraphNode,
                *mut usize,
            ) -> cu::CUresult;
            // SAFETY: the driver is loaded; the symbol has exactly the V2 signature (cuda.h
            // of CUDA 11.3-12.x); the out-pointers are valid.
            unsafe {
                match cu::culib().get::<V2>(b"cuStreamGetCaptureInfo_v2") {
                    Ok(v2) => v2(s.0, &mut status, &mut id, &mut graph, &mut deps, &mut count),
                    Err(_) => cu::CUresult::CUDA_ERROR_NOT_SUPPORTED,
                }
            }
        };
        check("cuStreamGetCaptureInfo", r)?;
        let active = status == cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
        Ok(CaptureInfo { active, id, graph, deps, count })
    }

    /// Keep `keep` with the graph that `s` is capturing now: `give_back(keep)` runs when that
    /// graph and every executable graph made from it are destroyed and their launches have
    /// finished, on a driver thread (so it must not call CUDA). `Ok(Err(keep))` hands it back
    /// when `s` is not capturing. `Err` only when the capture's graph could not take it:
    /// `keep` is then leaked, never dropped (the captured work may read what it keeps alive
    /// whenever the graph is replayed). Never call it on the legacy default stream (asking
    /// it about capture is an implicit synchronisation).
    pub fn keep_with_capture<T: Send + 'static>(
        &self,
        s: RawStream,
        keep: T,
        give_back: impl FnOnce(T) + Send + 'static,
    ) -> Result<Result<(), T>, DriverError> {
        // A stream the driver cannot answer for is handed back too (its capture cannot be
        // joined): the caller's own path for uncaptured work reports what is wrong with it.
        let graph = match self.capture_info(s) {
            Ok(info) if info.active && !info.graph.is_null() => info.graph,
            _ => return Ok(Err(keep)),
        };
        let on_destroyed: OnGraphDestroyed = Box::new(move || give_back(keep));
        let payload = Box::into_raw(Box::new(on_destroyed)).cast::<c_void>();
        let mut object: cu::CUuserObject = ptr::null_mut();
        let no_destructor_sync = cu::CUuserObject_flags_enum::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC as u32;
        // SAFETY: valid out-pointer; `destroy` takes exactly the payload made above; one
        // reference, owned here until moved to the graph.
        check("cuUserObjectCreate", unsafe { cu::cuUserObjectCreate(&mut object, payload, Some(destroy), 1, no_destructor_sync) })?;
        // (On a failure the payload is leaked, never dropped: the captured work may read
        // what it keeps alive whenever the graph is replayed.)
        let move_ref = cu::CUuserObjectRetain_flags_enum::CU_GRAPH_USER_OBJECT_MOVE as u32;
        // SAFETY: `graph` is the live graph of the active capture; the reference made above
        // moves to it.
        check("cuGraphRetainUserObject", unsafe { cu::cuGraphRetainUserObject(graph, object, 1, move_ref) })?;
        Ok(Ok(()))
    }
}
