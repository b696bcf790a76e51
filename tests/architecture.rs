//! The layering of `cai-runtime` (docs/architecture.md), checked on its source: every
//! `crate::…` and `super::…` path of every file is resolved to the top-level module it
//! names, and a module may only name modules of lower layers (or itself). `unsafe` code
//! appears only in `sys`. A new top-level module must be given a layer here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Top-level modules by layer, lowest first. A module may use modules of lower layers only.
const LAYERS: &[&[&str]] = &[
    // The CUDA Array Interface model and the process-wide counters: nothing of caijit below.
    &["cai", "stats", "sync"],
    // Diagnostics' switches and the ring of recent launches (plain data, no CUDA).
    &["diag"],
    // FFI: the driver, NVRTC, C libraries; the only `unsafe`.
    &["sys"],
    // The error type every layer above returns.
    &["error"],
    // Driver objects: contexts, streams, events, device memory.
    &["runtime"],
    &["array", "python"],
    // Compilation: kernel signatures, parameter layouts, NVRTC and its caches.
    &["signature"],
    // Kernel bundles: the file format and the bundles loaded (no CUDA).
    &["bundle"],
    // Parameter marshalling: launch arguments checked against a parameter list and packed.
    &["params", "compile"],
    // Compiled programs loaded into a context, and their kernels.
    &["kernel"],
    // Launches: the stream protocol around a marshalled kernel launch.
    &["launch"],
    // Numba-style dispatch: (name, argument types) → a loaded instance, cached per signature.
    &["dispatch"],
    &["interop", "xla"],
    // The kernel library.
    &["ops"],
];

/// Items the crate root re-exports, by the module that defines them.
const ROOT_REEXPORTS: &[(&str, &str)] = &[
    ("Error", "error"),
    ("Result", "error"),
    ("ArgumentError", "error"),
    ("CompileError", "error"),
    ("DriverError", "error"),
    ("Fault", "error"),
    ("NvrtcError", "error"),
    ("CudaArrayInterface", "cai"),
    ("FromCudaArrayInterface", "cai"),
    ("ParamBytes", "params"),
    ("KernelStruct", "params"),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../cai-runtime/src")
}

/// Every `.rs` file under `dir`, with its module path relative to the crate root
/// (`compile/cache.rs` → `["compile", "cache"]`, `sys/mod.rs` → `["sys"]`).
fn files(dir: &Path, module: &[String], out: &mut Vec<(PathBuf, Vec<String>)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            files(&path, &[module, &[stem]].concat(), out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let m = if stem == "mod" || (module.is_empty() && stem == "lib") { module.to_vec() } else { [module, &[stem]].concat() };
            out.push((path, m));
        }
    }
}

/// The top-level modules a file's paths name, and whether it has `unsafe` code.
struct Uses<'a> {
    module: &'a [String],
    named: BTreeSet<String>,
    has_unsafe: bool,
}

impl Uses<'_> {
    fn path(&mut self, segments: &[String]) {
        let target = match segments.first().map(String::as_str) {
            Some("crate") => segments.get(1).cloned(),
            // `super::x` from `a::b` names `a` (or `x`, from a top-level file's submodule).
            Some("super") => {
                let supers = segments.iter().take_while(|s| *s == "super").count();
                let base = &self.module[..self.module.len().saturating_sub(supers)];
                base.first().cloned().or_else(|| segments.get(supers).cloned())
            }
            _ => None,
        };
        if let Some(t) = target {
            self.named.insert(t);
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.path(&[prefix.as_slice(), &[n.ident.to_string()]].concat()),
            syn::UseTree::Rename(r) => self.path(&[prefix.as_slice(), &[r.ident.to_string()]].concat()),
            syn::UseTree::Glob(_) => self.path(prefix),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(prefix, t)),
        }
    }
}

impl<'ast> Visit<'ast> for Uses<'_> {
    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.path(&p.segments.iter().map(|s| s.ident.to_string()).collect::<Vec<_>>());
        syn::visit::visit_path(self, p);
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }
    fn visit_expr_unsafe(&mut self, e: &'ast syn::ExprUnsafe) {
        self.has_unsafe = true;
        syn::visit::visit_expr_unsafe(self, e);
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        self.has_unsafe |= i.unsafety.is_some();
        syn::visit::visit_item_impl(self, i);
    }
    fn visit_signature(&mut self, s: &'ast syn::Signature) {
        self.has_unsafe |= s.unsafety.is_some();
        syn::visit::visit_signature(self, s);
    }
}

/// `top-level module → modules it names` (itself excluded), and the files with `unsafe`.
fn module_graph() -> (BTreeMap<String, BTreeSet<String>>, Vec<PathBuf>) {
    let mut all = Vec::new();
    files(&src_dir(), &[], &mut all);
    assert!(all.len() > 10, "found only {} files under {}", all.len(), src_dir().display());
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut unsafe_files = Vec::new();
    for (path, module) in &all {
        let text = std::fs::read_to_string(path).unwrap();
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut uses = Uses { module, named: BTreeSet::new(), has_unsafe: false };
        uses.visit_file(&file);
        if uses.has_unsafe {
            unsafe_files.push(path.clone());
        }
        // The crate root declares every module and re-exports; it is above all layers.
        let Some(top) = module.first() else { continue };
        let named = uses.named.into_iter().map(|n| ROOT_REEXPORTS.iter().find(|(item, _)| *item == n).map_or(n, |(_, m)| m.to_string()));
        let modules = named.filter(|n| n != top && all.iter().any(|(_, m)| m.first() == Some(n)));
        graph.entry(top.clone()).or_default().extend(modules);
    }
    (graph, unsafe_files)
}

