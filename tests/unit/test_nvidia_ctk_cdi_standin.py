"""The nvidia-ctk STAND-IN's `cdi generate` and `cdi list` (tests/support/nvidia_ctk_cdi.py), held to what the REAL
nvidia-ctk v1.20.0 printed (tests/fixtures/nvidia-ctk/, README.md there): on the lent H100 machine for a simulated
machine of the same GPU, and for MIG devices to the naming and editing rules of NVIDIA's code (MIG stayed disabled
on that machine). A failure here means the stand-in, not a module, is wrong."""
import json
import os
import re
import stat
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator_state import new_state
from tests.support import ctk_env

FIXTURES = os.path.join(ctk_env.ROOT, "tests", "fixtures", "nvidia-ctk")
REAL_UUID = "GPU-3e165db4-9e73-0984-9e34-2e913492cfaa"   # the lent H100 (h100-machine.txt)


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def ctk(args, state=None, cwd=None):
    env = dict(os.environ)
    env.pop("GPUOPS_SIMULATED_GPUS", None)
    env.pop("NVIDIA_CTK_CDI_SPEC_DIRS", None)
    if state:
        env["GPUOPS_SIMULATED_GPUS"] = str(state)
    return subprocess.run([sys.executable, ctk_env.STANDIN] + list(args), env=env, cwd=cwd and str(cwd),
                          capture_output=True, text=True, check=False)


@pytest.fixture
def lent_h100(tmp_path):
    """A simulated machine of the lent one's GPU: one H100 SXM5 80GB, with that card's UUID."""
    path = tmp_path / "h100.json"
    state = new_state("hgx-h100-80gb", str(path))
    state["gpus"] = state["gpus"][:1]
    state["gpus"][0]["uuid"] = REAL_UUID
    path.write_text(json.dumps(state))
    assert SimulatedBackend(str(path)).read_gpu(0)["name"] == "NVIDIA H100 80GB HBM3"
    return path


def devices_part(text):
    """A spec's text up to its top-level containerEdits (what the name strategies change)."""
    return text[:text.index("\ncontainerEdits:\n") + 1]


def recorded_strategies():
    """{output name: devices part} from h100-name-strategies.txt."""
    out, name = {}, None
    for line in fixture("h100-name-strategies.txt").splitlines(True):
        match = re.match(r"===== nvidia-ctk cdi generate .* --output=(\S+)\.yaml$", line)
        if match:
            name = match.group(1)
            out[name] = ""
        elif name:
            out[name] += line
    return out


def recorded_blocks(name, opener):
    """{title: block text} of a recorded log whose blocks start with ``opener`` + title."""
    blocks, title = {}, None
    for line in fixture(name).splitlines():
        if line.startswith(opener):
            title = line[len(opener):]
            blocks[title] = []
        elif title is not None:
            blocks[title].append(line)
    return blocks


def section(lines, start, end=None):
    begin = lines.index(start) + 1
    finish = lines.index(end, begin) if end else len(lines)
    return [line for line in lines[begin:finish] if line]


# ------------------------------------------------------------------------------------------ golden (real H100)
def test_generate_is_the_real_h100_spec_byte_for_byte(tmp_path, lent_h100):
    out = tmp_path / "cdi"
    result = ctk(["cdi", "generate", "--output=%s" % (out / "nvidia.yaml")], lent_h100)
    assert result.returncode == 0, result.stderr
    assert (out / "nvidia.yaml").read_text() == fixture("h100-nvidia.yaml")
    assert 'level=info msg="Generated CDI spec with version 0.5.0"' in result.stderr
    result = ctk(["cdi", "generate", "--format=json", "--output=%s" % (out / "nvidia.json")], lent_h100)
    assert result.returncode == 0, result.stderr
    assert (out / "nvidia.json").read_text() == fixture("h100-nvidia.json")
    # no --output: the same YAML on stdout (the real reading's generate-stdout was identical to its file)
    assert ctk(["cdi", "generate"], lent_h100).stdout == fixture("h100-nvidia.yaml")


