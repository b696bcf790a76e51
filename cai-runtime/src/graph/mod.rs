//! CUDA graphs of caijit launches, replayed with new arguments.
//!
//! A [`Capture`] records every launch made on its stream (and on streams forked from it)
//! into a CUDA graph, as stream capture does; the launches on this thread that name no
//! stream go there. Arrays and scalars named at capture ([`Capture::input`],
//! [`Capture::scalar`]) are the graph's inputs. For each caijit launch the capture keeps
//! the kernel node it became, its parameter layout and its parameter bytes, and which bytes
//! each input fills: an array input fills every parameter it was passed to (or a view
//! inside it was), a scalar input the parameters its [`NamedScalar::arg`] was passed to.
//!
//! [`Graph::replay`] checks each new argument against every parameter it fills with the
//! launch's own checks (dtype, rank, const, contiguity, alignment) before anything changes,
//! writes the new bytes at those parameters' offsets, gives each changed kernel node its new
//! parameters (`cuGraphExecKernelNodeSetParams`), and launches the graph by the stream
//! protocol: after the new arrays' producer streams, which then wait for it.
//!
//! # Rules
//! - A replay's array has the captured array's dtype and shape: the captured grids were
//!   made for that shape. Its strides may differ only where every parameter it fills is a
//!   `caijit::Array` given the whole input (they are written with it); otherwise they match.
//! - Inputs left out of a replay keep their last value; the caller keeps every bound array
//!   alive while replays that use it may run (the Python face holds them).
//! - Other arrays the captured launches read are part of the graph as they are: the first
//!   replay waits for the work their producers had enqueued when they were captured; later
//!   replays are ordered against them by the caller, as with any CUDA graph.
//! - In another capture (PyTorch's, CuPy's), a replay is added to it as one child-graph node.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use crate::cai::ArrayView;
use crate::error::{Error, Result};
use crate::launch::record::{self, InputKind, Launch, Recording, SlotView};
use crate::launch::trace::{self, Traced};
use crate::launch::{enqueue_ordered, Arg, LaunchConfig, NamedScalar};
use crate::params::{marshal_one, ParamBuffer};
use crate::runtime::{Context, Events, Stream};
use crate::stats::{bump, COUNTERS};
use crate::sync::lock;
use crate::sys::{Driver, RawGraph, RawGraphExec, RawStream};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Whether this thread is capturing a caijit graph now (launches that name no stream go
/// to it).
#[inline]
pub fn capturing_here() -> bool {
    record::thread_capture().is_some()
}

/// Whether any thread is capturing a caijit graph now: a launch from any thread on its
/// stream is captured, and what it reads must live as long as the graph (a launch's
/// caller keeps it with [`crate::runtime::Context::release_after`], which keeps it with
/// the graph being captured).
#[inline]
pub fn capturing_anywhere() -> bool {
    record::any_capture()
}

/// A capture in progress: launches on [`Capture::stream`] (and, on this thread, launches
/// that name no stream) are recorded until [`Capture::end`]. Dropped without `end`, the
/// capture is ended and its graph discarded.
pub struct Capture {
    ctx: Arc<Context>,
    stream: Arc<Stream>,
    recording: Arc<Mutex<Recording>>,
    id: u64,
    thread: std::thread::ThreadId,
    ended: bool,
}

impl Capture {
    /// Begin capturing on a new stream of `ctx`'s device.
    pub fn begin(ctx: &Arc<Context>) -> Result<Capture> {
        if record::thread_capture().is_some() {
            return Err(Error::argument("this thread is capturing a caijit graph already: end it before beginning another"));
        }
        let stream = Arc::new(Stream::new(ctx)?);
        let d = ctx.bind()?;
        d.begin_capture(stream.raw())?;
        let id = match d.capture_id(stream.raw()) {
            Ok(id) => id,
            Err(e) => {
                let _ = d.end_capture(stream.raw()).map(|g| destroy_graph(ctx, g));
                return Err(e.into());
            }
        };
        let recording = Arc::new(Mutex::new(Recording::new(id)));
        record::register(recording.clone(), stream.raw(), Arc::new(AtomicBool::new(true)));
        Ok(Capture { ctx: ctx.clone(), stream, recording, id, thread: std::thread::current().id(), ended: false })
    }

    /// The stream being captured (fork other streams from it with events to capture their
    /// work too; give it to other libraries to capture theirs).
    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }

    /// The capture's id (CUDA's): what a scalar input made by [`Capture::scalar`] names.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether this is the thread that began the capture, the only one that may end it.
    pub fn is_on_this_thread(&self) -> bool {
        std::thread::current().id() == self.thread
    }

    /// Name `view` input `name`: every captured launch given this array, or a view inside
    /// it, has that parameter rebound when a replay names `name`. Name an input before the
    /// launches that use it. Returns the input's index (inputs are numbered in the order
    /// they are named, scalars too: [`Graph::replay_inputs`] takes them by index).
    pub fn input(&self, name: &str, view: &ArrayView) -> Result<usize> {
        let mut r = lock(&self.recording);
        r.add_array(name, view)?;
        Ok(r.inputs.len() - 1)
    }

    /// Name a scalar input: pass its [`NamedScalar::arg`] where the scalar goes; a replay
    /// that names `name` rebinds every parameter it was passed to.
    pub fn scalar(&self, name: &str, value: Arg<'_>) -> Result<NamedScalar> {
        let Arg::Scalar { value, dtype } = value.unnamed() else {
            return Err(Error::argument(format!("graph input `{name}`: a scalar input takes a scalar")));
        };
        lock(&self.recording).add_scalar(name)?;
        Ok(NamedScalar { name: name.into(), capture: self.id, value, dtype })
    }

    /// End the capture and instantiate its graph. Fails, discarding the graph, when a
    /// captured launch failed, an input was never passed to a caijit launch, or the capture
    /// was invalidated (a call illegal during capture; CUDA's error says which). Only the
    /// thread that began the capture can end it: elsewhere this is an error, and the
    /// capture, dropped, is abandoned (its thread's launches no longer go to it).
    pub fn end(mut self) -> Result<Graph> {
        self.ended = true;
        self.finish()
    }

    fn finish(&mut self) -> Result<Graph> {
        record::unregister(self.id);
        if !self.is_on_this_thread() {
            // The capture cannot be ended here (CUDA's thread-local mode): its stream is
            // left to it, never destroyed under it.
            std::mem::forget(self.stream.clone());
            return Err(Error::argument("a caijit graph capture must end on the thread that began it"));
        }
        let d = self.ctx.bind()?;
        let mut r = lock(&self.recording);
        let graph = match d.end_capture(self.stream.raw()) {
            Ok(g) => g,
            Err(e) => {
                self.ctx.return_events(&mut r.before_first);
                return Err(e.into());
            }
        };
        let mut used = vec![false; r.inputs.len()];
        r.slots.iter().for_each(|(i, _)| used[*i] = true);
        let unused = used.iter().position(|u| !u);
        let made = match (&r.failed, unused) {
            (Some(e), _) => Err(Error::launch(format!("a launch inside the capture failed, so the graph is discarded: {e}"))),
            (None, Some(i)) => Err(Error::argument(format!(
                "graph input `{}` was never passed to a caijit kernel launch inside the capture, so a replay could not rebind it",
                r.inputs[i].name
            ))),
            (None, None) => (|| Ok((d.graph_node_count(graph)?, d.graph_has_memory_nodes(graph)?, d.graph_instantiate(graph)?)))(),
        };
        let (nodes, allocates, exec) = match made {
            Ok(made) => made,
            Err(e) => {
                self.ctx.return_events(&mut r.before_first);
                destroy_graph(&self.ctx, graph);
                return Err(e);
            }
        };
        let mut fills = vec![Vec::new(); r.inputs.len()];
        for (i, s) in std::mem::take(&mut r.slots) {
            fills[i].push((s.launch, s.param, s.view));
        }
        let inputs: Arc<[record::Input]> = std::mem::take(&mut r.inputs).into();
        let bound: Vec<Option<Range<u128>>> = inputs
            .iter()
            .map(|i| match &i.kind {
                InputKind::Array(v) => Some(v.address_range()),
                InputKind::Scalar => None,
            })
            .collect();
        let constants = r.seen.iter().filter(|s| !bound.iter().flatten().any(|b| record::overlap(s, b))).cloned().collect();
        let launches = std::mem::take(&mut r.launches);
        let traced = trace::graph_traced(launches.iter().map(|l| l.name), self.ctx.ordinal());
        Ok(Graph {
            ctx: self.ctx.clone(),
            graph,
            exec,
            nodes,
            allocates,
            index: inputs.iter().enumerate().map(|(i, input)| (input.name.clone(), i)).collect(),
            inputs,
            fills,
            up_to_date: [vec![true; launches.len()], vec![true; launches.len()]],
            launches,
            before_first: std::mem::take(&mut r.before_first),
            bindings: 0,
            scratch: Scratch::default(),
            constants,
            bound,
            traced,
            _stream: Some(self.stream.clone()),
        })
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.finish();
        }
    }
}

