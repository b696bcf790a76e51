//! The layering of `cai-runtime` (docs/architecture.md), checked on its source: every
//! `crate::…` and `super::…` path of every file is resolved to the top-level module it
//! names, and a module may only name modules of lower layers (or itself). `unsafe` code
//! appears only in `sys`, except calls of `sys`'s `unsafe fn`s (see [`UNSAFE_FNS`]). A new
//! top-level module must be given a layer here.

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

/// The top-level modules a file's paths name, and its `unsafe` code.
struct Uses<'a> {
    module: &'a [String],
    named: BTreeSet<String>,
    /// `unsafe fn`, `unsafe impl` or `unsafe trait` items.
    unsafe_items: usize,
    /// Each `unsafe { … }` block: the function it calls when it is nothing but one call
    /// (`f(..)`, `x.f(..)`), else `None`.
    unsafe_blocks: Vec<Option<String>>,
}

/// The function an `unsafe` block calls when the block is exactly one call.
fn sole_call(block: &syn::Block) -> Option<String> {
    match block.stmts.as_slice() {
        [syn::Stmt::Expr(syn::Expr::MethodCall(m), None)] => Some(m.method.to_string()),
        [syn::Stmt::Expr(syn::Expr::Call(c), None)] => match &*c.func {
            syn::Expr::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        },
        _ => None,
    }
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
        self.unsafe_blocks.push(sole_call(&e.block));
        syn::visit::visit_expr_unsafe(self, e);
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        self.unsafe_items += usize::from(i.unsafety.is_some());
        syn::visit::visit_item_impl(self, i);
    }
    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        self.unsafe_items += usize::from(t.unsafety.is_some());
        syn::visit::visit_item_trait(self, t);
    }
    fn visit_signature(&mut self, s: &'ast syn::Signature) {
        self.unsafe_items += usize::from(s.unsafety.is_some());
        syn::visit::visit_signature(self, s);
    }
}

/// A file's `unsafe` code: its unsafe items and, per `unsafe` block, the one function it
/// calls (when it is one call).
struct UnsafeCode {
    path: PathBuf,
    items: usize,
    blocks: Vec<Option<String>>,
}

