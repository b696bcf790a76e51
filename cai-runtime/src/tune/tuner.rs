//! The tuner: per tuning key, the winner remembered, else read from the disk, else
//! measured; and the launch of the winner.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use super::candidate::Candidate;
use super::choice::{choose, Trial};
use super::measure;
use super::store::{self, Record};
use crate::dispatch::{launch_device, Dispatcher};
use crate::error::{Error, Result};
use crate::launch::Arg;
use crate::runtime::{Context, Stream};
use crate::stats::{bump, COUNTERS};
use crate::sync::lock;

/// A tuning's result, for one key.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuned {
    pub record: Record,
    /// Read from the disk, not measured by this process.
    pub from_disk: bool,
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

/// Whether tuning is on (`CAIJIT_AUTOTUNE=0` turns it off), read once.
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("CAIJIT_AUTOTUNE").map_or(true, |v| v != "0"))
}

/// The tunings of one launcher: per tuning key, what was found (from memory after the
/// first time).
#[derive(Debug, Default)]
pub struct Tuner {
    tuned: Mutex<HashMap<String, Arc<Tuned>>>,
}

impl Tuner {
    pub fn new() -> Tuner {
        Tuner::default()
    }

    /// The tuning of `key` over `candidates` for a launch on `args`: remembered, else read
    /// from the disk, else measured (and written there). With tuning off, the first
    /// candidate, untimed. An error when no candidate could be launched (each one's reason
    /// in the message), or when tuning would run while a stream it uses is being captured.
    pub fn tuned(
        &self,
        d: &Dispatcher,
        key: &str,
        candidates: &[Candidate],
        args: &[Arg<'_>],
        stream: Option<&Stream>,
    ) -> Result<Arc<Tuned>> {
        if candidates.is_empty() {
            return Err(Error::argument("autotune: no candidates"));
        }
        let labels: Vec<String> = candidates.iter().map(|c| c.label.clone()).collect();
        let memory_key = format!("{key}\n{}", labels.join("\n"));
        if let Some(t) = lock(&self.tuned).get(&memory_key) {
            return Ok(t.clone());
        }
        let mut probe: Vec<Arg<'_>> = args.to_vec();
        let ctx = Context::new(launch_device(&mut probe, stream)?)?;
        let full_key = self.full_key(d, &ctx, key, &labels)?;
        let untimed = || Record { key: full_key.clone(), candidates: labels.clone(), trials: Vec::new(), best: Some(0) };
        let tuned = if !enabled() {
            Tuned {
                record: Record {
                    trials: labels.iter().map(|_| Trial::Failed("not timed (CAIJIT_AUTOTUNE=0)".into())).collect(),
                    ..untimed()
                },
                from_disk: false,
            }
        } else {
            self.read_or_measure(d, &ctx, &full_key, candidates, &labels, &probe, stream)?
        };
        if tuned.record.best.is_none() {
            return Err(Error::argument(format!(
                "autotune: no candidate of kernel `{}` could be launched for key {key:?}:\n{}",
                d.name(),
                tuned.table()
            )));
        }
        let tuned = Arc::new(tuned);
        lock(&self.tuned).insert(memory_key, tuned.clone());
        Ok(tuned)
    }

    /// Launch the winner of `key`'s tuning (tuned first when needed) on `args`, on `stream`
    /// (or the stream the protocol picks). Returns the stream launched on (its CAI value).
    pub fn launch(&self, d: &Dispatcher, key: &str, candidates: &[Candidate], args: &[Arg<'_>], stream: Option<&Stream>) -> Result<u64> {
        let tuned = self.tuned(d, key, candidates, args, stream)?;
        let c = tuned
            .best()
            .and_then(|i| candidates.get(i))
            .ok_or_else(|| Error::argument(format!("autotune: the result of key {key:?} names no candidate")))?;
        let mut args: Vec<Arg<'_>> = args.to_vec();
        let ctx = Context::new(launch_device(&mut args, stream)?)?;
        measure::kernel(d, c, &ctx, &args)?.launch(&c.config, &args, stream, true)
    }

    /// What a result is stored under: the format, the kernel's program (its family key: its
    /// source, options and headers' contents), its name, the device model, the tuning key
    /// and the candidates.
    fn full_key(&self, d: &Dispatcher, ctx: &Context, key: &str, labels: &[String]) -> Result<String> {
        let program = crate::compile::family_key(d.program())?
            .map_err(|why| Error::argument(format!("autotune: the results of kernel `{}` cannot be keyed: {why}", d.name())))?;
        let (major, minor) = ctx.compute_capability();
        Ok(format!("{}\n{program}\n{}\n{} sm_{major}{minor}\n{key}\n{}", store::FORMAT, d.name(), ctx.name(), labels.join("\n")))
    }

    #[allow(clippy::too_many_arguments)]
    fn read_or_measure(
        &self,
        d: &Dispatcher,
        ctx: &Arc<Context>,
        full_key: &str,
        candidates: &[Candidate],
        labels: &[String],
        args: &[Arg<'_>],
        stream: Option<&Stream>,
    ) -> Result<Tuned> {
        let cache = crate::compile::DiskCache::from_env()?;
        let path = cache.as_ref().map(|c| store::path(c.dir(), full_key));
        if let Some(record) = path.as_deref().and_then(|p| store::read(p, full_key)) {
            return Ok(Tuned { record, from_disk: true });
        }
        let measured = || -> Result<Tuned> {
            if let Some(record) = path.as_deref().and_then(|p| store::read(p, full_key)) {
                return Ok(Tuned { record, from_disk: true }); // another process tuned it meanwhile
            }
            let streams = measure::array_streams(args).into_iter().chain(stream.map(Stream::handle));
            if let Some(s) = streams.into_iter().find(|&s| measure::capturing(s)) {
                return Err(Error::launch(format!(
                    "autotune: stream {s:#x} is being captured into a graph, and kernel `{}` has no tuning for this key yet: \
                     tune before the capture (or load the results), so that the capture stays valid",
                    d.name()
                )));
            }
            let record = self.measure(d, ctx, full_key, candidates, labels, args)?;
            if let Some(p) = &path {
                // (A cache that cannot be written costs a tuning per process, nothing else.)
                let _ = store::write(p, &record);
            }
            Ok(Tuned { record, from_disk: false })
        };
        match &path {
            Some(p) => store::locked(p, measured).unwrap_or_else(|_| measured()),
            None => measured(),
        }
    }

    fn measure(
        &self,
        d: &Dispatcher,
        ctx: &Arc<Context>,
        full_key: &str,
        candidates: &[Candidate],
        labels: &[String],
        args: &[Arg<'_>],
    ) -> Result<Record> {
        bump(&COUNTERS.tunings);
        let stream = Arc::new(Stream::new(ctx)?);
        // The scratch copies follow the parameters of the first candidate that resolves.
        let first = candidates.iter().find_map(|c| measure::kernel(d, c, ctx, args).ok());
        let scratch = match &first {
            Some(k) => Some(measure::Scratch::of(k, ctx, args, &stream)?),
            None => None,
        };
        let scratch_args = scratch.as_ref().map_or_else(|| args.to_vec(), |s| s.args(args));
        let trials: Vec<Trial> = candidates.iter().map(|c| measure::trial(d, c, ctx, &scratch_args, &stream)).collect();
        stream.synchronize()?;
        drop(scratch);
        let best = choose(&trials);
        Ok(Record { key: full_key.to_string(), candidates: labels.to_vec(), trials, best })
    }
}
