#!/usr/bin/env bash
# Run on an x86-64 machine with an NVIDIA GPU and Python 3.12 (no Rust needed), from the
# repository root, after scripts/gpu-bundle.sh filled .gpu/. Installs the wheel into a
# temporary directory, runs the GPU suites with CAIJIT_REQUIRE_GPU=1, then with --bench the
# benchmarks and with --sanitize compute-sanitizer (memcheck, racecheck) over the kernel
# library's tests and the randomized ordering tester; prints each suite's summary line at
# the end (and into $OUT if set).
#
# Targeted modes (one check, not the whole suite):
#   --tests "PYTEST ARGS"   only pytest, with these arguments (run in python/tests)
#   --ordering N            only the randomized ordering tester, N sequences (the soak:
#                           N >= 2000, split over calls with CAIJIT_ORDERING_SEED)
#   --ab-bench              the launch benchmark's caijit paths for the wheel of .gpu/base
#                           (an earlier build) and this one, alternately, twice each
#   --first-call            only the first-call benchmark (python/benchmarks/bench_first_call.py:
#                           NVRTC cold, disk cache warm, bundle; bundle build times)
#   --probe                 the launch probe (python/benchmarks/probe_launch.py: micro
#                           timings and the per-phase split), then the launch benchmark
#                           (CAIJIT_BENCH_QUICK=1 unless set)
#   --rust-bundle           only the Rust example that launches from an embedded bundle
#                           without NVRTC (.gpu/rust-bundle; also part of the full run)
set -uo pipefail
cd "$(dirname "$0")/.."
export CAIJIT_REQUIRE_GPU=1 CAIJIT_KERNELS_DIR="$PWD/kernels" CAIJIT_CACHE_DIR=/tmp/caijit-cache PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/caijit-out}; mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"; : >"$SUMMARY"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$SUMMARY"

# The launch benchmark's C floor: a library it calls between its Python paths' batches,
# and the same loop as a program (a cross-check row).
build_floor() {
    nvcc -O2 -shared -Xcompiler -fPIC -DLAUNCH_FLOOR_LIBRARY -o /tmp/liblaunch_floor.so \
        python/benchmarks/launch_floor.cu -lcuda 2>"$OUT/nvcc.log" && export CAIJIT_LAUNCH_FLOOR=/tmp/liblaunch_floor.so
    nvcc -O2 -o /tmp/launch_floor python/benchmarks/launch_floor.cu -lcuda 2>>"$OUT/nvcc.log" && export CAIJIT_LAUNCH_FLOOR_EXE=/tmp/launch_floor
}

