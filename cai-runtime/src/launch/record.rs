//! What a capture records: the inputs named for it, and for each caijit launch captured into
//! it, the kernel node it became, its parameter bytes and which of them each input fills.
//!
//! Launches find the recording of their capture by the capture's id ([`note_launch`]); a
//! process with no caijit capture running pays one relaxed atomic load per launch.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use super::{Arg, LaunchConfig, NamedScalar};
use crate::cai::ArrayView;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::params::ParamBuffer;
use crate::runtime::{Context, Events};
use crate::signature::ParamLayout;
use crate::sync::lock;
use crate::sys::{Driver, RawFunction, RawNode, RawStream};

/// An input named at capture: rebound by its name at each replay.
#[derive(Debug)]
pub(crate) struct Input {
    pub name: String,
    pub kind: InputKind,
}

#[derive(Debug)]
pub(crate) enum InputKind {
    /// An array, as captured: a replay's array must have its dtype and shape (the captured
    /// grids were made for them), and its strides where a slot needs them.
    Array(ArrayView),
    /// A scalar (its value lives in the parameter bytes it fills).
    Scalar,
}

/// Where an input's value goes: parameter `param` of captured launch `launch`.
#[derive(Clone, Debug)]
pub(crate) struct Slot {
    pub launch: usize,
    pub param: usize,
    pub view: SlotView,
}

/// How an array input fills its slot.
#[derive(Clone, Debug)]
pub(crate) enum SlotView {
    /// The input itself (or a scalar input).
    Whole,
    /// A view inside the input: `offset` bytes from its pointer, with these extents and
    /// strides (which a replay's array must then share with the captured one).
    Inside { offset: i128, shape: Vec<usize>, strides: Vec<i64> },
}

/// One captured launch.
#[derive(Clone)]
pub(crate) struct Launch {
    pub node: RawNode,
    pub func: RawFunction,
    pub name: &'static str,
    pub cfg: LaunchConfig,
    pub params: Arc<[ParamLayout]>,
    pub alignment: Arc<[usize]>,
    /// The bytes the node launches with now.
    pub buf: ParamBuffer,
}

/// A capture's recording.
pub(crate) struct Recording {
    pub id: u64,
    /// The address ranges of the arrays captured launches were given: an input named later
    /// must not overlap them (those launches could not be rebound).
    pub seen: Vec<Range<u128>>,
    pub inputs: Vec<Input>,
    pub slots: Vec<(usize, Slot)>,
    pub launches: Vec<Launch>,
    /// Events recorded on producer streams outside the capture when a captured launch read
    /// their arrays: the first replay waits for them.
    pub before_first: Events,
    /// The first error a captured launch met after it was enqueued: the capture fails with it.
    pub failed: Option<String>,
}

impl Recording {
    /// The recording of capture `id`, empty.
    pub fn new(id: u64) -> Recording {
        Recording {
            id,
            seen: Vec::new(),
            inputs: Vec::new(),
            slots: Vec::new(),
            launches: Vec::new(),
            before_first: Events::new(),
            failed: None,
        }
    }

    /// The input named `name`.
    pub fn input(&self, name: &str) -> Option<usize> {
        self.inputs.iter().position(|i| i.name == name)
    }

    /// Name `view` input `name`. Inputs do not overlap (a rebinding of one would leave
    /// the other where it was).
    pub fn add_array(&mut self, name: &str, view: &ArrayView) -> Result<()> {
        self.check_new(name)?;
        if view.is_empty() {
            return Err(Error::argument(format!("graph input `{name}` is an empty array: there is nothing to rebind")));
        }
        let range = view.address_range();
        if self.seen.iter().any(|s| overlap(&range, s)) {
            return Err(Error::argument(format!(
                "graph input `{name}` was given to a launch already captured: name inputs before the launches that use them"
            )));
        }
        for i in &self.inputs {
            if let InputKind::Array(v) = &i.kind {
                if overlap(&range, &v.address_range()) {
                    return Err(Error::argument(format!(
                        "graph input `{name}` overlaps graph input `{}`: name one array once and pass it where both are used",
                        i.name
                    )));
                }
            }
        }
        self.inputs.push(Input { name: name.into(), kind: InputKind::Array(view.clone().with_stream(None)) });
        Ok(())
    }