/// An instantiated graph of captured launches: [`Graph::replay`] it with new arguments.
pub struct Graph {
    ctx: Arc<Context>,
    graph: RawGraph,
    exec: RawGraphExec,
    nodes: usize,
    /// Whether the graph has memory nodes (then it cannot be a child of another graph).
    allocates: bool,
    /// The inputs, in the order they were named (shared with a replay's error messages).
    inputs: Arc<[record::Input]>,
    /// Each input's index by name.
    index: HashMap<String, usize>,
    /// For each input, the parameters it fills: (launch, parameter, how).
    fills: Vec<Vec<(usize, usize, SlotView)>>,
    /// Each launch, with its bytes now (`buf`).
    launches: Vec<Launch>,
    /// By [`Target`]: whether each launch's node in `exec` (what a replay launches) and in
    /// `graph` (what another capture clones) has its bytes now.
    up_to_date: [Vec<bool>; 2],
    before_first: Events,
    /// Replays that bound their arguments ([`Graph::bindings`]).
    bindings: u64,
    /// The captured stream (its handle must not be reused while work captured on it may
    /// still refer to it by identity: kept for the graph's life).
    _stream: Option<Arc<Stream>>,
    /// What a replay works in, kept for the next so that a replay allocates nothing.
    scratch: Scratch,
    /// The address ranges of the arrays the captured launches read that no input rebinds,
    /// and of the array each input is bound to now: what a copy of the graph reads.
    constants: Vec<Range<u128>>,
    bound: Vec<Option<Range<u128>>>,
    /// What the launch ring, profiles and NVTX name a replay: the graph's kernels.
    traced: Traced,
}

