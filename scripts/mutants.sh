#!/usr/bin/env bash
# Mutation check of the stream protocol: each mutant below is a deliberate one-line bug
# (a missing stream edge, a skipped argument check, ...) that named GPU tests must catch.
#
#   scripts/mutants.sh list                 the mutants, their files and killing tests
#   scripts/mutants.sh check [NAME...]      apply each to a scratch copy (no build): every
#                                           original text must occur exactly once
#   scripts/mutants.sh build [NAME...]      (here, with Rust; no GPU) one release wheel per
#                                           mutant into .gpu/mutants/<name>/, and the table
#                                           into .gpu/mutants/TABLE
#   scripts/mutants.sh run [NAME...]        (the GPU machine: Python 3, no Rust) baseline,
#                                           then each mutant's killing tests; a markdown table
#                                           on stdout and in $OUT/mutants.md
#
# Phase 1, build (CPU machine): scripts/gpu-bundle.sh first (it recreates .gpu/ and builds
# the unmutated wheel the run's baseline uses), then scripts/mutants.sh build. Each mutant
# is applied to a fresh copy of the repository's tracked and untracked-not-ignored files in
# /tmp/caijit-mutants/<name>/src (the working tree is never touched) by an exact-text
# replacement that fails loudly unless the original text occurs exactly once there (the
# code drifted: update the table). The copies get fresh modification times: cargo's
# fingerprints ignore where a workspace lives, so with the shared CARGO_TARGET_DIR an old
# timestamp could reuse another mutant's build of a crate. Dependencies stay built.
#
# Phase 2, run (GPU machine, with the device tool, from the repository root, carry .gpu):
#   run(command="scripts/mutants.sh run", carry=[".gpu"], kind="nvidia-h200-x2")
# Two GPUs: no_device_check's killer launches on an array of the other device. The baseline
# (the unmutated wheel of .gpu/wheels) must pass every killing test, none skipped, or the run
# stops. Then per mutant, under `timeout 120`: pytest exit 1 = KILLED; a signal (a crash) or
# the timeout (a hang) = KILLED, said so; 0 = SURVIVED; any other exit (5: no tests collected,
# 2: collection error, 4: usage) or a skipped killer = ERROR. Exits 1 if any mutant
# survived or erred.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
WORK=${MUTANTS_WORK:-/tmp/caijit-mutants}

# The mutants, and the helpers that read them: apply, list, the run's bookkeeping.
read -r -d '' MUTANTS_PY <<'PYEOF' || true
import os, shutil, subprocess, sys, difflib
import xml.etree.ElementTree as ET

