#!/usr/bin/env bash
# The README's first command: set up, then run the main job.
# PYTHON, VENV and NVRTC choose the virtualenv as for scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec "${VENV:-.venv}/bin/python" -m caijit demo "$@"