/// `top-level module → modules it names` (itself excluded), and the files with `unsafe`.
fn module_graph() -> (BTreeMap<String, BTreeSet<String>>, Vec<UnsafeCode>) {
    let mut all = Vec::new();
    files(&src_dir(), &[], &mut all);
    assert!(all.len() > 10, "found only {} files under {}", all.len(), src_dir().display());
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut unsafe_files = Vec::new();
    for (path, module) in &all {
        let text = std::fs::read_to_string(path).unwrap();
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut uses = Uses { module, named: BTreeSet::new(), unsafe_items: 0, unsafe_blocks: Vec::new() };
        uses.visit_file(&file);
        if uses.unsafe_items > 0 || !uses.unsafe_blocks.is_empty() {
            unsafe_files.push(UnsafeCode { path: path.clone(), items: uses.unsafe_items, blocks: std::mem::take(&mut uses.unsafe_blocks) });
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

/// The `sys` functions whose callers must uphold what the driver cannot check: device memory
/// at a raw address (read, written or freed) or an owned handle given up. Each is an
/// `unsafe fn` with a `# Safety` section, so that its callers say, in an `unsafe` block's
/// `// SAFETY:` comment, how they uphold it. Beyond this list, any `pub` function of `sys`
/// taking a raw pointer is checked to be `unsafe fn` by its type (a device address is a
/// `u64`, and a handle a plain value: those need the list).
const UNSAFE_FNS: &[&str] = &[
    "launch_checked",
    "copy_device_to_device",
    "copy_to_owned",
    "copy_from_owned",
    "zero_owned",
    "free_owned_async",
    "destroy_owned_stream",
];

/// A function of `sys` as the rule sees it.
#[derive(Debug)]
struct SysFn {
    name: String,
    is_unsafe: bool,
    is_pub: bool,
    /// Called by C through a function pointer (`extern "C"`): its caller is not Rust.
    is_extern: bool,
    takes_raw_pointer: bool,
    documents_safety: bool,
}

#[derive(Default)]
struct SysFns(Vec<SysFn>);

impl SysFns {
    fn add(&mut self, attrs: &[syn::Attribute], vis: &syn::Visibility, sig: &syn::Signature) {
        struct Pointers(bool);
        impl<'ast> Visit<'ast> for Pointers {
            fn visit_type_ptr(&mut self, _: &'ast syn::TypePtr) {
                self.0 = true;
            }
        }
        let mut pointers = Pointers(false);
        sig.inputs.iter().for_each(|i| pointers.visit_fn_arg(i));
        let doc: String = attrs
            .iter()
            .filter(|a| a.path().is_ident("doc"))
            .filter_map(|a| match &a.meta {
                syn::Meta::NameValue(nv) => Some(doc_text(&nv.value)),
                _ => None,
            })
            .collect();
        self.0.push(SysFn {
            name: sig.ident.to_string(),
            is_unsafe: sig.unsafety.is_some(),
            is_pub: !matches!(vis, syn::Visibility::Inherited),
            is_extern: sig.abi.is_some(),
            takes_raw_pointer: pointers.0,
            documents_safety: doc.lines().any(|l| l.trim() == "# Safety"),
        });
    }
}

/// A doc attribute's text.
fn doc_text(e: &syn::Expr) -> String {
    match e {
        syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => s.value() + "\n",
        _ => String::new(),
    }
}

impl<'ast> Visit<'ast> for SysFns {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.add(&f.attrs, &f.vis, &f.sig);
        syn::visit::visit_item_fn(self, f);
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.add(&f.attrs, &f.vis, &f.sig);
        syn::visit::visit_impl_item_fn(self, f);
    }
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        // Test modules hold test doubles, not the layer's functions.
        let test = m.attrs.iter().any(|a| a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test"));
        if !test {
            syn::visit::visit_item_mod(self, m);
        }
    }
}

/// Every function of `cai-runtime/src/sys`.
fn sys_fns() -> Vec<SysFn> {
    let mut all = Vec::new();
    files(&src_dir().join("sys"), &["sys".to_string()], &mut all);
    let mut fns = SysFns::default();
    for (path, _) in &all {
        let text = std::fs::read_to_string(path).unwrap();
        fns.visit_file(&syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
    }
    fns.0
}

#[test]
fn unsafe_code_lives_only_in_sys() {
    // Outside sys, `unsafe` is only a block that is one call of a sys `unsafe fn` (its
    // `// SAFETY:` comment is required by clippy's `undocumented_unsafe_blocks`, denied at
    // the crate root); no unsafe item, and no other unsafe operation.
    let (_, unsafe_files) = module_graph();
    let unsafe_fns: BTreeSet<String> = sys_fns().into_iter().filter(|f| f.is_unsafe && !f.is_extern).map(|f| f.name).collect();
    let sys = src_dir().join("sys");
    let mut wrong = Vec::new();
    for f in unsafe_files.iter().filter(|f| !f.path.starts_with(&sys)) {
        if f.items > 0 {
            wrong.push(format!("{}: {} unsafe fn/impl/trait item(s)", f.path.display(), f.items));
        }
        for block in &f.blocks {
            match block {
                Some(called) if unsafe_fns.contains(called) => {}
                Some(called) => {
                    wrong.push(format!("{}: an `unsafe` block calls `{called}`, which is no `unsafe fn` of sys", f.path.display()))
                }
                None => wrong.push(format!("{}: an `unsafe` block that is not one call of a sys `unsafe fn`", f.path.display())),
            }
        }
    }
    assert!(wrong.is_empty(), "`unsafe` outside cai-runtime/src/sys:\n{}", wrong.join("\n"));
    assert!(unsafe_files.iter().any(|f| f.path.starts_with(&sys)), "the checker found no `unsafe` at all, not even in sys");
    let lib = std::fs::read_to_string(src_dir().join("lib.rs")).unwrap();
    assert!(
        lib.contains("#![deny(unsafe_code, clippy::undocumented_unsafe_blocks)]"),
        "lib.rs must deny unsafe code and undocumented unsafe blocks"
    );
}

#[test]
fn sys_functions_with_preconditions_are_unsafe_and_say_what_callers_uphold() {
    let fns = sys_fns();
    assert!(fns.len() > 50, "found only {} functions in sys", fns.len());
    let mut wrong = Vec::new();
    for name in UNSAFE_FNS {
        match fns.iter().find(|f| f.name == *name) {
            None => wrong.push(format!("`{name}` (in UNSAFE_FNS) is not a function of sys")),
            Some(f) if !f.is_unsafe => wrong.push(format!("`{name}` must be `unsafe fn`: its callers uphold what the driver cannot check")),
            Some(_) => {}
        }
    }
    for f in &fns {
        if f.is_pub && !f.is_extern && f.takes_raw_pointer && !f.is_unsafe {
            wrong.push(format!("`{}` takes a raw pointer: make it `unsafe fn` with a `# Safety` section", f.name));
        }
        if f.is_pub && f.is_unsafe && !f.is_extern && !f.documents_safety {
            wrong.push(format!("`unsafe fn {}` has no `# Safety` section", f.name));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_unsafe_checkers_see_what_they_check() {
    // A call of a sys `unsafe fn` is told from any other unsafe block.
    let file = syn::parse_file(
        "fn f() { let _ = unsafe { d.zero_owned(p, n, s) }; unsafe { g(1) }; unsafe { *p = 1; } }
         unsafe impl Send for X {}",
    )
    .unwrap();
    let module = ["array".to_string()];
    let mut uses = Uses { module: &module, named: BTreeSet::new(), unsafe_items: 0, unsafe_blocks: Vec::new() };
    uses.visit_file(&file);
    assert_eq!(uses.unsafe_blocks, [Some("zero_owned".to_string()), Some("g".to_string()), None]);
    assert_eq!(uses.unsafe_items, 1);
    // A raw pointer parameter and a `# Safety` section are found; test modules are skipped.
    let file = syn::parse_file(
        "impl D { pub fn a(&self, p: &mut [*mut c_void]) {} /// x\n/// # Safety\n/// y\n pub unsafe fn b(&self, p: u64) {} }
         #[cfg(test)] mod tests { pub fn c(p: *const u8) {} }",
    )
    .unwrap();
    let mut fns = SysFns::default();
    fns.visit_file(&file);
    let seen: Vec<_> = fns.0.iter().map(|f| (f.name.as_str(), f.takes_raw_pointer, f.is_unsafe, f.documents_safety)).collect();
    assert_eq!(seen, [("a", true, false, false), ("b", false, true, true)]);
}

#[test]
fn the_checker_sees_a_use_that_looks_up() {
    // What the tests above rely on: a `use` of a higher layer, inside a group, is found.
    let file = syn::parse_file("use crate::{cai::DType, launch::{Arg, Num}}; fn f() { super::x::y(); }").unwrap();
    let module = ["runtime".to_string()];
    let mut uses = Uses { module: &module, named: BTreeSet::new(), unsafe_items: 0, unsafe_blocks: Vec::new() };
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
