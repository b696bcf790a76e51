#!/usr/bin/env bash
# Build, on a machine without a GPU, everything a GPU run needs into .gpu/ (ignored by git):
# the release wheels (caijit, the example extension), the Rust test binaries (built with --no-run) and the benchmarks,
# and the example that ships its kernels in a bundle (.gpu/rust-bundle: a binary without NVRTC, its bundle embedded).
# Then run it there with scripts/gpu-run.sh (device tool: carry .gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
# Always (quick when nothing changed): the wheel, the Rust tests and the bundle the example
# embeds (baked by .venv's caijit) must all come from this tree, or their bundle keys differ.
scripts/setup.sh
rm -rf .gpu/bin .gpu/wheels .gpu/rust-bundle && mkdir -p .gpu/bin .gpu/wheels .gpu/rust-bundle   # (.gpu/mutants: scripts/mutants.sh)
# (No --release: the wheel is built as it ships, with the pyproject.toml profile.)
(cd python && ../.venv/bin/maturin build -q -o ../.gpu/wheels)
# The example extension (the derive's GPU test launches through it).
(cd examples/rust-extension && ../../.venv/bin/maturin build --release -q -o ../../.gpu/wheels)
cargo test --workspace --release --locked --no-run --message-format=json 2>/dev/null \
    | .venv/bin/python -c '
import json, shutil, sys, os
for line in sys.stdin:
    m = json.loads(line)
    exe = m.get("executable")
    # proc-macro test binaries link the toolchain libstd dynamically: they stay here.
    # cai-macros tests need cargo (trybuild): they run where Rust is, not on the GPU machine.
    # tests/architecture.rs reads the sources of the checkout it was built in and needs no
    # GPU: it runs here (cargo test), not from the bundle.
    if m.get("reason") == "compiler-artifact" and exe and m["target"]["kind"] not in (["bin"], ["proc-macro"]) \
            and "/cai-macros/" not in m["target"]["src_path"] and m["target"]["name"] != "architecture":
        name = m["target"]["name"].replace("-", "_")
        if m["target"]["kind"] == ["lib"]:
            name = "unit_" + name
        shutil.copy(exe, os.path.join(".gpu/bin", name))
'
# The bundle example (run by scripts/gpu-run.sh, --rust-bundle alone).
cp "$(scripts/rust-bundle-example.sh --no-run | tail -1)" .gpu/rust-bundle/
strip .gpu/bin/* .gpu/rust-bundle/*   # the device tool carries at most 64 MiB
ls -la .gpu/bin .gpu/wheels
du -sh .gpu
