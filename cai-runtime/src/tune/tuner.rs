//! The tuner: per tuning key, the winner remembered, else read from the disk, else
//! measured; and the launch of the winner.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use smallvec::SmallVec;

use super::candidate::Candidate;
use super::choice::{choose, Trial};
use super::measure;
use super::store::{self, Record};
use crate::dispatch::{launch_device, Dispatcher};
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::launch::Arg;
use crate::runtime::{Context, Stream};
use crate::stats::{bump, COUNTERS};
use crate::sync::lock;

/// A tuning's result, for one key.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuned {
    pub record: Record,
    /// Where it came from.
    pub source: Source,
}

/// Where a tuning's result came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Timed by this process.
    Measured,
    /// Read from the disk cache (another process, or an earlier run, timed it).
    Disk,
    /// Shipped in a loaded bundle.
    Bundle,
    /// Tuning is off (`CAIJIT_AUTOTUNE=0`): the first candidate, untimed.
    Off,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Disk => "disk",
            Source::Bundle => "bundle",
            Source::Off => "off",
        }
    }
}

/// The keys a result is stored under: on disk (`disk`: the NVRTC build and driver
/// included) and in bundles (`shipped`: without them, so that a process without NVRTC finds
/// it), and the kernel's program's family key.
struct Keys {
    disk: String,
    shipped: String,
    family: String,
    device: String,
}

impl Tuned {
    /// The winning candidate's position.
    pub fn best(&self) -> Option<usize> {
        self.record.best
    }

    /// The candidates, their times or why they failed, and the winner, as a table.
    pub fn table(&self) -> String {
        let mut out = format!("{:<3} {:<48} {:>12} {:>8}  \n", "", "candidate", "median µs", "spread");
        for (i, (c, t)) in self.record.candidates.iter().zip(&self.record.trials).enumerate() {
            let mark = if Some(i) == self.record.best { "*" } else { "" };
            let _ = match t {
                Trial::Timed(t) => writeln!(out, "{mark:<3} {c:<48} {:>12.3} {:>7.1}%", t.median_us, t.spread() * 100.0),
                Trial::Failed(why) => writeln!(out, "{mark:<3} {c:<48} {:>12} {:>8}  {why}", "failed", ""),
            };
        }
        out
    }
}

/// A result a tuner remembers, and what it is the result of.
#[derive(Debug)]
struct Remembered {
    device: usize,
    kernel: String,
    key: String,
    tuned: Arc<Tuned>,
}

/// Whether tuning is on (`CAIJIT_AUTOTUNE=0` turns it off), read once.
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("CAIJIT_AUTOTUNE").map_or(true, |v| v != "0"))
}

/// The tunings of one launcher: per tuning key, what was found (from memory after the
/// first time).
#[derive(Debug, Default)]
pub struct Tuner {
    /// By a hash of (device, kernel, key, candidates' labels): each remembered result with
    /// what it was tuned for.
    tuned: Mutex<HashMap<u64, Vec<Remembered>>>,
    /// Held while a key is tuned.
    tuning: Mutex<()>,
}

impl Tuner {
    pub fn new() -> Tuner {
        Tuner::default()
    }