/// What a replay did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replayed {
    /// The stream the graph was launched on (its CAI value).
    pub stream: u64,
    /// Whether that stream was being captured, so that the replay became one child-graph
    /// node of that capture: a copy of the graph bound as now, which reads the arrays bound
    /// now whatever later replays bind (their owners must keep them for that graph's life).
    pub child: bool,
}

/// A replay's staged bytes and bookkeeping, kept between replays (cleared, not freed).
#[derive(Default)]
struct Scratch {
    /// Staged parameter bytes: `bufs[j]` is the new bytes of launch `staged[j]`; the buffers
    /// past `staged.len()` are left over from earlier replays, to be written over.
    bufs: Vec<ParamBuffer>,
    staged: Vec<usize>,
    /// For each launch, its index in `staged` (`NOT_STAGED`: none).
    at: Vec<usize>,
    /// For each input, whether this replay gives it.
    given: Vec<bool>,
}

const NOT_STAGED: usize = usize::MAX;

impl Scratch {
    /// The staged launches, each with its new bytes.
    fn changes(&self) -> impl Iterator<Item = (usize, &ParamBuffer)> + Clone {
        self.staged.iter().copied().zip(&self.bufs)
    }
    fn is_staged(&self, launch: usize) -> bool {
        self.at.get(launch).is_some_and(|&j| j != NOT_STAGED)
    }
}

/// Which nodes of which graph a replay brings up to date (the index of their flags in
/// `Graph::up_to_date`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Exec = 0,
    Template = 1,
}

impl Graph {
    /// The names of the inputs, in the order they were named.
    pub fn inputs(&self) -> impl Iterator<Item = &str> {
        self.inputs.iter().map(|i| i.name.as_str())
    }
    /// The kernels captured, in launch order.
    pub fn kernels(&self) -> impl ExactSizeIterator<Item = &'static str> + '_ {
        self.launches.iter().map(|l| l.name)
    }
    /// The graph's node count (kernels, and whatever else was captured: copies, memory
    /// nodes, other libraries' work).
    pub fn node_count(&self) -> usize {
        self.nodes
    }
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
    /// How many replays have bound their arguments: a replay that fails after its graph was
    /// launched (ordering its producers after it) has bound them, and the graph reads them
    /// from then on, so their owners must keep them alive as after a replay that succeeded.
    pub fn bindings(&self) -> u64 {
        self.bindings
    }

