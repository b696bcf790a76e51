"""Soak of the differential compile test (python/tests/compile_differential.py): 20,000
random include graphs, each compiled by caijit before and after one header is edited, in a
fresh process (disk cache) and in the same process (memory cache), against NVRTC reading
the files from disk. Prints the seed, a line per batch of cases, every mismatch as one JSON
line, then the counts per phase and per generator feature.

Runs without a GPU (NVRTC only):
    python python/benchmarks/compile_soak.py [--cases 20000] [--jobs J] [--seed S]
Each job compiles one batch of cases with about two cores busy. Exit status 1 on any mismatch.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import compile_differential  # noqa: E402

if __name__ == "__main__":
    sys.exit(compile_differential.main())
