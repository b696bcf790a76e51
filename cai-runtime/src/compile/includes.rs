//! Every header a program can include, found the way NVRTC finds it.
//!
//! [`resolve`] scans the program for `#include "name"` and `#include <name>` (also spelled
//! `%:include`; and the names probed by `__has_include`), finds each header, and does the same for every header found,
//! so the cache key can hash exactly the headers NVRTC can open. Conditionals are not
//! evaluated: the includes of every branch are followed (hashing a header too many only
//! costs a recompile when it changes).
//!
//! A name is looked for, in order: among caijit's embedded [`HEADERS`] (by exact name);
//! taken as a path when it is absolute; for the quoted form, in the directory of the file
//! that includes it (for the program itself, [`Program::source_dir`]; not with NVRTC's
//! `-no-source-include`); then in the include directories: the program's, its `-I`
//! options', the toolkit's (CUDA's own headers). A pre-included header (`-include`,
//! `--pre-include`) is looked for as NVRTC does: in the current directory, then in the
//! include directories.
//!
//! A trusted compilation hands NVRTC every header found, in memory, under the name it was
//! included by, and no search path: NVRTC compiles the bytes that were hashed and can open
//! nothing else. That holds only while a name means one file everywhere, so
//! [`Includes::untrusted`] says why it does not when:
//! - an include's name is computed (`#include MACRO`) or is an `#include_next`;
//! - a `__has_include` probes a name that is not a literal (`__has_include(MACRO)`, a macro
//!   for `__has_include` itself, `__has_include_next`): macros named like `…has_include`
//!   (CCCL's `_CCCL_HAS_INCLUDE`) may hand their parameter to it, and each of their uses
//!   is read as a probe;
//! - the text has a trigraph `??=` or `??/` (which may spell `#`, or a line splice);
//! - a name means different files (or none) from different including files;
//! - a `#pragma once` (or `_Pragma("once")`) file is reached under two names (in memory,
//!   they are two files);
//! - a pre-included header is found nowhere;
//! - an explicit PCH file option (`-use-pch=…`, `-create-pch=…`);
//! - a header cannot be read, or holds a NUL byte or invalid UTF-8.
//!
//! A header larger than 64 MiB is not read: NVRTC is handed an `#error` under its name. A
//! header that is not a regular file (a FIFO NVRTC would block on, a device) is an error
//! naming it; a directory of a header's name is passed over, as NVRTC passes over it.
//!
//! Such a program is compiled untrusted, as NVRTC finds headers itself, and never cached.
//!
//! The toolkit's headers are read and scanned once per process per version of the file
//! (its device, inode, length, modification and change times); other headers on every call.

use std::collections::HashMap;
use std::fs::Metadata;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use sha2::{Digest, Sha256};

use super::headers::HEADERS;
use super::options;
use super::program::Program;
use crate::sync::lock;

mod scan;
use scan::scan_as;
pub(crate) use scan::{scan, Scan};

/// What [`resolve`] found for a program.
#[derive(Debug)]
pub(crate) struct Includes {
    /// Every include name, in the order first met, with what it means: the digest of the
    /// file found, `embedded`, or `missing` (NVRTC may supply it itself, or fail).
    pub digest: [u8; 32],
    /// `(include name, contents)` of every header found in a file, for NVRTC to read from
    /// memory (caijit's embedded headers are not repeated here).
    pub headers: Vec<(String, Arc<str>)>,
    /// Why the names cannot be handed to NVRTC (and so the key cannot be trusted); `None`
    /// when they can.
    pub untrusted: Option<String>,
    /// The pre-included headers' names, in order (each is among `headers` when trusted).
    pub pre_includes: Vec<String>,
    /// What a bundle key covers of the headers, from the same reads as `digest` and
    /// `headers` (`Err(why)`: the program cannot be bundled): each name reached from the
    /// program without passing through a toolkit header, with its meaning (the digest of its
    /// file, `embedded`, or `outside`: a toolkit header or none, which belong to the NVRTC
    /// build a bundle records), names sorted; and each header of the program's own
    /// directories that only a toolkit header includes (found before the toolkit's own:
    /// `<cuda/std/version>` in `-I inc`), by name and digest. A process without the
    /// toolkit's headers follows no toolkit header and names the same; one whose include
    /// directories shadow a toolkit header's include gets another key (a miss, never a stale
    /// binary). Include directories themselves are not covered: a bundle serves wherever the
    /// program's headers are found.
    pub bundle: Result<[u8; 32], String>,
}

