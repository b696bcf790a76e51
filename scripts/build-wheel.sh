#!/usr/bin/env bash
# Build the caijit wheel with the kernel library precompiled: every instance of
# kernels/ops for sm_80, sm_90, sm_100 and sm_120 (+ PTX of sm_120 for newer GPUs) baked
# into python/caijit/_ops.caijit, which the wheel carries, so that caijit.ops needs no
# NVRTC and its first call compiles nothing (docs/bundles.md). Needs NVRTC (scripts/setup.sh
# installs it). Usage: scripts/build-wheel.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-target/wheels}")
scripts/setup.sh
printf '\n==> baking the kernel library into python/caijit/_ops.caijit\n'
.venv/bin/python -m caijit bundle build --ops --arch "$(.venv/bin/python -c 'import caijit.bundles as b; print(",".join(b.OPS_ARCHS))')" \
    -o python/caijit/_ops.caijit
printf '\n==> building the wheel into %s\n' "$out"
# (No --release: the pyproject.toml profile, the shipped one, builds it.)
(cd python && ../.venv/bin/maturin build -q -o "$out")
ls -l "$out"/caijit-*.whl
