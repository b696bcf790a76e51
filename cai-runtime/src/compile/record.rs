//! Recording the programs a run uses into a manifest, which `python -m caijit bundle build`
//! bakes into a bundle (`docs/bundles.md`).
//!
//! Recording (`CAIJIT_RECORD=manifest.json`, or [`record_to`]) appends one JSON line per
//! program and architecture compiled or loaded, and one per autotuning result the run used
//! ([`record_tuning`]), each written whole under an exclusive lock on the file, so
//! processes can record into one manifest at the same time.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{json, Value};

use super::bundled::{bundle_key, warn_once, Keys};
use super::compiled::Compiled;
use super::key::sha256_hex;
use super::program::{Arch, Program};
use crate::bundle::{self, ShippedTuning};
use crate::error::{Error, Result};
use crate::sync::lock;

/// `None`: not read from the environment yet; `Some(None)`: not recording.
static RECORDING: Mutex<Option<Option<PathBuf>>> = Mutex::new(None);

/// Record every program compiled or loaded from now on into the manifest at `path`
/// (`None`: stop). Returns the manifest recorded into before. Overrides `CAIJIT_RECORD`.
pub fn record_to(path: Option<PathBuf>) -> Option<PathBuf> {
    let mut r = lock(&RECORDING);
    let before = r.take().unwrap_or_else(from_env);
    *r = Some(path);
    before
}

fn from_env() -> Option<PathBuf> {
    std::env::var_os("CAIJIT_RECORD").filter(|p| !p.is_empty()).map(PathBuf::from)
}

/// The manifest recorded into, if any.
pub fn recording() -> Option<PathBuf> {
    lock(&RECORDING).get_or_insert_with(from_env).clone()
}

/// Append `program` (compiled for `arch` as `compiled`, of bundle keys `keys`) to the manifest, if recording, once
/// per process per manifest, key and architecture. Recording never fails a compilation:
/// a manifest that cannot be written is reported once on stderr.
pub(super) fn record(program: &Program, arch: Arch, compiled: &Compiled, keys: &Keys) {
    let Some(path) = recording() else { return };
    static WRITTEN: Mutex<Option<HashSet<(PathBuf, String, u32)>>> = Mutex::new(None);
    let key = match keys {
        Ok((k, _)) => k.clone(),
        Err(why) => return warn_once(&format!("caijit: warning: not recording {}: it cannot be bundled ({why})", program.name)),
    };
    let id = (path.clone(), key.clone(), arch.0);
    if lock(&WRITTEN).get_or_insert_with(HashSet::new).contains(&id) {
        return;
    }
    // A path that is not UTF-8 (JSON has no way to spell it) is not recorded.
    let mut line = match manifest_entry(program, arch, &key, compiled).map(|entry| entry.to_string()) {
        Ok(line) => line,
        Err(e) => return warn_once(&format!("caijit: warning: not recording {}: {e}", program.name)),
    };
    line.push('\n');
    match append_line(&path, line.as_bytes()) {
        Ok(()) => {
            lock(&WRITTEN).get_or_insert_with(HashSet::new).insert(id);
        }
        Err(e) => warn_once(&format!("caijit: warning: cannot record into the manifest {}: {e}", path.display())),
    }
}

/// Append the tuning result `t` to the manifest, if recording, once per process per
/// manifest and key: `bundle build` ships it beside its program. Never fails the tuning
/// (a manifest that cannot be written is reported once on stderr).
pub fn record_tuning(t: &ShippedTuning) {
    let Some(path) = recording() else { return };
    static WRITTEN: Mutex<Option<HashSet<(PathBuf, String)>>> = Mutex::new(None);
    let id = (path.clone(), t.key.clone());
    if lock(&WRITTEN).get_or_insert_with(HashSet::new).contains(&id) {
        return;
    }
    let mut line = json!({"caijit_manifest": 1, "caijit": bundle::CAIJIT_VERSION, "tuning": t}).to_string();
    line.push('\n');
    match append_line(&path, line.as_bytes()) {
        Ok(()) => {
            lock(&WRITTEN).get_or_insert_with(HashSet::new).insert(id);
        }
        Err(e) => warn_once(&format!("caijit: warning: cannot record into the manifest {}: {e}", path.display())),
    }
}

/// One line, whole, under an exclusive lock (other processes append to the same file).
fn append_line(path: &Path, line: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    f.lock()?;
    let written = f.write_all(line).and_then(|()| f.flush());
    let _ = f.unlock();
    written
}