/// A header file as read: its contents and what they include.
#[derive(Debug)]
struct Loaded {
    contents: Arc<str>,
    digest: [u8; 32],
    scan: Arc<Scan>,
}

/// What an include name means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Embedded(usize),
    File(usize),
    Missing,
}

/// A file found, and how many names it was included by.
struct Found {
    path: PathBuf,
    /// `(device, inode)`: one file reached through several directories (links) is one
    /// `Found` per directory, whose quoted includes are looked for there.
    file: (u64, u64),
    loaded: Arc<Loaded>,
    /// Found in a toolkit directory.
    toolkit: bool,
}

/// `(device, inode, length, modified ns, changed ns)`: a file's version, for the toolkit cache.
type Stamp = (u64, u64, u64, i128, i128);

fn stamp(m: &Metadata) -> Stamp {
    let ns = |s: i64, n: i64| s as i128 * 1_000_000_000 + n as i128;
    (m.dev(), m.ino(), m.len(), ns(m.mtime(), m.mtime_nsec()), ns(m.ctime(), m.ctime_nsec()))
}

/// Toolkit headers as last read, by path (pip may update them under a running process,
/// so each use checks the stamp).
type ToolkitFiles = Mutex<HashMap<PathBuf, (Stamp, Arc<Loaded>)>>;

fn toolkit_files() -> &'static ToolkitFiles {
    static FILES: OnceLock<ToolkitFiles> = OnceLock::new();
    FILES.get_or_init(Default::default)
}

/// The scan of embedded header `e` (constant for a build): each is scanned when first met.
fn embedded_scan(e: usize) -> &'static Scan {
    static SCANS: OnceLock<Vec<OnceLock<Scan>>> = OnceLock::new();
    SCANS.get_or_init(|| HEADERS.iter().map(|_| OnceLock::new()).collect())[e].get_or_init(|| scan(HEADERS[e].1))
}

struct Resolver<'a> {
    /// User include directories (the program's, then its options'), then the toolkit's.
    dirs: Vec<PathBuf>,
    toolkit_dirs: &'a [PathBuf],
    found: Vec<Found>,
    /// Each file found, by `(device, inode)`: one `Found` per directory it was found in.
    by_file: HashMap<(u64, u64), Vec<usize>>,
    /// How many names mean each file (`(device, inode)`).
    names_of_file: HashMap<(u64, u64), usize>,
    /// Every name met, with its meaning, in the order met, and its index in `order`.
    names: HashMap<String, Target>,
    order: Vec<String>,
    at: HashMap<String, usize>,
    /// A name met again meaning the same file through another directory: `(its index in
    /// `order`, that `Found`)`, whose includes are followed from there too.
    again: Vec<(usize, usize)>,
    /// `(includer, name)` of every include met: the includer's index in `order`, `None` for
    /// the program and its options.
    edges: Vec<(Option<usize>, String)>,
    /// Resolutions already made: `(directory of the includer for a quoted name, name)`.
    memo: HashMap<(Option<PathBuf>, String), Target>,
    /// Whether `dirs[k]` has a subdirectory of this name.
    subdirs: HashMap<(usize, std::ffi::OsString), bool>,
    /// Whether `#include "…"` looks next to the including file first (NVRTC's
    /// `-no-source-include` turns that off: then it is `#include <…>`).
    source_include: bool,
    /// Whether the standard has raw string literals (C++11 and later): else every file is
    /// scanned again as pre-C++11 reads it (such a program is compiled untrusted anyway, but
    /// a header NVRTC would block on must still be found first).
    raw_strings: bool,
    untrusted: Option<String>,
    /// The first header found that is not a regular file (an error: NVRTC would block on a
    /// FIFO, or refuse it).
    not_a_file: Option<String>,
}

