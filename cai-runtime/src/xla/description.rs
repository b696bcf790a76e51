//! A launch's description: the text its custom call carries (`caijit_launch`), which
//! holds everything another process needs to compile, load and bind the kernel, and its
//! fingerprint (`caijit_fingerprint`).

use std::fmt::Write as _;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::spec::{Binding, BufferSpec, FINGERPRINT};
use crate::cai::DType;
use crate::compile::Program;
use crate::error::{Error, Result};
use crate::launch::{LaunchConfig, Num};

/// The first token of every description: its format (bumped when the format changes).
const FORMAT: &str = "caijit-xla-launch/2";

/// What a launch is, in full: what its description encodes.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Description {
    pub(super) program: Program,
    /// The family key of `program` as it was compiled where it was traced ([`compiled_key`]):
    /// its source, options and own headers' contents, independent of the NVRTC build.
    pub(super) headers: String,
    pub(super) name: String,
    pub(super) inputs: Vec<BufferSpec>,
    pub(super) outputs: Vec<BufferSpec>,
    pub(super) aliases: Vec<(usize, usize)>,
    pub(super) bindings: Vec<Binding>,
    pub(super) config: LaunchConfig,
}

/// The fingerprint of a description: the first 128 bits of its SHA-256.
pub(super) fn fingerprint_of(description: &str) -> u128 {
    let digest = Sha256::digest(description.as_bytes());
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_be_bytes(first)
}

/// A fingerprint attribute's value: exactly 32 hex digits.
pub(super) fn parse_fingerprint(text: &[u8]) -> Result<u128> {
    let malformed = || {
        Error::argument(format!(
            "the custom call's `{FINGERPRINT}` attribute is {:?}; 32 hex digits were expected",
            String::from_utf8_lossy(&text[..text.len().min(64)])
        ))
    };
    if text.len() != 32 || !text.iter().all(u8::is_ascii_hexdigit) {
        return Err(malformed());
    }
    let text = std::str::from_utf8(text).map_err(|_| malformed())?;
    u128::from_str_radix(text, 16).map_err(|_| malformed())
}

/// A description's writer: each field is `<byte length>:<bytes>`, so any text fits.
struct Writer(String);

impl Writer {
    fn field(&mut self, v: &str) -> &mut Self {
        let _ = write!(self.0, "{}:{v}", v.len());
        self
    }
    fn num(&mut self, v: impl std::fmt::Display) -> &mut Self {
        self.field(&v.to_string())
    }
    fn path(&mut self, p: &std::path::Path) -> Result<&mut Self> {
        let s = p.to_str().ok_or_else(|| Error::argument(format!("the include path {} is not UTF-8", p.display())))?;
        Ok(self.field(s))
    }
}

/// A description's reader.
struct Reader<'a>(&'a str);

impl<'a> Reader<'a> {
    fn malformed(what: &str) -> Error {
        Error::argument(format!("the custom call's launch description is malformed ({what}); trace the program again"))
    }
    fn field(&mut self) -> Result<&'a str> {
        let colon = self.0.find(':').ok_or_else(|| Self::malformed("a field without a length"))?;
        let len: usize = self.0[..colon].parse().map_err(|_| Self::malformed("a field length"))?;
        let end = (colon + 1).checked_add(len).ok_or_else(|| Self::malformed("a field length"))?;
        let v = self.0.get(colon + 1..end).ok_or_else(|| Self::malformed("a field past its end"))?;
        self.0 = &self.0[end..];
        Ok(v)
    }
    fn num<T: std::str::FromStr>(&mut self) -> Result<T> {
        self.field()?.parse().map_err(|_| Self::malformed("a number"))
    }
    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> Result<T>) -> Result<Vec<T>> {
        let n: usize = self.num()?;
        (0..n).map(|_| item(self)).collect()
    }
    fn dims(&mut self) -> Result<[u32; 3]> {
        Ok([self.num()?, self.num()?, self.num()?])
    }
}

