//! `parse_interface`: a `__cuda_array_interface__` dict → a validated `Interface`.

use cai_runtime::cai::{ArrayView, StreamRef, TypestrOptions};
use cai_runtime::python::descriptor_from_object;
pub use cai_runtime::python::{descriptor_from_dict, descriptor_to_dict, interface_dict};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::array::DeviceArray;
use crate::errors::PyCaiResult;
use crate::pyobj::numpy_dtype;

/// A validated `__cuda_array_interface__`: the facts caijit derived from it.
#[pyclass(frozen, module = "caijit", name = "Interface")]
pub struct Interface {
    pub view: ArrayView,
    typestr: String,
    /// The device of the memory when the conversion that made this view learnt it (a
    /// launch then need not ask the driver again).
    pub device: Option<usize>,
    /// What keeps the memory the view addresses alive, held as long as the view.
    pub owner: Option<Owner>,
}

/// What a view holds alive, and whose rules it follows. A view of a view holds the same
/// owner, at any depth: a view never outlives the memory it addresses.
pub enum Owner {
    /// The caijit array viewed: its memory is freed (stream-ordered, after every launch
    /// that used it) only with the array, and its rules are the view's: the view carries
    /// the array's stream, and where the array may not be used (an array of another
    /// thread's per-thread default stream) neither may the view.
    Array(Py<DeviceArray>),
    /// A DLPack capsule holder, which launches reading the view hold too, until their work
    /// has finished.
    Capsule(Py<PyAny>),
}

impl Owner {
    pub fn clone_ref(&self, py: Python<'_>) -> Owner {
        match self {
            Owner::Array(a) => Owner::Array(a.clone_ref(py)),
            Owner::Capsule(c) => Owner::Capsule(c.clone_ref(py)),
        }
    }
}

impl Interface {
    /// A view that holds nothing (`parse_interface`: the caller keeps its object alive).
    pub fn from_view(view: ArrayView, typestr: String, device: Option<usize>) -> Interface {
        Interface { view, typestr, device, owner: None }
    }

    /// A view of a DLPack import, keeping its capsule alive as long as itself.
    pub fn of_capsule(view: ArrayView, device: Option<usize>, capsule: Py<PyAny>) -> Interface {
        let typestr = view.dtype().typestr().to_string();
        Interface { view, typestr, device, owner: Some(Owner::Capsule(capsule)) }
    }

    /// The one way to make a view of a caijit array: `view` (the array's own unless given)
    /// with the array's device, holding the array. Refused (`ArgumentError`) where the array
    /// may not be used: on a thread other than the home thread of an array on the
    /// per-thread default stream.
    pub fn of_array(array: Py<DeviceArray>, view: Option<ArrayView>) -> PyCaiResult<Interface> {
        let inner = &array.get().inner;
        inner.check_usable_here()?;
        let view = view.unwrap_or_else(|| inner.view());
        let typestr = view.dtype().typestr().to_string();
        Ok(Interface { view, typestr, device: Some(inner.context().ordinal()), owner: Some(Owner::Array(array)) })
    }

    /// The caijit array viewed, if any.
    pub fn array(&self) -> Option<&Py<DeviceArray>> {
        match &self.owner {
            Some(Owner::Array(a)) => Some(a),
            _ => None,
        }
    }

    /// Refuse a view of a caijit array where the array itself would be refused (its
    /// per-thread default stream is another thread's).
    pub fn check_usable_here(&self) -> PyCaiResult<()> {
        if let Some(a) = self.array() {
            a.get().inner.check_usable_here()?;
        }
        Ok(())
    }
}

#[pymethods]
impl Interface {
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.view.shape())
    }
    /// Byte strides, always explicit.
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.view.strides())
    }
    /// A `numpy.dtype` (`ml_dtypes.bfloat16` for bfloat16 where installed).
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        numpy_dtype(py, self.view.dtype())
    }
    /// The typestr as the producer wrote it.
    #[getter]
    fn typestr(&self) -> &str {
        &self.typestr
    }
    #[getter]
    fn ptr(&self) -> u64 {
        self.view.ptr()
    }
    #[getter]
    fn readonly(&self) -> bool {
        self.view.readonly()
    }
    #[getter]
    fn version(&self) -> u8 {
        self.view.version()
    }
    /// `None` (no ordering needed) or the CAI stream value: 1, 2 or a handle.
    #[getter]
    fn stream(&self) -> Option<u64> {
        self.view.stream().map(StreamRef::to_cai)
    }
    #[getter]
    fn ndim(&self) -> usize {
        self.view.ndim()
    }
    #[getter]
    fn size(&self) -> usize {
        self.view.size()
    }
    #[getter]
    fn itemsize(&self) -> usize {
        self.view.dtype().itemsize()
    }
    #[getter]
    fn nbytes(&self) -> usize {
        self.view.nbytes()
    }
    /// The device of the memory, when the conversion that made this view learnt it
    /// (`None` otherwise: a plain CAI dict says nothing of it).
    #[getter]
    fn device(&self) -> Option<usize> {
        self.device
    }
    #[getter]
    fn is_c_contiguous(&self) -> bool {
        self.view.is_c_contiguous()
    }
    #[getter]
    fn is_f_contiguous(&self) -> bool {
        self.view.is_f_contiguous()
    }
    /// `(lo, hi)`: the bytes addressed, relative to `ptr` (lo < 0 with negative strides).
    #[getter]
    fn byte_extent(&self) -> (i128, i128) {
        self.view.byte_extent()
    }
    #[getter]
    fn is_itemsize_aligned(&self) -> bool {
        self.view.is_itemsize_aligned()
    }
    /// The array re-exported as a CAI v3 dict (producer rules), so an `Interface` is
    /// itself a CUDA array that other libraries can consume.
    /// A view of a caijit array is refused where the array is (another thread than the
    /// home thread of an array on the per-thread default stream).
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyCaiResult<Bound<'py, PyDict>> {
        self.check_usable_here()?;
        Ok(descriptor_to_dict(py, &self.view.to_descriptor())?)
    }
    fn __repr__(&self) -> String {
        let v = &self.view;
        format!(
            "Interface(shape={:?}, strides={:?}, dtype={}, ptr={:#x}, readonly={}, version={}, stream={})",
            v.shape(),
            v.strides(),
            v.dtype(),
            v.ptr(),
            if v.readonly() { "True" } else { "False" },
            v.version(),
            v.stream().map_or("None".to_string(), |s| s.to_cai().to_string())
        )
    }
}

/// A CAI dict's validated view (every key type-checked, then the consumer rules), for
/// arguments of a launch.
pub fn view_from_dict(dict: &Bound<'_, PyDict>, options: TypestrOptions) -> PyCaiResult<ArrayView> {
    Ok(ArrayView::from_descriptor(&descriptor_from_dict(dict)?, options)?)
}

/// Validate `obj`'s `__cuda_array_interface__` (or `obj` itself when it is a dict)
/// without touching the GPU. `bfloat16=True` reads `<V2` as bfloat16.
#[pyfunction]
#[pyo3(signature = (obj, *, bfloat16 = false))]
pub fn parse_interface(obj: &Bound<'_, PyAny>, bfloat16: bool) -> PyCaiResult<Interface> {
    let desc = descriptor_from_object(obj)?;
    let options = if bfloat16 { TypestrOptions::BFLOAT16_V2 } else { TypestrOptions::default() };
    let view = ArrayView::from_descriptor(&desc, options)?;
    Ok(Interface::from_view(view, desc.typestr, None))
}
