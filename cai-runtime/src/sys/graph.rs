//! CUDA graphs: stream capture, the kernel node each captured launch made, instantiation,
//! rewriting a kernel node's parameters in an executable graph, and launching it.

use std::ffi::c_void;
use std::ptr;
use std::sync::OnceLock;

use cudarc::driver::sys as cu;

use super::{check, Driver, DriverError, LaunchConfig, RawFunction, RawGraph, RawGraphExec, RawNode, RawStream};

impl Driver {
    /// Begin capturing `s` into a new graph, in thread-local mode: calls that are unsafe
    /// during a capture are refused on this thread only, as CuPy and PyTorch's
    /// `capture_error_mode="thread_local"` do.
    pub fn begin_capture(&self, s: RawStream) -> Result<(), DriverError> {
        let mode = cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        // SAFETY: `s` is a live stream of the current context (the caller's); no pointers.
        check("cuStreamBeginCapture", unsafe { cu::cuStreamBeginCapture_v2(s.0, mode) })
    }

    /// End the capture of `s`: the captured graph (the caller owns it). Fails when the
    /// capture was invalidated (an illegal call during it); the capture has ended then too.
    pub fn end_capture(&self, s: RawStream) -> Result<RawGraph, DriverError> {
        let mut g: cu::CUgraph = ptr::null_mut();
        // SAFETY: valid out-pointer; `s` is the stream whose capture began.
        let r = unsafe { cu::cuStreamEndCapture(s.0, &mut g) };
        if r != cu::CUresult::CUDA_SUCCESS && !g.is_null() {
            // SAFETY: a graph the failed end handed over anyway is ours to destroy.
            unsafe { cu::cuGraphDestroy(g) };
        }
        check("cuStreamEndCapture", r)?;
        Ok(RawGraph(g))
    }

    /// Instantiate `g`. Memory its allocation nodes made and no node freed is freed at the
    /// start of the next launch (`AUTO_FREE_ON_LAUNCH`), so that it can be replayed.
    pub fn graph_instantiate(&self, g: RawGraph) -> Result<RawGraphExec, DriverError> {
        let mut exec: cu::CUgraphExec = ptr::null_mut();
        let flags = u64::from(cu::CUgraphInstantiate_flags_enum::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0);
        // SAFETY: valid out-pointer; `g` is a live graph.
        check("cuGraphInstantiateWithFlags", unsafe { cu::cuGraphInstantiateWithFlags(&mut exec, g.0, flags) })?;
        Ok(RawGraphExec(exec))
    }

    /// The number of nodes of `g`.
    pub fn graph_node_count(&self, g: RawGraph) -> Result<usize, DriverError> {
        let mut n = 0usize;
        // SAFETY: a null node array asks only for the count, written to a valid pointer.
        check("cuGraphGetNodes", unsafe { cu::cuGraphGetNodes(g.0, ptr::null_mut(), &mut n) })?;
        Ok(n)
    }

    /// Give kernel node `node` new parameters: in `exec` (an executable graph made from the
    /// node's graph) when given, else in the node's own graph (what a clone of it, a
    /// child-graph node, then launches). The node launched `f` with `cfg`; the driver copies
    /// the parameters before returning.
    ///
    /// # Safety
    /// As [`Driver::launch_checked`], for every later launch of the graph: `params[i]` points
    /// at exactly parameter `i`'s bytes of `f` until the call returns, and every device
    /// pointer among them stays valid, for the access `f` makes, while the graph may run.
    pub unsafe fn set_kernel_node_params(
        &self,
        exec: Option<RawGraphExec>,
        node: RawNode,
        f: RawFunction,
        cfg: &LaunchConfig,
        params: &mut [*mut c_void],
    ) -> Result<(), DriverError> {
        let p = node_params(f, cfg, params);
        match exec {
            // SAFETY: the caller upholds `# Safety`; `p` outlives the call, which copies it.
            Some(exec) => check("cuGraphExecKernelNodeSetParams", unsafe { cu::cuGraphExecKernelNodeSetParams_v2(exec.0, node.0, &p) }),
            // SAFETY: as above.
            None => check("cuGraphKernelNodeSetParams", unsafe { cu::cuGraphKernelNodeSetParams_v2(node.0, &p) }),
        }
    }