@pytest.mark.parametrize("name, args", [
    ("index", ["--device-name-strategy=index"]),
    ("uuid", ["--device-name-strategy=uuid"]),
    ("type-index", ["--device-name-strategy=type-index"]),
    ("no-all", ["--no-all-device"]),
])
def test_name_strategies_are_the_real_ones(lent_h100, name, args):
    result = ctk(["cdi", "generate"] + args, lent_h100)
    assert result.returncode == 0, result.stderr
    assert devices_part(result.stdout) == recorded_strategies()[name]
    # the rest of the spec does not depend on the names (the real variants' common part was identical too)
    assert result.stdout[len(devices_part(result.stdout)):] == fixture("h100-nvidia.yaml")[
        len(devices_part(fixture("h100-nvidia.yaml"))):]


def test_list_of_the_generated_spec_is_the_real_list(tmp_path, lent_h100):
    recorded = recorded_blocks("h100-cdi-list.txt", "===== ")
    list_block = next(lines for title, lines in recorded.items() if title.startswith("list: "))
    expected_stdout = section(list_block, "----- stdout", "----- stderr")
    expected_stderr = section(list_block, "----- stderr")
    ours = tmp_path / "ours"
    assert ctk(["cdi", "generate", "--output=%s" % (ours / "nvidia.yaml")], lent_h100).returncode == 0
    real = tmp_path / "real"
    real.mkdir()
    (real / "nvidia.yaml").write_text(fixture("h100-nvidia.yaml"))
    for directory in (ours, real):
        result = ctk(["cdi", "list", "--spec-dir=%s" % directory])
        assert result.returncode == 0
        assert result.stdout.splitlines() == expected_stdout
        assert [re.sub(r'^time="[^"]*" ', "", line) for line in expected_stderr] == result.stderr.splitlines()


# ------------------------------------------------------------------------------------------ cdi list rules
def _one(root, spec_dir):
    (root / spec_dir).mkdir(parents=True, exist_ok=True)
    (root / spec_dir / "nvidia.yaml").write_text(fixture("h100-nvidia.yaml"))


LIST_CASES = {
    "one spec (the recorded H100 nvidia.yaml)": lambda r: _one(r, "l/one"),
    "the same devices in two specs of ONE directory (nvidia.yaml and nvidia.json)": lambda r: (
        _one(r, "l/both"), (r / "l/both/nvidia.json").write_text(fixture("h100-nvidia.json"))),
    "the same devices in two directories (like /etc/cdi then /var/run/cdi, the default order)": lambda r: (
        _one(r, "l/etc-cdi"), _one(r, "l/run-cdi")),
    "a spec that does not parse beside a good one": lambda r: (
        _one(r, "l/broken"), (r / "l/broken/other.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: [\n")),
    "a spec whose cdiVersion is too low for its content (index names need 0.5.0)": lambda r: (
        (r / "l/broken").mkdir(parents=True),
        (r / "l/broken/nvidia.yaml").write_text(fixture("h100-nvidia.yaml").replace("cdiVersion: 0.5.0", "cdiVersion: 0.3.0"))),
    "temporary names beside the live spec: .nvidia.yaml.tmp and nvidia.yaml.bak are ignored, "
    ".nvidia.yaml.new.yaml is read": lambda r: [
        _one(r, "l/tmpnames")] + [(r / "l/tmpnames" / n).write_text(fixture("h100-nvidia.yaml"))
                                  for n in (".nvidia.yaml.tmp", "nvidia.yaml.bak", ".nvidia.yaml.new.yaml")],
    "an empty directory and a missing one": lambda r: (r / "l/empty").mkdir(parents=True),
}


