//! One op call, whatever the op: its operands, its `out` (given, or allocated), the stream
//! it runs on (decided once), the strided-input policy of its registry entry, and the
//! temporaries it frees, stream-ordered, when it returns.

use std::cell::Cell;
use std::sync::{Arc, OnceLock};

use smallvec::SmallVec;

use super::kernels::{self, OpStream};
use super::registry::OpSpec;
use super::rules::{copies, Planned};
use crate::array::DeviceArray;
use crate::cai::ArrayView;
use crate::error::Result;
use crate::launch::launch_stream;
use crate::runtime::{Context, Stream};

/// An input array of an op: a view, and the stream that owns its memory's order when the
/// caller has it (a [`DeviceArray`]'s), which a result may then live on.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    view: &'a ArrayView,
    home: Option<&'a Arc<Stream>>,
}

impl<'a> Operand<'a> {
    /// `view`, a view of `array`'s memory (a slice, a transpose): a result may live on the
    /// array's stream, which it keeps, when the call runs there.
    pub fn of_array(view: &'a ArrayView, array: &'a DeviceArray) -> Self {
        Operand { view, home: Some(array.stream()) }
    }

    pub fn view(&self) -> &'a ArrayView {
        self.view
    }
}

impl<'a> From<&'a ArrayView> for Operand<'a> {
    fn from(view: &'a ArrayView) -> Self {
        Operand { view, home: None }
    }
}

impl<'a> From<&'a DeviceArray> for Operand<'a> {
    fn from(a: &'a DeviceArray) -> Self {
        Operand { view: a.as_view(), home: Some(a.stream()) }
    }
}

/// Where an op writes: into a new array, or into one the caller gives (`out=`).
#[derive(Clone, Copy, Debug)]
pub enum Out<'a> {
    /// A new C-ordered [`DeviceArray`] of the op's result shape and NumPy's result dtype, on
    /// the call's device, allocated stream-ordered on the stream the op runs on when caijit
    /// can keep that stream as long as the array lives (the stream asked for, a default
    /// stream, or the stream of a [`DeviceArray`] operand); on the legacy default stream
    /// when the op runs on a stream only an operand's view names (a producer's handle,
    /// valid for the call only).
    Alloc,
    /// The given array, of the result's shape and dtype (checked, never reinterpreted;
    /// reductions convert into any real dtype). Any strides: a strided one is written
    /// through a C-ordered temporary, unless two of its elements share memory (refused).
    Into(&'a ArrayView),
}

/// What an op may be given as its `out`, and what it then returns: [`Alloc`] returns the
/// new array, an array (`&ArrayView`, `&DeviceArray`) returns `()`, and [`Out`], chosen at
/// run time, returns `Some(new array)` for [`Out::Alloc`].
pub trait OutArg<'a> {
    type Output;
    fn out(self) -> Out<'a>;
    /// The op's result: `Some` exactly when [`OutArg::out`] was [`Out::Alloc`].
    fn finish(result: Option<DeviceArray>) -> Self::Output;
}

/// `out` for a new array: `ops::add(ctx, &a, &b, Alloc, None)?` is a [`DeviceArray`].
#[derive(Clone, Copy, Debug)]
pub struct Alloc;

impl<'a> OutArg<'a> for Alloc {
    type Output = DeviceArray;
    fn out(self) -> Out<'a> {
        Out::Alloc
    }
    fn finish(result: Option<DeviceArray>) -> DeviceArray {
        result.expect("Out::Alloc allocates the result")
    }
}

impl<'a> OutArg<'a> for Out<'a> {
    type Output = Option<DeviceArray>;
    fn out(self) -> Out<'a> {
        self
    }
    fn finish(result: Option<DeviceArray>) -> Option<DeviceArray> {
        result
    }
}

impl<'a> OutArg<'a> for &'a ArrayView {
    type Output = ();
    fn out(self) -> Out<'a> {
        Out::Into(self)
    }
    fn finish(_: Option<DeviceArray>) {}
}

impl<'a> OutArg<'a> for &'a DeviceArray {
    type Output = ();
    fn out(self) -> Out<'a> {
        Out::Into(self.as_view())
    }
    fn finish(_: Option<DeviceArray>) {}
}

/// Op calls on one context, on `stream` or (`None`) the stream caijit's protocol picks from
/// the arrays. Each op is a method ([`Call::binary`], ...; the free functions of
/// [`ops`](super) make a `Call` and call one); [`Call::stream`] then says which stream the
/// call enqueued on, for what must outlive its work (the Python binding's DLPack capsules).
pub struct Call<'c> {
    pub(crate) ctx: &'c Arc<Context>,
    pub(crate) requested: Option<&'c Arc<Stream>>,
    launched: Cell<Option<u64>>,
}

