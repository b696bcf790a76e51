//! NVRTC's calls (feature `nvrtc`): loading the library, and programs compiled through it.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;
use std::ptr;
use std::sync::OnceLock;

use cudarc::nvrtc::sys as nv;

use super::library::open_library;
use super::nvrtc_error::NvrtcError;

/// Why NVRTC cannot be used whatever is installed: never, in a build with it (see
/// `no_nvrtc.rs`).
pub(crate) const LEFT_OUT: Option<&str> = None;

/// Proof that NVRTC is loaded; the only way to call it.
#[derive(Debug)]
pub(crate) struct Nvrtc {
    _private: (),
}

static NVRTC: OnceLock<Nvrtc> = OnceLock::new();

/// Load NVRTC from `name` (a path or a soname) and hand out the token.
///
/// cudarc resolves NVRTC's symbols by `dlopen`ing its candidate sonames; once a library of
/// that soname (`libnvrtc.so.13`, `libnvrtc.so.12`) is loaded here, those resolve to it.
pub(crate) fn load_nvrtc(name: &Path) -> Result<&'static Nvrtc, String> {
    let file = name.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    if !file.starts_with("libnvrtc.so") {
        return Err(format!("{} is not named like NVRTC (libnvrtc.so*)", name.display()));
    }
    let ours = open_library(name)?;
    // cudarc calls NVRTC through the library it opens by soname. It must be this one, with
    // every function caijit calls: otherwise another libnvrtc.so would be called (and a
    // missing function would panic inside cudarc).
    let theirs = std::panic::catch_unwind(|| {
        // SAFETY: opening a library by soname; cudarc keeps it for the process.
        unsafe { nv::culib() }
    })
    .map_err(|_| format!("{} is loaded, but cudarc finds no NVRTC by its soname", name.display()))?;
    for symbol in NVRTC_FUNCTIONS {
        // SAFETY: looking symbols up calls nothing; the addresses are only compared.
        let (a, b) = unsafe { (ours.get::<*const c_void>(symbol.as_bytes()), theirs.get::<*const c_void>(symbol.as_bytes())) };
        match (a, b) {
            (Ok(a), Ok(b)) if *a == *b => {}
            (Err(_), _) => return Err(format!("{} has no {symbol}: not a usable NVRTC", name.display())),
            _ => {
                return Err(format!(
                    "{} is loaded, but NVRTC's functions would be called from another libnvrtc.so found first on the loader's search path (LD_LIBRARY_PATH?)",
                    name.display()
                ))
            }
        }
    }
    Ok(NVRTC.get_or_init(|| Nvrtc { _private: () }))
}

/// The NVRTC functions caijit calls.
const NVRTC_FUNCTIONS: [&str; 15] = [
    "nvrtcVersion",
    "nvrtcGetNumSupportedArchs",
    "nvrtcGetSupportedArchs",
    "nvrtcCreateProgram",
    "nvrtcDestroyProgram",
    "nvrtcAddNameExpression",
    "nvrtcCompileProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetPTXSize",
    "nvrtcGetPTX",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
    "nvrtcGetLoweredName",
    "nvrtcGetErrorString",
];

/// Text NVRTC cannot take (a NUL byte inside), refused before the call as NVRTC would.
fn nul_byte(call: &'static str, what: &str) -> NvrtcError {
    let code = nv::nvrtcResult::NVRTC_ERROR_INVALID_INPUT;
    NvrtcError { call, code: code as i32, name: format!("{code:?}"), message: format!("{what} contains a NUL byte") }
}

fn nv_check(call: &'static str, r: nv::nvrtcResult) -> Result<(), NvrtcError> {
    if r == nv::nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any value.
    let s = unsafe { CStr::from_ptr(nv::nvrtcGetErrorString(r)) };
    Err(NvrtcError { call, code: r as i32, name: format!("{r:?}"), message: s.to_string_lossy().into_owned() })
}

/// An NVRTC program, destroyed on drop.
pub(crate) struct NvProgram {
    prog: nv::nvrtcProgram,
}

impl Drop for NvProgram {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed once.
        // A failure cannot be reported from drop and leaks nothing worse than the program.
        let _ = unsafe { nv::nvrtcDestroyProgram(&mut self.prog) };
    }
}

impl Nvrtc {
    pub fn version(&self) -> Result<(i32, i32), NvrtcError> {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: NVRTC is loaded; valid out-pointers.
        nv_check("nvrtcVersion", unsafe { nv::nvrtcVersion(&mut major, &mut minor) })?;
        Ok((major, minor))
    }

    /// Architectures NVRTC can target (`90` for sm_90).
    pub fn supported_archs(&self) -> Result<Vec<i32>, NvrtcError> {
        let mut n = 0;
        // SAFETY: valid out-pointer.
        nv_check("nvrtcGetNumSupportedArchs", unsafe { nv::nvrtcGetNumSupportedArchs(&mut n) })?;
        let mut archs = vec![0; n.max(0) as usize];
        // SAFETY: the buffer holds exactly the number of entries NVRTC reported.
        nv_check("nvrtcGetSupportedArchs", unsafe { nv::nvrtcGetSupportedArchs(archs.as_mut_ptr()) })?;
        Ok(archs)
    }