/// Find every header `program` can include (see the module's documentation). `options`
/// are the program's options as [`options::sort`] sorted them. A header that is not a
/// regular file (a FIFO, a device) is an error naming it.
pub(crate) fn resolve(program: &Program, options: &options::Sorted, toolkit_dirs: &[PathBuf]) -> crate::error::Result<Includes> {
    let mut dirs = program.include_dirs.clone();
    dirs.extend(options.include_dirs.iter().cloned());
    dirs.extend(toolkit_dirs.iter().cloned());
    let mut r = Resolver {
        dirs,
        toolkit_dirs,
        found: Vec::new(),
        by_file: HashMap::new(),
        names_of_file: HashMap::new(),
        names: HashMap::new(),
        order: Vec::new(),
        at: HashMap::new(),
        again: Vec::new(),
        edges: Vec::new(),
        memo: HashMap::new(),
        subdirs: HashMap::new(),
        source_include: !options.rest.iter().any(|o| options::is_no_source_include(o)),
        raw_strings: true,
        untrusted: None,
        not_a_file: None,
    };
    if let Some(std) = options::pre_cxx11_standard(&options.rest) {
        r.distrust(format!("-std={std} has no raw string literals, and caijit's key reads C++11 and later"));
        r.raw_strings = false;
    }
    if let Some(o) = &options.explicit_pch {
        r.distrust(format!("the option {o:?} makes NVRTC read or write a precompiled header file no key covers"));
    }
    // Pre-included headers, as NVRTC finds them: an absolute name as it is, another in the
    // current directory, then in the include directories (not next to the program).
    for name in &options.pre_includes {
        let target = r.resolve_one(name, true, Some(Path::new(".")));
        if target == Target::Missing {
            r.distrust(format!("the pre-included header {name:?} is found nowhere caijit looks"));
        }
        r.record(name, target, "the options", None);
    }
    // The program itself: its quoted includes are searched in its own directory first.
    let own_dir = program.source_dir.clone().or_else(|| Path::new(&program.name).parent().map(Path::to_path_buf));
    r.follow(&scan_as(&program.source, r.raw_strings), own_dir.as_deref(), "the program", None);
    // Then every name found, once each (a name means one header, or the key is not trusted),
    // and again from each other directory it is found in as the same file.
    let (mut next, mut next_again) = (0, 0);
    loop {
        let (at, target) = if next < r.order.len() {
            next += 1;
            (next - 1, r.names[&r.order[next - 1]])
        } else if next_again < r.again.len() {
            next_again += 1;
            let (at, f) = r.again[next_again - 1];
            (at, Target::File(f))
        } else {
            break;
        };
        let name = r.order[at].clone();
        match target {
            Target::Embedded(e) => r.follow(embedded_scan(e), None, &name, Some(at)),
            Target::File(f) => {
                let loaded = &r.found[f].loaded;
                let scan = if r.raw_strings { loaded.scan.clone() } else { Arc::new(scan_as(&loaded.contents, false)) };
                let dir = r.found[f].path.parent().map(Path::to_path_buf);
                r.follow(&scan, dir.as_deref(), &name, Some(at));
            }
            Target::Missing => {}
        }
    }
    if let Some(why) = r.not_a_file.take() {
        return Err(crate::error::Error::compile(format!("cannot compile {}: {why}", program.name), ""));
    }
    r.distrust_spellings_of_one_name();
    Ok(r.finish(&options.pre_includes))
}

/// `name` without leading `./` (`././x.h` is `x.h`).
fn without_dot_slash(mut name: &str) -> &str {
    while let Some(rest) = name.strip_prefix("./") {
        name = rest;
    }
    name
}