impl Description {
    pub(super) fn encode(&self) -> Result<String> {
        // Every field of the program, by name: a new field fails to compile here until the
        // description carries it.
        let Program { source, name, options, include_dirs, defines, name_expressions, source_dir } = &self.program;
        let mut w = Writer(String::with_capacity(source.len() + 256));
        w.field(FORMAT).field(source).field(name).field(&self.headers);
        w.num(options.len());
        for o in options {
            w.field(o);
        }
        w.num(include_dirs.len());
        for d in include_dirs {
            w.path(d)?;
        }
        w.num(defines.len());
        for (n, v) in defines {
            w.field(n).field(if v.is_some() { "1" } else { "0" }).field(v.as_deref().unwrap_or(""));
        }
        w.num(name_expressions.len());
        for e in name_expressions {
            w.field(e);
        }
        match source_dir {
            Some(d) => w.field("1").path(d)?,
            None => w.field("0"),
        };
        w.field(&self.name);
        for specs in [&self.inputs, &self.outputs] {
            w.num(specs.len());
            for s in specs {
                w.field(s.dtype.name()).num(s.shape.len());
                for &d in &s.shape {
                    w.num(d);
                }
            }
        }
        w.num(self.aliases.len());
        for &(i, o) in &self.aliases {
            w.num(i).num(o);
        }
        w.num(self.bindings.len());
        for b in &self.bindings {
            match *b {
                Binding::Buffer(i) => w.field("buffer").num(i),
                Binding::Scalar(Num::Bool(v)) => w.field("bool").num(u8::from(v)),
                Binding::Scalar(Num::Int(v)) => w.field("int").num(v),
                Binding::Scalar(Num::Float(v)) => w.field("float").num(v.to_bits()),
                Binding::Scalar(Num::Complex(re, im)) => w.field("complex").num(re.to_bits()).num(im.to_bits()),
            };
        }
        let LaunchConfig { grid, block, shared_mem, cluster, cooperative } = self.config;
        for d in grid.iter().chain(&block) {
            w.num(d);
        }
        w.num(shared_mem).num(u8::from(cooperative));
        for d in cluster.unwrap_or([0, 0, 0]) {
            w.num(d);
        }
        Ok(w.0)
    }

    pub(super) fn decode(text: &str) -> Result<Description> {
        let mut r = Reader(text);
        let format = r.field()?;
        if format != FORMAT {
            return Err(Error::argument(format!(
                "the custom call's launch description has format {format:?}; this caijit reads {FORMAT:?} (trace the program again with this caijit)"
            )));
        }
        let flag = |r: &mut Reader<'_>| match r.field()? {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err(Reader::malformed("a flag")),
        };
        let source = r.field()?.to_string();
        let name = r.field()?.to_string();
        let headers = r.field()?.to_string();
        let options = r.list(|r| Ok(r.field()?.to_string()))?;
        let include_dirs = r.list(|r| Ok(PathBuf::from(r.field()?)))?;
        let defines = r.list(|r| {
            let n = r.field()?.to_string();
            let has = flag(r)?;
            let v = r.field()?.to_string();
            Ok((n, has.then_some(v)))
        })?;
        let name_expressions = r.list(|r| Ok(r.field()?.to_string()))?;
        let source_dir = if flag(&mut r)? { Some(PathBuf::from(r.field()?)) } else { None };
        let program = Program { source, name, options, include_dirs, defines, name_expressions, source_dir };
        let kernel = r.field()?.to_string();
        let spec = |r: &mut Reader<'_>| {
            let dtype = r.field()?;
            let dtype = DType::from_name(dtype).ok_or_else(|| Reader::malformed("a dtype"))?;
            Ok(BufferSpec { dtype, shape: r.list(|r| r.num())? })
        };
        let inputs = r.list(spec)?;
        let outputs = r.list(spec)?;
        let aliases = r.list(|r| Ok((r.num()?, r.num()?)))?;
        let bindings = r.list(|r| {
            Ok(match r.field()? {
                "buffer" => Binding::Buffer(r.num()?),
                "bool" => Binding::Scalar(Num::Bool(flag(r)?)),
                "int" => Binding::Scalar(Num::Int(r.num()?)),
                "float" => Binding::Scalar(Num::Float(f64::from_bits(r.num()?))),
                "complex" => Binding::Scalar(Num::Complex(f64::from_bits(r.num()?), f64::from_bits(r.num()?))),
                _ => return Err(Reader::malformed("a binding")),
            })
        })?;
        let (grid, block) = (r.dims()?, r.dims()?);
        let shared_mem = r.num()?;
        let cooperative = flag(&mut r)?;
        let cluster = r.dims()?;
        if !r.0.is_empty() {
            return Err(Reader::malformed("text after its last field"));
        }
        let config = LaunchConfig { grid, block, shared_mem, cluster: (cluster != [0, 0, 0]).then_some(cluster), cooperative };
        Ok(Description { program, headers, name: kernel, inputs, outputs, aliases, bindings, config })
    }
}
