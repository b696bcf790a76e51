#!/usr/bin/env bash
# The README's second command: set up, then run every test (Rust workspace and pytest).
# GPU tests skip with a reason where there is no GPU; CAIJIT_REQUIRE_GPU=1 makes them fail.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Rust tests find the pip-installed NVRTC through the virtualenv.
export VIRTUAL_ENV="$PWD/.venv"
cargo test --workspace --locked
cargo clippy --workspace --all-targets --locked -q -- -D warnings
cargo fmt --all --check
(cd python && ../.venv/bin/python -m pytest -q -ra)