impl<'c> Call<'c> {
    pub fn new(ctx: &'c Arc<Context>, stream: Option<&'c Arc<Stream>>) -> Call<'c> {
        Call { ctx, requested: stream, launched: Cell::new(None) }
    }

    /// The stream (CAI value) the last op call ran on, once it had decided it (also when it
    /// failed after: an op of several kernels may have enqueued some); `None` when it failed
    /// before enqueueing anything.
    pub fn stream(&self) -> Option<u64> {
        self.launched.get()
    }

    /// Record the stream of the op call under way (`None` until it decides one).
    pub(crate) fn launched_on(&self, on: Option<u64>) {
        self.launched.set(on);
    }

    /// The op call: `spec`'s strided-input policy on `inputs`, `plan` (the checks, result
    /// shape and dtype) once, `out` checked against it or allocated, then `launch` on the
    /// inputs (C-ordered copies of the strided ones where the policy says so) and a
    /// C-ordered output (a strided `out` is scattered into from a temporary after).
    /// Nothing is launched for an empty result. Returns the new array of [`Out::Alloc`].
    pub(crate) fn run(
        &self,
        spec: OpSpec,
        inputs: &[Operand<'_>],
        out: Out<'_>,
        plan: impl FnOnce(&[&ArrayView]) -> Result<Planned>,
        launch: impl FnOnce(&OpStream<'_>, &[&ArrayView], &ArrayView) -> Result<()>,
    ) -> Result<Option<DeviceArray>> {
        self.launched_on(None);
        let what = spec.name;
        let views: SmallVec<[&ArrayView; 3]> = inputs.iter().map(|o| o.view).collect();
        let copy: SmallVec<[bool; 3]> = views.iter().map(|v| copies(spec.strided, what, v)).collect::<Result<_>>()?;
        let planned = plan(&views)?;
        let given = match out {
            Out::Into(o) => {
                planned.check_out(what, o)?;
                Some(o)
            }
            Out::Alloc => None,
        };
        let on = launch_stream(views.iter().copied().chain(given), self.requested.map(|s| &**s));
        self.launched_on(Some(on));
        let (stream, home) = streams(on, self.requested, inputs.iter().filter_map(|o| o.home))?;
        let mut result = None;
        let out = match given {
            Some(o) => o,
            // Written on `stream`, which a graph may be capturing.
            None => result.insert(DeviceArray::empty_written_on(self.ctx, &planned.shape, planned.dtype, &home, &stream)?).as_view(),
        };
        if out.is_empty() {
            return Ok(result);
        }
        let l = OpStream { ctx: self.ctx, stream: &stream };
        // The C-ordered copies the policy asks for, freed on `stream` after the op when this
        // function returns.
        let mut temps: SmallVec<[Option<DeviceArray>; 3]> = SmallVec::new();
        for (v, &copy) in views.iter().zip(&copy) {
            temps.push(match copy {
                true => {
                    let temp = DeviceArray::empty(self.ctx, v.shape(), v.dtype(), &stream)?;
                    kernels::ascontiguous(&l, v, temp.as_view())?;
                    Some(temp)
                }
                false => None,
            });
        }
        let read: SmallVec<[&ArrayView; 3]> = views.iter().zip(&temps).map(|(v, t)| t.as_ref().map_or(*v, DeviceArray::as_view)).collect();
        // An `out` that shares memory with what the kernels read (other than an elementwise
        // op's exact in-place write) is written after them, from a temporary.
        let clobbered = read.iter().any(|v| super::rules::clobbers(out, v, spec.in_place));
        if out.is_c_contiguous() && !clobbered {
            launch(&l, &read, out)?;
        } else {
            // The kernels write C order, and nothing they read: into a temporary, then
            // scattered into `out`.
            let temp = DeviceArray::empty(self.ctx, out.shape(), out.dtype(), &stream)?;
            launch(&l, &read, temp.as_view())?;
            kernels::scatter(&l, temp.as_view(), out)?;
        }
        Ok(result)
    }
}

/// The streams of an op call that runs on `on` (the launch stream's CAI value): the one it
/// launches on, and the one a new result lives on. A result keeps its stream as long as it
/// lives, so it lives on `on` only when that stream is one caijit can keep: the caller's
/// `explicit` stream, a default stream, or the stream of an input caijit owns (`homes`); a
/// producer's stream handle, valid only for the call, gets the result on the legacy default
/// stream instead (the launch then orders itself after its allocation, as after any array).
fn streams<'h>(
    on: u64,
    explicit: Option<&Arc<Stream>>,
    mut homes: impl Iterator<Item = &'h Arc<Stream>>,
) -> Result<(Arc<Stream>, Arc<Stream>)> {
    static DEFAULTS: OnceLock<[Arc<Stream>; 2]> = OnceLock::new();
    let [legacy, per_thread] = DEFAULTS.get_or_init(|| [Arc::new(Stream::legacy()), Arc::new(Stream::per_thread())]);
    let kept = match (explicit, on) {
        (Some(s), _) => Some(s.clone()),
        (None, 1) => Some(legacy.clone()),
        (None, 2) => Some(per_thread.clone()),
        (None, _) => homes.find(|h| h.handle() == on).cloned(),
    };
    Ok(match kept {
        Some(s) => (s.clone(), s),
        None => (Arc::new(Stream::borrowed(on)?), legacy.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_live_on_the_launch_stream_when_caijit_can_keep_it() {
        let mine = Arc::new(Stream::borrowed(0x5000).unwrap());
        // The caller's stream: launch and result.
        let (l, r) = streams(0x5000, Some(&mine), std::iter::empty()).unwrap();
        assert!(Arc::ptr_eq(&l, &mine) && Arc::ptr_eq(&r, &mine));
        // Default streams.
        for on in [1, 2] {
            let (l, r) = streams(on, None, std::iter::empty()).unwrap();
            assert_eq!((l.handle(), r.handle()), (on, on));
        }
        // The stream of an input caijit owns.
        let (l, r) = streams(0x5000, None, [&mine].into_iter()).unwrap();
        assert!(Arc::ptr_eq(&l, &mine) && Arc::ptr_eq(&r, &mine));
        // A producer's stream: launched on, but the result lives on the legacy stream.
        let (l, r) = streams(0x7000, None, [&mine].into_iter()).unwrap();
        assert_eq!((l.handle(), r.handle()), (0x7000, 1));
    }
}
