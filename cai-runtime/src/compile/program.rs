//! What is compiled: a CUDA C++ program ([`Program`]: its source and everything that
//! changes what NVRTC makes of it) and the architecture it is compiled for ([`Arch`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::signature::{self, Declarations};

/// A CUDA C++ program: source plus everything that changes what NVRTC makes of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Program {
    pub source: String,
    /// The file name NVRTC uses in its messages (`kernel.cu` by default).
    pub name: String,
    pub options: Vec<String>,
    pub include_dirs: Vec<PathBuf>,
    pub defines: Vec<(String, Option<String>)>,
    pub name_expressions: Vec<String>,
    /// The directory of the program's file, searched first for its `#include "…"`s (set by
    /// [`Program::located_at`]). `None`: NVRTC's own rule, the directory of `name`
    /// relative to the current directory.
    pub source_dir: Option<PathBuf>,
}

impl Program {
    pub fn new(source: impl Into<String>) -> Program {
        Program { source: source.into(), name: "kernel.cu".into(), ..Default::default() }
    }

    /// Read a `.cu` file; its directory becomes an include directory.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Program> {
        let path = path.as_ref();
        let source = crate::files::read_regular_text(path)
            .map_err(|e| Error::argument(crate::files::failed(&format!("the kernel source {}", path.display()), &e)))?;
        Ok(Program::new(source).located_at(path))
    }

    /// Name the program after the file it came from, search that file's directory first for
    /// its `#include "…"`s, and add it to the include path (what [`Program::from_file`]
    /// does, for source already read). A bare file name is in the current directory.
    pub fn located_at(mut self, path: impl AsRef<Path>) -> Self {
        let path = path.as_ref();
        if let Some(n) = path.file_name() {
            self.name = n.to_string_lossy().into_owned();
        }
        match path.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) => {
                self.include_dirs.push(dir.to_path_buf());
                self.source_dir = Some(dir.to_path_buf());
            }
            None => self.source_dir = Some(PathBuf::from(".")),
        }
        self
    }

    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
    pub fn option(mut self, option: impl Into<String>) -> Self {
        self.options.push(option.into());
        self
    }
    pub fn include_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.include_dirs.push(dir.into());
        self
    }
    pub fn define(mut self, name: impl Into<String>, value: Option<String>) -> Self {
        self.defines.push((name.into(), value));
        self
    }
    pub fn name_expression(mut self, expr: impl Into<String>) -> Self {
        let expr = expr.into();
        if !self.name_expressions.contains(&expr) {
            self.name_expressions.push(expr);
        }
        self
    }

    /// The `__global__` functions the tokenizer finds in the source (candidate names,
    /// template parameters, parameter names), with notes on what it could not read; read
    /// once per process per source ([`signature::declarations`]).
    pub fn declarations(&self) -> Arc<Declarations> {
        signature::declarations(&self.source)
    }

    /// The program with `headers` included before its source (`#line 1` keeps the source's
    /// line numbers in NVRTC's messages): what an instance caijit generates for a type
    /// needs (`cuda_fp16.h` for `__half`), whatever the source includes itself.
    pub fn including(mut self, headers: &[&str]) -> Self {
        if headers.is_empty() {
            return self;
        }
        let mut source = String::new();
        for h in headers {
            source.push_str(&format!("#include <{h}>\n"));
        }
        source.push_str("#line 1\n");
        source.push_str(&self.source);
        self.source = source;
        self
    }
}

/// A GPU architecture: `Arch(90)` is sm_90.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch(pub u32);

impl Arch {
    /// Parse `sm_90` or `90`. A virtual architecture (`compute_90`) and an architecture-specific one (`sm_90a`) are refused:
    /// caijit compiles CUBINs for a real one.
    pub fn parse(s: &str) -> Result<Arch> {
        if let Some(n) = s.trim().strip_prefix("compute_") {
            return Err(Error::argument(format!("{s:?} is a virtual architecture (PTX); caijit compiles for a real one: give sm_{n}")));
        }
        let digits = s.trim().trim_start_matches("sm_");
        if let Some(n) = digits.strip_suffix('a').or_else(|| digits.strip_suffix('f')) {
            return Err(Error::argument(format!(
                "{s:?} is an architecture-specific target (its code runs on sm_{n} only); caijit compiles portable CUBINs: give sm_{n}"
            )));
        }
        digits
            .parse::<u32>()
            .ok()
            .filter(|&n| (30..=200).contains(&n))
            .map(Arch)
            .ok_or_else(|| Error::argument(format!("cannot read {s:?} as a GPU architecture (expected e.g. sm_90)")))
    }

    /// From a compute capability `(major, minor)`.
    pub fn from_capability(major: i32, minor: i32) -> Arch {
        Arch((major * 10 + minor).max(0) as u32)
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sm_{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_parsing() {
        assert_eq!(Arch::parse("sm_90").unwrap(), Arch(90));
        assert!(Arch::parse("sm_90a").unwrap_err().to_string().contains("give sm_90"));
        assert_eq!(Arch::parse("80").unwrap(), Arch(80));
        assert!(Arch::parse("sm_x").is_err());
        assert_eq!(Arch::from_capability(9, 0).to_string(), "sm_90");
    }
}
