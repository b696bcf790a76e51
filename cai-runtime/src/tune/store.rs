//! Tuning results on disk: one JSON file per kernel program, device model, tuning key and
//! list of candidates, in the disk cache's `autotune/` folder (`CAIJIT_CACHE_DIR`, as
//! compilations are). A file is written whole (a temporary file renamed over it). The
//! processes of one job agree through a lock file beside it: the first to take the lock
//! tunes and writes; the others wait for the lock, then read what it wrote.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::choice::Trial;

/// The first line of every key: bumped when the file's meaning changes.
pub const FORMAT: &str = "caijit-autotune/2";

/// What a tuning found: each candidate (as described) and its trial, and the winner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub key: String,
    pub candidates: Vec<String>,
    pub trials: Vec<Trial>,
    pub best: Option<usize>,
}

/// The file a key's record lives in under `dir` (the disk cache's directory).
pub fn path(dir: &Path, key: &str) -> PathBuf {
    dir.join("autotune").join(format!("{}.json", hex::encode(Sha256::digest(key.as_bytes()))))
}

/// The record at `path` for `key`; `None` when there is none, or it cannot be read, is
/// another key's, or names no timed winner (then it is tuned again and replaced).
pub fn read(path: &Path, key: &str, labels: &[String]) -> Option<Record> {
    let text = std::fs::read(path).ok()?;
    usable(serde_json::from_slice(&text).ok()?, key, labels)
}

/// `record` if it is `key`'s, of these candidates (`labels`), has a trial per candidate and
/// names a timed winner.
pub fn usable(record: Record, key: &str, labels: &[String]) -> Option<Record> {
    (record.key == key && record.candidates == labels && record.trials.len() == record.candidates.len() && record.winner().is_some())
        .then_some(record)
}

impl Record {
    /// The winner's label and timing, when it was timed.
    pub fn winner(&self) -> Option<(&str, &super::Timing)> {
        let b = self.best?;
        match self.trials.get(b)? {
            Trial::Timed(t) => Some((self.candidates.get(b)?.as_str(), t)),
            Trial::Failed(_) => None,
        }
    }
}

/// Write `record` to `path` whole: readers see the old file or the new one, never a part.
pub fn write(path: &Path, record: &Record) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(&serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?)?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Run `f` holding the lock of `path` (an exclusive lock on `path.lock`, waited for): one
/// process at a time tunes a key. The lock goes when `f` returns (or the process ends).
pub fn locked<R>(path: &Path, f: impl FnOnce() -> R) -> std::io::Result<R> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let lock = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path.with_extension("lock"))?;
    lock.lock()?;
    let r = f();
    let _ = lock.unlock();
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::super::choice::Timing;
    use super::*;

    fn record(key: &str) -> Record {
        let t = Timing { median_us: 1.0, min_us: 1.0, max_us: 1.0, samples: 3, batch: 1 };
        Record {
            key: key.into(),
            candidates: vec!["a".into(), "b".into()],
            trials: vec![Trial::Timed(t), Trial::Failed("no".into())],
            best: Some(0),
        }
    }

    fn ab() -> Vec<String> {
        vec!["a".into(), "b".into()]
    }

    #[test]
    fn a_record_is_read_back_only_for_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "k1");
        assert_eq!(read(&p, "k1", &ab()), None);
        write(&p, &record("k1")).unwrap();
        assert_eq!(read(&p, "k1", &ab()), Some(record("k1")));
        assert_eq!(read(&p, "k2", &ab()), None, "another key's record");
        assert_eq!(read(&p, "k1", &["a".into()]), None, "other candidates");
        let no_winner = Record { best: Some(1), ..record("k1") };
        write(&p, &no_winner).unwrap();
        assert_eq!(read(&p, "k1", &ab()), None, "a winner that was never timed");
        std::fs::write(&p, b"{ not json").unwrap();
        assert_eq!(read(&p, "k1", &ab()), None, "a damaged record is tuned again");
        assert_ne!(path(dir.path(), "k1"), path(dir.path(), "k2"));
    }

    /// Several openers of the lock (as processes are: each its own open file) take turns:
    /// the first tunes, the others find its record.
    #[test]
    fn one_of_several_tuners_tunes_and_the_others_read_its_record() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "shared");
        let tuned = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    locked(&p, || {
                        if read(&p, "shared", &ab()).is_none() {
                            std::thread::sleep(std::time::Duration::from_millis(50));
                            tuned.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            write(&p, &record("shared")).unwrap();
                        }
                    })
                    .unwrap();
                    assert_eq!(read(&p, "shared", &ab()), Some(record("shared")));
                });
            }
        });
        assert_eq!(tuned.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
