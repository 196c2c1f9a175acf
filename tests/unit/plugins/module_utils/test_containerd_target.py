"""_containerd_target: the kubelet's endpoint as its flag files and config say it, and which containerd serves it."""
import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _containerd_target as target

K3S = target.Containerd("k3s", "/var/lib/rancher/k3s/agent/etc/containerd/config.toml", target.RANCHER_SOCKET)
PLAIN = target.Containerd("containerd", "/etc/containerd/config.toml", target.PLAIN_SOCKET)


@pytest.mark.parametrize("text,expected", [
    ('KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --v=2"\n',
     "unix:///run/containerd/containerd.sock"),
    ("KUBELET_EXTRA_ARGS=--container-runtime-endpoint /var/run/crio/crio.sock\n", "/var/run/crio/crio.sock"),
    ('# KUBELET_EXTRA_ARGS="--container-runtime-endpoint=unix:///old.sock"\nKUBELET_EXTRA_ARGS=\n', None),
    ('A="--container-runtime-endpoint=unix:///a.sock"\nB="--container-runtime-endpoint=unix:///b.sock"\n',
     "unix:///b.sock"),
])
def test_endpoint_from_flag_files(text, expected):
    assert target.kubelet_endpoint_from_env_file(text) == expected


def test_yaml_scalar_reads_and_sets_top_level_keys_only():
    text = "# k3s\ntoken: 'x'\nkubelet-arg:\n  - default-runtime: no\ndefault-runtime: runc # was\n"
    assert target.yaml_scalar(text, "default-runtime") == "runc"
    assert target.yaml_scalar(text, "absent") is None
    assert target.yaml_scalar("containerRuntimeEndpoint: \"unix:///x.sock\"\n",
                              "containerRuntimeEndpoint") == "unix:///x.sock"
    changed = target.set_yaml_scalar(text, "default-runtime", "nvidia")
    assert changed == "# k3s\ntoken: 'x'\nkubelet-arg:\n  - default-runtime: no\ndefault-runtime: \"nvidia\"\n"
    assert target.set_yaml_scalar(changed, "default-runtime", None) == "# k3s\ntoken: 'x'\nkubelet-arg:\n" \
        "  - default-runtime: no\n"
    assert target.set_yaml_scalar("a: 1", "default-runtime", "nvidia") == 'a: 1\ndefault-runtime: "nvidia"\n'


def readings(endpoint, *present):
    return target.Readings(dict((c.kind, c) for c in present), endpoint, "somewhere")


def test_auto_follows_the_kubelet_and_var_run_is_run():
    kind, found = target.resolve("auto", PLAIN.config, readings("unix:///var/run/k3s/containerd/containerd.sock",
                                                                PLAIN, K3S))
    assert kind == "k3s" and found is K3S
    assert target.resolve("auto", PLAIN.config, readings("unix:///run/containerd/containerd.sock", PLAIN, K3S))[0] \
        == "containerd"
    # no kubelet yet: the only distribution present, else plain containerd
    assert target.resolve("auto", PLAIN.config, readings(None, K3S))[0] == "k3s"
    assert target.resolve("auto", PLAIN.config, readings(None, PLAIN))[0] == "containerd"


def test_a_declaration_for_another_containerd_is_refused_naming_both():
    with pytest.raises(target.TargetError) as exc:
        target.resolve("containerd", PLAIN.config, readings("unix:///run/k3s/containerd/containerd.sock", PLAIN, K3S))
    message = str(exc.value)
    assert PLAIN.describe() in message and K3S.describe() in message and "distribution: k3s" in message
    with pytest.raises(target.TargetError, match="a runtime at unix:///run/crio/crio.sock"):
        target.resolve("auto", PLAIN.config, readings("unix:///run/crio/crio.sock", PLAIN))


def test_detection_follows_the_agents_path_order():
    found = target.detected_runtimes({"/usr/bin/nvidia-container-runtime": True,
                                      "/usr/local/bin/nvidia-container-runtime": True,
                                      "/usr/local/nvidia/toolkit/nvidia-container-runtime.cdi": True})
    assert found == {"nvidia": "/usr/local/bin/nvidia-container-runtime",
                     "nvidia-cdi": "/usr/local/nvidia/toolkit/nvidia-container-runtime.cdi"}
    assert target.would_detect("nvidia", "/usr/bin/nvidia-container-runtime")
    assert not target.would_detect("nvidia", "/opt/bin/nvidia-container-runtime")
    assert not target.would_detect("gpu", "/usr/bin/nvidia-container-runtime")


def test_template_version_and_text():
    assert target.template_version(3, None) == 3 and target.template_version(None, 2) == 3
    assert target.template_version(None, 1) == 2 and target.template_version(None, None) is None
    assert target.template_text("k3s", 2, []) is None
    text = target.template_text("k3s", 3, [target.runtime_table(3, "gpu", "/opt/r")])
    assert target.is_ours(text) and text.count(target.BASE_ACTION) == 1
    assert "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.'gpu'.options]" in text


# splitlines() ends a line at each of these too
_LINE_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_LINE = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=_LINE_BREAKS + "\n"),
                max_size=30).filter(lambda line: not line.startswith("default-runtime"))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(lines=st.lists(_LINE, max_size=8), value=st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,20}\Z"))
def test_setting_default_runtime_keeps_every_other_line(lines, value):
    """Whatever else config.yaml holds, setting default-runtime reads back as set, removing it leaves the other
    lines exactly as they were."""
    text = "".join(line + "\n" for line in lines)
    written = target.set_yaml_scalar(text, "default-runtime", value)
    assert target.yaml_scalar(written, "default-runtime") == value
    assert target.set_yaml_scalar(written, "default-runtime", None) == text
