"""caijit's compile caches against NVRTC reading the files from disk, over random include
graphs with one header edited (see compile_differential.py, which is also the soak).

CAIJIT_DIFFTEST_CASES sets the number of cases (default 1000), CAIJIT_DIFFTEST_SEED the
seed (default: random, printed in the summary and in every failure)."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest

import caijit
from caijit import _native

import compile_differential as cd


def _nvrtc_missing() -> str | None:
    try:
        _native.nvrtc_info()
    except caijit.CudaNotAvailable as e:
        return str(e)
    return None


pytestmark = pytest.mark.skipif(_nvrtc_missing() is not None, reason="NVRTC is not available")


def test_cached_compiles_match_nvrtc_after_a_header_edit(tmp_path: Any) -> None:
    n = int(os.environ.get("CAIJIT_DIFFTEST_CASES", "1000"))
    seed = int(os.environ.get("CAIJIT_DIFFTEST_SEED") or random.randrange(2**32))
    report = cd.run(list(range(n)), seed, str(tmp_path))
    print(report.summary())
    # The generator must keep producing cases that test something: most compile, and many
    # edits change what NVRTC makes of them (else a stale cache could not show).
    assert report.both_failed <= 0.25 * 3 * n, report.summary()
    assert report.effective_edits >= 0.25 * n, report.summary()
    if report.failures:
        shown = "\n\n".join(f.describe() for f in report.failures[:3])
        pytest.fail(
            f"{report.summary()}\n\n{shown}\n\nreproduce one case: python python/tests/compile_differential.py --seed {seed} --case N --keep DIR",
            pytrace=False,
        )


def test_bundles_match_nvrtc_with_headers_edited_during_the_bake(tmp_path: Any) -> None:
    """A bundle baked while headers are saved serves, with or without NVRTC, only what NVRTC
    makes of the files as they are (or, without NVRTC, misses): never the old code under a
    new key. CAIJIT_DIFFTEST_BUNDLE_CASES sets the number of cases (default 60)."""
    n = int(os.environ.get("CAIJIT_DIFFTEST_BUNDLE_CASES", "60"))
    seed = int(os.environ.get("CAIJIT_DIFFTEST_SEED") or random.randrange(2**32))
    report = cd.run_bundle(list(range(n)), seed, str(tmp_path))
    print(report.summary())
    # Edits that change NVRTC's result, and cases the bundle serves (those not edited, or
    # edited before the bake read them): else a stale bundle could not show.
    assert report.effective_edits >= 0.2 * n and report.served >= 0.2 * n, (report.served, report.summary())
    if report.failures:
        shown = "\n\n".join(f.describe() for f in report.failures[:3])
        pytest.fail(f"{report.summary()}\n\n{shown}", pytrace=False)


def test_a_case_is_made_from_its_seed_and_index_alone(tmp_path: Any) -> None:
    a = cd.generate(12345, 7, str(tmp_path))
    b = cd.generate(12345, 7, str(tmp_path))
    assert a.describe(2) == b.describe(2) and a.options == b.options
    assert cd.generate(12345, 8, str(tmp_path)).describe(2) != a.describe(2)


def test_the_generator_covers_every_feature(tmp_path: Any) -> None:
    """The features the issue names all occur within the CI run's first 300 cases."""
    seen = set().union(*(cd.generate(1, i, str(tmp_path)).features for i in range(300)))
    wanted = {
        "inc:quoted", "inc:angle", "inc:relpath", "inc:subdir", "inc:macro", "inc:stringize", "inc:has_include", "inc:sel_if",
        "inc:cplusplus_if", "inc:splice", "inc:comment_directive", "same_name_several_dirs", "guard:guard", "guard:once",
        "guard:both", "guard:none", "guard_shared", "noise:raw", "noise:digits", "noise:comment", "noise:splice_comment",
        "noise:char_quote", "noise:string_escape", "noise:dead", "I:api", "I:-I dir", "I:-Idir", "I:-I=dir",
        "I:--include-path=dir", "I:--include-path dir", "pre:-include f", "pre:-include=f", "pre:--pre-include=f",
        "pre:--pre-include f", "D:-DK=V", "D:-D K=V", "D:--define-macro=K=V", "D:--define-macro K=V", "std:-std=c++20",
        "std:--std=c++17", "std:None", "no_source_include", "minimal", "edit:slot", "edit:selector", "edit_keeps_mtime", "extern_c",
    }  # fmt: skip
    assert wanted <= seen, wanted - seen


def test_the_comparison_sees_a_changed_type_and_a_changed_constant() -> None:
    """A result that differs from NVRTC's only in one parameter type, or only in one
    constant of the PTX, is a mismatch; one equal to NVRTC's version 1 is called stale."""
    ptx = ".visible .entry {n}(\n\t.param .u32 {n}_param_0\n)\n{{\n\tmov.u32 %r1, {v}; // c\n\tret;\n}}\n"
    good = cd.summarize(["k"], {"k": ("_Z1ki", ["i"])}, ptx.format(n="_Z1ki", v=5))
    assert good["k"]["params"] == ["i"] and "mov.u32 %r1, 5;" in good["k"]["body"] and "//" not in good["k"]["body"]
    other_type = cd.summarize(["k"], {"k": ("_Z1kj", ["j"])}, ptx.format(n="_Z1kj", v=5))
    other_value = cd.summarize(["k"], {"k": ("_Z1ki", ["i"])}, ptx.format(n="_Z1ki", v=6))
    case = cd.generate(1, 0, "/nonexistent")
    ok = {"ok": True, "log": "", "kernels": good}
    for changed in (other_type, other_value):
        got = {"ok": True, "log": "", "kernels": changed}
        f = cd._compare(case, "v2-fresh-process", got, ok, got)
        assert f is not None and f.kind == "stale"
        f = cd._compare(case, "v2-fresh-process", got, ok, ok)
        assert f is not None and f.kind == "wrong"
    assert cd._compare(case, "v1", ok, ok, ok) is None
    failed = {"ok": False, "log": "error", "kernels": {}}
    f1, f2 = cd._compare(case, "v1", failed, ok, ok), cd._compare(case, "v1", ok, failed, failed)
    assert f1 is not None and f1.kind == "caijit-fails" and f2 is not None and f2.kind == "caijit-succeeds"
    assert cd.mangled_codes("_Z7kc00001jycPi", "kc00001") == ["j", "y", "c", "Pi"]