    /// Launch `exec` on `s`.
    pub fn graph_launch(&self, exec: RawGraphExec, s: RawStream) -> Result<(), DriverError> {
        // SAFETY: `exec` is a live executable graph whose nodes' parameters were checked when
        // captured or set (`set_kernel_node_params`); `s` a live stream.
        check("cuGraphLaunch", unsafe { cu::cuGraphLaunch(exec.0, s.0) })
    }

    /// Whether `g` has memory allocation or free nodes.
    pub fn graph_has_memory_nodes(&self, g: RawGraph) -> Result<bool, DriverError> {
        let mut n = self.graph_node_count(g)?;
        let mut nodes: Vec<cu::CUgraphNode> = vec![ptr::null_mut(); n];
        // SAFETY: `nodes` has room for `n` nodes, and the driver writes at most `n`.
        check("cuGraphGetNodes", unsafe { cu::cuGraphGetNodes(g.0, nodes.as_mut_ptr(), &mut n) })?;
        for &node in &nodes[..n.min(nodes.len())] {
            let mut kind = cu::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
            // SAFETY: `node` is a node of the live graph `g`; valid out-pointer.
            check("cuGraphNodeGetType", unsafe { cu::cuGraphNodeGetType(node, &mut kind) })?;
            if matches!(kind, cu::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC | cu::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Add `child` (cloned by the driver) to the capture of `s` as one child-graph node after
    /// the capture's current dependencies, which it becomes. Drivers older than CUDA 12.3
    /// cannot: `CUDA_ERROR_NOT_SUPPORTED`.
    pub fn capture_child_graph(&self, s: RawStream, child: RawGraph) -> Result<(), DriverError> {
        static CAN: OnceLock<bool> = OnceLock::new();
        if !*CAN.get_or_init(|| self.has("cuStreamUpdateCaptureDependencies_v2")) {
            return check("cuStreamUpdateCaptureDependencies", cu::CUresult::CUDA_ERROR_NOT_SUPPORTED);
        }
        let info = self.capture_info(s)?;
        if !info.active || info.graph.is_null() {
            return check("cuStreamGetCaptureInfo", cu::CUresult::CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
        }
        let deps = info.deps();
        let mut node: cu::CUgraphNode = ptr::null_mut();
        // SAFETY: `info.graph` is the live graph of the capture, `deps` its current
        // dependencies; `child` a live graph, which the driver clones.
        check("cuGraphAddChildGraphNode", unsafe {
            cu::cuGraphAddChildGraphNode(&mut node, info.graph, deps.as_ptr(), deps.len(), child.0)
        })?;
        let set = cu::CUstreamUpdateCaptureDependencies_flags::CU_STREAM_SET_CAPTURE_DEPENDENCIES as u32;
        // SAFETY: one node of the capture's graph and no edge data; the call copies the array.
        check("cuStreamUpdateCaptureDependencies", unsafe { cu::cuStreamUpdateCaptureDependencies_v2(s.0, &mut node, ptr::null(), 1, set) })
    }

    /// Destroy `exec` (its launches in flight finish first, as the driver guarantees).
    ///
    /// # Safety
    /// `exec` is not used again.
    pub unsafe fn graph_exec_destroy(&self, exec: RawGraphExec) -> Result<(), DriverError> {
        // SAFETY: the caller's promise.
        check("cuGraphExecDestroy", unsafe { cu::cuGraphExecDestroy(exec.0) })
    }

    /// Destroy `g` and its nodes.
    ///
    /// # Safety
    /// Neither `g` nor its nodes are used again.
    pub unsafe fn graph_destroy(&self, g: RawGraph) -> Result<(), DriverError> {
        // SAFETY: the caller's promise.
        check("cuGraphDestroy", unsafe { cu::cuGraphDestroy(g.0) })
    }
}

/// A kernel node's parameters: `f` launched with `cfg` and `params` (pointers the driver
/// reads while the call that takes them runs).
fn node_params(f: RawFunction, cfg: &LaunchConfig, params: &mut [*mut c_void]) -> cu::CUDA_KERNEL_NODE_PARAMS {
    cu::CUDA_KERNEL_NODE_PARAMS {
        func: f.0,
        gridDimX: cfg.grid[0],
        gridDimY: cfg.grid[1],
        gridDimZ: cfg.grid[2],
        blockDimX: cfg.block[0],
        blockDimY: cfg.block[1],
        blockDimZ: cfg.block[2],
        sharedMemBytes: cfg.shared_mem,
        kernelParams: params.as_mut_ptr(),
        extra: ptr::null_mut(),
        kern: ptr::null_mut(),
        ctx: ptr::null_mut(),
    }
}