#[test]
fn every_module_has_a_layer_and_looks_only_down() {
    let (graph, _) = module_graph();
    let mut wrong = Vec::new();
    for (module, named) in &graph {
        let Some(layer) = layer_of(module) else {
            wrong.push(format!("module `{module}` has no layer: add it to LAYERS in tests/architecture.rs"));
            continue;
        };
        for n in named {
            match layer_of(n) {
                Some(l) if l < layer => {}
                _ => wrong.push(format!("`{module}` (layer {layer}) uses `{n}` (layer {:?})", layer_of(n))),
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn unsafe_code_lives_only_in_sys() {
    let (_, unsafe_files) = module_graph();
    let sys = src_dir().join("sys");
    let outside: Vec<_> = unsafe_files.iter().filter(|f| !f.starts_with(&sys)).collect();
    assert!(outside.is_empty(), "`unsafe` outside cai-runtime/src/sys: {outside:?}");
    assert!(!unsafe_files.is_empty(), "the checker found no `unsafe` at all, not even in sys");
}

#[test]
fn the_checker_sees_a_use_that_looks_up() {
    // What the tests above rely on: a `use` of a higher layer, inside a group, is found.
    let file = syn::parse_file("use crate::{cai::DType, launch::{Arg, Num}}; fn f() { super::x::y(); }").unwrap();
    let module = ["runtime".to_string()];
    let mut uses = Uses { module: &module, named: BTreeSet::new(), has_unsafe: false };
    uses.visit_file(&file);
    assert_eq!(uses.named, BTreeSet::from(["cai".to_string(), "launch".to_string(), "x".to_string()]));
}

/// What belongs to dispatch (name resolution, template deduction, overload picking, the
/// per-signature instance cache): the runtime's `dispatch` module owns it, and the Python
/// binding only converts arguments and asks (docs/architecture.md).
const DISPATCH_NAMES: &[&str] = &["deduce", "headers_for", "kernels_named", "name_expression", "including", "KernelDecl", "Instance"];
/// Functions only `dispatch` defines.
const DISPATCH_FNS: &[&str] = &["pick_overload", "admits", "overload_list", "overload_cast", "needs_name_expression", "program_for"];

/// What a Python-binding file names of dispatch.
#[derive(Default)]
struct DispatchUses {
    found: BTreeSet<String>,
    /// Inside a map type's generic arguments.
    in_map: usize,
}

impl<'ast> Visit<'ast> for DispatchUses {
    fn visit_path_segment(&mut self, s: &'ast syn::PathSegment) {
        let id = s.ident.to_string();
        if DISPATCH_NAMES.contains(&id.as_str()) {
            self.found.insert(format!("names `{id}`"));
        }
        if self.in_map > 0 && ["ArgType", "Kernel", "RtKernel"].contains(&id.as_str()) {
            self.found.insert(format!("keeps a map of `{id}` (an instance cache)"));
        }
        let map = id == "HashMap" || id == "BTreeMap";
        self.in_map += usize::from(map);
        syn::visit::visit_path_segment(self, s);
        self.in_map -= usize::from(map);
    }
    fn visit_expr_method_call(&mut self, m: &'ast syn::ExprMethodCall) {
        let id = m.method.to_string();
        if DISPATCH_NAMES.contains(&id.as_str()) {
            self.found.insert(format!("calls `.{id}()`"));
        }
        syn::visit::visit_expr_method_call(self, m);
    }
    fn visit_signature(&mut self, s: &'ast syn::Signature) {
        let id = s.ident.to_string();
        if DISPATCH_FNS.contains(&id.as_str()) {
            self.found.insert(format!("defines `{id}`"));
        }
        syn::visit::visit_signature(self, s);
    }
}

fn dispatch_uses(source: &str) -> BTreeSet<String> {
    let file = syn::parse_file(source).unwrap();
    let mut uses = DispatchUses::default();
    uses.visit_file(&file);
    uses.found
}

#[test]
fn the_python_binding_leaves_dispatch_to_the_runtime() {
    let mut all = Vec::new();
    files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../python/src"), &[], &mut all);
    assert!(all.len() > 5, "found only {} files under python/src", all.len());
    let mut wrong = Vec::new();
    for (path, _) in &all {
        for what in dispatch_uses(&std::fs::read_to_string(path).unwrap()) {
            wrong.push(format!("{}: {what}; ask cai_runtime::dispatch instead", path.display()));
        }
    }
    assert!(wrong.is_empty(), "dispatch decided in the Python binding:\n{}", wrong.join("\n"));
}

#[test]
fn the_dispatch_checker_sees_deduction_overloads_and_caches() {
    let found = dispatch_uses(
        "struct K { m: Mutex<HashMap<(usize, SmallVec<[ArgType; 8]>), Arc<RtKernel>>> }
         fn pick_overload() {}
         fn f(d: &KernelDecl) { let _ = signature::deduce(d, &[]); p.name_expression(e); }",
    );
    let want = [
        "keeps a map of `ArgType` (an instance cache)",
        "keeps a map of `RtKernel` (an instance cache)",
        "defines `pick_overload`",
        "names `KernelDecl`",
        "names `deduce`",
        "calls `.name_expression()`",
    ];
    for w in want {
        assert!(found.contains(w), "{w} not in {found:?}");
    }
    assert!(dispatch_uses("use cai_runtime::dispatch::{admits, Dispatcher}; fn g(d: &Dispatcher) { d.resolve(0, &[]); }").is_empty());
}
