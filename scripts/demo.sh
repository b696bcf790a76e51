#!/usr/bin/env bash
# The README's first command: set up, then run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m caijit demo "$@"
