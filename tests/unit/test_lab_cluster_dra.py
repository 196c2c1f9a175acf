"""lab_cluster.py with gpuops_device_plugin_provider=dra: its own state directory, a v1.34 fake server and the DRA
chart path handed to the command; a clear refusal when the fixture chart is missing."""
import json
import os

from tests.support import lab_cluster


def _run(monkeypatch, tmp_path, capsys, chart):
    monkeypatch.setenv("GPUOPS_LAB_STATE_DIR", str(tmp_path / "lab-state"))
    monkeypatch.setattr(lab_cluster, "DRA_CHART", str(chart))
    for var in ("K8S_AUTH_KUBECONFIG", "K8S_AUTH_HOST"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "args.txt"
    rc = lab_cluster.main(["lab_cluster", "--", "sh", "-c", 'echo "$@" > %s' % out, "sh",
                           "-e", "gpuops_device_plugin_provider=dra"])
    return rc, out, capsys.readouterr()


def test_dra_without_the_fixture_chart_is_refused(monkeypatch, tmp_path, capsys):
    rc, out, captured = _run(monkeypatch, tmp_path, capsys, tmp_path / "missing")
    assert rc == 2
    assert "nvidia-dra-driver-gpu" not in captured.out and str(tmp_path / "missing") in captured.err
    assert not out.exists()


def test_dra_runs_a_v1_34_cluster_with_its_own_state(monkeypatch, tmp_path, capsys):
    chart = tmp_path / "chart-src"
    chart.mkdir()
    (chart / "Chart.yaml").write_text("name: nvidia-dra-driver-gpu\n")
    rc, out, captured = _run(monkeypatch, tmp_path, capsys, chart)
    assert rc == 0, captured.err
    own = tmp_path / "lab-state" / "fake-cluster-dra"
    args = out.read_text()
    assert "cluster_dra_chart_path=%s" % (own / "chart") in args
    assert "cluster_device_plugin_chart_path" not in args
    assert (own / "chart" / "Chart.yaml").exists()
    saved = json.load(open(str(own / "objects.json")))
    nodes = [obj for key, obj in saved["objects"] if key[1] == "nodes"]
    assert nodes and all(n["metadata"]["labels"]["nvidia.com/gpu.present"] == "true" for n in nodes)
    assert "DRA kubelet plugin" in captured.out
    assert not os.path.exists(str(tmp_path / "lab-state" / "fake-cluster-chart"))