    /// Create a program from `source` with in-memory headers `(include name, contents)`.
    pub fn create_program(&self, source: &str, name: &str, headers: &[(String, String)]) -> Result<NvProgram, NvrtcError> {
        let cstr = |s: &str, what: &str| CString::new(s).map_err(|_| nul_byte("nvrtcCreateProgram", what));
        let src = cstr(source, "the source")?;
        let name = cstr(name, "the program name")?;
        let contents: Vec<CString> = headers.iter().map(|(_, c)| cstr(c, "a header")).collect::<Result<_, _>>()?;
        let names: Vec<CString> = headers.iter().map(|(n, _)| cstr(n, "a header name")).collect::<Result<_, _>>()?;
        let contents_ptrs: Vec<*const c_char> = contents.iter().map(|c| c.as_ptr()).collect();
        let names_ptrs: Vec<*const c_char> = names.iter().map(|c| c.as_ptr()).collect();
        let mut prog = ptr::null_mut();
        // SAFETY: every pointer refers to a live NUL-terminated string; NVRTC copies them.
        nv_check("nvrtcCreateProgram", unsafe {
            nv::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                headers.len() as c_int,
                contents_ptrs.as_ptr(),
                names_ptrs.as_ptr(),
            )
        })?;
        Ok(NvProgram { prog })
    }
}

impl NvProgram {
    pub fn add_name_expression(&mut self, expr: &str) -> Result<(), NvrtcError> {
        let e = CString::new(expr).map_err(|_| nul_byte("nvrtcAddNameExpression", "a name expression"))?;
        // SAFETY: live program; NVRTC copies the string.
        nv_check("nvrtcAddNameExpression", unsafe { nv::nvrtcAddNameExpression(self.prog, e.as_ptr()) })
    }

    /// Compile; `Ok(false)` when NVRTC reports a compilation error (see [`NvProgram::log`]).
    pub fn compile(&mut self, options: &[String]) -> Result<bool, NvrtcError> {
        let opts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()).map_err(|_| nul_byte("nvrtcCompileProgram", &format!("option {o:?}"))))
            .collect::<Result<_, _>>()?;
        let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        // SAFETY: live program; option strings outlive the call.
        let r = unsafe { nv::nvrtcCompileProgram(self.prog, ptrs.len() as c_int, ptrs.as_ptr()) };
        match r {
            nv::nvrtcResult::NVRTC_SUCCESS => Ok(true),
            nv::nvrtcResult::NVRTC_ERROR_COMPILATION => Ok(false),
            other => nv_check("nvrtcCompileProgram", other).map(|()| false),
        }
    }

    fn read(
        &self,
        what: &'static str,
        size: unsafe fn(nv::nvrtcProgram, *mut usize) -> nv::nvrtcResult,
        get: unsafe fn(nv::nvrtcProgram, *mut c_char) -> nv::nvrtcResult,
    ) -> Result<Vec<u8>, NvrtcError> {
        let mut n = 0usize;
        // SAFETY: live program and valid out-pointer.
        nv_check(what, unsafe { size(self.prog, &mut n) })?;
        let mut buf = vec![0u8; n];
        if n > 0 {
            // SAFETY: the buffer holds the size NVRTC reported.
            nv_check(what, unsafe { get(self.prog, buf.as_mut_ptr() as *mut c_char) })?;
        }
        Ok(buf)
    }

    pub fn log(&self) -> Result<String, NvrtcError> {
        let mut b = self.read("nvrtcGetProgramLog", nv::nvrtcGetProgramLogSize, nv::nvrtcGetProgramLog)?;
        while b.last() == Some(&0) {
            b.pop();
        }
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    pub fn ptx(&self) -> Result<String, NvrtcError> {
        let mut b = self.read("nvrtcGetPTX", nv::nvrtcGetPTXSize, nv::nvrtcGetPTX)?;
        while b.last() == Some(&0) {
            b.pop();
        }
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    /// The CUBIN, or `None` when the program was compiled for a virtual architecture.
    pub fn cubin(&self) -> Result<Option<Vec<u8>>, NvrtcError> {
        let b = self.read("nvrtcGetCUBIN", nv::nvrtcGetCUBINSize, nv::nvrtcGetCUBIN)?;
        Ok((!b.is_empty()).then_some(b))
    }

    pub fn lowered_name(&self, expr: &str) -> Result<String, NvrtcError> {
        let e = CString::new(expr).map_err(|_| nul_byte("nvrtcAddNameExpression", "a name expression"))?;
        let mut out: *const c_char = ptr::null();
        // SAFETY: live, compiled program; NVRTC returns a pointer owned by the program.
        nv_check("nvrtcGetLoweredName", unsafe { nv::nvrtcGetLoweredName(self.prog, e.as_ptr(), &mut out) })?;
        if out.is_null() {
            let code = nv::nvrtcResult::NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID;
            let message = format!("NVRTC has no lowered name for {expr:?}");
            return Err(NvrtcError { call: "nvrtcGetLoweredName", code: code as i32, name: format!("{code:?}"), message });
        }
        // SAFETY: non-null results are NUL-terminated and live as long as the program.
        Ok(unsafe { CStr::from_ptr(out) }.to_string_lossy().into_owned())
    }
}
