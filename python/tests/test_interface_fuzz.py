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
