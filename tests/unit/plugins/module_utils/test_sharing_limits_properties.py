"""Property-based: every valid limit renders back exactly; no value with a space, a quote or a stray
separator ever gets through (CUDA would ignore it and cap nothing)."""
from hypothesis import given, settings, strategies as st

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._sharing import (
    LimitError, parse_mem_limit, render_mem_limit)


def _hex(n):
    return st.text(alphabet="0123456789abcdef", min_size=n, max_size=n)


uuids = st.builds(lambda a, b, c, d, e: "GPU-%s-%s-%s-%s-%s" % (a, b, c, d, e),
                  _hex(8), _hex(4), _hex(4), _hex(4), _hex(12))
devices = st.one_of(st.integers(0, 15).map(str), uuids)
amounts = st.builds(lambda n, u: "%d%s" % (n, u), st.integers(1, 200000), st.sampled_from(["M", "MB", "G", "GB"]))
entries = st.lists(st.tuples(devices, amounts), min_size=1, max_size=6, unique_by=lambda t: t[0])


@settings(max_examples=200, deadline=None)
@given(entries)
def test_valid_limits_render_back_exactly(pairs):
    text = ",".join("%s=%s" % p for p in pairs)
    parsed = parse_mem_limit(text)
    assert render_mem_limit(parsed) == text
    assert [e["device"] if e["kind"] == "uuid" else str(e["device"]) for e in parsed] == [p[0] for p in pairs]


@settings(max_examples=200, deadline=None)
@given(entries, st.sampled_from([" ", "\t", "'", '"', ";", ",,", "=", "\n"]), st.data())
def test_one_bad_character_anywhere_is_refused(pairs, bad, data):
    text = ",".join("%s=%s" % p for p in pairs)
    pos = data.draw(st.integers(0, len(text)))
    broken = text[:pos] + bad + text[pos:]
    with pytest.raises(LimitError):
        parse_mem_limit(broken)
