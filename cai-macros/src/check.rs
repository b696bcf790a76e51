//! Validation of a parsed struct: one role per field kind, the required ones present.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Field, Fields, Type};

use crate::attr::{self, Container, Errors, FieldAttrs, Role};

pub struct Parsed<'a> {
    pub container: Container,
    pub fields: Vec<(&'a Field, FieldAttrs)>,
}

impl<'a> Parsed<'a> {
    pub fn role(&self, role: Role) -> Option<&'a Field> {
        self.fields.iter().find(|(_, a)| a.role.map(|r| r.0) == Some(role)).map(|(f, _)| *f)
    }
}

pub fn named_fields<'a>(input: &'a DeriveInput, errors: &mut Errors) -> Vec<&'a Field> {
    match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(n) => n.named.iter().collect(),
            other => {
                errors.spanned(other.span(), "caijit derives need a struct with named fields");
                Vec::new()
            }
        },
        _ => {
            errors.spanned(input.ident.span(), "caijit derives need a struct with named fields");
            Vec::new()
        }
    }
}

pub fn parse<'a>(input: &'a DeriveInput, errors: &mut Errors) -> Parsed<'a> {
    let container = attr::container(&input.attrs, errors);
    let fields = named_fields(input, errors).into_iter().map(|f| (f, attr::field(f, errors))).collect();
    Parsed { container, fields }
}

/// The last path segment of a type, for recognising `u64`, `DeviceArray`, …
pub fn last_ident(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

pub fn cai_struct(input: &DeriveInput, p: &Parsed<'_>, errors: &mut Errors) {
    for role in [Role::Data, Role::Shape, Role::Strides, Role::Stream, Role::Readonly] {
        let marked: Vec<Span> = p.fields.iter().filter_map(|(_, a)| a.role.filter(|r| r.0 == role).map(|r| r.1)).collect();
        for extra in marked.iter().skip(1) {
            errors.spanned(*extra, format!("more than one field is marked `{}`", role.name()));
        }
    }
    for (_, a) in &p.fields {
        if let Some(o) = &a.offset {
            errors.spanned(o.span(), "`offset` belongs to #[derive(KernelParams)]");
        }
    }
    if p.role(Role::Data).is_none() {
        errors.spanned(input.ident.span(), "mark the device pointer field with #[cai(data)]");
    }
    if p.role(Role::Shape).is_none() {
        errors.spanned(input.ident.span(), "mark the shape field with #[cai(shape)]");
    }
    if let Some(data) = p.role(Role::Data) {
        let owning = last_ident(&data.ty).is_some_and(|i| i == "DeviceArray");
        if p.container.dtype.is_none() && !owning {
            errors.spanned(
                input.ident.span(),
                "the element type is unknown: add #[cai(dtype = f32)] (or another element type) to the struct",
            );
        }
    }
    if let (Some(span), false) = (p.container.python, input.generics.params.is_empty()) {
        errors.spanned(span, "`python` needs a non-generic struct (#[pyclass] cannot be generic)");
    }
    if let Some(s) = &p.container.size {
        errors.spanned(s.span(), "`size` belongs to #[derive(KernelParams)]");
    }
}

pub fn has_repr_c(input: &DeriveInput) -> bool {
    input.attrs.iter().any(|a| {
        a.path().is_ident("repr") && {
            let mut c = false;
            let _ = a.parse_nested_meta(|m| {
                if m.path.is_ident("C") {
                    c = true;
                }
                Ok(())
            });
            c
        }
    })
}
