//! Diagnostics of compilation: `-lineinfo` builds, and the NVTX range of a compile.
//!
//! `-lineinfo` builds: optimized code with a line table, so that compute-sanitizer and
//! Nsight Compute name the `.cu` file and line of a fault or a hot spot. Not a debug build
//! (`-G`): the code is the same optimized code, the line table is extra.

use super::program::Program;

/// With NVTX on (`CAIJIT_NVTX=1`), an NVTX range around a compilation, named
/// `caijit compile <name expressions or file name>`.
pub(super) fn nvtx_range(program: &Program) -> Option<crate::sys::nvtx::Range> {
    if !crate::diag::enabled(crate::diag::NVTX) {
        return None;
    }
    let what = if program.name_expressions.is_empty() { program.name.clone() } else { program.name_expressions.join(", ") };
    let name = std::ffi::CString::new(format!("caijit compile {what}")).ok()?;
    Some(crate::sys::nvtx::Range::push(&name))
}

/// The option NVRTC takes.
pub const LINEINFO: &str = "-lineinfo";

impl Program {
    /// Compile with `-lineinfo` (an option like any other, so it enters the cache key: a
    /// line-info build is cached apart from the plain one). A program read from a file is
    /// named by the file's absolute path, so that tools find the source; source text keeps
    /// its name.
    pub fn lineinfo(mut self) -> Self {
        if !self.options.iter().any(|o| o == LINEINFO) {
            self.options.push(LINEINFO.into());
        }
        if let Some(dir) = &self.source_dir {
            let path = dir.join(&self.name);
            if let Ok(absolute) = std::path::absolute(&path) {
                self.name = absolute.to_string_lossy().into_owned();
            }
        }
        self
    }

    /// Whether the program is compiled with `-lineinfo`.
    pub fn has_lineinfo(&self) -> bool {
        self.options.iter().any(|o| o == LINEINFO || o == "--generate-line-info")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lineinfo_adds_the_option_once_and_names_a_file_program_by_its_path() {
        let p = Program::new("__global__ void k() {}").located_at("kernels/k.cu").lineinfo().lineinfo();
        assert_eq!(p.options.iter().filter(|o| *o == LINEINFO).count(), 1);
        assert!(std::path::Path::new(&p.name).is_absolute(), "{}", p.name);
        assert!(p.name.ends_with("kernels/k.cu"), "{}", p.name);
        assert!(p.has_lineinfo());
        let text = Program::new("__global__ void k() {}").lineinfo();
        assert_eq!(text.name, "kernel.cu");
        assert!(!Program::new("").has_lineinfo());
    }
}