@pytest.mark.parametrize("title", sorted(LIST_CASES))
def test_list_follows_the_real_cache_rules(tmp_path, title):
    block = recorded_blocks("cdi-list-cases.txt", "## ")[title]
    LIST_CASES[title](tmp_path)
    command = block[0].split()[1:]          # "$ nvidia-ctk cdi list --spec-dir=l/..."
    result = ctk(command[1:], cwd=tmp_path)
    assert "exit %d" % result.returncode == block[1]
    assert result.stdout.splitlines() == section(block, "--- stdout", "--- stderr")
    expected = section(block, "--- stderr")
    got = result.stderr.splitlines()
    # the parser's own wording after "failed to unmarshal CDI Spec:" is not reproduced; the order of the error
    # lines is a Go map's in NVIDIA's tool
    cut = [re.sub(r"(failed to unmarshal CDI Spec:).*\]\"$", r"\1", line) for line in expected]
    assert sorted(cut) == sorted(re.sub(r"(failed to unmarshal CDI Spec:).*\]\"$", r"\1", line) for line in got)


def test_list_reads_spec_dirs_from_the_environment(tmp_path):
    _one(tmp_path, "l/one")
    env = dict(os.environ, NVIDIA_CTK_CDI_SPEC_DIRS=str(tmp_path / "l/one"))
    result = subprocess.run([sys.executable, ctk_env.STANDIN, "cdi", "list"], env=env, capture_output=True,
                            text=True, check=False)
    assert result.stdout.splitlines()[-1] == "nvidia.com/gpu=all" and len(result.stdout.splitlines()) == 3


# ------------------------------------------------------------------------------------------ MIG (rules from the code)
@pytest.fixture
def mig_node(tmp_path):
    """8 x H100: GPU 0 in MIG mode with a 1g.10gb (one CI) and a 3g.40gb (two 1c CIs), GPU 1 in MIG mode with no
    instance, GPUs 2-7 whole."""
    path = str(tmp_path / "mig.json")
    sim = SimulatedBackend(path, shape="hgx-h100-80gb")
    sim.set_mig_mode(0, True)
    sim.set_mig_mode(1, True)
    big = sim.create_gpu_instance(0, 9, 4)      # 3g.40gb at slice 4
    small = sim.create_gpu_instance(0, 19, 0)   # 1g.10gb at slice 0
    sim.create_compute_instance(0, big, 0)
    sim.create_compute_instance(0, big, 0)
    sim.create_compute_instance(0, small, 0)
    return path, sim.read_all()["gpus"]


def test_mig_devices_are_named_and_ordered_as_nvidia_ctk_names_them(mig_node):
    path, gpus = mig_node
    result = ctk(["cdi", "generate"], path)
    assert result.returncode == 0, result.stderr
    spec = yaml.safe_load(result.stdout)
    names = [d["name"] for d in spec["devices"]]
    migs = gpus[0]["mig_devices"]               # the simulator's order: GI by placement, then CI
    assert len(migs) == 3
    expected = (["0:0", "0:1", "0:2"] + ["%d" % i for i in range(2, 8)]
                + sorted([g["uuid"] for g in gpus[2:]] + [m["uuid"] for m in migs]) + ["all"])
    # pkg/nvcdi/namer.go "%d:%d" / the MIG UUID; the MIG-mode GPUs get no entry of their own (lib-nvml.go); GPU 1,
    # in MIG mode without MIG devices, gets none at all; the sorter orders names by bytes
    assert names == sorted(expected, key=lambda n: n.encode())
    assert gpus[1]["uuid"] not in names and "1" not in names and gpus[0]["uuid"] not in names
    # quoted in the YAML, so that a YAML 1.1 reader does not take 0:1 for a base-60 number
    assert '    - name: "0:1"\n' in result.stdout
    assert spec["cdiVersion"] == "0.5.0"


