//! Code generation. Everything is wrapped in `const _: () = { ... };` and reaches the
//! runtime through `#krate::__private`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::DeriveInput;

use crate::attr::{Errors, Role};
use crate::check::{self, last_ident};

fn krate(p: &check::Parsed<'_>) -> TokenStream {
    match &p.container.krate {
        Some(path) => quote!(#path),
        None => quote!(::cai_runtime),
    }
}

pub fn cuda_array_interface(input: &DeriveInput) -> TokenStream {
    let mut errors = Errors::default();
    let p = check::parse(input, &mut errors);
    check::cai_struct(input, &p, &mut errors);
    let k = krate(&p);
    let name = &input.ident;
    let (impl_g, ty_g, where_g) = input.generics.split_for_impl();
    if let Err(e) = errors.finish() {
        return e.to_compile_error();
    }
    let data = p.role(Role::Data).expect("checked");
    let shape = p.role(Role::Shape).expect("checked");
    let (data_id, shape_id) = (&data.ident, &shape.ident);
    let dtype = match &p.container.dtype {
        Some(t) => quote_spanned!(t.span()=> <#t as #k::__private::Element>::DTYPE),
        None => quote!(self.#data_id.dtype()),
    };
    let strides = match p.role(Role::Strides) {
        Some(f) => {
            let id = &f.ident;
            quote!(#k::__private::StridesField::strides(&self.#id))
        }
        None => quote!(::core::option::Option::None),
    };
    let stream = match p.role(Role::Stream) {
        Some(f) => {
            let id = &f.ident;
            quote!(#k::__private::StreamField::stream(&self.#id))
        }
        None => quote!(::core::option::Option::None),
    };
    let readonly = match p.role(Role::Readonly) {
        Some(f) => {
            let id = &f.ident;
            quote!(self.#id)
        }
        None => quote!(!#k::__private::DataField::writable(&self.#data_id)),
    };
    let data_ty = &data.ty;
    let shape_ty = &shape.ty;
    let assert_data = quote_spanned!(data_ty.span()=> fn _assert_data<T: #k::__private::DataField>() {} _assert_data::<#data_ty>(););
    let assert_shape = quote_spanned!(shape_ty.span()=> fn _assert_shape<T: #k::__private::ShapeField>() {} _assert_shape::<#shape_ty>(););
    let export = quote! {
        impl #impl_g #k::__private::CudaArrayInterface for #name #ty_g #where_g {
            fn cai_view(&self) -> ::core::result::Result<#k::__private::ArrayView, #k::__private::InterfaceError> {
                #assert_data
                #assert_shape
                #k::__private::export_view(
                    #k::__private::DataField::device_ptr(&self.#data_id),
                    &#k::__private::ShapeField::dims(&self.#shape_id),
                    #strides,
                    #dtype,
                    #readonly,
                    #stream,
                )
            }
        }
    };
    // Import only where every field can be built from a borrowed pointer.
    let borrowed = last_ident(data_ty).is_some_and(|i| i == "u64" || i == "CUdeviceptr");
    let import = if borrowed {
        let dtype_const = p.container.dtype.as_ref().map(|t| quote!(<#t as #k::__private::Element>::DTYPE)).expect("checked");
        let has_strides = p.role(Role::Strides).is_some();
        let has_readonly = p.role(Role::Readonly).is_some();
        let inits = p.fields.iter().map(|(f, a)| {
            let id = &f.ident;
            let ty = &f.ty;
            match a.role.map(|r| r.0) {
                Some(Role::Data) => quote!(#id: view.ptr()),
                Some(Role::Shape) => quote!(#id: <#ty as #k::__private::ShapeField>::from_dims(view.shape())
                    .ok_or(#k::__private::InterfaceError::RankMismatch { expected: <#ty as #k::__private::ShapeField>::RANK.unwrap_or(0), got: view.ndim() })?),
                Some(Role::Strides) => quote!(#id: <#ty as #k::__private::StridesField>::from_strides(view.strides())
                    .ok_or(#k::__private::InterfaceError::RankMismatch { expected: view.ndim(), got: view.strides().len() })?),
                Some(Role::Stream) => quote_spanned!(ty.span()=> #id: <#ty as #k::__private::StreamFieldImport>::from_stream(view.stream().map(|s| s.to_cai()))
                    .unwrap_or_default()),
                Some(Role::Readonly) => quote!(#id: view.readonly()),
                None => quote_spanned!(ty.span()=> #id: ::core::default::Default::default()),
            }
        });
        quote! {
            impl #impl_g #k::__private::FromCudaArrayInterface for #name #ty_g #where_g {
                fn from_cai(view: &#k::__private::ArrayView) -> ::core::result::Result<Self, #k::__private::InterfaceError> {
                    #k::__private::check_import(
                        view,
                        #dtype_const,
                        <#shape_ty as #k::__private::ShapeField>::RANK,
                        !#has_strides,
                        !#has_readonly,
                    )?;
                    ::core::result::Result::Ok(Self { #(#inits,)* })
                }
            }
        }
    } else {
        quote!()
    };
    let python = p.container.python.map(|span| python_glue(&k, name, borrowed, span));
    quote! {
        const _: () = {
            #export
            #import
            #python
        };
    }
}

/// `#[cai(python)]`: the `__cuda_array_interface__` getter of a `#[pyclass]`, and (where
/// import exists) `FromPyObject` from any object carrying a CAI, so a `#[pyfunction]` can
/// take the type from a PyTorch tensor or a CuPy array. Uses the user's own `pyo3`.
fn python_glue(k: &TokenStream, name: &syn::Ident, import: bool, span: proc_macro2::Span) -> TokenStream {
    let from = import.then(|| {
        quote_spanned! {span=>
            impl<'a, 'py> ::pyo3::FromPyObject<'a, 'py> for #name {
                type Error = ::pyo3::PyErr;
                fn extract(obj: ::pyo3::Borrowed<'a, 'py, ::pyo3::PyAny>) -> ::core::result::Result<Self, ::pyo3::PyErr> {
                    let d = #k::__private::python::descriptor_from_object(&obj)?;
                    <Self as #k::__private::FromCudaArrayInterface>::from_descriptor(&d)
                        .map_err(|e| ::pyo3::exceptions::PyValueError::new_err(e.to_string()))
                }
            }
        }
    });
    quote_spanned! {span=>
        #[::pyo3::pymethods]
        impl #name {
            /// The CUDA Array Interface (v3, with the stream).
            #[getter]
            fn __cuda_array_interface__<'py>(
                &self,
                py: ::pyo3::Python<'py>,
            ) -> ::pyo3::PyResult<::pyo3::Bound<'py, ::pyo3::types::PyDict>> {
                let d = <Self as #k::__private::CudaArrayInterface>::cai_descriptor(self)
                    .map_err(|e| ::pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
                ::core::result::Result::Ok(#k::__private::python::descriptor_to_dict(py, &d)?)
            }
        }
        #from
    }
}

pub fn kernel_params(input: &DeriveInput) -> TokenStream {
    let mut errors = Errors::default();
    let p = check::parse(input, &mut errors);
    let name = &input.ident;
    if !check::has_repr_c(input) {
        errors.spanned(name.span(), "#[derive(KernelParams)] needs #[repr(C)]: its layout must match the CUDA struct's");
    }
    if !input.generics.params.is_empty() {
        errors.spanned(input.generics.span(), "#[derive(KernelParams)] does not support generic structs");
    }
    for (_, a) in &p.fields {
        if let Some((role, span)) = a.role {
            errors.spanned(span, format!("`{}` belongs to #[derive(CudaArrayInterface)]", role.name()));
        }
    }
    if let Some(t) = &p.container.dtype {
        errors.spanned(t.span(), "`dtype` belongs to #[derive(CudaArrayInterface)]");
    }
    let k = krate(&p);
    if let Err(e) = errors.finish() {
        return e.to_compile_error();
    }
    let writes = p.fields.iter().map(|(f, _)| {
        let id = &f.ident;
        let ty = &f.ty;
        quote_spanned!(ty.span()=> <#ty as #k::__private::ParamBytes>::write_param(&self.#id, &mut out[::core::mem::offset_of!(#name, #id)..]);)
    });
    let offsets = p.fields.iter().filter_map(|(f, a)| {
        let id = &f.ident;
        a.offset.as_ref().map(|o| {
            let msg = format!("field `{}` of `{}` is not at offset {} (its CUDA twin's)", id.as_ref().unwrap(), name, o.base10_digits());
            quote_spanned!(o.span()=> assert!(::core::mem::offset_of!(#name, #id) == #o, #msg);)
        })
    });
    let size = p.container.size.as_ref().map(|s| {
        let msg = format!("`{}` is not {} bytes (its CUDA twin's size)", name, s.base10_digits());
        quote_spanned!(s.span()=> assert!(::core::mem::size_of::<#name>() == #s, #msg);)
    });
    let align = p.container.align.as_ref().map(|a| {
        let msg = format!("`{}` is not aligned to {} bytes (its CUDA twin's alignment)", name, a.base10_digits());
        quote_spanned!(a.span()=> assert!(::core::mem::align_of::<#name>() == #a, #msg);)
    });
    quote! {
        const _: () = {
            const _: () = { #(#offsets)* #size #align };
            impl #k::__private::ParamBytes for #name {
                const SIZE: usize = ::core::mem::size_of::<#name>();
                fn write_param(&self, out: &mut [u8]) {
                    #(#writes)*
                }
            }
            impl #k::__private::KernelStruct for #name {}
        };
    }
}