E = "test_stream_edges.py::"   # relative to python/tests
LAUNCH, ARRAY, RUNTIME = "cai-runtime/src/launch.rs", "cai-runtime/src/array.rs", "cai-runtime/src/runtime.rs"
MUTANTS = [
    dict(name="no_forward_wait", file=LAUNCH,
         original="d.stream_wait_event(launch_stream, e)?;", replacement="",
         description="the launch stream no longer waits for its producers' events (forward edge)",
         killers=[E + "test_foreign_producer_is_waited_for"]),
    dict(name="no_reverse_edge", file=LAUNCH,
         original="d.stream_wait_event(p.stream, after)?;", replacement="",
         description="producer streams no longer wait for the kernel (reverse edge): their allocator recycles memory under it",
         killers=[E + "test_torch_temporary_on_side_stream_is_not_recycled",
                  E + "test_cupy_temporary_on_side_stream_is_not_recycled"]),
    dict(name="free_on_wrong_stream", file=RUNTIME,
         original="lock(&self.memory).blocks.give_back(a.ptr, owner);",
         replacement="lock(&self.memory).blocks.give_back(a.ptr, Owner::Idle);",
         description="a dropped DeviceArray's block is anybody's at once, not kept for its own stream until its work is done",
         killers=[E + "test_freed_array_waits_for_its_stream",
                  E + "test_a_block_freed_under_a_running_kernel_goes_to_its_stream_only"]),
    dict(name="export_without_stream", file=ARRAY,
         original="if !stream || version < 3 {", replacement="if true {",
         description="__cuda_array_interface__ never carries the array's pending stream",
         killers=[E + "test_cai_export_carries_pending_stream"]),
    dict(name="no_dtype_check", file="cai-runtime/src/params/mod.rs",
         original="if let Some(d) = dtype.filter(|&d| d != a.dtype) {", replacement="if let Some(d) = dtype.filter(|_| false) {",
         description="an array of the wrong dtype is launched",
         killers=[E + "test_dtype_mismatch_is_refused"]),
    dict(name="no_alignment_check", file="cai-runtime/src/params/mod.rs",
         original="if !v.is_itemsize_aligned() || !crate::cai::is_multiple_of(v.ptr().into(), vector as u64) {", replacement="if false {",
         description="a view not aligned to its elements is launched",
         killers=[E + "test_misaligned_array_view_is_refused"]),
    dict(name="no_readonly_check", file="cai-runtime/src/params/mod.rs",
         original="if let Some(why) = a.immutable.filter(|_| !is_const) {", replacement="if let Some(why) = a.immutable.filter(|_| false) {",
         description="a readonly array is passed for a mutable pointer",
         killers=[E + "test_readonly_array_for_mutable_pointer_is_refused"]),
    dict(name="no_device_check", file=LAUNCH,
         original="Some(o) if o as usize == ctx.ordinal() => {}", replacement="Some(_) => {}",
         description="an array on another device is launched (needs 2 GPUs)",
         killers=[E + "test_array_on_other_device_is_refused"]),
    dict(name="opt_outs_on_own_arrays", file=LAUNCH,
         original="producers.retain(|p| p.stream != launch_stream && (foreign || p.own));",
         replacement="producers.retain(|p| p.stream != launch_stream && foreign);",
         description="the sync opt-outs (CAI_NO_SYNC, sync=False) drop the edges to caijit's own arrays too",
         killers=[E + "test_own_temporary_survives_cai_sync_opt_out",
                  E + "test_sync_false_keeps_own_arrays_ordered"]),
    dict(name="context_not_restored", file=RUNTIME,
         original="let _ = self.driver.restore_current(previous);", replacement="let _ = previous;",
         description="binding caijit's context leaves it current: the caller's context is not restored",
         killers=[E + "test_stream_drop_keeps_current_context",
                  E + "test_launch_keeps_current_context"]),
    # The arms after it become unreachable: a warning, not an error.
    dict(name="capture_joins_foreign_stream", file=LAUNCH,
         original="(l, q) if l == q => kept.push(p),", replacement="_ => kept.push(p),",
         description="edges to streams outside a graph capture (or into one) are kept: the capture breaks, or a launch joins it",
         killers=[E + "test_capture_on_blocking_cupy_stream_with_legacy_producer",
                  E + "test_launch_waiting_on_a_capturing_stream_is_an_error"]),
    dict(name="no_failure_wait", file=LAUNCH,
         original="let _ = d.stream_synchronize(launch_stream);", replacement="",
         description="after a failed reverse edge the caller is not held until the kernel finished",
         killers=[E + "test_reverse_edge_failure_waits_for_the_kernel"]),
    dict(name="dlpack_released_early", file="python/src/args/arg.rs",
         original="result = result.and(ctx.release_after(stream, Box::new(holder)));", replacement="drop(holder);",
         description="DLPack capsules are released at once, not after the kernel",
         killers=[E + "test_dlpack_temporary_released_after_kernel[cupy]", E + "test_ops_hold_dlpack_capsules_until_the_kernel_is_done"]),
    # The compile cache (issue #26): NVRTC must never read a byte the key did not cover.
    # Their killers need NVRTC only (no GPU).
    dict(name="trusted_compile_passes_include_dirs", file="cai-runtime/src/compile/mod.rs",
         original="        Some(includes) => {",
         replacement="        Some(includes) => { for d in program.include_dirs.iter().chain(&sorted.include_dirs).chain(&tk.include_dirs) { opts.push(format!(\"-I{}\", d.display())); }",
         description="a trusted compile passes -I to NVRTC: it can read headers from disk that the key did not cover",
         killers=["test_compile.py::test_a_trusted_compile_gives_nvrtc_no_search_path"]),
    dict(name="key_without_nvrtc_build", file="cai-runtime/src/compile/key.rs",
         original="tk.build.as_bytes(), &arch,",
         replacement="tk.build.split(';').next().unwrap_or_default().as_bytes(), &arch,",
         description="the cache key names NVRTC by major.minor only: another build of the same version is served this one's binary",
         killers=["test_compile.py::test_the_key_names_the_exact_nvrtc_build"]),
    dict(name="view_without_owner", file="python/src/interface.rs",
         original="owner: Some(Owner::Array(array)) })", replacement="owner: None })",
         description="a view of a caijit array (or a view of that view) does not hold the array: its memory goes to new arrays while the view lives",
         killers=[E + "test_view_of_a_view_holds_the_array[2]"]),
    dict(name="capturing_stream_to_producer", file="python/src/args/context.rs",
         original="if capturing {", replacement="if false && capturing {",
         description="a DLPack producer is handed the capturing launch stream: its wait on its own stream breaks the capture",
         killers=[E + "test_dlpack_only_argument_in_a_capture_is_capture_legal"]),
    dict(name="xla_call_without_fingerprint", file="cai-runtime/src/xla.rs",
         original="if fingerprint_of(text) != key {", replacement="if false {",
         description="a custom call's description is compiled whatever fingerprint the call carries: another process's program can run another kernel",
         killers=["test_jax_lowering.py::test_a_description_that_does_not_match_its_fingerprint_is_refused",
                  "test_jax_lowering.py::test_a_launch_resolves_in_a_fresh_process_from_its_attributes_alone",
                  "test_jax_lowering.py::test_a_serialized_program_resolves_its_launch_in_a_fresh_process[exe]"]),
]
BY_NAME = {m["name"]: m for m in MUTANTS}