def test_mig_device_edits_are_the_parent_and_its_instance_caps(mig_node):
    path, gpus = mig_node
    spec = yaml.safe_load(ctk(["cdi", "generate"], path).stdout)
    by_name = dict((d["name"], d) for d in spec["devices"])
    for j, mig in enumerate(gpus[0]["mig_devices"]):
        gi_minor = 3 + 9 * mig["gi_id"]                    # mig-minors of the lent machine, GPU minor 0
        ci_minor = 4 + 9 * mig["gi_id"] + mig["ci_id"]
        nodes = by_name["0:%d" % j]["containerEdits"]["deviceNodes"]
        assert [n["path"] for n in nodes] == ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap%d" % gi_minor,
                                              "/dev/nvidia-caps/nvidia-cap%d" % ci_minor]
        assert [n.get("minor", 0) for n in nodes] == [0, gi_minor, ci_minor]
        assert by_name[mig["uuid"]]["containerEdits"] == by_name["0:%d" % j]["containerEdits"]
    merged = [n["path"] for n in by_name["all"]["containerEdits"]["deviceNodes"]]
    assert merged[:7] == ["/dev/nvidia0"] + ["/dev/nvidia%d" % i for i in range(2, 8)]
    assert len(merged) == len(set(merged)) == 7 + 2 + 3   # GPUs 0, 2-7, the caps of 2 GIs and of 3 CIs, once each
    assert "/dev/nvidia1" not in merged


def test_type_index_names_for_gpus_and_mig_devices(mig_node):
    path, _gpus = mig_node
    spec = yaml.safe_load(ctk(["cdi", "generate", "--device-name-strategy=type-index"], path).stdout)
    assert [d["name"] for d in spec["devices"]] == ["all"] + ["gpu%d" % i for i in range(2, 8)] + [
        "mig0:0", "mig0:1", "mig0:2"]
    assert spec["cdiVersion"] == "0.3.0"


def test_mig_mode_without_mig_devices_fails_as_the_real_tool_and_keeps_the_old_file(tmp_path):
    path = str(tmp_path / "one.json")
    SimulatedBackend(path, shape="h200-x1").set_mig_mode(0, True)
    observed = [line.split("PROBE Save: ", 1)[1] for line in fixture("mig-enabled-no-devices.txt").splitlines()
                if line.startswith("PROBE Save: ")]
    output = tmp_path / "nvidia.yaml"
    output.write_text("the live spec\n")
    for args, message in ((["--output=%s" % output], observed[0]), (["--output=%s" % output, "--no-all-device"],
                                                                    observed[1])):
        result = ctk(["cdi", "generate"] + args, path)
        assert result.returncode == 1
        assert result.stderr.splitlines()[-1] == "level=error msg=%s" % json.dumps(message)
        assert output.read_text() == "the live spec\n"
    assert set(os.listdir(str(tmp_path))) == {"one.json", "one.json.lock", "nvidia.yaml"}   # no temporary left


def test_without_gpus_it_fails_as_the_real_tool_without_a_driver():
    recorded = [line for line in fixture("local-commands.txt").splitlines() if "level=error" in line][-1]
    result = ctk(["cdi", "generate"])
    assert result.returncode == 1
    assert result.stderr.strip() == re.sub(r'^time="[^"]*" ', "", recorded)


def test_output_is_written_whole_0644_and_named_like_nvidia_ctk(tmp_path, lent_h100):
    target = tmp_path / "new" / "nvidia"
    os.umask(0o077)
    try:
        assert ctk(["cdi", "generate", "--output=%s" % target], lent_h100).returncode == 0
    finally:
        os.umask(0o022)
    written = tmp_path / "new" / "nvidia.yaml"       # no extension -> the format's (pkg/nvcdi/spec/spec.go)
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
    assert os.listdir(str(tmp_path / "new")) == ["nvidia.yaml"]
    # the file's extension picks the encoding, whatever --format says (vendor/.../pkg/cdi/spec.go write)
    assert ctk(["cdi", "generate", "--format=json", "--output=%s" % written], lent_h100).returncode == 0
    assert written.read_text() == fixture("h100-nvidia.yaml")


@pytest.mark.parametrize("args, message", [
    (["--device-name-strategy=serial"], "invalid device name strategy: serial"),
    (["--format=toml"], "invalid output format: toml"),
])
def test_bad_flags_are_refused_with_nvidia_ctks_words(lent_h100, args, message):
    result = ctk(["cdi", "generate"] + args, lent_h100)
    assert result.returncode == 1 and result.stderr.strip() == "level=error msg=%s" % json.dumps(message)
