#!/usr/bin/env bash
# Run on an x86-64 machine with an NVIDIA GPU and Python 3.12 (no Rust needed), from the
# repository root, after scripts/gpu-bundle.sh filled .gpu/. Installs the wheel into a
# temporary directory, runs the GPU suites with CAIJIT_REQUIRE_GPU=1 and, with --bench,
# the benchmarks; prints each suite's summary line at the end (and into $OUT if set).
set -uo pipefail
cd "$(dirname "$0")/.."
export CAIJIT_REQUIRE_GPU=1 CAIJIT_KERNELS_DIR="$PWD/kernels" CAIJIT_CACHE_DIR=/tmp/caijit-cache PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/caijit-out}; mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"; : >"$SUMMARY"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$SUMMARY"

if ls .gpu/wheels/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/wheels/*.whl
    export PYTHONPATH=/tmp/site
fi

status=0
for t in .gpu/bin/*; do
    [ "$(basename "$t")" = bench_launch ] && continue
    log="$OUT/rust-$(basename "$t").log"
    "$t" --test-threads=1 --nocapture >"$log" 2>&1 || status=1
    grep -oE "device 0:.*" "$log" >>"$SUMMARY"
    echo "rust $(basename "$t"): $(grep -E '^test result' "$log" | tail -1)" | tee -a "$SUMMARY"
    grep -E "panicked|FAILED|^---- " "$log" | head -20
done

if [ -n "${PYTHONPATH:-}" ]; then
    (cd python/tests && python3 -m pytest -q -ra -p no:cacheprovider . 2>&1 | tee "$OUT/pytest.log" | tail -25) || status=1
    echo "pytest: $(tail -1 "$OUT/pytest.log")" >>"$SUMMARY"
    grep -E "^E  " "$OUT/pytest.log" | head -40
fi

if [ -n "${PYTHONPATH:-}" ]; then
    # The main job, as the README runs it (from outside the source tree, so the installed
    # wheel is the one imported).
    (cd /tmp && python3 -m caijit demo 2>&1 | tee "$OUT/demo.txt") || status=1
fi

if [ "${1:-}" = "--bench" ]; then
    [ -x .gpu/bin/bench_launch ] && .gpu/bin/bench_launch --bench 2>&1 | tee "$OUT/bench_launch_rust.txt"
    if nvcc -O2 -o /tmp/launch_floor python/benchmarks/launch_floor.cu -lcuda 2>"$OUT/nvcc.log"; then
        export CAIJIT_LAUNCH_FLOOR=/tmp/launch_floor
    fi
    export CAIJIT_BENCH_CHART="$OUT/launch_overhead.png"
    if [ -n "${PYTHONPATH:-}" ]; then
        for b in python/benchmarks/bench_*.py python/benchmarks/soak.py; do
            python3 "$b" 2>&1 | tee "$OUT/$(basename "$b" .py).txt"
        done
    fi
fi

echo "===== summary"; cat "$SUMMARY"
exit $status
