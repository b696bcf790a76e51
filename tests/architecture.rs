//! The import graph of the repository, checked on its source (docs/architecture.md):
//!
//! - in each crate, every path of every file (`crate::…`, `super::…`, `self::…`, a child
//!   module's name; not a visibility such as `pub(super)`, which uses nothing) is resolved
//!   to the module file it names; no file imports a file that imports it back (no cycle);
//! - `cai-runtime`'s and the Python binding's top-level modules each have a layer, and a
//!   module names only modules of lower layers;
//! - the workspace's crates have layers too: a library depends on, and names, only crates
//!   below it (the binding uses `cai_runtime`, never the other way);
//! - `unsafe` code appears only in `cai-runtime`'s `sys`, except calls of `sys`'s `unsafe
//!   fn`s (see [`UNSAFE_FNS`]): each an `unsafe` block that is that one call.
//!
//! - only `sys` names cudarc; the binding keeps no rule the runtime has, and reads
//!   parameter kinds through the runtime's accessors; no `match` over `ParamKind` has a
//!   catch-all arm;
//! - no file of `cai-runtime/src` is over 700 lines without saying why.
//!
//! A new top-level module must be given a layer here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// `cai-runtime`'s top-level modules by layer, lowest first. A module may use modules of
/// lower layers only.
const LAYERS: &[&[&str]] = &[
    // The CUDA Array Interface model, the process-wide counters, locks, and reading files
    // that must be regular files: nothing of caijit below.
    &["cai", "stats", "sync", "files"],
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
    // Numba-style dispatch: (name, argument types) → a loaded instance, cached per
    // signature; graphs of captured launches, replayed with new arguments.
    &["dispatch", "graph"],
    &["interop", "xla"],
    // The kernel library; autotuning.
    &["ops", "tune"],
];

/// The Python binding's (`python/src`) top-level modules by layer, lowest first.
const BINDING_LAYERS: &[&[&str]] = &[
    // Python objects read and made without caijit's errors; sticky faults as Python sees
    // them; the binding's launch phases (`CAIJIT_PHASE_TIMES`).
    &["fault", "timing"],
    // `cai_runtime::Error` → caijit's exceptions.
    &["errors"],
    // Streams and dtypes from Python; diagnostics and bundles (thin wrappers).
    &["stream", "pyobj", "diag", "bundles"],
    // DLPack both ways: capsules read, caijit arrays exported.
    &["dlpack"],
    // `caijit.DeviceArray`, then the views (`caijit.Interface`) that may hold one.
    &["array"],
    &["interface"],
    // Python objects → launch arguments.
    &["args"],
    // Launches and the kernel library.
    &["kernel", "ops"],
    // `caijit.jax` (launches prepared for XLA, through `Kernel`'s dispatcher); autotuning;
    // graphs of captured launches.
    &["jax", "tune", "graph"],
];