# Installed as pip installs (bytecode compiled): with PYTHONDONTWRITEBYTECODE set, a wheel
# installed --no-compile recompiles its Python source in every fresh process, which the
# first-call benchmark would count as caijit's import time.
if ls .gpu/wheels/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/wheels/*.whl
    export PYTHONPATH=/tmp/site
fi

if [ "${1:-}" = --ab-bench ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site-base .gpu/base/*.whl
    build_floor
    for round in 1 2; do
        for build in base new; do
            site=/tmp/site; [ $build = base ] && site=/tmp/site-base
            echo "===== $build (round $round)"
            PYTHONPATH=$site CAIJIT_BENCH_QUICK=1 CAIJIT_BENCH_CHART=/dev/null python3 python/benchmarks/bench_launch.py 2>&1 \
                | grep -E '^\| (caijit|CuPy|PyTorch|C\+\+)' | tee -a "$OUT/ab-bench.txt"
        done
    done
    exit 0
fi

if [ "${1:-}" = --first-call ]; then
    python3 python/benchmarks/bench_first_call.py 2>&1 | tee "$OUT/bench_first_call.txt"
    exit "${PIPESTATUS[0]}"
fi

# The Rust example built without NVRTC (scripts/rust-bundle-example.sh): its template kernel
# from the bundle it embeds, values checked, and no libnvrtc in the process; NVRTC cannot be
# found here either (CAIJIT_NVRTC_PATH points nowhere).
rust_bundle() {
    local bin=.gpu/rust-bundle/rust-bundle-example
    if [ ! -x "$bin" ]; then
        echo "rust-bundle example: not built (scripts/gpu-bundle.sh builds it)" | tee -a "$SUMMARY"
        return 1
    fi
    CAIJIT_NVRTC_PATH=/nonexistent "$bin" 2>&1 | tee "$OUT/rust-bundle.txt"
    local rc=${PIPESTATUS[0]}
    echo "$(tail -1 "$OUT/rust-bundle.txt") (exit $rc)" >>"$SUMMARY"
    return "$rc"
}

if [ "${1:-}" = --rust-bundle ]; then
    rust_bundle
    status=$?
    echo "===== summary"; cat "$SUMMARY"
    exit $status
fi

if [ "${1:-}" = --probe ]; then
    build_floor
    (cd python/benchmarks && python3 probe_launch.py 2>&1 | tee "$OUT/probe_launch.txt")
    (cd python/benchmarks && CAIJIT_BENCH_QUICK=${CAIJIT_BENCH_QUICK:-1} CAIJIT_BENCH_CHART=/dev/null python3 bench_launch.py 2>&1 | tee "$OUT/bench_launch.txt")
    exit 0
fi

if [ "${1:-}" = --tests ] || [ "${1:-}" = --ordering ]; then
    if [ "$1" = --ordering ]; then
        export CAIJIT_ORDERING_EXAMPLES="${2:-200}" CAIJIT_ORDERING_REPORT="$OUT/ordering.txt"
        args="test_ordering_random.py"
    else
        args="${2:?--tests needs pytest arguments}"
    fi
    # shellcheck disable=SC2086 # the arguments are pytest's, split on purpose
    (cd python/tests && python3 -m pytest -q -ra -p no:cacheprovider $args 2>&1 | tee "$OUT/pytest.log" | tail -40)
    status=$?
    echo "pytest: $(tail -1 "$OUT/pytest.log")" >>"$SUMMARY"
    [ -f "$OUT/ordering.txt" ] && cat "$OUT/ordering.txt" >>"$SUMMARY"
    echo "===== summary"; cat "$SUMMARY"
    exit $status
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

rust_bundle || status=1

if [ -n "${PYTHONPATH:-}" ]; then
    (cd python/tests && python3 -m pytest -q -ra -p no:cacheprovider . 2>&1 | tee "$OUT/pytest.log" | tail -25) || status=1
    echo "pytest: $(tail -1 "$OUT/pytest.log")" >>"$SUMMARY"
    grep -E "^E  " "$OUT/pytest.log" | head -40
fi

if [ -n "${PYTHONPATH:-}" ] && [ ! -f /tmp/site/caijit/_ops.caijit ]; then
    # The wheel as scripts/build-wheel.sh ships it carries the kernel library precompiled:
    # bake it for this GPU into the installed package, then run the kernel library's tests
    # and the bundle tests again, now served from it (and once with NVRTC unloadable).
    arch=$(python3 -c 'import caijit; m, n = caijit._native.device_info(0)[1]; print(f"sm_{m}{n}")')
    t0=$SECONDS
    python3 -m caijit bundle build --ops --arch "$arch" -o /tmp/site/caijit/_ops.caijit >"$OUT/bake-ops.log" 2>&1 || status=1
    echo "kernel library baked for $arch in $((SECONDS - t0)) s: $(du -h /tmp/site/caijit/_ops.caijit | cut -f1)" | tee -a "$SUMMARY"
    (cd python/tests && python3 -m pytest -q -ra -p no:cacheprovider test_ops.py test_bundles_gpu.py 2>&1 | tee "$OUT/pytest-packaged.log" | tail -8) || status=1
    echo "pytest (kernel library from the packaged bundle): $(tail -1 "$OUT/pytest-packaged.log")" >>"$SUMMARY"
    rm -f /tmp/site/caijit/_ops.caijit
fi

if [ -n "${PYTHONPATH:-}" ]; then
    # The main job, as the README runs it (from outside the source tree, so the installed
    # wheel is the one imported).
    (cd /tmp && python3 -m caijit demo 2>&1 | tee "$OUT/demo.txt") || status=1
fi

if [[ " $* " == *" --bench "* ]]; then
    [ -x .gpu/bin/bench_launch ] && .gpu/bin/bench_launch --bench 2>&1 | tee "$OUT/bench_launch_rust.txt"
    build_floor
    export CAIJIT_BENCH_CHART="$OUT/launch_overhead.png"
    if [ -n "${PYTHONPATH:-}" ]; then
        for b in python/benchmarks/bench_*.py python/benchmarks/probe_launch.py python/benchmarks/soak.py; do
            python3 "$b" 2>&1 | tee "$OUT/$(basename "$b" .py).txt"
        done
    fi
fi

if [[ " $* " == *" --sanitize "* ]] && [ -n "${PYTHONPATH:-}" ]; then
    # compute-sanitizer over the kernel library's GPU tests: memcheck for every kernel,
    # racecheck for the ones that share memory between threads. The test of ops from many
    # host threads runs the same kernels thousands of times: too slow under memcheck.
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    (cd python/tests && timeout 240 "$SAN" --tool memcheck --target-processes all \
        python3 -m pytest -q -p no:cacheprovider test_ops.py -k "not compile and not threads" 2>&1 | tail -6 | tee "$OUT/memcheck.txt")
    (cd python/tests && timeout 180 "$SAN" --tool racecheck --target-processes all \
        python3 -m pytest -q -p no:cacheprovider test_ops.py -k "transpose or reductions or softmax" 2>&1 | tail -6 | tee "$OUT/racecheck.txt")
    # The randomized ordering tester, a small budget: every producer, stream and step kind
    # under memcheck (it sees device-side accesses to freed or foreign memory). API errors
    # are not reported here: cuda-python, loaded by CuPy and Numba, probes the driver for
    # symbols it lacks with cuGetProcAddress, which memcheck counts as errors.
    (cd python/tests && CAIJIT_ORDERING_EXAMPLES=${CAIJIT_MEMCHECK_ORDERING_EXAMPLES:-20} timeout 300 "$SAN" --tool memcheck --report-api-errors no --target-processes all \
        python3 -m pytest -q -p no:cacheprovider test_ordering_random.py 2>&1 | tail -6 | tee "$OUT/memcheck-ordering.txt")
    echo "memcheck: $(grep -h 'ERROR SUMMARY' "$OUT/memcheck.txt" | tail -1)" >>"$SUMMARY"
    echo "memcheck (ordering tester): $(grep -h 'ERROR SUMMARY' "$OUT/memcheck-ordering.txt" | tail -1); $(grep -h 'passed\|failed' "$OUT/memcheck-ordering.txt" | tail -1)" >>"$SUMMARY"
    echo "racecheck: $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' "$OUT/racecheck.txt" | tail -1)" >>"$SUMMARY"
fi

echo "===== summary"; cat "$SUMMARY"
exit $status