/// What the manifest records of one program (`docs/bundles.md`).
///
/// An include directory or source directory that is not UTF-8 is an error: JSON cannot
/// spell it.
pub fn manifest_entry(program: &Program, arch: Arch, key: &str, compiled: &Compiled) -> std::result::Result<Value, String> {
    let utf8 = |p: &Path| {
        p.to_str().map(str::to_owned).ok_or_else(|| format!("the directory {} is not UTF-8, which a manifest cannot spell", p.display()))
    };
    let include_dirs = program.include_dirs.iter().map(|d| utf8(d)).collect::<std::result::Result<Vec<_>, _>>()?;
    let source_dir = program.source_dir.as_deref().map(utf8).transpose()?;
    Ok(json!({
        "caijit_manifest": 1,
        "caijit": bundle::CAIJIT_VERSION,
        "key": key,
        "arch": arch.0,
        "name": program.name,
        "source": program.source,
        "source_sha256": sha256_hex(&[program.source.as_bytes()]),
        "options": program.options,
        "defines": program.defines,
        "name_expressions": program.name_expressions,
        "include_dirs": include_dirs,
        "source_dir": source_dir,
        "kernels": kernels_json(compiled),
    }))
}

/// The kernels of `compiled` with their parameters, as the manifest and a bundled program's description list them.
pub(super) fn kernels_json(compiled: &Compiled) -> Value {
    let kernels: Vec<Value> = compiled
        .kernels
        .iter()
        .map(|k| {
            let params: Vec<Value> = k
                .params
                .iter()
                .map(|q| json!({"name": q.name, "type": q.cpp_type, "offset": q.offset, "size": q.size, "align": q.align}))
                .collect();
            json!({
                "name": k.name_expression.clone().unwrap_or_else(|| k.qualified_name.clone()),
                "lowered": k.lowered_name,
                "params": params,
            })
        })
        .collect();
    Value::Array(kernels)
}

/// What a manifest recorded: its programs, each once (by bundle key, in the order first
/// recorded), and the tuning results the run used.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Manifest {
    pub programs: Vec<Program>,
    pub tunings: Vec<ShippedTuning>,
}

/// Read a manifest. A line that is not a manifest entry is an error naming its line number.
pub fn read_manifest(path: &Path) -> Result<Manifest> {
    let text = crate::files::read_regular_text(path)
        .map_err(|e| Error::argument(crate::files::failed(&format!("the manifest {}", path.display()), &e)))?;
    let mut seen = HashSet::new();
    let mut out = Manifest::default();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let bad = |what: &str| Error::argument(format!("manifest {} line {}: {what}", path.display(), n + 1));
        let v: Value = serde_json::from_str(line).map_err(|e| bad(&format!("not JSON ({e})")))?;
        if v["caijit_manifest"] != json!(1) {
            return Err(bad("not a caijit manifest entry (no \"caijit_manifest\": 1)"));
        }
        if let Some(t) = v.get("tuning") {
            out.tunings.push(serde_json::from_value(t.clone()).map_err(|e| bad(&format!("not a tuning result ({e})")))?);
            continue;
        }
        let strings = |k: &str| -> Result<Vec<String>> {
            match &v[k] {
                Value::Null => Ok(vec![]),
                Value::Array(a) => {
                    a.iter().map(|s| s.as_str().map(str::to_owned).ok_or_else(|| bad(&format!("{k:?} is not a list of strings")))).collect()
                }
                _ => Err(bad(&format!("{k:?} is not a list of strings"))),
            }
        };
        let source = v["source"].as_str().ok_or_else(|| bad("no \"source\""))?;
        let mut p = Program::new(source);
        p.name = v["name"].as_str().unwrap_or("kernel.cu").to_string();
        p.options = strings("options")?;
        p.name_expressions = strings("name_expressions")?;
        p.include_dirs = strings("include_dirs")?.into_iter().map(PathBuf::from).collect();
        p.source_dir = v["source_dir"].as_str().map(PathBuf::from);
        for d in v["defines"].as_array().map(Vec::as_slice).unwrap_or_default() {
            match d.as_array().map(Vec::as_slice) {
                Some([Value::String(k), Value::Null]) => p.defines.push((k.clone(), None)),
                Some([Value::String(k), Value::String(val)]) => p.defines.push((k.clone(), Some(val.clone()))),
                _ => return Err(bad("\"defines\" is not a list of [name, value or null]")),
            }
        }
        let key = match bundle_key(&p)? {
            Ok(k) => k,
            Err(why) => return Err(bad(&format!("{} cannot be bundled: {why}", p.name))),
        };
        if seen.insert(key) {
            out.programs.push(p);
        }
    }
    Ok(out)
}
