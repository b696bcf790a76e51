#!/usr/bin/env bash
# Set up a fresh machine: a virtualenv with the build and test requirements (NVRTC from
# pip included) and caijit built into it. Idempotent; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r python/requirements-dev.txt
(cd python && ../.venv/bin/maturin develop --release -q)
# The example extension of #[derive(CudaArrayInterface)] with #[cai(python)] (tested by pytest).
(cd examples/rust-extension && ../../.venv/bin/maturin develop --release -q)
