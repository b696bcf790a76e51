#!/usr/bin/env bash
# The Rust example that ships its kernels in a bundle (examples/rust-bundle): bake the
# bundle of its template kernel (the float and double instances its launches deduce) with
# the Python CLI, build the example in release with the bundle embedded (cai-runtime without
# NVRTC), then run it: on a GPU it launches and checks the values, without one it looks the
# instances up only (--inspect). Either run is with CAIJIT_NVRTC_PATH pointing nowhere.
#
#   CAIJIT_EXAMPLE_ARCHS=sm_90   the architectures to bake (default sm_80,sm_90,sm_100,sm_120, + PTX)
#   --no-run                     bake and build only (scripts/gpu-bundle.sh)
# Prints the binary's path last: target/release/rust-bundle-example.
set -euo pipefail
cd "$(dirname "$0")/.."
# .venv's caijit bakes the bundle: built from this tree (quick when nothing changed), so that
# its bundle keys are the ones the example computes.
scripts/setup.sh >/dev/null
archs=${CAIJIT_EXAMPLE_ARCHS:-sm_80,sm_90,sm_100,sm_120}
dir=target/rust-bundle-example
mkdir -p "$dir"
.venv/bin/python -m caijit bundle build examples/rust-bundle/kernels/axpy.cu \
    --instantiate 'axpy<float>' --instantiate 'axpy<double>' --arch "$archs" -o "$dir/axpy.caijit"
# The workspace's target directory: the dependencies built for caijit are reused.
CAIJIT_EXAMPLE_BUNDLE="$PWD/$dir/axpy.caijit" CARGO_TARGET_DIR="$PWD/target" \
    cargo build --release --locked --manifest-path examples/rust-bundle/Cargo.toml
bin=target/release/rust-bundle-example
if [ "${1:-}" != --no-run ]; then
    if nvidia-smi -L >/dev/null 2>&1; then
        CAIJIT_NVRTC_PATH=/nonexistent "$bin"
    else
        echo "(no GPU: looking the instances up only)"
        CAIJIT_NVRTC_PATH=/nonexistent "$bin" --inspect
    fi
fi
echo "$bin"
