#!/usr/bin/env bash
# The README's second command: set up, then run every test (Rust workspace and pytest).
# GPU tests skip with a reason where there is no GPU; CAIJIT_REQUIRE_GPU=1 makes them fail.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n==> %s\n' "$*"; }
scripts/setup.sh
# Rust tests find the pip-installed NVRTC through the virtualenv.
export VIRTUAL_ENV="$PWD/.venv"
step "building and running the Rust tests (cargo test --workspace; about 1.5 min the first time)"
cargo test --workspace --locked
step "clippy and rustfmt"
cargo clippy --workspace --all-targets --locked -q -- -D warnings
cargo fmt --all --check
step "the Python tests (pytest; about 2 min without a GPU)"
(cd python && ../.venv/bin/python -m pytest -q -ra)