def pick(names):
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        sys.exit(f"unknown mutant(s): {' '.join(unknown)} (see: scripts/mutants.sh list)")
    return [BY_NAME[n] for n in names] if names else MUTANTS

def copy_tree(src, dest):
    """The tracked and untracked-not-ignored files of src into dest, with fresh mtimes."""
    files = subprocess.run(["git", "-C", src, "ls-files", "-z", "-co", "--exclude-standard"],
                           check=True, capture_output=True).stdout.decode().split("\0")
    n = 0
    for f in filter(None, files):
        s = os.path.join(src, f)
        if not os.path.isfile(s):   # deleted in the working tree, or a submodule
            continue
        d = os.path.join(dest, f)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        shutil.copy(s, d)           # contents and mode, not times
        n += 1
    print(f"copied {n} files to {dest}", file=sys.stderr)

def apply(m, tree, write=True):
    path = os.path.join(tree, m["file"])
    with open(path) as f:
        text = f.read()
    n = text.count(m["original"])
    if n != 1:
        sys.exit(f"MUTANT {m['name']}: the original text occurs {n} times in {m['file']} (expected exactly once): "
                 f"{m['original']!r}; the code drifted, update scripts/mutants.sh")
    mutated = text.replace(m["original"], m["replacement"])
    if write:
        with open(path, "w") as f:
            f.write(mutated)
    line = text[: text.index(m["original"])].count("\n") + 1
    diff = "".join(difflib.unified_diff(text.splitlines(True), mutated.splitlines(True),
                                        "a/" + m["file"], "b/" + m["file"], n=2))
    return line, diff

def junit(path):
    """Outcomes of a pytest --junitxml file: counts, and the tests that did not run."""
    counts = dict(passed=0, failed=0, skipped=0)
    skipped = []
    for case in ET.parse(path).getroot().iter("testcase"):
        tags = {c.tag for c in case}
        if tags & {"failure", "error"}:
            counts["failed"] += 1
        elif "skipped" in tags:
            counts["skipped"] += 1
            reason = next(c for c in case if c.tag == "skipped").get("message", "")
            skipped.append(f"{case.get('name')}: {reason}")
        else:
            counts["passed"] += 1
    return counts, skipped

cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "names":            # names [NAME...]: the chosen mutants (all by default)
    print("\n".join(m["name"] for m in pick(args)))
elif cmd == "list":
    for m in pick(args):
        print(f"{m['name']}  ({m['file']})\n    {m['description']}\n    {m['original']!r} -> {m['replacement']!r}")
        print("".join(f"    kill: {k}\n" for k in m["killers"]), end="")
elif cmd == "table":          # the TSV written to .gpu/mutants/TABLE
    print("name\tfile\tdescription\tkilling tests")
    for m in MUTANTS:
        print("\t".join([m["name"], m["file"], m["description"], " ".join(m["killers"])]))
