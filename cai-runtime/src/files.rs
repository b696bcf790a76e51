//! Files caijit reads that must be regular files (kernel sources, headers, manifests,
//! bundles, disk-cache entries): opened without blocking, since a FIFO nobody writes blocks
//! `open` itself and then every read, and refused when they are anything else (a FIFO, a
//! device such as `/dev/zero`, which would be read until memory runs out).

use std::fs::{File, FileType, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// What a file that is not a regular file is, for a message refusing it ("a FIFO").
pub(crate) fn kind_name(kind: FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// `path` opened for reading, with its metadata; never through a symbolic link when
/// `no_follow`. Anything but a regular file is an [`io::ErrorKind::InvalidInput`] error
/// saying what it is ("is a FIFO, not a regular file": see [`failed`]).
pub(crate) fn open_regular(path: &Path, no_follow: bool) -> io::Result<(File, Metadata)> {
    let flags = if no_follow { libc::O_NONBLOCK | libc::O_NOFOLLOW } else { libc::O_NONBLOCK };
    let file = OpenOptions::new().read(true).custom_flags(flags).open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        let what = kind_name(meta.file_type());
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("is {what}, not a regular file")));
    }
    Ok((file, meta))
}

/// The UTF-8 text of the regular file at `path`, as [`open_regular`] opens it (whole: for
/// files caijit is asked to read, such as a kernel source or a manifest; not sized from
/// the metadata, which a growing file outdates).
pub(crate) fn read_regular_text(path: &Path) -> io::Result<String> {
    let (mut file, _) = open_regular(path, false)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    String::from_utf8(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "is not UTF-8 text"))
}

/// Why the file `what` (its description: "the manifest m.json") could not be read, from an
/// error of this module's functions: "the manifest m.json is a FIFO, not a regular file",
/// "cannot read the manifest m.json: No such file or directory (os error 2)".
pub(crate) fn failed(what: &str, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData => format!("{what} {e}"),
        _ => format!("cannot read {what}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_read_and_a_fifo_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        for (path, what) in [(fifo.as_path(), "a FIFO"), (dir.path(), "a directory"), (Path::new("/dev/zero"), "a device")] {
            let e = read_regular_text(path).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{what}: {e}");
            assert_eq!(failed("the file", &e), format!("the file is {what}, not a regular file"));
        }
        let file = dir.path().join("k.cu");
        std::fs::write(&file, "__global__ void k() {}\n").unwrap();
        assert_eq!(read_regular_text(&file).unwrap(), "__global__ void k() {}\n");
        std::fs::write(&file, b"\xff").unwrap();
        assert_eq!(read_regular_text(&file).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