    pub fn add_scalar(&mut self, name: &str) -> Result<()> {
        self.check_new(name)?;
        self.inputs.push(Input { name: name.into(), kind: InputKind::Scalar });
        Ok(())
    }

    fn check_new(&self, name: &str) -> Result<()> {
        if name.is_empty() || !name.chars().all(|c| c == '_' || c.is_alphanumeric()) || name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(Error::argument(format!("graph input name {name:?} is not an identifier (it is passed by keyword at replay)")));
        }
        if self.input(name).is_some() {
            return Err(Error::argument(format!("graph input `{name}` is named twice")));
        }
        Ok(())
    }

    /// Which inputs fill which parameters of launch `launch` made with `args`: a named
    /// scalar by its name, an array by being an input or a view inside one. An array that
    /// overlaps an input without lying inside it is refused (a rebinding could not follow it).
    fn bind(&mut self, launch: usize, params: &[ParamLayout], args: &[Arg<'_>]) -> Result<()> {
        for (param, a) in args.iter().enumerate() {
            let at = |what: String| crate::params::param_error(&params[param], what);
            match *a {
                Arg::ScalarInput(s) => {
                    let found = self.input(&s.name).filter(|&i| s.capture == self.id && matches!(self.inputs[i].kind, InputKind::Scalar));
                    let Some(i) = found else {
                        return Err(at(format!("`{}` is not a scalar input of the graph being captured", s.name)));
                    };
                    self.slots.push((i, Slot { launch, param, view: SlotView::Whole }));
                }
                Arg::Array(v) | Arg::ArrayOn(v, _) if !v.is_empty() => {
                    let range = v.address_range();
                    self.seen.push(range.clone());
                    for (i, input) in self.inputs.iter().enumerate() {
                        let InputKind::Array(whole) = &input.kind else { continue };
                        let outer = whole.address_range();
                        if !overlap(&range, &outer) {
                            continue;
                        }
                        let view = if same_view(v, whole) {
                            SlotView::Whole
                        } else if outer.start <= range.start && range.end <= outer.end && v.dtype() == whole.dtype() {
                            let offset = i128::from(v.ptr()) - i128::from(whole.ptr());
                            SlotView::Inside { offset, shape: v.shape().to_vec(), strides: v.strides().to_vec() }
                        } else {
                            return Err(at(format!(
                                "the array overlaps graph input `{}` without lying inside it (or with another dtype): pass the input itself or a view inside it, or name this array as an input",
                                input.name
                            )));
                        };
                        self.slots.push((i, Slot { launch, param, view }));
                        break;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Another caijit graph was replayed on `stream` (one child-graph node, a copy of it bound
/// as now), reading the arrays of address ranges `reads`, with `scalar_inputs` the scalar
/// inputs of captures it was given. If that stream is being captured by a caijit graph, the
/// copy cannot follow a rebinding of that graph: none of its inputs may be among what the
/// copy reads, and an input named later must not overlap it either (as for a launch's
/// arrays).
pub(crate) fn note_child(d: &Driver, stream: RawStream, reads: &[Range<u128>], scalar_inputs: &[&NamedScalar]) -> Result<()> {
    if ACTIVE.load(Relaxed) == 0 {
        return Ok(());
    }
    let info = d.capture_info(stream)?;
    let Some(r) = info.active.then(|| recording(info.id)).flatten() else { return Ok(()) };
    let mut r = lock(&r);
    let copied = "the replay is added to the capture as a copy of that graph, which a rebinding of this one could not follow";
    if let Some(s) = scalar_inputs.iter().find(|s| s.capture == r.id) {
        return Err(Error::argument(format!(
            "scalar input `{}` of the graph being captured is given to a replay of another graph: {copied}",
            s.name
        )));
    }
    for input in &r.inputs {
        let InputKind::Array(v) = &input.kind else { continue };
        if reads.iter().any(|read| overlap(read, &v.address_range())) {
            return Err(Error::argument(format!(
                "graph input `{}` of the graph being captured is read by a replay of another graph: {copied}; pass that graph arrays of its own",
                input.name
            )));
        }
    }
    r.seen.extend_from_slice(reads);
    Ok(())
}

/// Whether two address ranges share a byte.
pub(crate) fn overlap(a: &Range<u128>, b: &Range<u128>) -> bool {
    a.start < b.end && b.start < a.end
}

/// Two views of the same elements with the same layout.
pub(crate) fn same_view(a: &ArrayView, b: &ArrayView) -> bool {
    a.ptr() == b.ptr() && a.dtype() == b.dtype() && a.shape() == b.shape() && a.strides() == b.strides()
}

/// Recordings of the captures running now, by capture id (few: a linear scan), each with
/// the flag its thread reads.
type Registered = (u64, Arc<Mutex<Recording>>, Arc<AtomicBool>);
static RECORDINGS: Mutex<Vec<Registered>> = Mutex::new(Vec::new());
/// How many there are: a launch looks for its capture's recording only when there is one.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The capture this thread runs a caijit graph on: its stream (that of launches naming
    /// none), its id, and whether it is still registered (a capture ended or dropped
    /// elsewhere clears it).
    static CAPTURING: std::cell::RefCell<Option<(RawStream, u64, Arc<AtomicBool>)>> = const { std::cell::RefCell::new(None) };
}

/// Register `r`, captured on `stream` by this thread; `alive` is cleared by [`unregister`].
pub(crate) fn register(r: Arc<Mutex<Recording>>, stream: RawStream, alive: Arc<AtomicBool>) {
    let id = lock(&r).id;
    lock(&RECORDINGS).push((id, r, alive.clone()));
    ACTIVE.fetch_add(1, Relaxed);
    CAPTURING.set(Some((stream, id, alive)));
}

/// Forget capture `id` (from any thread); its thread's launches no longer go to it.
pub(crate) fn unregister(id: u64) {
    let mut all = lock(&RECORDINGS);
    if let Some(at) = all.iter().position(|(c, ..)| *c == id) {
        let (_, _, alive) = all.swap_remove(at);
        alive.store(false, Relaxed);
        ACTIVE.fetch_sub(1, Relaxed);
    }
    CAPTURING.with_borrow_mut(|c| {
        if c.as_ref().is_some_and(|(_, c, _)| *c == id) {
            *c = None;
        }
    });
}

fn recording(id: u64) -> Option<Arc<Mutex<Recording>>> {
    lock(&RECORDINGS).iter().find(|(c, ..)| *c == id).map(|(_, r, _)| r.clone())
}

/// Whether any thread is capturing a caijit graph now.
#[inline]
pub(crate) fn any_capture() -> bool {
    ACTIVE.load(Relaxed) != 0
}

/// The stream this thread is capturing a caijit graph on, if it is.
#[inline]
pub(crate) fn thread_capture() -> Option<(RawStream, u64)> {
    if ACTIVE.load(Relaxed) == 0 {
        return None;
    }
    CAPTURING.with_borrow(|c| c.as_ref().filter(|(_, _, alive)| alive.load(Relaxed)).map(|&(s, id, _)| (s, id)))
}

/// Refuse a launch stream outside the caijit capture this thread runs (its work would run
/// now, not at replay).
#[inline]
pub(crate) fn check_launch_stream(d: &Driver, launch: RawStream) -> Result<()> {
    let Some((stream, id)) = thread_capture() else { return Ok(()) };
    if launch == stream || (launch != RawStream::from_cai(1) && d.capture_id(launch)? == id) {
        return Ok(());
    }
    Err(Error::argument(
        "inside a caijit graph capture, launch on the graph's stream (give no stream) or a stream forked from it: work on another stream would run now, not when the graph is replayed",
    ))
}

/// A captured launch left out an edge to `producer`, a stream outside its capture `id`:
/// if that is a caijit capture, the graph's first replay waits for what `producer` has
/// enqueued by now.
pub(crate) fn producer_outside(ctx: &Context, d: &Driver, id: u64, producer: RawStream) -> Result<()> {
    if ACTIVE.load(Relaxed) == 0 {
        return Ok(());
    }
    let Some(r) = recording(id) else { return Ok(()) };
    let mut events = Events::new();
    ctx.take_events(1, &mut events)?;
    if let Err(e) = d.event_record(events[0], producer) {
        ctx.return_events(&mut events);
        return Err(e.into());
    }
    lock(&r).before_first.extend(events);
    Ok(())
}

/// After `k` was launched with `cfg`, `buf` (its parameter bytes) and `args` on `stream`:
/// if that stream is being captured by a caijit graph, record the kernel node it became.
#[inline]
pub(crate) fn note_launch(
    d: &Driver,
    stream: RawStream,
    k: &Kernel,
    cfg: &LaunchConfig,
    buf: &ParamBuffer,
    args: &[Arg<'_>],
) -> Result<()> {
    if ACTIVE.load(Relaxed) == 0 {
        return Ok(());
    }
    note_captured(d, stream, k, cfg, buf, args)
}

#[cold]
fn note_captured(d: &Driver, stream: RawStream, k: &Kernel, cfg: &LaunchConfig, buf: &ParamBuffer, args: &[Arg<'_>]) -> Result<()> {
    if stream == RawStream::from_cai(1) {
        return Ok(());
    }
    let info = match d.capture_info(stream) {
        Ok(info) => info,
        // A capture the driver cannot describe (another library's, with programmatic
        // edges, say) is left alone; this thread's own caijit capture is not.
        Err(e) => return if thread_capture().is_some_and(|(s, _)| s == stream) { Err(e.into()) } else { Ok(()) },
    };
    let Some(r) = info.active.then(|| recording(info.id)).flatten() else { return Ok(()) };
    let mut r = lock(&r);
    let result = (|| -> Result<()> {
        let node = info.last_node().ok_or_else(|| Error::launch("the captured launch did not end its stream's capture in one node"))?;
        let launch = r.launches.len();
        r.bind(launch, &k.info.params, args)?;
        r.launches.push(Launch {
            node,
            func: k.raw,
            name: k.instance(),
            cfg: *cfg,
            params: k.info.params.clone().into(),
            alignment: k.pointee_alignment.clone().into(),
            buf: buf.clone(),
        });
        Ok(())
    })();
    if let Err(e) = &result {
        r.failed.get_or_insert_with(|| e.to_string());
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cai::DType;
    use crate::signature::ParamKind;

    fn recording() -> Recording {
        Recording::new(1)
    }

    fn named(name: &str, capture: u64, value: crate::launch::Num) -> crate::launch::NamedScalar {
        crate::launch::NamedScalar { name: name.into(), capture, value, dtype: None }
    }

    fn params(n: usize) -> Vec<ParamLayout> {
        (0..n)
            .map(|index| ParamLayout {
                index,
                name: Some(format!("p{index}")),
                cpp_type: "float*".into(),
                kind: ParamKind::Pointer { dtype: Some(DType::F32), is_const: false },
                size: 8,
                align: 8,
                offset: 8 * index,
            })
            .collect()
    }

    #[test]
    fn inputs_are_identifiers_named_once_and_never_overlap() {
        let mut r = recording();
        let x = ArrayView::contiguous(0x1000, &[64], DType::F32, false).unwrap();
        r.add_array("x", &x).unwrap();
        r.add_scalar("alpha").unwrap();
        assert!(r.add_scalar("alpha").unwrap_err().to_string().contains("named twice"));
        assert!(r.add_scalar("2x").unwrap_err().to_string().contains("not an identifier"));
        assert!(r.add_scalar("").is_err());
        let inside = ArrayView::contiguous(0x1000 + 128, &[4], DType::F32, false).unwrap();
        let e = r.add_array("y", &inside).unwrap_err().to_string();
        assert!(e.contains("overlaps graph input `x`"), "{e}");
        let after = ArrayView::contiguous(0x1000 + 256, &[4], DType::F32, false).unwrap();
        r.add_array("y", &after).unwrap();
    }

    #[test]
    fn arrays_bind_as_the_input_or_a_view_inside_it_and_scalars_by_name() {
        let mut r = recording();
        let x = ArrayView::contiguous(0x1000, &[8, 8], DType::F32, false).unwrap();
        r.add_array("x", &x).unwrap();
        r.add_scalar("a").unwrap();
        let row = ArrayView::new(0x1000 + 32, &[8], Some(&[4]), DType::F32, false, None).unwrap();
        let column = ArrayView::new(0x1000 + 4, &[8], Some(&[32]), DType::F32, false, None).unwrap();
        let other = ArrayView::contiguous(0x9000, &[8], DType::F32, false).unwrap();
        let a = Arg::ScalarInput(&named("a", 1, crate::launch::Num::Float(1.0)));
        let args = [Arg::Array(&x), Arg::ArrayOn(&row, 0), Arg::Array(&column), Arg::Array(&other), a];
        r.bind(3, &params(5), &args).unwrap();
        let slots: Vec<(usize, usize, usize, bool)> =
            r.slots.iter().map(|(i, s)| (*i, s.launch, s.param, matches!(s.view, SlotView::Whole))).collect();
        assert_eq!(slots, [(0, 3, 0, true), (0, 3, 1, false), (0, 3, 2, false), (1, 3, 4, true)]);
        match &r.slots[2].1.view {
            SlotView::Inside { offset, shape, strides } => assert_eq!((*offset, &shape[..], &strides[..]), (4, &[8][..], &[32][..])),
            SlotView::Whole => unreachable!(),
        }
    }

    #[test]
    fn what_a_rebinding_could_not_follow_is_refused() {
        let mut r = recording();
        let x = ArrayView::contiguous(0x1000, &[8], DType::F32, false).unwrap();
        r.add_array("x", &x).unwrap();
        let past_the_end = ArrayView::contiguous(0x1000 + 4, &[8], DType::F32, false).unwrap();
        let e = r.bind(0, &params(1), &[Arg::Array(&past_the_end)]).unwrap_err().to_string();
        assert!(e.contains("argument 0 `p0`") && e.contains("overlaps graph input `x` without lying inside it"), "{e}");
        let as_ints = ArrayView::contiguous(0x1000, &[8], DType::I32, false).unwrap();
        assert!(r.bind(0, &params(1), &[Arg::Array(&as_ints)]).is_err());
        let unknown = Arg::ScalarInput(&named("b", 1, crate::launch::Num::Int(1)));
        let e = r.bind(0, &params(1), &[unknown]).unwrap_err().to_string();
        assert!(e.contains("`b` is not a scalar input"), "{e}");
        let e = r.bind(0, &params(1), &[Arg::ScalarInput(&named("x", 1, crate::launch::Num::Int(1)))]);
        assert!(e.is_err(), "an array input's name given to a scalar");
        r.add_scalar("s").unwrap();
        let elsewhere = Arg::ScalarInput(&named("s", 2, crate::launch::Num::Int(1)));
        assert!(r.bind(0, &params(1), &[elsewhere]).is_err(), "a scalar input of another capture");
        // An array a launch was given before it is named cannot become an input.
        let early = ArrayView::contiguous(0x8000, &[8], DType::F32, false).unwrap();
        r.bind(1, &params(1), &[Arg::Array(&early)]).unwrap();
        let e = r.add_array("early", &early).unwrap_err().to_string();
        assert!(e.contains("name inputs before the launches that use them"), "{e}");
        let empty = ArrayView::contiguous(0x9000, &[0], DType::F32, false).unwrap();
        assert!(r.add_array("empty", &empty).unwrap_err().to_string().contains("empty array"));
    }
}