    /// The tuning of `key` over `candidates` for a launch on `args`: remembered, else read
    /// from the disk, else measured (and written there). With tuning off, the first
    /// candidate, untimed. An error when the arguments do not fit the kernel (the launch's
    /// own `ArgumentError`), when no candidate could be launched (each one's reason in the
    /// message), or when tuning would run while a stream it uses is being captured.
    pub fn tuned(
        &self,
        d: &Dispatcher,
        key: &str,
        candidates: &[Candidate],
        args: &[Arg<'_>],
        stream: Option<&Stream>,
    ) -> Result<Arc<Tuned>> {
        let mut args: SmallVec<[Arg<'_>; 8]> = SmallVec::from_slice(args);
        let ctx = Context::new(launch_device(&mut args, stream)?)?;
        self.tuned_on(d, &ctx, key, candidates, &args, stream)
    }

    /// Launch the winner of `key`'s tuning (tuned first when needed) on `args`, on `stream`
    /// (or the stream the protocol picks). Returns the stream launched on (its CAI value).
    /// Once the key is known, a call is one lookup (no allocation) before the launch.
    pub fn launch(&self, d: &Dispatcher, key: &str, candidates: &[Candidate], args: &[Arg<'_>], stream: Option<&Stream>) -> Result<u64> {
        let mut args: SmallVec<[Arg<'_>; 8]> = SmallVec::from_slice(args);
        let ctx = Context::new(launch_device(&mut args, stream)?)?;
        let tuned = self.tuned_on(d, &ctx, key, candidates, &args, stream)?;
        let c = tuned
            .best()
            .and_then(|i| candidates.get(i))
            .ok_or_else(|| Error::argument(format!("autotune: the result of key {key:?} names no candidate")))?;
        measure::kernel(d, c, &ctx, &args)?.launch(&c.config, &args, stream, true)
    }

    /// The result remembered for `key` of kernel `d` on `ctx`'s device over these candidates.
    fn remembered(&self, hash: u64, ctx: &Context, d: &Dispatcher, key: &str, candidates: &[Candidate]) -> Option<Arc<Tuned>> {
        let labels = || candidates.iter().map(|c| &c.label);
        lock(&self.tuned)
            .get(&hash)?
            .iter()
            .find(|r| r.device == ctx.ordinal() && r.kernel == d.name() && r.key == key && r.tuned.record.candidates.iter().eq(labels()))
            .map(|r| r.tuned.clone())
    }

    /// [`Tuner::tuned`] on `ctx`'s device, the arguments' devices known.
    fn tuned_on(
        &self,
        d: &Dispatcher,
        ctx: &Arc<Context>,
        key: &str,
        candidates: &[Candidate],
        args: &[Arg<'_>],
        stream: Option<&Stream>,
    ) -> Result<Arc<Tuned>> {
        if candidates.is_empty() {
            return Err(Error::argument("autotune: no candidates"));
        }
        // (One tuner may serve several kernels and devices: each has its own results.)
        let hash = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (ctx.ordinal(), d.name(), key).hash(&mut h);
            candidates.iter().for_each(|c| c.label.hash(&mut h));
            h.finish()
        };
        if let Some(t) = self.remembered(hash, ctx, d, key, candidates) {
            return Ok(t);
        }
        // Threads of one tuner tune one key at a time (the second finds the first's result).
        let _tuning = lock(&self.tuning);
        if let Some(t) = self.remembered(hash, ctx, d, key, candidates) {
            return Ok(t);
        }
        let labels: Vec<String> = candidates.iter().map(|c| c.label.clone()).collect();
        let tuned = if !enabled() {
            let untimed = labels.iter().map(|_| Trial::Failed("not timed (CAIJIT_AUTOTUNE=0)".into())).collect();
            Tuned { record: Record { key: key.to_string(), candidates: labels, trials: untimed, best: Some(0) }, source: Source::Off }
        } else {
            self.read_or_measure(d, ctx, key, candidates, &labels, args, stream)?
        };
        if tuned.record.best.is_none() {
            return Err(Error::argument(format!(
                "autotune: no candidate of kernel `{}` could be launched for key {key:?}:\n{}",
                d.name(),
                tuned.table()
            )));
        }
        let tuned = Arc::new(tuned);
        let entry = Remembered { device: ctx.ordinal(), kernel: d.name().to_string(), key: key.to_string(), tuned: tuned.clone() };
        lock(&self.tuned).entry(hash).or_default().push(entry);
        Ok(tuned)
    }

    /// What a result is stored under: the format, the kernel's program (its family key: its
    /// source, options and headers' contents), its name, the device model, the tuning key and
    /// the candidates; on disk also the NVRTC build and driver that made and ran it. `None`
    /// for a program whose headers caijit cannot all name (its results stay in memory).
    fn keys(&self, d: &Dispatcher, ctx: &Context, key: &str, labels: &[String]) -> Option<Keys> {
        let family = crate::compile::family_key(d.program()).ok()?.ok()?;
        let nvrtc = crate::compile::toolkit().map(|t| t.build.clone()).unwrap_or_else(|_| "no NVRTC".into());
        let driver = crate::runtime::driver_version().unwrap_or(0);
        let (major, minor) = ctx.compute_capability();
        let device = format!("{} sm_{major}{minor}", ctx.name());
        // The tuning key and the labels quoted (a key may span lines): one line each.
        let labels: Vec<String> = labels.iter().map(|l| format!("{l:?}")).collect();
        let (head, tail) = (format!("{}\n{family}\n{}", store::FORMAT, d.name()), format!("{device}\n{key:?}\n{}", labels.join("\n")));
        Some(Keys { disk: format!("{head}\nnvrtc {nvrtc}, driver {driver}\n{tail}"), shipped: format!("{head}\n{tail}"), family, device })
    }

    /// The result the first loaded bundle that ships a usable one for `keys` has (one whose
    /// record cannot be used is passed over with a warning).
    fn shipped(keys: &Keys, labels: &[String]) -> Option<Record> {
        for b in crate::bundle::loaded().unwrap_or_default() {
            match b.tuning(&keys.shipped) {
                Ok(Some(t)) => match serde_json::from_value(t.record.clone()).ok().and_then(|r| store::usable(r, &keys.shipped, labels)) {
                    Some(r) => return Some(r),
                    None => eprintln!(
                        "caijit: warning: bundle {} ships a tuning of kernel {} it cannot use; looking further",
                        b.origin(),
                        t.kernel
                    ),
                },
                Ok(None) => {}
                Err(e) => eprintln!("caijit: warning: {e}; looking further"),
            }
        }
        None
    }

    /// Record `record` (of `key`, for kernel `d`) into the manifest, so that `bundle build`
    /// ships it with the program, and the winner's code with it (its instance compiled or
    /// loaded now, which records it).
    fn record_for_bundles(
        d: &Dispatcher,
        ctx: &Arc<Context>,
        key: &str,
        keys: &Keys,
        record: &Record,
        winner: &Candidate,
        args: &[Arg<'_>],
    ) {
        let Some((label, timing)) = record.winner() else { return };
        if measure::kernel(d, winner, ctx, args).is_err() {
            return;
        }
        let shipped = Record { key: keys.shipped.clone(), ..record.clone() };
        let Ok(record) = serde_json::to_value(&shipped) else { return };
        crate::compile::record_tuning(&crate::bundle::ShippedTuning {
            key: keys.shipped.clone(),
            family: keys.family.clone(),
            kernel: d.name().to_string(),
            device: keys.device.clone(),
            tuning_key: key.to_string(),
            winner: label.to_string(),
            median_us: timing.median_us,
            record,
        });
    }

    /// A loaded bundle's result, else the disk cache's, else one measured now (and written
    /// there); recorded into the manifest when recording.
    #[allow(clippy::too_many_arguments)]
    fn read_or_measure(
        &self,
        d: &Dispatcher,
        ctx: &Arc<Context>,
        key: &str,
        candidates: &[Candidate],
        labels: &[String],
        args: &[Arg<'_>],
        stream: Option<&Stream>,
    ) -> Result<Tuned> {
        let keys = self.keys(d, ctx, key, labels);
        let tuned = self.find_or_measure(d, ctx, key, keys.as_ref(), candidates, labels, args, stream)?;
        // Not a result timed with bounds checks (debug instances, waited for): it would
        // serve ordinary runs.
        let checked = crate::diag::flags() & crate::diag::BOUNDS != 0;
        let winner = tuned.best().and_then(|b| candidates.get(b));
        if let (Some(k), Some(w), Some(_), false) =
            (&keys, winner, crate::compile::recording(), checked && tuned.source == Source::Measured)
        {
            Tuner::record_for_bundles(d, ctx, key, k, &tuned.record, w, args);
        }
        Ok(tuned)
    }

    #[allow(clippy::too_many_arguments)]
    fn find_or_measure(
        &self,
        d: &Dispatcher,
        ctx: &Arc<Context>,
        key: &str,
        keys: Option<&Keys>,
        candidates: &[Candidate],
        labels: &[String],
        args: &[Arg<'_>],
        stream: Option<&Stream>,
    ) -> Result<Tuned> {
        // A bundle's result first: every process that loads the bundle launches the same.
        if let Some(record) = keys.and_then(|k| Tuner::shipped(k, labels)) {
            return Ok(Tuned { record, source: Source::Bundle });
        }
        // Results of a run with bounds checks (debug instances, waited for) are not kept on
        // disk: they would serve ordinary runs.
        let checked = crate::diag::flags() & crate::diag::BOUNDS != 0;
        let cache = if checked { None } else { crate::compile::DiskCache::from_env_trusted()? };
        let disk_key = cache.as_ref().and(keys).map(|k| k.disk.as_str());
        let path = cache.as_ref().zip(disk_key).map(|(c, k)| store::path(c.dir(), k));
        let stored = |p: &std::path::Path| store::read(p, disk_key.unwrap_or_default(), labels);
        if let Some(record) = path.as_deref().and_then(stored) {
            return Ok(Tuned { record, source: Source::Disk });
        }
        let measured = || -> Result<Tuned> {
            if let Some(record) = path.as_deref().and_then(stored) {
                return Ok(Tuned { record, source: Source::Disk }); // another process tuned it meanwhile
            }
            let mut streams = measure::array_streams(args);
            streams.extend(stream.map(Stream::handle));
            if let Some(s) = streams.into_iter().find(|&s| measure::capturing(s)) {
                return Err(Error::launch(format!(
                    "autotune: stream {s:#x} is being captured into a graph, and kernel `{}` has no tuning for this key yet: \
                     tune before the capture (or load the results), so that the capture stays valid",
                    d.name()
                )));
            }
            let mut record = self.measure(d, ctx, candidates, labels, args, stream)?;
            record.key = disk_key.map_or_else(|| key.to_string(), str::to_owned);
            // Only a result with a winner is kept; a cache that cannot be written costs a
            // tuning per process, nothing else.
            if let (Some(p), Some(_)) = (&path, record.best) {
                let _ = store::write(p, &record);
            }
            Ok(Tuned { record, source: Source::Measured })
        };
        match &path {
            Some(p) => store::locked(p, measured).unwrap_or_else(|_| measured()),
            None => measured(),
        }
    }

    /// Time every candidate (one tuning of the process at a time, so that tunings do not
    /// share the GPU): on a stream of the tuner's own, ordered after the stream the plain
    /// launch would use, with the arguments checked first against the first candidate that
    /// resolves (an argument that does not fit is the launch's error, not every candidate's).
    fn measure(
        &self,
        d: &Dispatcher,
        ctx: &Arc<Context>,
        candidates: &[Candidate],
        labels: &[String],
        args: &[Arg<'_>],
        stream: Option<&Stream>,
    ) -> Result<Record> {
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
        let _one = lock(&ONE_AT_A_TIME);
        let record = |trials: Vec<Trial>| Record { key: String::new(), candidates: labels.to_vec(), best: choose(&trials), trials };
        let resolved: Vec<Result<Arc<Kernel>>> = candidates.iter().map(|c| measure::kernel(d, c, ctx, args)).collect();
        let Some(first) = resolved.iter().find_map(|k| k.as_ref().ok()).cloned() else {
            // Nothing launches: every candidate's reason, and no launch at all.
            return Ok(record(resolved.into_iter().map(|k| Trial::Failed(k.err().map_or_else(String::new, |e| e.to_string()))).collect()));
        };
        crate::kernel::check_args(first.info(), &first.pointee_alignment, args)?;
        bump(&COUNTERS.tunings);
        let own = Arc::new(Stream::new(ctx)?);
        let views = args.iter().filter_map(|a| match a {
            Arg::Array(v) | Arg::ArrayOn(v, _) => Some(*v),
            _ => None,
        });
        let caller = crate::launch::launch_stream(views, stream);
        ctx.order_streams(&own, &Stream::borrowed(caller)?)?;
        let scratch = measure::Scratch::of(&first, ctx, args, &own)?;
        let scratch_args = scratch.args(args);
        let trials: Vec<Trial> = candidates.iter().zip(&resolved).map(|(c, k)| measure::trial(c, k, ctx, &scratch_args, &own)).collect();
        own.synchronize()?;
        drop(scratch);
        Ok(record(trials))
    }
}