impl Resolver<'_> {
    fn distrust(&mut self, why: String) {
        self.untrusted.get_or_insert(why);
    }

    /// Whether two meanings are one header (one file, wherever it was found).
    fn same(&self, a: Target, b: Target) -> bool {
        match (a, b) {
            (Target::File(f), Target::File(g)) => self.found[f].file == self.found[g].file,
            _ => a == b,
        }
    }

    /// NVRTC 12 takes `./x.h` and `x.h` for one in-memory header (seen with 12.9: a `<x.h>`
    /// was served the header handed as `./x.h`): names that differ only so must mean one
    /// file, or the key is not trusted.
    fn distrust_spellings_of_one_name(&mut self) {
        let mut seen: HashMap<&str, &str> = HashMap::new();
        let mut clash = None;
        for name in &self.order {
            let plain = without_dot_slash(name);
            match seen.get(plain) {
                Some(&other) if !self.same(self.names[other], self.names[name.as_str()]) => {
                    clash = Some(format!("{other:?} and {name:?} name different headers (NVRTC may take them for one)"));
                    break;
                }
                Some(_) => {}
                None => {
                    seen.insert(plain, name);
                }
            }
        }
        if let Some(why) = clash {
            self.distrust(why);
        }
    }

    /// Resolve and record every include of a file in `dir` (`at`: its index in `order`).
    fn follow(&mut self, scan: &Scan, dir: Option<&Path>, includer: &str, at: Option<usize>) {
        if let Some(d) = &scan.opaque {
            self.distrust(format!("{includer} has {d}: caijit cannot name every header it may read"));
        }
        for inc in &scan.includes {
            let quoted = inc.quoted && self.source_include;
            let target = self.resolve_one(&inc.name, quoted, dir);
            self.record(&inc.name, target, includer, at);
        }
    }

    /// Record what `name` means where `includer` (at `at` in `order`) includes it: one name
    /// must mean one file.
    fn record(&mut self, name: &str, target: Target, includer: &str, at: Option<usize>) {
        self.edges.push((at, name.to_string()));
        match self.names.get(name) {
            None => {
                self.names.insert(name.to_string(), target);
                self.at.insert(name.to_string(), self.order.len());
                self.order.push(name.to_string());
                if let Target::File(f) = target {
                    let names = self.names_of_file.entry(self.found[f].file).or_default();
                    *names += 1;
                    if *names > 1 && self.found[f].loaded.scan.pragma_once {
                        let p = self.found[f].path.display().to_string();
                        self.distrust(format!(
                            "{p} has `#pragma once` (or `_Pragma(\"once\")`) and is included by two names (one is {name:?})"
                        ));
                    }
                }
            }
            Some(&prev) if !self.same(prev, target) => {
                let what = |t: Target, r: &Self| match t {
                    Target::File(f) => r.found[f].path.display().to_string(),
                    Target::Embedded(_) => "an embedded header".into(),
                    Target::Missing => "nothing".into(),
                };
                let (before, now) = (what(prev, self), what(target, self));
                self.distrust(format!("{name:?} means {before} in one place and {now} in {includer}"));
            }
            // The same file found through another directory: what it includes is looked for
            // there too (NVRTC, handed it by name, reads one header for each name it includes).
            Some(&Target::File(f)) => {
                if let Target::File(g) = target {
                    if f != g && !self.again.iter().any(|&(_, h)| h == g) {
                        self.again.push((self.at[name], g));
                    }
                }
            }
            Some(_) => {}
        }
    }

    /// What `name`, included from a file in `dir`, means; `quoted`: looked for in `dir` first.
    fn resolve_one(&mut self, name: &str, quoted: bool, dir: Option<&Path>) -> Target {
        let dir = dir.filter(|_| quoted);
        let memo_key = (dir.map(Path::to_path_buf), name.to_string());
        if let Some(&t) = self.memo.get(&memo_key) {
            return t;
        }
        let target = self.search(name, dir);
        self.memo.insert(memo_key, target);
        target
    }

    fn search(&mut self, name: &str, dir: Option<&Path>) -> Target {
        if let Some(e) = HEADERS.iter().position(|(n, _)| *n == name) {
            return Target::Embedded(e);
        }
        let name = Path::new(name);
        if name.is_absolute() {
            return self.open(name.to_path_buf()).unwrap_or(Target::Missing);
        }
        if let Some(t) = dir.and_then(|d| self.open(d.join(name))) {
            return t;
        }
        // `cuda/std/x` is not in a directory without `cuda/`: one look per directory and
        // first component (most of CCCL's names are looked for in two directories).
        let first = name.components().next().filter(|_| name.components().nth(1).is_some());
        for k in 0..self.dirs.len() {
            if let Some(first) = first {
                let key = (k, first.as_os_str().to_os_string());
                if !*self.subdirs.entry(key).or_insert_with(|| self.dirs[k].join(first).is_dir()) {
                    continue;
                }
            }
            if let Some(t) = self.open(self.dirs[k].join(name)) {
                return t;
            }
        }
        Target::Missing
    }

    /// The file at `path`, read once per resolution (and once per process for the
    /// toolkit's, while unchanged); `None` when there is no file there.
    fn open(&mut self, path: PathBuf) -> Option<Target> {
        let meta = std::fs::metadata(&path).ok()?;
        if meta.is_dir() {
            // NVRTC passes over a directory of the header's name and searches on.
            return None;
        }
        if !meta.is_file() {
            let what = crate::files::kind_name(meta.file_type());
            self.not_a_file.get_or_insert_with(|| format!("the header {} is {what}, not a regular file", path.display()));
            return Some(Target::Missing);
        }
        let file = (meta.dev(), meta.ino());
        let seen = self.by_file.get(&file).map(Vec::as_slice).unwrap_or_default();
        if let Some(&f) = seen.iter().find(|&&f| self.found[f].path.parent() == path.parent()) {
            return Some(Target::File(f));
        }
        let toolkit = self.toolkit_dirs.iter().any(|d| path.starts_with(d));
        // (A file already read through another directory is not read again.)
        let loaded = match seen.first() {
            Some(&f) => Ok(self.found[f].loaded.clone()),
            None if toolkit => load_toolkit(&path, &meta),
            None => load(&path).map(|(_, l)| l),
        };
        match loaded {
            Ok(loaded) => {
                self.found.push(Found { path, file, loaded, toolkit });
                self.by_file.entry(file).or_default().push(self.found.len() - 1);
                Some(Target::File(self.found.len() - 1))
            }
            Err(e) => {
                self.distrust(format!("{}: {e}", path.display()));
                Some(Target::Missing)
            }
        }
    }

    fn finish(self, pre_includes: &[String]) -> Includes {
        let mut h = Sha256::new();
        let mut part = |p: &[u8]| {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p);
        };
        let mut headers = Vec::new();
        for name in &self.order {
            part(name.as_bytes());
            match self.names[name] {
                Target::Embedded(_) => part(b"embedded"),
                Target::Missing => part(b"missing"),
                Target::File(f) => {
                    let found = &self.found[f];
                    part(&found.loaded.digest);
                    // Compiled from the file system, NVRTC sees paths (`__FILE__`, messages).
                    if self.untrusted.is_some() {
                        part(found.path.as_os_str().as_encoded_bytes());
                    }
                    headers.push((name.clone(), found.loaded.contents.clone()));
                }
            }
        }
        if let Some(why) = &self.untrusted {
            part(why.as_bytes());
        }
        let bundle = match &self.untrusted {
            Some(why) => Err(why.clone()),
            None => Ok(self.bundle_digest()),
        };
        Includes { digest: h.finalize().into(), headers, pre_includes: pre_includes.to_vec(), untrusted: self.untrusted, bundle }
    }

    /// [`Includes::bundle`]: the names reached from the program and its options
    /// through anything but toolkit headers, and the program's own headers reached only
    /// through toolkit headers.
    fn bundle_digest(&self) -> [u8; 32] {
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); self.order.len()];
        let mut stack = Vec::new();
        let at: HashMap<&str, usize> = self.order.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
        for (from, name) in &self.edges {
            match from {
                Some(f) => children[*f].push(at[name.as_str()]),
                None => stack.push(at[name.as_str()]),
            }
        }
        let toolkit = |t: Target| matches!(t, Target::File(f) if self.found[f].toolkit);
        let mut direct = vec![false; self.order.len()];
        while let Some(n) = stack.pop() {
            let target = self.names[&self.order[n]];
            // A toolkit header's includes are followed only by a process that has it.
            if !std::mem::replace(&mut direct[n], true) && target != Target::Missing && !toolkit(target) {
                stack.extend(&children[n]);
            }
        }
        let mut meanings: Vec<(&str, &str, &[u8])> = Vec::new();
        for (n, name) in self.order.iter().enumerate() {
            let target = self.names[name];
            let file = |f: usize| &self.found[f].loaded.digest[..];
            match (direct[n], target) {
                (true, Target::Embedded(_)) => meanings.push((name, "embedded", b"")),
                (true, Target::File(f)) if !toolkit(target) => meanings.push((name, "file", file(f))),
                (true, _) => meanings.push((name, "outside", b"")),
                (false, Target::File(f)) if !toolkit(target) => meanings.push((name, "through the toolkit", file(f))),
                (false, _) => {}
            }
        }
        meanings.sort_unstable();
        let mut h = Sha256::new();
        for (name, what, digest) in meanings {
            for p in [name.as_bytes(), what.as_bytes(), digest] {
                h.update((p.len() as u64).to_le_bytes());
                h.update(p);
            }
        }
        h.finalize().into()
    }
}