elif cmd == "copy":           # copy SRC DEST
    copy_tree(*args)
elif cmd == "apply":          # apply NAME TREE: mutate TREE in place, print the diff
    m = BY_NAME[args[0]]
    line, diff = apply(m, args[1])
    print(diff, end="")
elif cmd == "check":          # check TREE [NAME...]: every original text once, nothing written
    for m in pick(args[1:]):
        line, _ = apply(m, args[0], write=False)
        print(f"ok  {m['name']:<30} {m['file']}:{line}")
elif cmd == "killers":        # killers NAME...: the union, in table order, one per line
    seen = []
    for m in pick(args):
        seen += [k for k in m["killers"] if k not in seen]
    print("\n".join(seen))
elif cmd == "field":          # field NAME KEY
    v = BY_NAME[args[0]][args[1]]
    print(" ".join(v) if isinstance(v, list) else v)
elif cmd == "junit":          # junit FILE: "passed=N failed=N skipped=N", then the skipped tests
    counts, skipped = junit(args[0])
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    print("\n".join(skipped))
else:
    sys.exit(f"unknown helper command {cmd}")
PYEOF

mut() { "$PY" -c "$MUTANTS_PY" "$@"; }

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

# ---------------------------------------------------------------- check (no build)
check() {
    local tree="$WORK/check/src"
    mut names "$@" >/dev/null     # fails on an unknown name
    rm -rf "$WORK/check" && mkdir -p "$tree"
    mut copy "$ROOT" "$tree"
    mut check "$tree" "$@"
}

