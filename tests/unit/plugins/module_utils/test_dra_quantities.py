"""The DRA templates' pinned memory limits are Kubernetes quantities (plugins/module_utils/plan/_dra.py quantity_bytes):
Kubernetes' grammar with Kubernetes' meaning, written so that Kubernetes reads back the bytes the user's text means;
everything else refused with the valid forms, naming its place once. The host MPS path's CUDA notation
(_sharing.parse_mem_amount, 8G = 8 GiB) is a different grammar and stays as it was."""

from decimal import Decimal, localcontext

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra, _sharing

KI, MI, GI, TI = 2 ** 10, 2 ** 20, 2 ** 30, 2 ** 40
WHERE = "gpuops_dra_claim_templates[0]"


def written(item):
    """The MPS config explicit_templates writes for one template."""
    return _dra.explicit_templates([dict(item, name="w", sharing="mps")])[0]["config"]["sharing"]["mpsConfig"]


def refusal(item):
    with pytest.raises(_dra.DraError) as exc:
        _dra.explicit_templates([dict(item, name="w", sharing="mps")])
    return str(exc.value)


@pytest.mark.parametrize("value, nbytes", [
    ("10Gi", 10 * GI), ("512Mi", 512 * MI), ("2Gi", 2 * GI), ("2048Ki", 2 * MI), ("0.25Ti", 256 * GI),
    ("1G", 10 ** 9), ("1000M", 10 ** 9), ("1000000k", 10 ** 9), ("1e9", 10 ** 9), ("1E+9", 10 ** 9),
    ("1000000000", 10 ** 9), (10 ** 9, 10 ** 9), ("1P", 10 ** 15), ("1048576", MI), ("1073741824000m", GI),
    ("1.5Gi", 3 * GI // 2), (".5Gi", GI // 2), ("1.Gi", GI), ("+1Gi", GI), ("08Gi", 8 * GI), ("10.035M", 10035000),
])
def test_kubernetes_quantities_are_taken_with_kubernetes_meaning(value, nbytes):
    mps = written({"pinned_memory_limit": value, "per_device_pinned_memory_limit": {0: value}})
    # written as given, so what Kubernetes reads in the template is what it reads in the user's text
    assert mps["defaultPinnedDeviceMemoryLimit"] == str(value)
    assert mps["defaultPerDevicePinnedMemoryLimit"] == {"0": str(value)}
    assert _dra.quantity_bytes(mps["defaultPinnedDeviceMemoryLimit"]) == (nbytes, str(value))


def test_1g_is_ten_to_the_ninth_bytes_not_a_gib():
    # the defect of issue 47: 1G was written as 1024Mi (CUDA's meaning); Kubernetes reads 1G as 10**9 bytes
    mps = written({"pinned_memory_limit": "1G"})
    assert mps["defaultPinnedDeviceMemoryLimit"] != "1024Mi"
    assert _dra.quantity_bytes(mps["defaultPinnedDeviceMemoryLimit"])[0] == 10 ** 9
    # while the host path keeps CUDA's notation, where 1G is a GiB and 1Gi is no unit at all
    assert _sharing.parse_mem_amount("1G") == GI
    with pytest.raises(_sharing.LimitError):
        _sharing.parse_mem_amount("1Gi")


GRAMMAR = "is not a Kubernetes quantity"


@pytest.mark.parametrize("value, words", [
    ("8GB", GRAMMAR), ("512MB", GRAMMAR), ("8GiB", GRAMMAR), ("8gb", GRAMMAR), ("8 Gi", "(no spaces)"),
    (" 8Gi", "(no spaces)"), ("8Gi\n", GRAMMAR), ("1K", GRAMMAR), ("1mi", GRAMMAR), ("1e3Mi", GRAMMAR),
    ("1_000Mi", GRAMMAR), ("NaN", GRAMMAR), ("Infinity", GRAMMAR), ("0x10", GRAMMAR), ("", GRAMMAR),
    ("ten", GRAMMAR), ("1e", GRAMMAR), ("\uff18Gi", GRAMMAR), ("8Gi,4Gi", GRAMMAR),
    ("1.5", "1.5 bytes, not a whole number of bytes"), ("1m", "not a whole number of bytes"),
    ("2e-3", "not a whole number of bytes"), ("1.0000000000000000000000000001Gi", "not a whole number of bytes"),
    ("0", "is zero"), ("0Mi", "is zero"), (0, "is zero"), ("-1Gi", "is negative"), (-5, "is negative"),
    ("1Ki", "1024 bytes, below 1Mi"), ("1048575", "below 1Mi"), (8, "below 1Mi"),
    ("1Pi", "larger than any GPU"), ("1E", "larger than any GPU"), (2 ** 50, "larger than any GPU"),
    ("1e99999999999999999999", "exponent out of any range"), (1.5e9, "(quote it)"),
    (True, "must be a Kubernetes quantity"), (["8Gi"], "must be a Kubernetes quantity"),
])
def test_what_is_not_a_kubernetes_quantity_of_whole_bytes_is_refused(value, words):
    for item, where in (({"pinned_memory_limit": value}, WHERE + ".pinned_memory_limit"),
                        ({"per_device_pinned_memory_limit": {0: value}}, WHERE + ".per_device_pinned_memory_limit[0]")):
        message = refusal(item)
        assert words in message
        assert message.startswith(where) and message.count(WHERE) == 1, message
        if words in (GRAMMAR, "(no spaces)", "must be a Kubernetes quantity"):
            for form in ("Ki, Mi, Gi, Ti, Pi, Ei", "k, M, G, T, P, E", "an exponent (1e9)", "nothing (bytes)"):
                assert form in message


def test_the_cuda_units_get_a_hint():
    assert "Kubernetes writes no B: 8G is 8 * 10**9 bytes, 8Gi is 8 * 2**30" in refusal({"pinned_memory_limit": "8GB"})


def test_an_int_too_long_to_print_is_refused_without_printing_it():
    with pytest.raises(_dra.DraError, match="larger than any GPU"):
        _dra.quantity_bytes(10 ** 5000, "x")


@pytest.mark.parametrize("item, words", [
    ({"pinned_memory_limit": "8GB"}, WHERE + ".pinned_memory_limit '8GB' is not"),
    ({"active_thread_percentage": 0}, WHERE + ".active_thread_percentage must be a whole number from 1 to 100"),
    ({"active_thread_percentage": "25%"}, WHERE + ".active_thread_percentage must be a whole number"),
    ({"per_device_pinned_memory_limit": {"gpu0": "8Gi"}}, WHERE + ".per_device_pinned_memory_limit: device 'gpu0'"),
])
def test_an_explicit_templates_error_names_its_place_once(item, words):
    message = refusal(item)
    assert message.startswith(words) and message.count(WHERE) == 1, message


def test_a_hand_built_gpu_configs_limits_are_checked_too():
    config = _dra.gpu_config("mps", pinned_memory_limit="8GB", per_device_pinned_memory_limit={"0": "4Gi", "1": "-1"})
    errors = _dra.config_limit_errors(config, "templates[0].config")
    assert [e.split(" ", 1)[0] for e in errors] == [
        "templates[0].config.sharing.mpsConfig.defaultPinnedDeviceMemoryLimit",
        "templates[0].config.sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[1]"]
    assert _dra.config_limit_errors(_dra.gpu_config("mps", pinned_memory_limit="35942Mi")) == []
    assert _dra.config_limit_errors({"sharing": "MPS"}) == _dra.config_limit_errors(None) == []


# ---- properties ----------------------------------------------------------------------------------------------------
SUFFIXES = dict([("", 1), ("k", 10 ** 3), ("M", 10 ** 6), ("G", 10 ** 9), ("T", 10 ** 12), ("Ki", KI), ("Mi", MI),
                 ("Gi", GI), ("Ti", TI)] + [("e%d" % n, 10 ** n) for n in range(0, 15)] + [("E+6", 10 ** 6)])


def _decimal_text(numerator, denominator):
    """numerator / denominator (a power of 2 or of 10: a finite decimal) in plain decimal digits."""
    with localcontext() as ctx:
        ctx.prec = 80
        return format(Decimal(numerator) / Decimal(denominator), "f")


@settings(max_examples=300, deadline=None)
@given(st.integers(MI, 2 ** 50 - 1), st.sampled_from(sorted(SUFFIXES)), st.sampled_from(["", "+", "0"]))
def test_any_whole_number_of_bytes_in_any_form_reads_as_those_bytes(nbytes, suffix, lead):
    text = lead + _decimal_text(nbytes, SUFFIXES[suffix]) + suffix
    assert _dra.quantity_bytes(text) == (nbytes, text)


@settings(max_examples=200, deadline=None)
@given(st.integers(MI, 2 ** 50 - 2), st.sampled_from(sorted(SUFFIXES)))
def test_half_a_byte_more_is_refused(nbytes, suffix):
    text = _decimal_text(2 * nbytes + 1, 2 * SUFFIXES[suffix]) + suffix
    with pytest.raises(_dra.DraError, match="not a whole number of bytes"):
        _dra.quantity_bytes(text)


@settings(max_examples=200, deadline=None)
@given(st.integers(MI, 2 ** 50 - 1), st.sampled_from(sorted(SUFFIXES)),
       st.sampled_from([" ", "\t", "\n", "_", "B", ",", "'", "%", "="]), st.data())
def test_one_stray_character_anywhere_is_refused(nbytes, suffix, bad, data):
    text = _decimal_text(nbytes, SUFFIXES[suffix]) + suffix
    pos = data.draw(st.integers(0, len(text)))
    with pytest.raises(_dra.DraError, match="is not a Kubernetes quantity"):
        _dra.quantity_bytes(text[:pos] + bad + text[pos:])