    /// The index of input `name` (what [`Graph::replay_inputs`] takes), or the error a
    /// replay naming it meets.
    pub fn input_index(&self, name: &str) -> Result<usize> {
        self.index.get(name).copied().ok_or_else(|| {
            let known: Vec<&str> = self.inputs().collect();
            Error::argument(format!("the graph has no input `{name}` (its inputs: {})", known.join(", ")))
        })
    }

    /// Rebind the inputs named in `args` and launch the graph on `stream` (else the one
    /// stream the new arrays share, else the legacy default stream), ordered by the stream
    /// protocol against the producer streams of the new arrays (`sync = false` leaves other
    /// libraries' out, as for a launch). Every argument is checked before anything changes;
    /// a bad one is an [`Error::Argument`] naming the input, kernel and parameter. On any
    /// error the graph is left bound as it was.
    pub fn replay(&mut self, args: &[(&str, Arg<'_>)], stream: Option<&Stream>, sync: bool) -> Result<Replayed> {
        let by_index = args.iter().map(|&(name, a)| Ok((self.input_index(name)?, a))).collect::<Result<Vec<_>>>()?;
        self.replay_inputs(&by_index, stream, sync)
    }

    /// [`Graph::replay`] with the inputs given by index ([`Graph::input_index`], the order
    /// they were named in): what a caller replaying often resolves once.
    pub fn replay_inputs(&mut self, args: &[(usize, Arg<'_>)], stream: Option<&Stream>, sync: bool) -> Result<Replayed> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let replayed = self.replay_with(&mut scratch, args, stream, sync);
        self.scratch = scratch;
        replayed
    }

    fn replay_with(&mut self, scratch: &mut Scratch, args: &[(usize, Arg<'_>)], stream: Option<&Stream>, sync: bool) -> Result<Replayed> {
        if let Some(o) = stream.and_then(Stream::device).filter(|&o| o != self.ctx.ordinal()) {
            return Err(Error::argument(format!("the stream is on device {o} but the graph is on device {}", self.ctx.ordinal())));
        }
        self.stage(scratch, args)?;
        let arrays = args.iter().enumerate().filter_map(|(i, (_, a))| match a {
            Arg::Array(v) => Some((i, *v, None)),
            Arg::ArrayOn(v, device) => Some((i, *v, Some(*device))),
            _ => None,
        });
        let inputs = self.inputs.clone();
        let named = |i: usize, what: String| Error::argument(format!("graph input `{}`: {what}", inputs[args[i].0].name));
        let ctx = self.ctx.clone();
        let mut child = false;
        let mut recorded = None;
        let stream = enqueue_ordered(&ctx, arrays, stream, sync, named, |d, s| {
            let capturing = s != RawStream::from_cai(1) && d.capture_id(s)? != 0;
            child = capturing;
            let target = if capturing { Target::Template } else { Target::Exec };
            if capturing {
                if self.allocates {
                    return Err(Error::argument(
                        "this graph allocates memory (an op's result or scratch space), and CUDA forbids memory nodes in a child graph: it cannot be replayed inside another capture",
                    ));
                }
                if !self.before_first.is_empty() {
                    return Err(Error::argument(
                        "the graph's first replay waits for work enqueued before its capture, which cannot be done inside another capture: replay it once outside first",
                    ));
                }
                // Inside a caijit capture, the copy must read none of that graph's inputs.
                let mut now = self.bound.clone();
                let mut scalars = Vec::new();
                for (i, a) in args {
                    match a {
                        Arg::Array(v) | Arg::ArrayOn(v, _) => now[*i] = Some(v.address_range()),
                        Arg::ScalarInput(s) => scalars.push(*s),
                        _ => {}
                    }
                }
                let reads: Vec<Range<u128>> = self.constants.iter().cloned().chain(now.into_iter().flatten()).collect();
                record::note_child(d, s, &reads, &scalars)?;
            }
            // The replay is traced as one launch named by the graph's kernels (NVTX range,
            // profile timing; inside another capture, counted as untimed).
            let span = trace::begin_as(self.traced, d, s)?;
            self.bring_up(d, target, scratch)?;
            let launched = if capturing {
                d.capture_child_graph(s, self.graph).map_err(Error::from)
            } else {
                (|| -> Result<()> {
                    for &e in &self.before_first {
                        d.stream_wait_event(s, e)?;
                    }
                    Ok(d.graph_launch(self.exec, s)?)
                })()
            };
            if let Err(e) = launched {
                self.roll_back(d, target, scratch);
                return Err(e);
            }
            if !capturing {
                self.ctx.return_events(&mut self.before_first);
            }
            self.bindings += 1;
            COUNTERS.graph_node_updates.fetch_add(scratch.staged.len() as u64, Relaxed);
            let other = if capturing { Target::Exec } else { Target::Template };
            for (launch, buf) in scratch.changes() {
                self.launches[launch].buf.clone_from(buf);
                self.up_to_date[target as usize][launch] = true;
                self.up_to_date[other as usize][launch] = false;
            }
            for (i, a) in args {
                if let Arg::Array(v) | Arg::ArrayOn(v, _) = a {
                    self.bound[*i] = Some(v.address_range());
                }
            }
            bump(&COUNTERS.graph_replays);
            let no_grid = LaunchConfig { grid: [0; 3], block: [0; 3], shared_mem: 0, cluster: None, cooperative: false };
            recorded = trace::record_as(self.traced.name, self.traced.device, &no_grid, s, args.len(), |slots| {
                trace::write_args(args.iter().map(|(_, a)| a), slots)
            });
            trace::end_as(span, self.traced, d, s)
        })?;
        if let Some(r) = &recorded {
            trace::block(&self.ctx, r)?;
        }
        Ok(Replayed { stream, child })
    }

    /// Give `target`'s nodes the bytes of this replay: the staged ones, and the current
    /// bytes where its node is stale. On an error, the nodes already given new bytes get
    /// their old ones back (or are marked stale).
    fn bring_up(&mut self, d: &Driver, target: Target, scratch: &Scratch) -> Result<()> {
        let current = &self.up_to_date[target as usize];
        let stale = (0..self.launches.len()).filter(|&i| !current[i] && !scratch.is_staged(i)).map(|i| (i, &self.launches[i].buf));
        let work = scratch.changes().chain(stale);
        for (done, (i, buf)) in work.clone().enumerate() {
            if let Err(e) = self.set(d, target, i, buf) {
                let mut failed = vec![i];
                for (j, _) in work.take(done) {
                    if self.set(d, target, j, &self.launches[j].buf).is_err() {
                        failed.push(j);
                    }
                }
                failed.into_iter().for_each(|j| self.up_to_date[target as usize][j] = false);
                return Err(e);
            }
        }
        // The stale nodes now have their launch's bytes.
        self.up_to_date[target as usize].fill(true);
        Ok(())
    }

    /// After a failed launch (or child-graph node): `target`'s staged nodes get their old
    /// bytes back (or are marked stale).
    fn roll_back(&mut self, d: &Driver, target: Target, scratch: &Scratch) {
        for &launch in &scratch.staged {
            if self.set(d, target, launch, &self.launches[launch].buf).is_err() {
                self.up_to_date[target as usize][launch] = false;
            }
        }
    }

    /// Give launch `i`'s node in `target` the bytes `buf`.
    fn set(&self, d: &Driver, target: Target, i: usize, buf: &ParamBuffer) -> Result<()> {
        let l = &self.launches[i];
        let exec = (target == Target::Exec).then_some(self.exec);
        // SAFETY: `buf` holds `l`'s parameter bytes, each argument written by `marshal_one`
        // after the launch's checks against `l.params` (the kernel's compiled list);
        // `with_pointers` points at each parameter; `l.node` is this launch's node, in
        // `exec` or in the graph; the arrays they name are kept alive by the caller while the
        // graph may run.
        #[allow(unsafe_code)]
        let set = buf.with_pointers(&l.params, |p| unsafe { d.set_kernel_node_params(exec, l.node, l.func, &l.cfg, p) });
        Ok(set?)
    }

    /// Check and lay out every argument of a replay into `scratch`, changing nothing else:
    /// the launches whose bytes change, each with its new bytes.
    fn stage(&self, scratch: &mut Scratch, args: &[(usize, Arg<'_>)]) -> Result<()> {
        let Scratch { bufs, staged, at, given } = scratch;
        staged.clear();
        // Where each launch's staged bytes are, and which inputs were given: one pass over
        // the arguments, whatever their number.
        at.clear();
        at.resize(if args.is_empty() { 0 } else { self.launches.len() }, NOT_STAGED);
        given.clear();
        given.resize(if args.is_empty() { 0 } else { self.inputs.len() }, false);
        for &(input, ref a) in args {
            let Some(name) = self.inputs.get(input).map(|i| i.name.as_str()) else {
                return Err(Error::argument(format!("the graph has no input {input} (it has {})", self.inputs.len())));
            };
            if std::mem::replace(&mut given[input], true) {
                return Err(Error::argument(format!("graph input `{name}` is given twice")));
            }
            let refused = |what: String| Error::argument(format!("graph input `{name}`: {what}"));
            let mut stage = |launch: usize, param: usize, a: &Arg<'_>| -> Result<()> {
                let l = &self.launches[launch];
                if at[launch] == NOT_STAGED {
                    at[launch] = staged.len();
                    match bufs.get_mut(staged.len()) {
                        Some(b) => b.clone_from(&l.buf),
                        None => bufs.push(l.buf.clone()),
                    }
                    staged.push(launch);
                }
                marshal_one(&l.params[param], l.alignment[param], a, &mut bufs[at[launch]]).map_err(|e| match e {
                    Error::Argument(e) => Error::argument(format!("graph input `{name}`, kernel `{}`: {}", l.name, e.message)),
                    other => other,
                })
            };
            match (&self.inputs[input].kind, a.unnamed()) {
                (InputKind::Array(was), Arg::Array(v)) => {
                    if v.dtype() != was.dtype() || v.shape() != was.shape() {
                        return Err(refused(format!(
                            "the graph was captured for an array of {} with shape {:?}, got {} with shape {:?}: its grids were made for that shape, so capture another graph for this one",
                            was.dtype(), was.shape(), v.dtype(), v.shape()
                        )));
                    }
                    for (launch, param, how) in &self.fills[input] {
                        match how {
                            SlotView::Whole => stage(*launch, *param, &Arg::Array(v))?,
                            SlotView::Inside { offset, shape, strides } => {
                                if v.strides() != was.strides() {
                                    return Err(refused(format!(
                                        "a view inside it was captured, so it needs the captured byte strides {:?}; got {:?}",
                                        was.strides(),
                                        v.strides()
                                    )));
                                }
                                let ptr = u64::try_from(i128::from(v.ptr()) + offset)
                                    .map_err(|_| refused("its pointer is out of range".into()))?;
                                let inside = ArrayView::new(ptr, shape, Some(strides), v.dtype(), v.readonly(), None)
                                    .map_err(|e| refused(e.to_string()))?;
                                stage(*launch, *param, &Arg::Array(&inside))?;
                            }
                        }
                    }
                }
                (InputKind::Scalar, Arg::Scalar { value, dtype }) => {
                    for (launch, param, _) in &self.fills[input] {
                        stage(*launch, *param, &Arg::Scalar { value, dtype })?;
                    }
                }
                (InputKind::Array(_), _) => return Err(refused("expected an array".into())),
                (InputKind::Scalar, _) => return Err(refused("expected a scalar".into())),
            }
        }
        // A launch whose bytes did not change needs no update: the changed ones move to
        // the front, in order.
        let mut kept = 0;
        for j in 0..staged.len() {
            let launch = staged[j];
            if bufs[j] == self.launches[launch].buf {
                at[launch] = NOT_STAGED;
            } else {
                if kept != j {
                    bufs.swap(kept, j);
                }
                staged[kept] = launch;
                at[launch] = kept;
                kept += 1;
            }
        }
        staged.truncate(kept);
        Ok(())
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        self.ctx.return_events(&mut self.before_first);
        let Ok(d) = self.ctx.bind() else { return };
        // A graph may be dropped while this thread captures another (a Python name rebound
        // by the next `with caijit.graph() as g:`, a garbage collection inside
        // `torch.cuda.graph`): destroying a graph or a stream is an unsafe call there, which
        // would invalidate that capture. In relaxed mode it is allowed.
        let stream = self._stream.take();
        d.relaxed_capture(|| {
            // SAFETY: the executable graph is dropped with its owner and not used again;
            // launches of it in flight finish first (the driver's guarantee).
            #[allow(unsafe_code)]
            let _ = unsafe { d.graph_exec_destroy(self.exec) };
            destroy_graph(&self.ctx, self.graph);
            drop(stream);
        });
    }
}

/// Destroy `g`, which nothing uses any more.
fn destroy_graph(ctx: &Context, g: RawGraph) {
    if let Ok(d) = ctx.bind() {
        // SAFETY: the graph and its nodes are used by no one after this (executable graphs
        // made from it are independent of it).
        #[allow(unsafe_code)]
        let _ = unsafe { d.graph_destroy(g) };
    }
}

// A graph may move between threads (its handles are plain driver identifiers); `replay`
// takes `&mut`, so one thread replays it at a time.
const _: () = {
    const fn send<T: Send>() {}
    send::<Graph>();
};
