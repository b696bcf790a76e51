"""Hypothesis: arbitrary (mostly malformed) dicts never crash parse_interface."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import caijit

ints = st.one_of(st.integers(-4, 8), st.integers(), st.integers(min_value=2**63 - 2, max_value=2**65))
scalars = st.one_of(st.none(), st.booleans(), ints, st.floats(), st.text(max_size=5))
values = st.one_of(
    scalars,
    st.tuples(ints, st.booleans()),
    st.lists(ints, max_size=5).map(tuple),
    st.lists(scalars, max_size=4).map(tuple),
    st.sampled_from(["<f4", "|b1", ">f8", "<V2", "<c16", "x", ""]),
)
keys = st.sampled_from(["shape", "typestr", "data", "version", "strides", "descr", "mask", "stream", "extra"])


@settings(max_examples=3000, deadline=None)
@given(st.dictionaries(keys, values, max_size=9))
def test_arbitrary_dicts_are_accepted_or_rejected_cleanly(d: dict[str, Any]) -> None:
    try:
        i = caijit.parse_interface(d)
    except caijit.InterfaceError:
        return
    # Accepted: the derived facts are consistent.
    assert i.size == 0 or i.ptr != 0
    assert len(i.strides) == len(i.shape) == i.ndim
    assert i.nbytes == i.size * i.itemsize


LAUNCH_K = caijit.kernel(
    '#include <caijit/caijit.cuh>\nextern "C" __global__ void k(const float* x, caijit::Array<float, 2> y) {}',
    options=["-DCAIJIT_FUZZ=1"],
)
ARRAYISH = st.fixed_dictionaries(
    {"shape": st.lists(st.integers(-2, 2**40), max_size=3).map(tuple), "typestr": st.sampled_from(["<f4", "<f8", ">f4", "|b1", "<V2", "x"]),
     "data": st.tuples(st.integers(-1, 2**64), st.booleans()), "version": st.integers(-1, 5)},
    optional={"strides": st.one_of(st.none(), st.lists(st.integers(-(2**63), 2**63), max_size=3).map(tuple)),
              "stream": st.one_of(st.none(), st.integers(-1, 2**64)), "mask": st.one_of(st.none(), st.just(1))},
)


class CAI:
    def __init__(self, d: dict[str, Any]) -> None:
        self.__cuda_array_interface__ = d


@settings(max_examples=2000, deadline=None)
@given(ARRAYISH, ARRAYISH)
def test_launches_with_malformed_arrays_fail_cleanly(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Malformed or foreign (never allocated) arrays at a launch: a typed error, never a
    launch on a bad pointer, never a crash."""
    try:
        LAUNCH_K[1, 1](CAI(a), CAI(b))
    except (caijit.InterfaceError, caijit.ArgumentError, caijit.CudaNotAvailable, caijit.CompileError):
        return
    # Only arrays that address no memory may launch: every pointer drawn here is foreign.
    sizes = [caijit.parse_interface(CAI(d)).size for d in (a, b)]
    assert sizes == [0, 0], f"launched with {a} and {b}"
