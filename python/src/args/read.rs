//! Reading producers' objects cheaply, for the fast paths: per-thread tables keyed by a
//! type's address (its [`Route`]) or a dtype object's, NumPy dtypes, shape and stride tuples, and the
//! device of a known type's array.

use std::cell::RefCell;

use cai_runtime::cai::DType;
use cai_runtime::python::dlpack::ExchangeApi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use smallvec::SmallVec;

use super::producer::{Known, Producer};
use crate::errors::PyCaiResult;

/// How arguments of one type are read, decided once per type.
#[derive(Clone, Copy, Debug)]
pub enum Route {
    /// Through the type's DLPack exchange API (`known`: the producer the type also is, whose
    /// rules the table does not apply itself).
    Exchange {
        api: ExchangeApi,
        known: Option<Known>,
    },
    /// Through a producer's own attributes (its row of `PRODUCERS`, in `args/mod.rs`).
    Known(Known),
    Other,
}

impl Route {
    /// The producer the type was matched to, if any.
    pub fn producer(&self) -> Option<&'static Producer> {
        match self {
            Route::Exchange { known, .. } => known.map(|k| k.producer),
            Route::Known(k) => Some(k.producer),
            Route::Other => None,
        }
    }
}

thread_local! {
    /// Routes of the types seen, and caijit dtypes of the dtype objects seen: per thread,
    /// so the launch path takes no lock.
    static ROUTES: RefCell<Vec<(usize, Route)>> = const { RefCell::new(Vec::new()) };
    static SEEN_DTYPES: RefCell<Vec<(usize, Option<DType>)>> = const { RefCell::new(Vec::new()) };
}

/// A type's route, looked up by the type's address after the first time (`compute`).
pub fn remembered_route(ty: &Bound<'_, PyAny>, compute: impl FnOnce() -> PyResult<Route>) -> PyResult<Route> {
    remember(&ROUTES, ty, compute)
}

/// Look `key`'s address up in a per-thread table, computing and recording it the first
/// time. Every recorded object is kept alive for the process's life (a leaked strong
/// reference: types and dtype singletons, a handful per process), so no address in a table
/// can be reused by another object.
fn remember<V: Copy>(
    table: &'static std::thread::LocalKey<RefCell<Vec<(usize, V)>>>,
    key: &Bound<'_, PyAny>,
    compute: impl FnOnce() -> PyResult<V>,
) -> PyResult<V> {
    let addr = key.as_ptr() as usize;
    if let Some(v) = table.with_borrow(|t| t.iter().find(|(k, _)| *k == addr).map(|&(_, v)| v)) {
        return Ok(v);
    }
    let v = compute()?;
    std::mem::forget(key.clone().unbind());
    table.with_borrow_mut(|t| t.push((addr, v)));
    Ok(v)
}

/// NumPy, CuPy and PyTorch dtype objects are singletons: their caijit dtype is looked up by
/// address after the first time (the table holds a reference, so addresses stay unique).
pub fn cached_dtype(dtype_obj: &Bound<'_, PyAny>, read: impl FnOnce() -> PyResult<Option<DType>>) -> PyResult<Option<DType>> {
    remember(&SEEN_DTYPES, dtype_obj, read)
}

/// The dtype of an array whose `dtype` is a NumPy dtype (CuPy's, Numba's), from its
/// typestr, read once per dtype object; `None` for a dtype caijit does not know.
pub fn numpy_dtype_of(obj: &Bound<'_, PyAny>) -> PyResult<Option<DType>> {
    let py = obj.py();
    let dtype_obj = obj.getattr(intern!(py, "dtype"))?;
    cached_dtype(&dtype_obj, || {
        let typestr: String = dtype_obj.getattr(intern!(py, "str"))?.extract()?;
        Ok(DType::from_typestr(&typestr).ok())
    })
}

/// A shape or strides tuple (torch.Size included) read item by item, into a buffer on the
/// stack; any other sequence through the generic conversion.
pub fn ints<T>(obj: &Bound<'_, PyAny>) -> PyResult<SmallVec<[T; 4]>>
where
    T: for<'a, 'py> FromPyObject<'a, 'py, Error = PyErr>,
{
    match obj.cast::<PyTuple>() {
        Ok(t) => {
            let mut out = SmallVec::new();
            for item in t.iter_borrowed() {
                out.push(item.extract::<T>()?);
            }
            Ok(out)
        }
        Err(_) => Ok(obj.extract::<Vec<T>>()?.into()),
    }
}

/// The device of a known type's array: the runtime's [`sole_device`](cai_runtime::runtime::sole_device)
/// when there is one, else asked of the object itself by `ask` (still cheaper than the
/// driver's pointer query).
pub fn object_device(ask: impl FnOnce() -> PyCaiResult<usize>) -> PyCaiResult<usize> {
    match cai_runtime::runtime::sole_device() {
        Some(d) => Ok(d),
        None => ask(),
    }
}
