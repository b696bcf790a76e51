"""The documentation describes the product as it is, not how it was built (CPU): no doc
tells of rounds or of what was done last time, and a commit is named only on the line that
says what a figure was measured at (history belongs in git)."""

from __future__ import annotations

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "README.md")]

HISTORY = re.compile(r"\b(this|last|previous|earlier) round\b|\blast time\b", re.I)
# 7 to 40 hex digits with at least one digit and one letter a-f (not a word, not a number).
COMMIT = re.compile(r"(?<![\w.-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")


def history(text: str) -> list[str]:
    """The lines of ``text`` that tell history: round words, and commit hashes outside a
    line saying what was "measured at"."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if HISTORY.search(line):
            found.append(f"{number}: {HISTORY.search(line).group(0)!r}: {line.strip()[:120]}")  # type: ignore[union-attr]
        elif "measured at" not in line.lower() and COMMIT.search(line):
            found.append(f"{number}: commit {COMMIT.search(line).group(0)}: {line.strip()[:120]}")  # type: ignore[union-attr]
    return found


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_docs_tell_no_history(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        found = history(f.read())
    assert not found, f"{os.path.relpath(path, ROOT)} tells history (git keeps it):\n" + "\n".join(found)


def test_the_check_sees_rounds_and_commits() -> None:
    text = "\n".join(
        [
            "This round the launch got faster.",
            "As last time, 2.1 µs.",
            "Compared with the previous round and an earlier round.",
            "Fixed in 4511e90.",
            "Measured at 4511e90c on one H200.",
            "A figure of 1234567 ns, a deadbeef-free word, sm_90a, face, 0x7f00000, sha256 values",
        ]
    )
    assert [line.split(":")[0] for line in history(text)] == ["1", "2", "3", "4"]


def test_the_readme_layout_lists_every_example_and_doc() -> None:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    rows = {line.split("|")[1].strip(): line for line in readme[readme.index("## Layout") :].splitlines() if line.startswith("| `")}
    examples = [e for e in os.listdir(os.path.join(ROOT, "examples")) if e.endswith(".py") or os.path.isdir(os.path.join(ROOT, "examples", e))]
    docs = [os.path.basename(d) for d in glob.glob(os.path.join(ROOT, "docs", "*.md"))]
    missing = [f"examples/{e}" for e in examples if f"`{e}" not in rows["`examples/`"]]
    missing += [f"docs/{d}" for d in docs if f"`{d}`" not in rows["`docs/`"]]
    assert not missing, f"README.md's layout table does not list: {', '.join(sorted(missing))}"
