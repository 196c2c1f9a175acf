"""Per-workload MPS limits: strict validation (CUDA silently ignores a bad value and then caps nothing)."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._sharing import (
    GIB, MIB, LimitError, daemon_defaults, daemon_mem_amount, parse_mem_limit, parse_thread_percentage,
    render_mem_limit, workload_limits)

U0 = "GPU-0a1b2c3d-1111-2222-3333-444455556666"
U1 = "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff"
H200 = {"index": 0, "uuid": U0, "name": "NVIDIA H200", "memory_total_bytes": 150754820096,
        "memory_total_mib": 143771}
TWO = [H200, dict(H200, index=1, uuid=U1)]


# ---- good forms --------------------------------------------------------------------------------------
@pytest.mark.parametrize("value,rendered,mibs", [
    ("0=4G", "0=4G", [4096]),
    ("0=4096M", "0=4096M", [4096]),
    ("0=4GB", "0=4GB", [4096]),
    ("0=512MB", "0=512MB", [512]),
    ("0=6G,1=10G", "0=6G,1=10G", [6144, 10240]),
    ("%s=5G,%s=10G" % (U0, U1), "%s=5G,%s=10G" % (U0, U1), [5120, 10240]),
    ("%s=5GB,%s=10GB" % (U0, U1), "%s=5GB,%s=10GB" % (U0, U1), [5120, 10240]),
    ({0: "8G"}, "0=8G", [8192]),
    ({"1": "8G", U0: "2048M"}, "1=8G,%s=2048M" % U0, [8192, 2048]),
])
def test_good_memory_limits_render_exactly(value, rendered, mibs):
    entries = parse_mem_limit(value, TWO)
    assert render_mem_limit(entries) == rendered
    assert [e["mib"] for e in entries] == mibs
    assert " " not in rendered and "'" not in rendered and '"' not in rendered


def test_uuid_and_index_kinds_are_reported():
    entries = parse_mem_limit("0=1G,%s=2G" % U1, TWO)
    assert [(e["kind"], e["device"]) for e in entries] == [("index", 0), ("uuid", U1)]
    assert entries[1]["bytes"] == 2 * GIB


def test_without_facts_any_index_and_uuid_is_accepted():
    # No GPU facts (e.g. rendering for a pod that lands anywhere): only the format is checked.
    assert render_mem_limit(parse_mem_limit("3=1G,%s=1G" % U1)) == "3=1G,%s=1G" % U1


@pytest.mark.parametrize("value,expected", [(25, 25), ("25", 25), (1, 1), ("100", 100), (100, 100)])
def test_good_thread_percentages(value, expected):
    assert parse_thread_percentage(value) == expected


# ---- bad memory-limit forms: each refused with the reason ------------------------------------------------
BAD_MEMORY = [
    ("", "is empty"),
    ("8G", "no device given"),
    ("=8G", "device is missing"),
    ("0=", "memory limit is empty"),
    ("0=8", "has no unit: write 8M or 8G"),
    ("0=8g", "units are upper case: G"),
    ("0=8gb", "units are upper case: GB"),
    ("0=8GiB", "CUDA's M/G are already binary"),
    ("0=8MiB", "CUDA's M/G are already binary"),
    ("0=8T", "megabytes or gigabytes"),
    ("0=8K", "megabytes or gigabytes"),
    ("0=8192B", "megabytes or gigabytes"),
    ("0=1.5G", "has a fraction"),
    ("0=1,5G", "no device given"),
    ("0=-8G", "is negative"),
    ("0=0G", "is zero"),
    ("0=08G", "leading zeros"),
    ("0=8 G", "contains spaces"),
    ("0=6G, 1=10G", "contains spaces"),
    (" 0=6G", "contains spaces"),
    ("0=6G\n", "contains spaces"),
    ("'0=6G'", "quote characters"),
    ('"0=6G,1=10G"', "quote characters"),
    ("'%s=5GB,%s=10GB'" % (U0, U1), "quote characters"),
    ("0=6G;1=10G", "uses ';'"),
    ("0:6G", "with '=', not ':'"),
    ("0=6G,", "stray comma"),
    (",0=6G", "stray comma"),
    ("0=6G,,1=6G", "stray comma"),
    ("0=6G=1", "more than one '='"),
    ("-1=6G", "without signs or leading zeros"),
    ("00=6G", "without signs or leading zeros"),
    ("2=6G", "index 2 does not exist"),
    ("0=6G,0=4G", "more than once"),
    ("0=6G,%s=4G" % U0, None),  # two GPUs: index 0 may be another GPU for the pod, so this is allowed
    ("GPU-0a1b2c3d=6G", "not a full GPU UUID"),
    ("GPU-0A1B2C3D-1111-2222-3333-444455556666=6G", "lower-case"),
    ("GPU-00000000-0000-0000-0000-000000000000=6G", "not on this node"),
    ("MIG-0a1b2c3d-1111-2222-3333-444455556666=6G", "is a MIG device"),
    ("gpu0=6G", "neither a GPU index nor a GPU UUID"),
    ("all=6G", "neither a GPU index nor a GPU UUID"),
    ("0=99999999999G", "larger than any GPU"),
    ("0=" + "9" * 5000 + "G", "(5001 characters) is larger than any GPU: a limit must be below 1048576G"),
    ("0=0" + "9" * 5000 + "G", "is larger than any GPU"),
    ("0=" + "0" * 5000 + "8G", "has leading zeros: write 8G"),
    ("0=8XB", "not one of"),
    ("0=G", "is not a whole number"),
]


@pytest.mark.parametrize("value,fragment", [b for b in BAD_MEMORY if b[1]])
def test_bad_memory_limits_are_refused_with_a_reason(value, fragment):
    with pytest.raises(LimitError) as err:
        parse_mem_limit(value, TWO)
    assert fragment in str(err.value)
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" in str(err.value)


def test_at_least_twenty_distinct_bad_memory_formats():
    assert len([b for b in BAD_MEMORY if b[1]]) >= 20


def test_index_and_uuid_of_the_only_gpu_is_a_duplicate():
    with pytest.raises(LimitError, match="more than once"):
        parse_mem_limit("0=6G,%s=4G" % U0, [H200])
    # on two GPUs the index is the pod's own ordinal, which may be the other GPU: allowed
    assert len(parse_mem_limit("0=6G,%s=4G" % U0, TWO)) == 2


@pytest.mark.parametrize("value,fragment", [
    ({}, "mapping is empty"),
    ({0: 8}, "has no unit: write 8M or 8G"),
    ({0: 8.5}, "must be a whole number followed by"),
    ({True: "8G"}, "not a GPU index or GPU UUID"),
    ({"0": "8 G"}, "contains spaces"),
    (["0=8G"], "must be a string like 0=8G or a mapping"),
    (8, "must be a string like 0=8G or a mapping"),
])
def test_bad_memory_limit_shapes(value, fragment):
    with pytest.raises(LimitError) as err:
        parse_mem_limit(value, TWO)
    assert fragment in str(err.value)


BAD_THREADS = [
    (0, "got 0"),
    (101, "got 101"),
    (-5, "got -5"),
    ("0", "got 0"),
    ("101", "got 101"),
    ("-5", "got -5"),
    ("25%", "without a % sign"),
    ("12.5", "no fractions"),
    (12.5, "no fractions"),
    (25.0, "no fractions"),
    ("025", "without leading zeros"),
    (" 25", "without spaces"),
    ("25 ", "without spaces"),
    ("'25'", "without quote characters"),
    ('"25"', "without quote characters"),
    ("", "empty string"),
    ("twenty", "got 'twenty'"),
    (True, "boolean"),
    (None, "got NoneType"),
    ([25], "got list"),
    ("0x19", "got '0x19'"),
]


@pytest.mark.parametrize("value,fragment", BAD_THREADS)
def test_bad_thread_percentages_are_refused_with_a_reason(value, fragment):
    with pytest.raises(LimitError) as err:
        parse_thread_percentage(value)
    assert fragment in str(err.value)
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE must be a whole number from 1 to 100" in str(err.value)


def test_at_least_twenty_bad_thread_formats():
    assert len(BAD_THREADS) >= 20


# ---- rendering for a pod spec and the share warnings ----------------------------------------------------
def test_pod_env_is_rendered_in_order():
    out = workload_limits(active_thread_percentage="20", pinned_device_mem_limit={0: "4G"})
    assert out["env"] == [{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "20"},
                          {"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": "0=4G"}]
    assert out["warnings"] == []


def test_limits_within_share_give_no_warning():
    out = workload_limits(25, "0=8G", gpus=[H200], replicas=4)
    assert out["warnings"] == []


def test_limits_above_share_warn_with_what_the_workload_really_gets():
    # 4 replicas of an H200: 25 % and 150754820096 // 4 // MiB = 35942 MiB per replica.
    out = workload_limits(50, "0=40G", gpus=[H200], replicas=4)
    assert len(out["warnings"]) == 2
    assert "exceeds the per-replica share of 25%" in out["warnings"][0]
    assert "gets 25%" in out["warnings"][0]
    assert "40960 MiB" in out["warnings"][1] and "35942 MiB" in out["warnings"][1]
    # still rendered: a warning is not an error
    assert out["pinned_device_mem_limit"] == "0=40G"


def test_uuid_limit_compares_with_that_gpus_share():
    small = dict(H200, index=1, uuid=U1, memory_total_bytes=None, memory_total_mib=40960)
    out = workload_limits(pinned_device_mem_limit="%s=12G" % U1, gpus=[H200, small], replicas=4)
    assert len(out["warnings"]) == 1 and "10240 MiB" in out["warnings"][0]
    out = workload_limits(pinned_device_mem_limit="%s=12G" % U0, gpus=[H200, small], replicas=4)
    assert out["warnings"] == []
    # an index may be either GPU for the pod: compared with the smallest share
    out = workload_limits(pinned_device_mem_limit="0=12G", gpus=[H200, small], replicas=4)
    assert len(out["warnings"]) == 1 and "smallest" in out["warnings"][0]


def test_nothing_to_render_is_an_error():
    with pytest.raises(LimitError, match="give CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and/or"):
        workload_limits()


def test_bad_limit_never_reaches_the_env():
    with pytest.raises(LimitError):
        workload_limits(25, "0=6G, 1=10G", gpus=TWO)


def test_daemon_defaults_match_the_device_plugin():
    out = daemon_defaults(TWO, 4)
    assert out == {"default_active_thread_percentage": 25,
                   "default_pinned_device_mem_limit": {0: "35942M", 1: "35942M"}}


@pytest.mark.parametrize("nbytes,text", [(8 * GIB, "8G"), (4096 * MIB, "4G"), (4606 * MIB, "4606M"),
                                         (4606 * MIB + 5, "4606M")])
def test_daemon_amount(nbytes, text):
    assert daemon_mem_amount(nbytes) == text
