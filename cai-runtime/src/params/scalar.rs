//! Scalar arguments encoded as exactly their parameter's type, range-checked: the one
//! encoding a launch, a JAX launch's prepared scalars and the ops share.

use crate::cai::DType;

/// A scalar argument's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    Bool(bool),
    Int(i128),
    Float(f64),
    Complex(f64, f64),
}

macro_rules! num_from {
    ($($t:ty => $v:ident),* $(,)?) => {
        $(impl From<$t> for Num {
            fn from(x: $t) -> Num {
                Num::$v(x.into())
            }
        })*
    };
}
num_from!(bool => Bool, i8 => Int, i16 => Int, i32 => Int, i64 => Int, u8 => Int, u16 => Int, u32 => Int, u64 => Int, f32 => Float, f64 => Float);

impl From<usize> for Num {
    fn from(x: usize) -> Num {
        Num::Int(x as i128)
    }
}

impl From<isize> for Num {
    fn from(x: isize) -> Num {
        Num::Int(x as i128)
    }
}

impl From<half::f16> for Num {
    fn from(x: half::f16) -> Num {
        Num::Float(x.into())
    }
}

impl From<half::bf16> for Num {
    fn from(x: half::bf16) -> Num {
        Num::Float(x.into())
    }
}

/// A scalar parameter's bytes (at most 16, for complex128), kept on the stack: encoding
/// a launch's scalars allocates nothing.
#[derive(Clone, Copy, Debug)]
pub struct ScalarBytes {
    buf: [u8; 16],
    len: usize,
}

impl ScalarBytes {
    fn new(parts: &[&[u8]]) -> Self {
        let mut s = ScalarBytes { buf: [0; 16], len: 0 };
        for p in parts {
            s.buf[s.len..s.len + p.len()].copy_from_slice(p);
            s.len += p.len();
        }
        s
    }
}

impl std::ops::Deref for ScalarBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl<const N: usize> PartialEq<[u8; N]> for ScalarBytes {
    fn eq(&self, other: &[u8; N]) -> bool {
        **self == other[..]
    }
}

/// Encode a scalar as exactly `dtype`, checking its range.
pub fn encode_scalar(value: Num, dtype: DType) -> std::result::Result<ScalarBytes, String> {
    use DType::*;
    let int = |v: Num| -> std::result::Result<i128, String> {
        match v {
            Num::Int(i) => Ok(i),
            Num::Bool(b) => Ok(i128::from(b)),
            Num::Float(f) => Err(format!("{f} is a float; the parameter is an integer (convert explicitly)")),
            Num::Complex(..) => Err("a complex number cannot be converted to an integer".into()),
        }
    };
    let float = |v: Num| -> std::result::Result<f64, String> {
        match v {
            Num::Float(f) => Ok(f),
            Num::Int(i) => Ok(i as f64),
            Num::Bool(b) => Ok(f64::from(u8::from(b))),
            Num::Complex(..) => Err("a complex number cannot be converted to a real type".into()),
        }
    };
    macro_rules! ranged {
        ($t:ty) => {{
            let i = int(value)?;
            <$t>::try_from(i)
                .map(|x| ScalarBytes::new(&[&x.to_le_bytes()]))
                .map_err(|_| format!("{i} is out of range for {} [{}, {}]", dtype.cpp_name(), <$t>::MIN, <$t>::MAX))?
        }};
    }
    let finite_max = |f: f64, max: f64| -> std::result::Result<f64, String> {
        if f.is_finite() && f.abs() > max {
            Err(format!("{f} is out of range for {} (largest finite value {max})", dtype.cpp_name()))
        } else {
            Ok(f)
        }
    };
    Ok(match dtype {
        Bool => match value {
            Num::Bool(b) => ScalarBytes::new(&[&[u8::from(b)]]),
            Num::Int(i @ (0 | 1)) => ScalarBytes::new(&[&[i as u8]]),
            other => return Err(format!("{other:?} is not a bool")),
        },
        I8 => ranged!(i8),
        I16 => ranged!(i16),
        I32 => ranged!(i32),
        I64 => ranged!(i64),
        U8 => ranged!(u8),
        U16 => ranged!(u16),
        U32 => ranged!(u32),
        U64 => ranged!(u64),
        F16 => ScalarBytes::new(&[&half::f16::from_f64(finite_max(float(value)?, 65504.0)?).to_le_bytes()]),
        BF16 => ScalarBytes::new(&[&half::bf16::from_f64(finite_max(float(value)?, 3.3895313892515355e38)?).to_le_bytes()]),
        F32 => ScalarBytes::new(&[&(finite_max(float(value)?, f32::MAX as f64)? as f32).to_le_bytes()]),
        F64 => ScalarBytes::new(&[&float(value)?.to_le_bytes()]),
        C64 | C128 => {
            let (re, im) = match value {
                Num::Complex(re, im) => (re, im),
                other => (float(other)?, 0.0),
            };
            if dtype == C64 {
                let (re, im) = (finite_max(re, f32::MAX as f64)? as f32, finite_max(im, f32::MAX as f64)? as f32);
                ScalarBytes::new(&[&re.to_le_bytes(), &im.to_le_bytes()])
            } else {
                ScalarBytes::new(&[&re.to_le_bytes(), &im.to_le_bytes()])
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_are_converted_exactly_with_range_checks() {
        assert_eq!(encode_scalar(Num::Int(-1), DType::I32).unwrap(), (-1i32).to_le_bytes());
        assert!(encode_scalar(Num::Int(1 << 40), DType::I32).unwrap_err().contains("out of range"));
        assert!(encode_scalar(Num::Int(-1), DType::U8).unwrap_err().contains("out of range"));
        assert!(encode_scalar(Num::Float(1.5), DType::I64).unwrap_err().contains("float"));
        assert_eq!(encode_scalar(Num::Int(3), DType::F32).unwrap(), 3.0f32.to_le_bytes());
        assert_eq!(encode_scalar(Num::Float(0.5), DType::F16).unwrap(), half::f16::from_f32(0.5).to_le_bytes());
        assert!(encode_scalar(Num::Float(1e6), DType::F16).unwrap_err().contains("out of range"));
        assert!(encode_scalar(Num::Float(f64::INFINITY), DType::F32).is_ok());
        assert_eq!(encode_scalar(Num::Bool(true), DType::Bool).unwrap(), [1]);
        assert!(encode_scalar(Num::Int(2), DType::Bool).is_err());
        assert_eq!(encode_scalar(Num::Complex(1.0, -2.0), DType::C128).unwrap().len(), 16);
        assert_eq!(encode_scalar(Num::Int(u64::MAX as i128), DType::U64).unwrap(), u64::MAX.to_le_bytes());
    }
}