/// The repository's crates (package names) by layer, lowest first. A crate's library may
/// depend on crates of lower layers only.
const CRATE_LAYERS: &[&[&str]] = &[
    &["cai-macros"],
    &["cai-runtime"],
    // Users of the runtime: the Python binding, the derive example extension, the fuzzers.
    &["caijit-python", "cai-image", "caijit-fuzz"],
    // Cross-crate tests.
    &["caijit-integration"],
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn src_dir() -> PathBuf {
    repo().join("cai-runtime/src")
}

fn binding_dir() -> PathBuf {
    repo().join("python/src")
}

/// A module path (`["args", "torch"]`); the crate root is `[]`.
type Module = Vec<String>;

/// Every `.rs` file under `dir`, with its module path relative to the crate root
/// (`compile/cache.rs` → `["compile", "cache"]`, `sys/mod.rs` → `["sys"]`).
fn files(dir: &Path, module: &[String], out: &mut Vec<(PathBuf, Module)>) {
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

/// The paths a file names, resolved to absolute module paths, and whether it has `unsafe`
/// code.
struct Uses<'a> {
    /// The module the visitor is in: the file's, and an inline module's inside it.
    module: Module,
    /// The crate's module files (to tell a child module's name in a relative path).
    modules: &'a BTreeSet<Module>,
    named: BTreeSet<Module>,
    /// Names this file's `use`s bring in, with what they name.
    imports: BTreeMap<String, Module>,
    /// The first segments of every path (other crates' names among them).
    roots: BTreeSet<String>,
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

impl<'a> Uses<'a> {
    fn new(module: &[String], modules: &'a BTreeSet<Module>) -> Self {
        Uses {
            module: module.to_vec(),
            modules,
            named: BTreeSet::new(),
            imports: BTreeMap::new(),
            roots: BTreeSet::new(),
            unsafe_items: 0,
            unsafe_blocks: Vec::new(),
        }
    }

    fn path(&mut self, segments: &[String]) {
        if let Some(absolute) = self.absolute(segments) {
            self.named.insert(absolute);
        }
    }

    /// The absolute module path of a path, when it names something of this crate.
    fn absolute(&mut self, segments: &[String]) -> Option<Module> {
        let first = segments.first()?;
        self.roots.insert(first.clone());
        Some(match first.as_str() {
            "crate" => segments[1..].to_vec(),
            // `super::x` from `a::b` names `a::x`; from `a/mod.rs` (module `a`), the root's `x`.
            "super" => {
                let supers = segments.iter().take_while(|s| *s == "super").count();
                [&self.module[..self.module.len().saturating_sub(supers)], &segments[supers..]].concat()
            }
            "self" => [&self.module, &segments[1..]].concat(),
            // A child module by its name (`cupy::view` in `args/mod.rs`).
            child if self.modules.contains(&[&self.module, &[child.to_string()][..]].concat()) => [&self.module, segments].concat(),
            _ => return None,
        })
    }

    /// A `use` of `segments` under the name `name`: named, and remembered, so that a path
    /// to `name` through this module (a re-export) is followed to the module defining it.
    fn import(&mut self, segments: &[String], name: String) {
        if let Some(absolute) = self.absolute(segments) {
            self.named.insert(absolute.clone());
            self.imports.insert(name, absolute);
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) if n.ident == "self" => self.import(prefix, prefix.last().cloned().unwrap_or_default()),
            syn::UseTree::Name(n) => self.import(&[prefix.as_slice(), &[n.ident.to_string()]].concat(), n.ident.to_string()),
            syn::UseTree::Rename(r) => self.import(&[prefix.as_slice(), &[r.ident.to_string()]].concat(), r.rename.to_string()),
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
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {
        // `pub(super)`, `pub(in crate::a)`: who may see an item, not a module it uses (a
        // child's `pub(super) fn` names its parent, and uses nothing of it).
    }
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        // An inline module (`mod tests { use super::*; }`): its paths are relative to it.
        self.module.push(m.ident.to_string());
        syn::visit::visit_item_mod(self, m);
        self.module.pop();
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

/// A crate's source, file by file.
struct Source {
    /// Each file's module, the module files it names (itself and the root left out), the
    /// first segments of its paths, and its `unsafe` code.
    files: Vec<SourceFile>,
}

struct SourceFile {
    path: PathBuf,
    module: Module,
    uses: BTreeSet<Module>,
    roots: BTreeSet<String>,
    /// `unsafe fn`, `unsafe impl` or `unsafe trait` items.
    unsafe_items: usize,
    /// Per `unsafe` block, the one function it calls (when it is one call).
    unsafe_blocks: Vec<Option<String>>,
}

/// A graph of named nodes: `node → the nodes it uses`.
type Graph = BTreeMap<String, BTreeSet<String>>;

impl Source {
    /// Read every file under `dir` (a crate's `src`).
    fn read(dir: &Path) -> Source {
        let mut all = Vec::new();
        files(dir, &[], &mut all);
        let modules: BTreeSet<Module> = all.iter().map(|(_, m)| m.clone()).collect();
        let scanned: Vec<(PathBuf, Module, Uses<'_>)> = all
            .iter()
            .map(|(path, module)| {
                let text = std::fs::read_to_string(path).unwrap();
                let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let mut uses = Uses::new(module, &modules);
                uses.visit_file(&file);
                (path.clone(), module.clone(), uses)
            })
            .collect();
        let imports: BTreeMap<Module, BTreeMap<String, Module>> = scanned.iter().map(|(_, m, u)| (m.clone(), u.imports.clone())).collect();
        // The module file a path names: its longest prefix that is one, or, when the item
        // after that is one the module imports (a re-export: the crate root's `pub use
        // error::Error`), the module the import names.
        let module_of = |path: &Module| -> Module {
            let mut path = path.clone();
            for _ in 0..8 {
                let m = (0..=path.len()).rev().map(|k| path[..k].to_vec()).find(|m| modules.contains(m)).unwrap_or_default();
                match path.get(m.len()).and_then(|item| imports.get(&m)?.get(item)) {
                    Some(target) if !target.starts_with(&path[..=m.len()]) => path = [target, &path[m.len() + 1..]].concat(),
                    _ => return m,
                }
            }
            panic!("re-exports of {path:?} go round");
        };
        let files = scanned
            .into_iter()
            .map(|(path, module, uses)| {
                let named: BTreeSet<Module> = uses.named.iter().map(module_of).filter(|m| *m != module).collect();
                let (roots, unsafe_items, unsafe_blocks) = (uses.roots, uses.unsafe_items, uses.unsafe_blocks);
                SourceFile { module, uses: named, roots, unsafe_items, unsafe_blocks, path }
            })
            .collect();
        Source { files }
    }

    /// File by file: `module → the modules it names`. The crate root, which declares every
    /// module and re-exports, is above them all and left out.
    fn file_graph(&self) -> Graph {
        let name = |m: &Module| m.join("::");
        let mut graph = Graph::new();
        for f in self.files.iter().filter(|f| !f.module.is_empty()) {
            graph.entry(name(&f.module)).or_default().extend(f.uses.iter().filter(|m| !m.is_empty()).map(name));
        }
        graph
    }

    /// `top-level module → top-level modules it names` (itself left out).
    fn module_graph(&self) -> Graph {
        let mut graph = Graph::new();
        for f in &self.files {
            let Some(top) = f.module.first() else { continue };
            let named = f.uses.iter().filter_map(|m| m.first()).filter(|m| *m != top).cloned();
            graph.entry(top.clone()).or_default().extend(named);
        }
        graph
    }
}

fn layer_of(layers: &[&[&str]], node: &str) -> Option<usize> {
    layers.iter().position(|l| l.contains(&node))
}

/// What breaks `layers` in `graph`: a node without a layer, and each use of a node that is
/// not on a lower layer.
fn layering_errors(graph: &Graph, layers: &[&[&str]], table: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    for (node, named) in graph {
        let Some(layer) = layer_of(layers, node) else {
            wrong.push(format!("`{node}` has no layer: add it to {table} in tests/architecture.rs"));
            continue;
        };
        for n in named {
            match layer_of(layers, n) {
                Some(l) if l < layer => {}
                l => wrong.push(format!("`{node}` (layer {layer}) uses `{n}` (layer {l:?})")),
            }
        }
    }
    wrong
}

/// A cycle of `graph` (its first node repeated at the end), if it has one.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit<'g>(graph: &'g Graph, node: &'g str, path: &mut Vec<&'g str>, done: &mut BTreeSet<&'g str>) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| *n == node) {
            return Some(path[at..].iter().chain([&node]).map(|n| n.to_string()).collect());
        }
        if !done.insert(node) {
            return None;
        }
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(graph, next, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|n| visit(graph, n, &mut Vec::new(), &mut done))
}

#[test]
fn every_module_has_a_layer_and_looks_only_down() {
    let source = Source::read(&src_dir());
    assert!(source.files.len() > 10, "found only {} files under {}", source.files.len(), src_dir().display());
    let wrong = layering_errors(&source.module_graph(), LAYERS, "LAYERS");
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn the_binding_has_layers_too() {
    let source = Source::read(&binding_dir());
    assert!(source.files.len() > 5, "found only {} files under python/src", source.files.len());
    let wrong = layering_errors(&source.module_graph(), BINDING_LAYERS, "BINDING_LAYERS");
    assert!(wrong.is_empty(), "the Python binding's layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn no_file_of_the_binding_imports_a_file_that_imports_it() {
    let graph = Source::read(&binding_dir()).file_graph();
    assert!(graph.len() > 10 && graph.contains_key("args::torch"), "{graph:?}");
    if let Some(cycle) = find_cycle(&graph) {
        panic!("python/src has an import cycle: {}", cycle.join(" → "));
    }
}

/// Inside each top-level module too, files do not import each other in a circle: a
/// parent (`mod.rs`) declares its children and re-exports them, and holds nothing a child
/// uses; children name their siblings directly.
#[test]
fn the_runtime_has_no_file_cycle() {
    let graph = Source::read(&src_dir()).file_graph();
    if let Some(cycle) = find_cycle(&graph) {
        panic!("cai-runtime/src has an import cycle between files: {}", cycle.join(" → "));
    }
}

/// The repository's crates: package name → (manifest directory, the repository's crates
/// its library depends on).
fn crate_graph() -> BTreeMap<String, (PathBuf, BTreeSet<String>)> {
    let mut manifests = Vec::new();
    for dir in [".", "cai-runtime", "cai-macros", "python", "tests", "fuzz", "examples/rust-extension"] {
        let path = repo().join(dir).join("Cargo.toml");
        manifests.push((repo().join(dir), std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))));
    }
    let package = |text: &str| {
        let (_, body) = sections(text).into_iter().find(|(header, _)| header == "package")?;
        let line = body.lines().find(|l| l.trim_start().starts_with("name"))?;
        Some(line.split('"').nth(1)?.to_string())
    };
    let names: BTreeSet<String> = manifests.iter().filter_map(|(_, t)| package(t)).collect();
    let mut graph = BTreeMap::new();
    for (dir, text) in &manifests {
        let Some(name) = package(text) else { continue };
        // What the library links: its normal and build dependencies. (Dev-dependencies are
        // its tests', which are crates of their own above it: cai-macros' tests use the runtime.)
        let mut deps = BTreeSet::new();
        for (_, body) in sections(text).iter().filter(|(h, _)| h == "dependencies" || h == "build-dependencies") {
            for line in body.lines() {
                let key = line.split(['=', '.']).next().unwrap_or("").trim();
                if names.contains(key) {
                    deps.insert(key.to_string());
                }
            }
        }
        graph.insert(name, (dir.clone(), deps));
    }
    graph
}

/// A Cargo manifest's `[section]`s: (header, the lines under it).
fn sections(manifest: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in manifest.lines() {
        match line.trim().strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(header) => out.push((header.to_string(), String::new())),
            None => {
                if let Some((_, body)) = out.last_mut() {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    out
}

#[test]
fn crates_depend_only_on_lower_crates() {
    let crates = crate_graph();
    assert!(crates.len() >= 6 && crates["caijit-python"].1.contains("cai-runtime"), "{crates:?}");
    let graph: Graph = crates.iter().map(|(n, (_, deps))| (n.clone(), deps.clone())).collect();
    let mut wrong = layering_errors(&graph, CRATE_LAYERS, "CRATE_LAYERS");
    // And what a library's source names: no crate of its own layer or above (the binding
    // names `cai_runtime`; the runtime never names the binding's crate).
    for (name, (dir, _)) in &crates {
        let layer = layer_of(CRATE_LAYERS, name).unwrap_or(0);
        let above: BTreeSet<String> = crates
            .keys()
            .filter(|c| *c != name && layer_of(CRATE_LAYERS, c).is_none_or(|l| l >= layer))
            .map(|c| c.replace('-', "_"))
            .collect();
        let lib = ["src", "."].map(|d| dir.join(d)).into_iter().find(|d| d.join("lib.rs").exists());
        let Some(lib) = lib.filter(|_| name != "caijit-integration") else { continue };
        wrong.extend(
            crates_named(&lib, &above).into_iter().map(|(file, c)| format!("{file}: names the crate `{c}`, which is not below `{name}`")),
        );
    }
    assert!(wrong.is_empty(), "crate layering broken:\n{}", wrong.join("\n"));
}

/// `(file, crate)` for each of `crates` (as Rust names them) a file under `dir` names.
fn crates_named(dir: &Path, crates: &BTreeSet<String>) -> Vec<(String, String)> {
    let files = Source::read(dir).files;
    files.iter().flat_map(|f| f.roots.intersection(crates).map(|c| (f.path.display().to_string(), c.clone()))).collect()
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
    "free_segment",
    "destroy_owned_stream",
    "set_kernel_node_params",
    "graph_exec_destroy",
    "graph_destroy",
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
    let source = Source::read(&src_dir());
    let sys = src_dir().join("sys");
    let unsafe_fns: BTreeSet<String> = sys_fns().into_iter().filter(|f| f.is_unsafe && !f.is_extern).map(|f| f.name).collect();
    let mut wrong = Vec::new();
    for f in source.files.iter().filter(|f| !f.path.starts_with(&sys)) {
        if f.unsafe_items > 0 {
            wrong.push(format!("{}: {} unsafe fn/impl/trait item(s)", f.path.display(), f.unsafe_items));
        }
        for block in &f.unsafe_blocks {
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
    let in_sys = source.files.iter().filter(|f| f.path.starts_with(&sys));
    assert!(
        in_sys.into_iter().any(|f| f.unsafe_items > 0 || !f.unsafe_blocks.is_empty()),
        "the checker found no `unsafe` at all, not even in sys"
    );
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
    let modules = BTreeSet::new();
    let mut uses = Uses::new(&module, &modules);
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
    let modules = BTreeSet::new();
    let mut uses = Uses::new(&module, &modules);
    uses.visit_file(&file);
    let tops: BTreeSet<&str> = uses.named.iter().map(|n| n[0].as_str()).collect();
    assert_eq!(tops, BTreeSet::from(["cai", "launch", "x"]));
}

/// Write `files` (path, text) as a crate's source in a new temporary directory.
fn fake_crate(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

#[test]
fn the_checker_catches_a_cycle() {
    // Two top-level modules that use each other: a cycle, and one of the uses is upward.
    let dir = fake_crate(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::b::f; pub fn g() {}"),
        ("b.rs", "pub fn f() { super::a::g() }"),
        ("c.rs", "use crate::{a, b}; fn h() { a::g(); b::f(); }"),
    ]);
    let source = Source::read(dir.path());
    assert_eq!(find_cycle(&source.file_graph()), Some(vec!["a".to_string(), "b".to_string(), "a".to_string()]));
    assert_eq!(layering_errors(&source.module_graph(), &[&["a"], &["b"], &["c"]], "L"), ["`a` (layer 0) uses `b` (layer Some(1))"]);
    // Within one top-level module: `x/mod.rs` uses its child `y` by a relative path, and
    // `y` an item of `x/mod.rs` through `super` (what args/ did before it was untangled).
    let dir = fake_crate(&[
        ("lib.rs", "mod x;"),
        ("x/mod.rs", "mod y; mod z; pub fn h() {} fn k() { y::f(); }"),
        ("x/y.rs", "use super::{z::Z, h}; pub fn f() { h() }"),
        ("x/z.rs", "pub struct Z;"),
    ]);
    let graph = Source::read(dir.path()).file_graph();
    assert_eq!(find_cycle(&graph), Some(vec!["x".to_string(), "x::y".to_string(), "x".to_string()]));
    assert_eq!(graph["x::y"], BTreeSet::from(["x".to_string(), "x::z".to_string()]));
    // Without the use back, no cycle: a visibility naming the parent (`pub(super)`,
    // `pub(in crate::x)`) is no use of it.
    let dir = fake_crate(&[
        ("lib.rs", "mod x;"),
        ("x/mod.rs", "mod y; mod z; fn k() { y::f(); }"),
        ("x/y.rs", "use super::z::Z; pub(super) fn f() {}"),
        ("x/z.rs", "pub(in crate::x) struct Z { pub(super) n: u8 }"),
    ]);
    let graph = Source::read(dir.path()).file_graph();
    assert_eq!(find_cycle(&graph), None);
    assert_eq!(graph["x::y"], BTreeSet::from(["x::z".to_string()]));
    assert!(graph["x::z"].is_empty(), "{graph:?}");
}

#[test]
fn the_checker_follows_re_exports_to_the_defining_module() {
    // `c` names `a`'s item through the root's and `b`'s re-exports: it uses `a`, not `b`.
    let dir = fake_crate(&[
        ("lib.rs", "mod a; mod b; mod c; pub use a::X;"),
        ("a.rs", "pub struct X; pub struct Y;"),
        ("b.rs", "pub use crate::a::Y as Z; pub fn f() {}"),
        ("c.rs", "use crate::X; fn g(_: crate::b::Z) { crate::b::f() }"),
    ]);
    let graph = Source::read(dir.path()).file_graph();
    assert_eq!(graph["c"], BTreeSet::from(["a".to_string(), "b".to_string()]), "b::f is b's own");
    let dir = fake_crate(&[("lib.rs", "mod a; pub use a::X;"), ("a.rs", "pub struct X;"), ("b.rs", "fn g(_: crate::X) {}")]);
    assert_eq!(Source::read(dir.path()).file_graph()["b"], BTreeSet::from(["a".to_string()]));
}

#[test]
fn the_crate_checker_sees_a_library_naming_a_crate_above_it() {
    let dir = fake_crate(&[("lib.rs", "mod m; fn f() { cai_runtime::cai::DType::F32; }"), ("m.rs", "use caijit_integration::gpu;")]);
    let above = BTreeSet::from(["caijit_integration".to_string(), "caijit_python".to_string()]);
    let found = crates_named(dir.path(), &above);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].0.ends_with("m.rs") && found[0].1 == "caijit_integration", "{found:?}");
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
    files(&binding_dir(), &[], &mut all);
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

/// cudarc is the runtime's FFI: only `sys` names it (its types reach `interop` through
/// `sys::cudarc_types`), and the binding never does.
#[test]
fn no_file_but_sys_names_cudarc() {
    let mut wrong = Vec::new();
    for f in Source::read(&src_dir()).files {
        if f.roots.contains("cudarc") && f.module.first().map(String::as_str) != Some("sys") {
            wrong.push(f.path.display().to_string());
        }
    }
    for f in Source::read(&binding_dir()).files {
        if f.roots.contains("cudarc") {
            wrong.push(f.path.display().to_string());
        }
    }
    assert!(wrong.is_empty(), "cudarc named outside cai-runtime's sys:\n{}", wrong.join("\n"));
}

/// Rules the runtime keeps, each once: which device a launch runs on, the one-GPU shortcut,
/// DLPack's devices, tensor ⇄ view conversion and stream handshake (capture included), and
/// how XLA buffers bind to parameters. The binding calls them; it defines none and asks the
/// driver none of their questions itself.
const RUNTIME_RULES: &[&str] = &[
    "launch_device",
    "sole_device",
    "is_cuda",
    "view_of",
    "tensor_of",
    "export_tensor",
    "import_stream",
    "consumer_stream_value",
    "order_export",
    "bindings",
    "check_aliases",
];
/// Driver questions behind those rules (the capture state of a stream, a pointer's device).
const RUNTIME_QUESTIONS: &[&str] = &["is_capturing", "pointer_device"];

#[derive(Default)]
struct RuleUses(BTreeSet<String>);

impl<'ast> Visit<'ast> for RuleUses {
    fn visit_signature(&mut self, s: &'ast syn::Signature) {
        if RUNTIME_RULES.contains(&s.ident.to_string().as_str()) {
            self.0.insert(format!("defines `{}`", s.ident));
        }
        syn::visit::visit_signature(self, s);
    }
    fn visit_expr_method_call(&mut self, m: &'ast syn::ExprMethodCall) {
        if RUNTIME_QUESTIONS.contains(&m.method.to_string().as_str()) {
            self.0.insert(format!("asks `.{}()`", m.method));
        }
        syn::visit::visit_expr_method_call(self, m);
    }
    fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
        if let syn::Expr::Path(p) = &*c.func {
            let last = p.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
            // (The binding's `pointer_device` pyfunction wraps the runtime's of that name.)
            if RUNTIME_QUESTIONS.contains(&last.as_str()) && p.path.segments.len() == 1 {
                self.0.insert(format!("asks `{last}()` itself"));
            }
        }
        syn::visit::visit_expr_call(self, c);
    }
}

fn rule_uses(source: &str) -> BTreeSet<String> {
    let mut uses = RuleUses::default();
    uses.visit_file(&syn::parse_file(source).unwrap());
    uses.0
}

#[test]
fn the_python_binding_holds_no_rule_the_runtime_has() {
    let mut all = Vec::new();
    files(&binding_dir(), &[], &mut all);
    let mut wrong = Vec::new();
    for (path, _) in &all {
        for what in rule_uses(&std::fs::read_to_string(path).unwrap()) {
            wrong.push(format!("{}: {what}; the runtime has that rule", path.display()));
        }
    }
    assert!(wrong.is_empty(), "rules kept in the Python binding:\n{}", wrong.join("\n"));
    let found = rule_uses("fn launch_device() {} fn f(s: &S) { s.is_capturing(); }");
    assert_eq!(found.len(), 2, "{found:?}");
}

/// The arms of `match`es over `ParamKind` that take every kind not named (`_` without a
/// guard): a new kind would fall into them unseen.
struct KindMatches<'a> {
    file: &'a str,
    found: Vec<String>,
}

fn names_a_param_kind(p: &syn::Pat) -> bool {
    let path = |p: &syn::Path| p.segments.iter().any(|s| s.ident == "ParamKind");
    match p {
        syn::Pat::Or(o) => o.cases.iter().any(names_a_param_kind),
        syn::Pat::Path(p) => path(&p.path),
        syn::Pat::Struct(s) => path(&s.path),
        syn::Pat::TupleStruct(t) => path(&t.path),
        syn::Pat::Ident(i) => i.subpat.as_ref().is_some_and(|(_, p)| names_a_param_kind(p)),
        _ => false,
    }
}

/// The patterns a match arm gives to each position of the matched value: one, or a
/// tuple's elements.
fn positions(p: &syn::Pat) -> Vec<&syn::Pat> {
    match p {
        syn::Pat::Tuple(t) => t.elems.iter().collect(),
        p => vec![p],
    }
}

impl<'ast> Visit<'ast> for KindMatches<'_> {
    fn visit_expr_match(&mut self, m: &'ast syn::ExprMatch) {
        let width = m.arms.iter().map(|a| positions(&a.pat).len()).max().unwrap_or(0);
        for k in 0..width {
            if !m.arms.iter().any(|a| positions(&a.pat).get(k).is_some_and(|p| names_a_param_kind(p))) {
                continue;
            }
            for a in m.arms.iter().filter(|a| a.guard.is_none()) {
                let wild = matches!(a.pat, syn::Pat::Wild(_)) || matches!(positions(&a.pat).get(k), Some(syn::Pat::Wild(_)));
                if wild {
                    self.found.push(format!("{}: a `_` arm in a match over ParamKind", self.file));
                }
            }
        }
        syn::visit::visit_expr_match(self, m);
    }
}

/// Every consumer of a parameter kind handles each kind by name: adding a `ParamKind` fails
/// to compile at each `match` that must decide what to do with it (in the runtime, where
/// the enum is defined and every match is exhaustive), and the binding reads kinds only
/// through the runtime's accessors (`ParamKind::name`, `dtype`, `is_const`, `rank`),
/// never by a match of its own (across crates, `#[non_exhaustive]` would force a `_`).
#[test]
fn every_consumer_handles_every_param_kind() {
    let mut all = Vec::new();
    files(&src_dir(), &[], &mut all);
    let mut wrong = Vec::new();
    for (path, _) in &all {
        let file = path.display().to_string();
        let mut v = KindMatches { file: &file, found: Vec::new() };
        v.visit_file(&syn::parse_file(&std::fs::read_to_string(path).unwrap()).unwrap());
        wrong.extend(v.found);
    }
    let mut binding = Vec::new();
    files(&binding_dir(), &[], &mut binding);
    for (path, _) in &binding {
        if std::fs::read_to_string(path).unwrap().contains("ParamKind::") {
            wrong.push(format!("{}: matches on ParamKind; use its accessors", path.display()));
        }
    }
    assert!(wrong.is_empty(), "parameter kinds left to a catch-all:\n{}", wrong.join("\n"));
    let mut v = KindMatches { file: "t", found: Vec::new() };
    v.visit_file(&syn::parse_file("fn f(k: K) { match k { ParamKind::Scalar(_) => 1, _ => 2 }; }").unwrap());
    v.visit_file(&syn::parse_file("fn f(k: K) { match (k, a) { (ParamKind::Scalar(_), A::X) => 1, (_, other) => 2 }; }").unwrap());
    v.visit_file(&syn::parse_file("fn f(k: K) { match (k, a) { (ParamKind::Scalar(_), _) => 1, _ if g => 2, (_, A::X) => 3 }; }").unwrap());
    assert_eq!(v.found.len(), 3, "{:?}", v.found);
}

/// A file of `cai-runtime/src` past this many lines needs a `# Size` section in its module
/// doc saying why it is one file; otherwise it is split by job.
const LONG_FILE: usize = 700;

#[test]
fn no_runtime_file_is_long_without_a_reason() {
    let mut all = Vec::new();
    files(&src_dir(), &[], &mut all);
    let mut wrong = Vec::new();
    for (path, _) in &all {
        let text = std::fs::read_to_string(path).unwrap();
        let lines = text.lines().count();
        if lines > LONG_FILE && !text.lines().take_while(|l| l.starts_with("//!")).any(|l| l.trim() == "//! # Size") {
            wrong.push(format!("{}: {lines} lines", path.display()));
        }
    }
    assert!(wrong.is_empty(), "files over {LONG_FILE} lines without a `# Size` section in their module doc:\n{}", wrong.join("\n"));
}
