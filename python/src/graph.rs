//! `caijit.graph()`: a capture of launches (`cai_runtime::graph`) as a context manager, and
//! its replay with new arguments by position or keyword. The graph holds the Python objects
//! bound to its array inputs, so that what a replay reads stays alive while the graph may
//! run.

use std::sync::{Arc, Mutex, OnceLock};

use cai_runtime::graph::{Capture, Graph as RtGraph};
use cai_runtime::launch::Arg;
use cai_runtime::runtime::{Context, Stream as RtStream};
use cai_runtime::sync::lock;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use smallvec::SmallVec;

use crate::args::{arg_from_py, args_from_py, number, release_after, ArgContext, GraphScalar, PyArg};
use crate::errors::{PyCaiError, PyCaiResult};
use crate::stream::{stream_from_py, Stream};

enum State {
    /// Made, not entered yet.
    New,
    Capturing(Capture),
    Ready(Box<RtGraph>),
    /// The capture raised or failed: nothing to replay.
    Discarded(String),
}

/// A CUDA graph of caijit launches: `with caijit.graph() as g:` captures the launches made
/// in the block (on this thread, those that name no stream, and any on `g.stream`); after
/// it, `g(x=new_x, alpha=0.5)` replays them with the inputs named by `g.input` rebound.
#[pyclass(frozen, module = "caijit", name = "Graph")]
pub struct Graph {
    device: usize,
    state: Mutex<State>,
    stream: Mutex<Option<Arc<RtStream>>>,
    /// The objects bound to array inputs now (captured, then each replay's), by input index.
    held: Mutex<Vec<Option<Py<PyAny>>>>,
    /// The inputs, once captured (made by the first replay).
    known: OnceLock<Known>,
}

/// Objects a replay no longer binds (released once its work is done, with the GIL).
type Objects = SmallVec<[Py<PyAny>; 8]>;

/// A captured graph's inputs as a replay finds them: by position, their names in the order
/// they were named; by keyword, their indices in a dict (found by the keywords' strings'
/// own hashes).
struct Known {
    names: Vec<String>,
    index: Py<PyDict>,
}

impl Graph {
    /// Run `f` on the captured graph; before its capture ends, or when it failed, the error
    /// saying so.
    fn ready<R>(&self, f: impl FnOnce(&mut RtGraph) -> PyCaiResult<R>) -> PyCaiResult<R> {
        match &mut *lock(&self.state) {
            State::Ready(g) => f(g),
            State::Discarded(why) => Err(PyCaiError::argument(format!("the graph cannot be replayed: {why}"))),
            State::New | State::Capturing(_) => Err(PyCaiError::argument("a graph is replayed after its `with caijit.graph()` block")),
        }
    }

    /// The inputs of the captured graph (else the error saying why there is none).
    fn known(&self, py: Python<'_>) -> PyCaiResult<&Known> {
        if let Some(known) = self.known.get() {
            return Ok(known);
        }
        let known = self.ready(|g| {
            let index = PyDict::new(py);
            for (i, name) in g.inputs().enumerate() {
                index.set_item(name, i)?;
            }
            Ok(Known { names: g.inputs().map(String::from).collect(), index: index.unbind() })
        })?;
        Ok(self.known.get_or_init(|| known))
    }

    /// Run `f` on the capture in progress.
    fn capturing<R>(&self, f: impl FnOnce(&Capture) -> cai_runtime::Result<R>) -> PyCaiResult<R> {
        match &*lock(&self.state) {
            State::Capturing(c) => Ok(f(c)?),
            _ => Err(PyCaiError::argument("graph inputs are named inside `with caijit.graph() as g:`, while it captures")),
        }
    }
}

#[pymethods]
impl Graph {
    #[new]
    #[pyo3(signature = (device = 0))]
    fn new(device: usize) -> Self {
        Graph { device, state: Mutex::new(State::New), stream: Mutex::new(None), held: Mutex::default(), known: OnceLock::new() }
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyCaiResult<Bound<'_, Self>> {
        let g = slf.get();
        let py = slf.py();
        let begun = py.detach(|| -> cai_runtime::Result<()> {
            let mut state = lock(&g.state);
            if !matches!(*state, State::New) {
                return Err(cai_runtime::Error::argument("a caijit.Graph captures once: make a new one with caijit.graph()"));
            }
            let capture = Capture::begin(&Context::new(g.device)?)?;
            *lock(&g.stream) = Some(capture.stream().clone());
            *state = State::Capturing(capture);
            Ok(())
        });
        begun?;
        Ok(slf)
    }

