//! What compilation does with text it reads back (a source, PTX, lowered names from NVRTC
//! or from the disk cache), as `compile::describe_kernels` does it: every reader must return
//! (an error is fine), and what the layout accepts must be consistent.

use cai_runtime::cai::DType;
use cai_runtime::signature::{
    deduce, layout, parse_kernels, probe_types, ptx_entries, types_from_lowered, ArgType, KernelDecl, ParamType, PtxParam,
};

/// Launch argument types that fit `decl`'s parameters, so that deduction binds something.
fn args_for(decl: &KernelDecl, dtype: DType) -> Vec<ArgType> {
    decl.params
        .iter()
        .map(|(_, t)| match t {
            ParamType::Pointer { .. } => ArgType::Array { dtype, rank: 1 },
            ParamType::Array { .. } => ArgType::Array { dtype, rank: 2 },
            ParamType::Value(_) => ArgType::TypedScalar(dtype),
        })
        .collect()
}

pub fn describe(source: &str, ptx: &str, lowered: &[(String, String)]) {
    let decls = parse_kernels(source).kernels;
    for d in &decls {
        let _ = deduce(d, &vec![ArgType::UntypedScalar; d.params.len()]);
        let _ = deduce(d, &args_for(d, DType::F32));
        for (_, t) in &d.params {
            let _ = (d.is_template(), t.to_string());
        }
    }
    for (_, l) in lowered {
        let _ = types_from_lowered(l);
        let _ = probe_types(l);
    }
    let Ok(entries) = ptx_entries(ptx) else { return };
    for (name, params) in entries {
        // Whatever the declaration, the PTX sizes and alignments must lay out or fail cleanly.
        let opaque = vec![(None, ParamType::Value(cai_runtime::signature::CType::Named("S".into()))); params.len()];
        check(&name, &opaque, &params);
        let declared = match types_from_lowered(&name) {
            Ok(Some((_, types))) => types.into_iter().map(|t| (None, t)).collect(),
            Ok(None) => match decls.iter().find(|d| d.name == name) {
                Some(d) => d.params.clone(),
                None => continue,
            },
            Err(_) => continue,
        };
        check(&name, &declared, &params);
    }
}

fn check(name: &str, declared: &[(Option<String>, ParamType)], params: &[PtxParam]) {
    let Ok(l) = layout(name, declared, params) else { return };
    assert_eq!(l.len(), params.len());
    let mut end = 0usize;
    for p in &l {
        assert!(p.align >= 1 && p.offset % p.align == 0, "{p:?}");
        assert!(p.offset >= end, "{l:?}");
        end = p.offset.checked_add(p.size).expect("layout checked the end");
        let _ = (p.kind.describe(), p.kind.expected_size());
    }
}
