#!/usr/bin/env bash
# Set up a fresh machine: a virtualenv with the build and test requirements (NVRTC from
# pip included) and caijit built into it. Idempotent; safe to run again (later runs are
# quick: pip finds everything installed and cargo rebuilds only what changed).
#
#   PYTHON=python3.13   the interpreter of the virtualenv (default python3; >= 3.10)
#   VENV=.venv-3.13     where the virtualenv lives (default .venv)
#   NVRTC=12            NVRTC 12.x from pip (python/requirements-nvrtc12.txt) instead of 13.x
set -euo pipefail
cd "$(dirname "$0")/.."

explicit_python=${PYTHON:+yes}
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
NVRTC=${NVRTC:-13}
start=$SECONDS
t0=$SECONDS
# Each step says what it does and, when it ends, how long it took.
step() {
    [ -z "${step_name:-}" ] || printf '    (took %d s)\n' $((SECONDS - t0))
    step_name=$1 t0=$SECONDS
    printf '\n==> %s\n' "$*"
}

if ! "$PYTHON" -c 'import sys' >/dev/null 2>&1; then
    if command -v "$PYTHON" >/dev/null 2>&1; then
        echo "$PYTHON cannot be run ($(command -v "$PYTHON") fails to start). Set PYTHON to an interpreter that runs, e.g. PYTHON=python3.12." >&2
    else
        echo "$PYTHON cannot be run: no such command. Install it, or set PYTHON to one that runs, e.g. PYTHON=python3.12." >&2
    fi
    exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "caijit needs Python >= 3.10; $PYTHON is $("$PYTHON" --version 2>&1). Set PYTHON=python3.12 (say)." >&2
    exit 1
fi
case "$NVRTC" in
    12 | 13) ;;
    *) echo "NVRTC=$NVRTC: caijit installs NVRTC 12 or 13 from pip (NVRTC=12 or NVRTC=13)" >&2; exit 1 ;;
esac
if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
    echo "$VENV exists but its Python does not run (moved, or its interpreter is gone): remove $VENV and run again" >&2
    exit 1
fi
want=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ -x "$VENV/bin/python" ]; then
    have=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if [ "$have" != "$want" ] && [ -n "$explicit_python" ]; then
        echo "$VENV has Python $have but PYTHON=$PYTHON is $want: remove $VENV, or set VENV=.venv-$want" >&2
        exit 1
    fi
else
    step "creating the virtualenv $VENV (Python $want)"
    "$PYTHON" -m venv "$VENV"
fi
venv_dir=$(cd "$VENV" && pwd)
PY=$venv_dir/bin/python
step "installing maturin, NumPy, pytest, mypy, JAX (CPU, for Python >= 3.11) and NVRTC $NVRTC from pip into $VENV (quiet: errors only)"
other=$([ "$NVRTC" = 12 ] && echo 13 || echo 12)
# One NVRTC in the environment: caijit would take the newest it finds.
"$PY" -m pip uninstall -y -q $(sed -n 's/^\(nvidia-[a-z0-9-]*\)==.*/\1/p' "python/requirements-nvrtc$other.txt") 2>/dev/null || true
# -q: no line per requirement (nor the "Ignoring ...: markers ... don't match your
# environment" of the pins for other Pythons); errors and warnings still show.
"$PY" -m pip install -q --disable-pip-version-check --progress-bar off \
    -r python/requirements-dev.txt -r "python/requirements-nvrtc$NVRTC.txt"
step "building caijit (Rust, release) into $VENV (a first build compiles for minutes)"
# VIRTUAL_ENV: maturin installs into this virtualenv (without it, into a .venv it finds).
(cd python && VIRTUAL_ENV=$venv_dir "$PY" -m maturin develop --release --locked)
# The example extension of #[derive(CudaArrayInterface)] with #[cai(python)] (tested by pytest).
step "building the example extension examples/rust-extension into $VENV"
(cd examples/rust-extension && VIRTUAL_ENV=$venv_dir "$PY" -m maturin develop --release --locked)
step "done"
echo "set up in $((SECONDS - start)) s; run caijit with $VENV/bin/python -m caijit (or: source $VENV/bin/activate)"