# ---------------------------------------------------------------- phase 1: build
build() {
    local names; names=$(mut names "$@")     # fails on an unknown name
    local maturin="$ROOT/.venv/bin/maturin"
    [ -x "$maturin" ] || { echo "no $maturin: run scripts/setup.sh" >&2; exit 1; }
    [ -n "$(ls "$ROOT"/.gpu/wheels/caijit-*.whl 2>/dev/null)" ] \
        || echo "note: no .gpu/wheels/caijit-*.whl yet: run scripts/gpu-bundle.sh (it recreates .gpu/, so before this)" >&2
    export CARGO_TARGET_DIR="$ROOT/target/mutants"   # shared: the dependencies build once
    local name tree out start
    for name in $names; do
        start=$SECONDS
        tree="$WORK/$name/src"
        out="$WORK/$name/out"
        rm -rf "$WORK/$name" && mkdir -p "$tree" "$out"
        mut copy "$ROOT" "$tree"
        mut apply "$name" "$tree" | tee "$out/mutant.diff"
        # Stripped: the line tables help no mutant, and the transfer is at most 64 MiB.
        (cd "$tree/python" && "$maturin" build --release --locked --strip -q -o "$out")
        # Into .gpu/ only once built (scripts/gpu-bundle.sh starts by removing .gpu/).
        rm -rf "$ROOT/.gpu/mutants/$name" && mkdir -p "$ROOT/.gpu/mutants"
        cp -r "$out" "$ROOT/.gpu/mutants/$name"
        echo "built $name in $((SECONDS - start)) s: $(cd "$out" && ls caijit-*.whl)"
    done
    mut table >"$ROOT/.gpu/mutants/TABLE"
    echo "== wheels (the device tool carries at most 64 MiB in all)"
    du -h "$ROOT"/.gpu/mutants/*/caijit-*.whl
    du -sh "$ROOT/.gpu/mutants" "$ROOT/.gpu"
}

# ---------------------------------------------------------------- phase 2: run (GPU)
SITE=/tmp/mut-site

# install NAME WHEEL: into $SITE/NAME, and check that is the caijit Python imports from it.
install() {
    rm -rf "${SITE:?}/$1"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE/$1" "$2"
    (cd /tmp && PYTHONPATH="$SITE/$1" "$PY" -c "
import caijit, sys
assert caijit.__file__.startswith('$SITE/$1/'), caijit.__file__")
}

# pytest NAME LOG TEST...: the killing tests against $SITE/NAME from python/tests; its exit code.
pytest_on() {
    local name=$1 log=$2; shift 2
    rm -f "$SITE/$name.xml"
    (cd "$ROOT/python/tests" && PYTHONPATH="$SITE/$name" timeout -k 10 120 "$PY" -m pytest -q -rs -p no:cacheprovider -x \
        --junitxml="$SITE/$name.xml" "$@" >"$log" 2>&1)
}

run() {
    local names; names=$(mut names "$@")
    cd "$ROOT"
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    export CAIJIT_REQUIRE_GPU=1 CAIJIT_KERNELS_DIR="$ROOT/kernels" CAIJIT_CACHE_DIR=/tmp/caijit-mut-cache PYTHONUNBUFFERED=1
    local logs=${OUT:-/tmp/caijit-mut-out}/mutants; mkdir -p "$logs" "$SITE"
    nvidia-smi --query-gpu=index,name --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"

    # Baseline: the unmutated wheel must pass every killing test (none skipped), or the
    # table would say nothing.
    local wheels=(.gpu/wheels/caijit-*.whl)
    [ -f "${wheels[0]}" ] && [ ${#wheels[@]} -eq 1 ] \
        || { echo "ABORT: expected one .gpu/wheels/caijit-*.whl (scripts/gpu-bundle.sh), found: ${wheels[*]}" >&2; exit 2; }
    install baseline "${wheels[0]}"
    local -a all; mapfile -t all < <(mut killers $names)
    echo "== baseline: ${#all[@]} killing tests on ${wheels[0]}"
    local rc=0; pytest_on baseline "$logs/baseline.log" "${all[@]}" || rc=$?
    local outcome; outcome=$(mut junit "$SITE/baseline.xml" 2>/dev/null || echo "no junit report")
    if [ $rc -ne 0 ] || [[ "$outcome" != *" skipped=0"* ]]; then
        tail -40 "$logs/baseline.log"
        echo "ABORT: the baseline must pass all killing tests (pytest exit $rc; ${outcome//$'\n'/; })" >&2
        exit 2
    fi
    echo "baseline: ${outcome%%$'\n'*}"

    local table="| mutant | what it breaks | killing tests | result |
|---|---|---|---|"
    local survived=0 errors=0 name wheel result killers log
    local -a tests
    for name in $names; do
        mapfile -t tests < <(mut killers "$name")
        killers=$(printf '`%s`, ' "${tests[@]#test_stream_edges.py::}")
        log="$logs/$name.log"
        wheel=$(ls .gpu/mutants/"$name"/caijit-*.whl 2>/dev/null | head -1 || true)
        if [ -z "$wheel" ]; then
            result="ERROR: not built"
        elif ! install "$name" "$wheel" >"$log" 2>&1; then
            result="ERROR: the wheel does not install or import"
        else
            rc=0; pytest_on "$name" "$log" "${tests[@]}" || rc=$?
            outcome=$(mut junit "$SITE/$name.xml" 2>/dev/null | head -1 || true)
            case $rc in
                0) if [[ "$outcome" == *" skipped=0"* ]]; then result="SURVIVED"; else result="ERROR: skipped ($outcome)"; fi ;;
                1) result="KILLED" ;;
                124) result="KILLED (hung: timeout 120 s)" ;;
                137) result="KILLED (signal 9: hung past the timeout, or killed for memory)" ;;
                5) result="ERROR: no tests collected" ;;
                *) if [ $rc -gt 128 ]; then result="KILLED (crash: signal $((rc - 128)))"; else result="ERROR: pytest exit $rc"; fi ;;
            esac
        fi
        case $result in SURVIVED) survived=$((survived + 1)) ;; ERROR*) errors=$((errors + 1)) ;; esac
        echo "== $name: $result"
        [[ $result == KILLED* ]] || { [ -f "$log" ] && tail -15 "$log"; }
        table+=$'\n'"| \`$name\` | $(mut field "$name" description) | ${killers%, } | $result |"
    done
    echo
    echo "$table"
    [ -n "${OUT:-}" ] && echo "$table" >"$OUT/mutants.md"
    echo
    echo "$(wc -w <<<"$names") mutants: $survived survived, $errors errors (logs: $logs)"
    [ $survived -eq 0 ] && [ $errors -eq 0 ]
}

case ${1:-} in
    list) shift; mut list "$@" ;;
    check) shift; check "$@" ;;
    build) shift; build "$@" ;;
    run) shift; run "$@" ;;
    -h|--help|help) usage ;;
    *) usage 2 >&2 ;;
esac