    #[pyo3(signature = (exc_type, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyCaiResult<bool> {
        let raised = exc_type.is_some_and(|t| !t.is_none());
        let ended = py.detach(|| -> PyCaiResult<()> {
            let mut state = lock(&self.state);
            match &*state {
                State::Capturing(c) if !c.is_on_this_thread() => {
                    return Err(PyCaiError::argument(
                        "a caijit graph capture must end on the thread that began it (leave the `with` block there)",
                    ))
                }
                State::Capturing(_) => {}
                _ => return Ok(()),
            }
            let State::Capturing(capture) = std::mem::replace(&mut *state, State::Discarded("the capture raised".into())) else {
                return Ok(());
            };
            if raised {
                drop(capture);
                return Ok(());
            }
            match capture.end() {
                Ok(g) => {
                    *state = State::Ready(Box::new(g));
                    Ok(())
                }
                Err(e) => {
                    *state = State::Discarded(e.to_string());
                    Err(e.into())
                }
            }
        });
        // (What the captured launches were given is kept with the captured graph: see
        // `ArgContext::keep`.)
        ended?;
        Ok(false)
    }

    /// Name an input of the graph: an array (returned as it is: pass it to launches in the
    /// capture) or a scalar (returned as a `caijit.GraphScalar`: pass that where the scalar
    /// goes). A replay names it by keyword.
    fn input<'py>(&self, py: Python<'py>, name: &str, value: Bound<'py, PyAny>) -> PyCaiResult<Bound<'py, PyAny>> {
        if name == "stream" {
            return Err(PyCaiError::argument("`stream` names a replay's stream: give the input another name"));
        }
        if let Some((n, dtype)) = number(0, &value)? {
            let scalar = self.capturing(|c| c.scalar(name, Arg::Scalar { value: n, dtype }))?;
            let scalar = GraphScalar { scalar, source: value.unbind() };
            return Ok(Bound::new(py, scalar)?.into_any());
        }
        let stream = lock(&self.stream).clone();
        let mut cx = ArgContext::new(stream.as_ref().map(|s| s.handle()));
        let converted = arg_from_py(0, &value, &mut cx).map_err(|e| e.at_argument(0, Some(name), None))?;
        let Some(view) = converted.view() else {
            return Err(PyCaiError::argument(format!("graph input `{name}`: expected an array or a scalar")));
        };
        let view = view.clone();
        let index = py.detach(|| self.capturing(|c| c.input(name, &view)))?;
        let mut held = lock(&self.held);
        if held.len() <= index {
            held.resize_with(index + 1, || None);
        }
        held[index] = Some(value.clone().unbind());
        Ok(value)
    }

    /// The stream being captured (a `caijit.Stream`): give it to other libraries to capture
    /// their work into the graph too.
    #[getter]
    fn stream(&self) -> PyCaiResult<Stream> {
        match &*lock(&self.stream) {
            Some(s) => Ok(Stream { inner: s.clone() }),
            None => Err(PyCaiError::argument("the graph has no stream before its capture begins")),
        }
    }

    /// Replay the graph with the inputs given rebound (the others keep their last values):
    /// by position in the order they were named, or by keyword; on `stream` (else the one
    /// stream the new arrays share, else the legacy default stream).
    #[pyo3(signature = (*args, stream = None, **inputs))]
    fn __call__(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        stream: Option<&Bound<'_, PyAny>>,
        inputs: Option<&Bound<'_, PyDict>>,
    ) -> PyCaiResult<()> {
        self.replay(py, args, stream, inputs)
    }

    /// [`Graph::__call__`].
    #[pyo3(signature = (*args, stream = None, **inputs))]
    fn replay(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        stream: Option<&Bound<'_, PyAny>>,
        inputs: Option<&Bound<'_, PyDict>>,
    ) -> PyCaiResult<()> {
        let stream = stream.map(stream_from_py).transpose()?.flatten();
        let known = self.known(py)?;
        if args.len() > known.names.len() {
            return Err(PyCaiError::argument(format!(
                "the graph has {} inputs ({}), got {} positional arguments",
                known.names.len(),
                known.names.join(", "),
                args.len()
            )));
        }
        // Each input's index, and the object given for it.
        let mut indices: SmallVec<[usize; 8]> = (0..args.len()).collect();
        let mut objs: SmallVec<[Bound<'_, PyAny>; 8]> = args.iter().collect();
        let index = known.index.bind(py);
        for (k, v) in inputs.into_iter().flat_map(|d| d.iter()) {
            // A name not in the dict gets the runtime's answer (its error).
            let i = match index.get_item(&k)? {
                Some(i) => i.extract::<usize>()?,
                None => self.ready(|g| Ok(g.input_index(&k.cast_into::<PyString>().map_err(PyErr::from)?.to_cow()?)?))?,
            };
            indices.push(i);
            objs.push(v);
        }
        let names: SmallVec<[&str; 8]> = indices.iter().map(|&i| known.names[i].as_str()).collect();
        let mut cx = ArgContext::new(stream.as_ref().map(|s| s.handle()));
        let mut converted: SmallVec<[PyArg; 8]> = SmallVec::new();
        args_from_py(objs.iter().cloned().enumerate(), &mut cx, |i, e| at_input(e, i, names[i]), &mut converted)?;
        let args: SmallVec<[(usize, Arg<'_>); 8]> = indices.iter().copied().zip(converted.iter().map(PyArg::as_arg)).collect();
        // The objects the graph reads from now on, bound under the graph's lock with the
        // replay that binds them (two threads replaying cannot leave them crossed): an
        // array's object, or for an array imported by DLPack the capsule, which owns its
        // memory while the graph may read it (not only until this replay is done).
        let bound: SmallVec<[(usize, Py<PyAny>); 8]> = indices
            .iter()
            .zip(&objs)
            .zip(&converted)
            .filter_map(|((&i, o), a)| match a {
                PyArg::Dlpack { holder, .. } => Some((i, holder.clone_ref(py))),
                a => a.view().map(|_| (i, o.clone().unbind())),
            })
            .collect();
        let (replayed, ctx, replaced, same) = py.detach(|| {
            self.ready(|g| {
                let before = g.bindings();
                let replayed = g.replay_inputs(&args, stream.as_deref(), true);
                // A replay that raised after binding its arguments leaves the graph reading
                // them: they are held as after one that succeeded. (An object bound again
                // is still held: its extra reference goes now.)
                let (mut replaced, mut same) = (Objects::new(), Objects::new());
                if g.bindings() != before {
                    let mut held = lock(&self.held);
                    for (i, obj) in bound {
                        if held.len() <= i {
                            held.resize_with(i + 1, || None);
                        }
                        match &held[i] {
                            Some(old) if old.is(&obj) => same.push(obj),
                            _ => replaced.extend(held[i].replace(obj)),
                        }
                    }
                }
                Ok((replayed?, g.context().clone(), replaced, same))
            })
        })?;
        drop((args, same));
        // The objects a rebinding replaced may still be read by an earlier replay, on any
        // stream: they go once this replay's work is done, which CUDA orders after every
        // earlier launch of the graph (inside another capture: with that capture's graph).
        let mut kept = cx.take_kept();
        kept.extend(replaced);
        if replayed.child {
            // The child-graph node added to that capture reads what is bound now, whatever
            // later replays bind: it keeps those objects for its graph's life (the captured
            // launches' arguments it keeps already, with the copy of this graph).
            kept.extend(lock(&self.held).iter().flatten().map(|o| o.clone_ref(py)));
        }
        release_after(&ctx, replayed.stream, converted.drain(..), kept)
    }

    /// The input names, in the order they were named.
    #[getter]
    fn inputs(&self) -> Vec<String> {
        match &*lock(&self.state) {
            State::Ready(g) => g.inputs().map(String::from).collect(),
            _ => Vec::new(),
        }
    }

    /// The kernels captured, in launch order.
    #[getter]
    fn kernels(&self) -> Vec<&'static str> {
        match &*lock(&self.state) {
            State::Ready(g) => g.kernels().collect(),
            _ => Vec::new(),
        }
    }

    /// The graph's node count: kernels, and whatever else was captured.
    #[getter]
    fn node_count(&self) -> usize {
        match &*lock(&self.state) {
            State::Ready(g) => g.node_count(),
            _ => 0,
        }
    }

    fn __repr__(&self) -> String {
        match &*lock(&self.state) {
            State::New => "caijit.Graph(not captured yet)".into(),
            State::Capturing(_) => "caijit.Graph(capturing)".into(),
            State::Ready(g) => {
                format!("caijit.Graph(kernels={:?}, inputs={:?})", g.kernels().collect::<Vec<_>>(), g.inputs().collect::<Vec<_>>())
            }
            State::Discarded(why) => format!("caijit.Graph(discarded: {why})"),
        }
    }
}

/// A replay's conversion error for the object at `index` of the call, which is input `name`:
/// named by the input, as the replay's own checks name it (its position in the call means
/// nothing for a keyword).
fn at_input(e: PyCaiError, index: usize, name: &str) -> PyCaiError {
    match e.at_argument(index, Some(name), None) {
        PyCaiError::Cai(cai_runtime::Error::Argument(mut a)) => {
            let what = a.message.strip_prefix(&format!("argument {index}: ")).unwrap_or(&a.message);
            a.message = format!("graph input `{name}`: {what}");
            PyCaiError::Cai(cai_runtime::Error::Argument(a))
        }
        PyCaiError::Cai(cai_runtime::Error::InterfaceAt(mut a)) => {
            a.label = Some(format!("graph input `{name}`"));
            PyCaiError::Cai(cai_runtime::Error::InterfaceAt(a))
        }
        other => other,
    }
}

/// `caijit.graph(device=0)`: a new graph to capture with `with`.
#[pyfunction]
#[pyo3(signature = (device = 0))]
pub fn graph(device: usize) -> Graph {
    Graph::new(device)
}