/// The largest header read into memory (and handed to NVRTC from there); a larger one is
/// handed to NVRTC as an `#error`.
const MAX_HEADER: u64 = 64 << 20;

/// Read and scan a header.
fn load(path: &Path) -> Result<(Stamp, Arc<Loaded>), String> {
    let (mut file, meta) = crate::files::open_regular(path, false).map_err(|e| e.to_string())?;
    // Not sized from the metadata: a file may claim any length (a sparse one, a growing one).
    let mut bytes = Vec::new();
    (&mut file).take(MAX_HEADER + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    let text = if bytes.len() as u64 > MAX_HEADER {
        // Not left to NVRTC either (it would read all of it, and run out of memory): handed
        // in memory in its place, this fails the compile when the header is included.
        format!("#error header larger than {} MiB, more than caijit reads into memory\n", MAX_HEADER >> 20).into_bytes()
    } else {
        bytes
    };
    let text = String::from_utf8(text).map_err(|_| "not UTF-8 text, which NVRTC cannot be handed in memory".to_string())?;
    if text.contains('\0') {
        return Err("holds a NUL byte, which NVRTC cannot be handed in memory".into());
    }
    let digest = Sha256::digest(text.as_bytes()).into();
    let scan = Arc::new(scan(&text));
    Ok((stamp(&meta), Arc::new(Loaded { contents: text.into(), digest, scan })))
}

/// A toolkit header, from the process-wide cache while its stamp is unchanged.
fn load_toolkit(path: &Path, meta: &Metadata) -> Result<Arc<Loaded>, String> {
    let cache = toolkit_files();
    let now = stamp(meta);
    if let Some((s, l)) = lock(cache).get(path) {
        if *s == now {
            return Ok(l.clone());
        }
    }
    let (read_stamp, loaded) = load(path)?;
    // Kept only if it did not change between the look and the read.
    if read_stamp == now {
        lock(cache).insert(path.to_path_buf(), (now, loaded.clone()));
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests;
