#!/usr/bin/env bash
# Set up a fresh machine: a virtualenv with the build and test requirements (NVRTC from
# pip included) and caijit built into it. Idempotent; safe to run again (later runs are
# quick: pip finds everything installed and cargo rebuilds only what changed).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
step() { printf '\n==> %s\n' "$*"; }
start=$SECONDS

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "caijit needs Python >= 3.10; $PYTHON is $("$PYTHON" --version 2>&1). Set PYTHON=python3.12 (say)." >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    step "creating the virtualenv .venv ($("$PYTHON" --version))"
    "$PYTHON" -m venv .venv
fi
step "installing maturin, NumPy, pytest and NVRTC from pip into .venv (about 20 s the first time)"
.venv/bin/python -m pip install -q --disable-pip-version-check -r python/requirements-dev.txt
step "building caijit (Rust, release) into .venv (about 1.5 min the first time)"
(cd python && ../.venv/bin/maturin develop --release --locked)
# The example extension of #[derive(CudaArrayInterface)] with #[cai(python)] (tested by pytest).
step "building the example extension examples/rust-extension into .venv (about 1.5 min the first time)"
(cd examples/rust-extension && ../../.venv/bin/maturin develop --release --locked)
step "set up in $((SECONDS - start)) s; run caijit with .venv/bin/python -m caijit (or: source .venv/bin/activate)"
