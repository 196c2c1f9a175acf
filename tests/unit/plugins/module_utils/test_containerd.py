"""Tests of _containerd_config (the pure analysis), _nvidia_ctk (versions, edit mode, the runner) and of the
nvidia-ctk STAND-IN's golden outputs.

The nvidia-ctk here is tests/support/nvidia_ctk_standin.py, a stand-in (the real tool cannot be installed on
these machines). The golden tests compare its output with the exact TOML that shared/reference/containerd.md
recorded from the real nvidia-ctk (v1.17.8, v1.18.0, v1.20.0); fixtures in tests/fixtures/containerd/.
Every configuration produced here is also loaded by Debian's real containerd (`config dump`).
"""
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from tests.support import ctk_env  # noqa: E402

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import (  # noqa: E402
    ContainerdConfigError, DEFAULT_CONFIG, DEFAULT_DROP_IN, DEFAULT_RUNTIME_PATH, TomlLibraryMissing,
    WRONG_DROP_IN_1180, analyse_source, check_candidate_dump, config_version, cri_key, diff_entries,
    effective_changes, effective_cri_tree, get_in, lost_imports, parse_toml, plan_files, runtimes_of,
    set_cri_v1_enable_cdi, source_runtime_name, systemd_cgroup_findings, systemd_cgroup_runtimes, toml_reader,
    validate_params)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._nvidia_ctk import (  # noqa: E402
    NvidiaCtkRunner, choose_edit_mode, configure_args, parse_containerd_version, parse_ctk_version, substitute)

GOLDEN_INPUT = ctk_env.fixture_text("golden-input-v2.toml")
GOLDEN_V2 = ctk_env.fixture_text("golden-v2-in-place-1.17.8.toml")
GOLDEN_MISSING = ctk_env.fixture_text("golden-missing-set-default-cdi-drop-in-1.20.0.toml")
GOLDEN_V3 = ctk_env.fixture_text("golden-v3-set-default-drop-in-1.20.0.toml")
INPUT_V3 = ctk_env.fixture_text("input-v3.toml")
NVIDIA_BLOCK = """
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
            SystemdCgroup = true
"""
# "config.toml becomes the input, re-serialised, with imports as its first line" (reference 1.5)
INPUT_RESERIALISED = GOLDEN_V2.replace(NVIDIA_BLOCK, "")


def load_standin():
    spec = importlib.util.spec_from_file_location("nvidia_ctk_standin", ctk_env.STANDIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def configure(tmp_path, version, text, *extra, drop_in=True):
    etc = tmp_path / "etc" / "containerd"
    etc.mkdir(parents=True, exist_ok=True)
    config = etc / "config.toml"
    if text is not None:
        config.write_text(text)
    args = ["runtime", "configure", "--runtime=containerd", "--config=%s" % config]
    if drop_in:
        args.append("--drop-in-config=%s" % (etc / "conf.d" / "99-nvidia.toml"))
    result = ctk_env.run_standin(args + list(extra), version)
    assert result.returncode == 0, result.stderr
    return config, etc / "conf.d" / "99-nvidia.toml"


def assert_loads_with_nvidia(config, containerd_key="io.containerd.grpc.v1.cri"):
    result = ctk_env.containerd_dump(config)
    assert result.returncode == 0, result.stderr
    dump = parse_toml(result.stdout, "dump")
    assert isinstance(get_in(dump, ["plugins", containerd_key, "containerd", "runtimes", "nvidia"]), dict)
    return dump


# ------------------------------------------------------------------------------------------------------
# golden outputs of the stand-in (reference section 1.5) + real containerd validation
# ------------------------------------------------------------------------------------------------------
def test_standin_says_it_is_a_standin():
    result = ctk_env.run_standin(["--version"], "1.18.1")
    assert "version 1.18.1" in result.stdout
    assert "stand-in" in result.stdout
    with open(ctk_env.STANDIN) as handle:
        assert "NOT the real NVIDIA Container Toolkit CLI" in handle.read()


def test_golden_v2_in_place_1_17_8(tmp_path):
    config, drop_in = configure(tmp_path, "1.17.8", GOLDEN_INPUT, drop_in=False)
    assert config.read_text() == GOLDEN_V2
    assert "keep this comment" not in config.read_text()
    assert not drop_in.exists()
    assert_loads_with_nvidia(config)


@pytest.mark.parametrize("version", ["1.18.0", "1.18.1", "1.20.0"])
def test_golden_v2_drop_in(tmp_path, version):
    config, drop_in = configure(tmp_path, version, GOLDEN_INPUT)
    assert drop_in.read_text() == GOLDEN_V2  # byte-identical to the in-place block (whole CRI section copied)
    pattern = str(drop_in.parent / "*.toml")
    assert config.read_text() == 'imports = ["%s"]\n' % pattern + INPUT_RESERIALISED
    dump = assert_loads_with_nvidia(config)
    assert dump["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"] == "registry.k8s.io/pause:3.9"


def test_golden_v2_drop_in_set_as_default_goes_to_drop_in(tmp_path):
    config, drop_in = configure(tmp_path, "1.20.0", GOLDEN_INPUT, "--nvidia-set-as-default")
    assert drop_in.read_text() == GOLDEN_V2.replace('default_runtime_name = "runc"', 'default_runtime_name = "nvidia"')
    assert 'default_runtime_name = "runc"' in config.read_text()
    dump = assert_loads_with_nvidia(config)
    assert dump["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"] == "nvidia"


def test_golden_missing_file_set_default_cdi_1_20_0(tmp_path):
    config, drop_in = configure(tmp_path, "1.20.0", None, "--nvidia-set-as-default", "--enable-cdi")
    assert drop_in.read_text() == GOLDEN_MISSING
    assert config.read_text() == 'imports = ["%s"]\nversion = 2\n' % (drop_in.parent / "*.toml")
    assert "SystemdCgroup" not in drop_in.read_text()  # nvidia-docker#1788
    assert_loads_with_nvidia(config)


def test_golden_missing_file_1_17_8_in_place_same_tree(tmp_path):
    config, drop_in = configure(tmp_path, "1.17.8", None, "--nvidia-set-as-default", "--cdi.enabled", drop_in=False)
    assert config.read_text() == GOLDEN_MISSING
    assert not drop_in.exists()
    assert_loads_with_nvidia(config)


def test_golden_v3_set_as_default_1_20_0(tmp_path):
    config, drop_in = configure(tmp_path, "1.20.0", INPUT_V3, "--nvidia-set-as-default")
    assert drop_in.read_text() == GOLDEN_V3
    top = config.read_text()
    assert top.startswith('imports = ["%s"]\nversion = 3\n' % (drop_in.parent / "*.toml"))
    assert "'" not in top and "pinned_images" in top and 'default_runtime_name = "runc"' in top
    assert "cri.v1.images" not in drop_in.read_text()  # only the runtime plugin is copied


def test_golden_v3_1_17_8_in_place_same_runtime_block(tmp_path):
    config, _drop_in = configure(tmp_path, "1.17.8", INPUT_V3, "--nvidia-set-as-default", drop_in=False)
    text = config.read_text()
    start = text.index('        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]')
    block = GOLDEN_V3[GOLDEN_V3.index('        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]'):]
    assert text[start:] == block


def test_v3_on_containerd_1_6_is_silently_dropped(tmp_path):
    """What Debian's containerd 1.6.20 does NOT catch: a version 3 config loads with exit 0, its v3 CRI
    sections dropped (reference 4.1). check_candidate_dump turns that into a refusal."""
    config, _drop_in = configure(tmp_path, "1.20.0", INPUT_V3, "--nvidia-set-as-default")
    result = ctk_env.containerd_dump(config)
    assert result.returncode == 0
    dump = parse_toml(result.stdout, "dump")
    assert dump["version"] == 2
    problems, _warnings = check_candidate_dump(dump, "nvidia", DEFAULT_RUNTIME_PATH, True, False, "1.6.20")
    assert any("does not see runtime 'nvidia'" in p for p in problems)


@pytest.mark.parametrize("version", ["1.17.8", "1.18.0", "1.18.1", "1.20.0"])
@pytest.mark.parametrize("text", [GOLDEN_INPUT, INPUT_V3, None], ids=["v2", "v3", "missing"])
def test_standin_is_idempotent_in_content(tmp_path, version, text):
    drop = version != "1.17.8"
    config, drop_in = configure(tmp_path, version, text, "--cdi.enabled", drop_in=drop)
    first = (config.read_text(), drop_in.read_text() if drop else None)
    configure(tmp_path, version, config.read_text(), "--cdi.enabled", drop_in=drop)
    assert (config.read_text(), drop_in.read_text() if drop else None) == first


def test_1_18_0_drops_existing_imports_and_1_18_1_keeps_them(tmp_path):
    text = 'imports = ["/foo/bar/*.toml"]\n' + GOLDEN_INPUT
    config, drop_in = configure(tmp_path / "a", "1.18.0", text)
    tree = parse_toml(config.read_text(), "c")
    assert tree["imports"] == [str(drop_in.parent / "*.toml")]
    assert lost_imports(parse_toml(text, "in"), tree) == ["/foo/bar/*.toml"]
    config, drop_in = configure(tmp_path / "b", "1.18.1", text)
    tree = parse_toml(config.read_text(), "c")
    assert tree["imports"] == ["/foo/bar/*.toml", str(drop_in.parent / "*.toml")]


def test_1_18_0_default_drop_in_is_the_wrong_directory():
    standin = load_standin()
    assert standin.parse_args(["--runtime=containerd"], (1, 18, 0))["drop_in"] == WRONG_DROP_IN_1180
    assert standin.parse_args(["--runtime=containerd"], (1, 18, 1))["drop_in"] == DEFAULT_DROP_IN
    with pytest.raises(standin.CtkError, match="not defined"):
        standin.parse_args(["--runtime=containerd", "--drop-in-config=/x.toml"], (1, 17, 8))
    with pytest.raises(standin.CtkError, match="needs an argument"):
        standin.parse_args(["--runtime=containerd", "--drop-in-config="], (1, 18, 0))


def test_empty_drop_in_config_is_broken_on_1_20(tmp_path):
    config, _drop_in = configure(tmp_path, "1.20.0", GOLDEN_INPUT, "--drop-in-config", "", drop_in=False)
    tree = parse_toml(config.read_text(), "c")
    assert "nvidia" not in runtimes_of(tree, 2)
    assert tree["imports"] == [str(config.parent / "*.toml")]


def test_docker_v1_config_goes_to_drop_in_untouched_top_level(tmp_path):
    text = 'disabled_plugins = ["cri"]\n'
    config, drop_in = configure(tmp_path, "1.20.0", text)
    assert config.read_text() == text
    tree = parse_toml(drop_in.read_text(), "d")
    assert tree["version"] == 1 and tree["disabled_plugins"] == ["cri"]
    assert tree["plugins"]["cri"]["containerd"]["runtimes"]["nvidia"]["options"] == {
        "BinaryName": DEFAULT_RUNTIME_PATH, "Runtime": DEFAULT_RUNTIME_PATH}
    # Real containerd loads the top-level file happily: the trap is invisible to `config dump`.
    result = ctk_env.containerd_dump(config)
    assert result.returncode == 0
    dump = parse_toml(result.stdout, "d")
    problems, _warnings = check_candidate_dump(dump, "nvidia", DEFAULT_RUNTIME_PATH, False, False, "1.6.20")
    assert any("disables the CRI plugin" in p for p in problems)


@pytest.mark.parametrize("option,what", [("--nvidia-runtime-path=bin/nvidia-container-runtime", "NVIDIA runtime path"),
                                         ("--drop-in-config=conf.d/99-nvidia.toml", "drop-in-config path")])
def test_standin_rejects_relative_paths_like_nvidia_ctk(tmp_path, option, what):
    config = tmp_path / "config.toml"
    config.write_text(GOLDEN_INPUT)
    result = ctk_env.run_standin(["runtime", "configure", "--runtime=containerd", "--config=%s" % config, option])
    relative = option.split("=", 1)[1]
    assert result.returncode == 1
    assert 'the %s "%s" is not an absolute path' % (what, relative) in result.stderr
    assert config.read_text() == GOLDEN_INPUT


def test_standin_dry_run_prints_two_documents_and_writes_nothing(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "config.toml").write_text(GOLDEN_INPUT)
    result = ctk_env.run_standin(["runtime", "configure", "--runtime=containerd", "--dry-run",
                                  "--config=%s" % (etc / "config.toml"),
                                  "--drop-in-config=%s" % (etc / "d" / "99-nvidia.toml")])
    assert result.returncode == 0
    assert result.stdout.startswith(GOLDEN_V2)
    assert 'imports = ["/etc/containerd/conf.d/*.toml"]' in result.stdout
    assert (etc / "config.toml").read_text() == GOLDEN_INPUT and not (etc / "d").exists()


@pytest.mark.parametrize("text,version", [("", 2), ("# only a comment\n", 2), ("oom_score = 0\n", 1),
                                          ("version = 3\n", 3), ('version = "2"\n', None), ("version = 2.0\n", None),
                                          ("version = true\n", None), ("[version]\nx = 1\n", None)])
def test_standin_picks_the_config_version_as_nvidia_ctk_does(tmp_path, text, version):
    """NVIDIA's parseVersion (v1.20.0, pkg/config/engine/containerd/containerd.go): empty -> 2, keys without
    `version` -> 1, an integer -> itself, any other type -> an error that leaves the file alone."""
    config = tmp_path / "config.toml"
    config.write_text(text)
    result = ctk_env.run_standin(["runtime", "configure", "--runtime=containerd", "--config=%s" % config,
                                  "--drop-in-config=%s" % (tmp_path / "conf.d" / "99-nvidia.toml")])
    if version is None:
        assert result.returncode == 1 and "unsupported type for version field" in result.stderr, result.stderr
        assert config.read_text() == text and not (tmp_path / "conf.d").exists()
        return
    assert result.returncode == 0, result.stderr
    written = parse_toml((tmp_path / "conf.d" / "99-nvidia.toml").read_text(), "out")  # (version 1: the whole tree)
    assert written["version"] == version and isinstance(runtimes_of(written, version).get("nvidia"), dict)


def test_a_copy_of_the_standin_finds_the_collection_through_ansible_collections_path(tmp_path):
    # (tests/integration/test_site_slices.py runs such a copy, under ansible-playbook, which sets the variable)
    copy = tmp_path / "tools" / "nvidia_ctk_standin.py"
    copy.parent.mkdir()
    shutil.copy(ctk_env.STANDIN, str(copy))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ctk_env.ROOT, ".collections"))
    found = subprocess.run([sys.executable, str(copy), "--version"], env=env, capture_output=True, text=True, check=False)
    assert found.returncode == 0 and "stand-in" in found.stdout, found.stderr
    env.pop("ANSIBLE_COLLECTIONS_PATH")
    lost = subprocess.run([sys.executable, str(copy), "--version"], env=env, capture_output=True, text=True, check=False)
    assert lost.returncode == 1 and "ANSIBLE_COLLECTIONS_PATH" in lost.stderr


# ------------------------------------------------------------------------------------------------------
# what Debian 12's containerd 1.6.20 does and does not catch (docs/containerd.md lists this)
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,rc", [
    ('version = 2\n[plugins\n', 1),                          # not TOML
    ('version = "2"\n', 1),                                  # wrong type
    ('version = 2\nimports = ["/nonexistent/x.toml"]\n', 1),  # missing import
    ('version = 3\n', 0),                                    # too new: accepted silently by 1.6.20
    ('version = 4\n', 0),
    ('version = 2\nno_such_key = 1\n', 0),                   # unknown keys ignored
    ('disabled_plugins = ["cri"]\n', 0),                     # v1 + CRI off: loads fine
])
def test_real_containerd_catches(tmp_path, text, rc):
    path = tmp_path / "c.toml"
    path.write_text(text)
    assert ctk_env.containerd_dump(path).returncode == rc


def test_real_containerd_missing_file_fails_on_1_6(tmp_path):
    assert ctk_env.containerd_dump(tmp_path / "absent.toml").returncode == 1


# ------------------------------------------------------------------------------------------------------
# pure helpers
# ------------------------------------------------------------------------------------------------------
def test_config_version_rules():
    assert config_version({}) == 2
    assert config_version({"disabled_plugins": ["cri"]}) == 1
    assert config_version({"version": 3}) == 3
    with pytest.raises(ContainerdConfigError, match="must be an integer"):
        config_version({"version": "2"})
    assert [cri_key(v) for v in (1, 2, 3, 4)] == ["cri", "io.containerd.grpc.v1.cri",
                                                  "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.runtime"]


def test_trap_no_version_docker_file():
    version, errors, _warnings = analyse_source({"disabled_plugins": ["cri"]}, "/etc/containerd/config.toml", True)
    assert version == 1
    assert len(errors) == 1
    assert "no `version` key" in errors[0] and "Docker's containerd.io" in errors[0] and "#1430" in errors[0]


def test_trap_cri_disabled_with_version():
    _version, errors, _warnings = analyse_source({"version": 2, "disabled_plugins": ["io.containerd.grpc.v1.cri"]},
                                                 "/c", True)
    assert len(errors) == 1 and "disables the CRI plugin" in errors[0]


def test_trap_k3s_path_warns():
    _version, errors, warnings = analyse_source(
        {"version": 2}, "/var/lib/rancher/k3s/agent/etc/containerd/config.toml", True)
    assert not errors and "regenerate config.toml" in warnings[0]


def test_clean_config_has_no_traps():
    tree = parse_toml(GOLDEN_INPUT, "in")
    assert analyse_source(tree, "/c", True) == (2, [], [])
    assert analyse_source({}, "/c", False) == (2, [], [])


def test_parse_toml_errors_name_the_file_and_templates():
    with pytest.raises(ContainerdConfigError, match="/x.toml is not valid TOML"):
        parse_toml("version = 2\n[plugins\n", "/x.toml")
    with pytest.raises(ContainerdConfigError, match="Go template"):
        parse_toml('{{ template "base" . }}\n', "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl")


def test_toml_fallback_to_tomlkit(monkeypatch):
    monkeypatch.setitem(sys.modules, "tomllib", None)
    monkeypatch.setitem(sys.modules, "tomli", None)
    assert toml_reader()[2] == "tomlkit"
    tree = parse_toml(GOLDEN_INPUT, "in")
    # exactly dict: tomlkit's documents are dict subclasses, and parse_toml must hand back plain data
    assert type(tree) is dict and tree["version"] == 2  # pylint: disable=unidiomatic-typecheck
    assert source_runtime_name(tree, 2) == "runc"
    with pytest.raises(ContainerdConfigError, match="not valid TOML"):
        parse_toml("[a\n", "x")


def test_no_toml_library(monkeypatch):
    for name in ("tomllib", "tomli", "tomlkit"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(TomlLibraryMissing, match="tomli"):
        parse_toml("version = 2", "x")


@pytest.mark.parametrize("text,expected", [
    ("NVIDIA Container Toolkit CLI version 1.17.8\ncommit: abc", (1, 17, 8)),
    ("NVIDIA Container Toolkit CLI version v1.18.0-rc.4", (1, 18, 0)),
    ("garbage", None),
])
def test_parse_ctk_version(text, expected):
    assert parse_ctk_version(text) == expected


def test_parse_containerd_version():
    text = "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3"
    assert parse_containerd_version(text) == "1.6.20~ds1"
    assert parse_containerd_version("containerd containerd.io v2.1.4 abc") == "v2.1.4"


def test_choose_edit_mode():
    assert choose_edit_mode("auto", (1, 17, 8)) == ("in_place", [])
    assert choose_edit_mode("auto", (1, 20, 0)) == ("drop_in", [])
    mode, warnings = choose_edit_mode("auto", (1, 18, 0))
    assert mode == "drop_in" and "#1404" in warnings[0]
    with pytest.raises(ContainerdConfigError, match="needs nvidia-ctk 1.18.1"):
        choose_edit_mode("drop_in", (1, 17, 8))
    with pytest.raises(ContainerdConfigError, match="in_place is broken"):
        choose_edit_mode("in_place", (1, 20, 0))


@pytest.mark.parametrize("kwargs,match", [
    ({"config_path": "etc/containerd/config.toml"}, "config_path must be an absolute path"),
    ({"drop_in_path": "conf.d/99.toml"}, "drop_in_path must be an absolute path"),
    ({"runtime_path": "nvidia-container-runtime"}, "runtime_path must be an absolute path"),
    ({"drop_in_path": "/etc/containerd/config.toml"}, "must differ"),
    ({"drop_in_path": "/etc/containerd/conf.d/99-nvidia.conf"}, "must end in .toml"),
    ({"config_path": '/etc/con"tainerd.toml'}, "must not contain quotes"),
    ({"runtime_name": "nv idia"}, "runtime_name must be"),
    ({"runtime_name": ""}, "runtime_name must be"),
    ({"edit_mode": "both"}, "edit_mode must be one of"),
])
def test_validate_params_rejects(kwargs, match):
    args = dict(config_path=DEFAULT_CONFIG, drop_in_path=DEFAULT_DROP_IN, edit_mode="auto",
                runtime_name="nvidia", runtime_path=DEFAULT_RUNTIME_PATH)
    args.update(kwargs)
    with pytest.raises(ContainerdConfigError, match=match):
        validate_params(**args)


def test_validate_params_in_place_ignores_drop_in():
    validate_params("/var/lib/rancher/rke2/agent/etc/containerd/config.toml", "", "in_place", "nvidia",
                    DEFAULT_RUNTIME_PATH)


def test_configure_args_are_a_list_with_every_flag():
    args = configure_args("/usr/bin/nvidia-ctk", "/t/c.toml", "/t/d/99.toml", "drop_in", "nv", "/bin/r", True,
                          True)
    assert args == ["/usr/bin/nvidia-ctk", "runtime", "configure", "--runtime=containerd", "--config=/t/c.toml",
                    "--drop-in-config=/t/d/99.toml", "--nvidia-runtime-name=nv", "--nvidia-runtime-path=/bin/r",
                    "--nvidia-set-as-default", "--cdi.enabled"]
    in_place_args = configure_args("c", "/c", "/d.toml", "in_place", "n", "/r", False, False)
    assert "--drop-in-config=/t/d/99.toml" not in in_place_args


def test_substitute_replaces_only_whole_quoted_strings():
    text = "imports = ['/etc/containerd/conf.d/*.toml', \"/etc/containerd/conf.d/*.tomlx\"]"
    out = substitute(text, [("/etc/containerd/conf.d/*.toml", "/tmp/x/conf.d/*.toml")])
    assert out == "imports = [\"/tmp/x/conf.d/*.toml\", \"/etc/containerd/conf.d/*.tomlx\"]"
    assert substitute(None, []) is None


def test_source_runtime_and_systemd_cgroup_helpers():
    tree = parse_toml(GOLDEN_INPUT, "in")
    assert source_runtime_name(tree, 2) == "runc"
    assert systemd_cgroup_runtimes(tree, 2) == ["runc"]
    tree["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"] = "nvidia-legacy"
    assert source_runtime_name(tree, 2) == "runc"  # names starting with nvidia are skipped
    assert source_runtime_name({"version": 2}, 2) is None


def test_systemd_cgroup_lost_on_existing_runtime_is_an_error():
    before = parse_toml(GOLDEN_V2, "b")
    after = parse_toml(GOLDEN_V2.replace("SystemdCgroup = true", "SystemdCgroup = false"), "a")
    errors, _warnings = systemd_cgroup_findings(before, after, 2, "nvidia", "runc")
    assert len(errors) == 2 and "would lose SystemdCgroup" in errors[0]


def test_systemd_cgroup_missing_on_nvidia_warns():
    tree = parse_toml(GOLDEN_V2.replace(
        'BinaryName = "/usr/bin/nvidia-container-runtime"\n            SystemdCgroup = true',
        'BinaryName = "/usr/bin/nvidia-container-runtime"'), "a")
    errors, warnings = systemd_cgroup_findings(None, tree, 2, "nvidia", "crun")
    assert not errors and "gets no SystemdCgroup" in warnings[0] and "runc has it" in warnings[0]
    errors, warnings = systemd_cgroup_findings(None, parse_toml(GOLDEN_MISSING, "m"), 2, "nvidia", None)
    assert not errors and "fallback options without SystemdCgroup" in warnings[0]
    assert systemd_cgroup_findings(parse_toml(GOLDEN_INPUT, "i"), parse_toml(GOLDEN_V2, "o"), 2, "nvidia",
                                   "runc") == ([], [])


def test_check_candidate_dump_problems():
    good = parse_toml(GOLDEN_V2, "g")
    assert check_candidate_dump(good, "nvidia", DEFAULT_RUNTIME_PATH, False, False, "1.6.20") == ([], [])
    problems, _warnings = check_candidate_dump(good, "nvidia", "/opt/other", True, False, "1.6.20")
    assert any("BinaryName" in p for p in problems) and any("default_runtime_name" in p for p in problems)
    dangling = parse_toml(GOLDEN_V2.replace('default_runtime_name = "runc"', 'default_runtime_name = "kata"'), "d")
    problems, _warnings = check_candidate_dump(dangling, "nvidia", DEFAULT_RUNTIME_PATH, False, False, "1.6.20")
    assert any("names no configured runtime" in p for p in problems)
    _problems, warnings = check_candidate_dump(good, "nvidia", DEFAULT_RUNTIME_PATH, False, True, "1.6.20")
    assert "enable_cdi" in warnings[0]
    problems, _warnings = check_candidate_dump({"version": 2}, "nvidia", DEFAULT_RUNTIME_PATH, False, False, "x")
    assert "no CRI plugin section" in problems[0]
    # a containerd that knows enable_cdi (1.7+) and reads it as false: CDI would stay off, refused
    off = parse_toml(GOLDEN_V2.replace('[plugins."io.containerd.grpc.v1.cri"]\n',
                                       '[plugins."io.containerd.grpc.v1.cri"]\n    enable_cdi = false\n'), "off")
    problems, warnings = check_candidate_dump(off, "nvidia", DEFAULT_RUNTIME_PATH, False, True, "1.7.34")
    assert problems == ["containerd 1.7.34 reads enable_cdi = False from the merged config's CRI plugin"
                        " (io.containerd.grpc.v1.cri): CDI would stay off"] and warnings == []


def test_set_cri_v1_enable_cdi_puts_it_where_the_cri_plugin_reads_it():
    """Issue 36: nvidia-ctk's version 1 output (recorded from the real 1.17.8) has enable_cdi only under
    [plugins.cri.containerd]; the collection adds it to [plugins.cri] and leaves every other value as it was."""
    real = ctk_env.real_ctk_text("v1-cdi-in-place-1.17.8.toml")
    assert get_in(parse_toml(real, "r"), ["plugins", "cri", "enable_cdi"]) is None
    fixed = parse_toml(set_cri_v1_enable_cdi(real, "/etc/containerd/config.toml"), "f")
    expected = parse_toml(real, "r")
    expected["plugins"]["cri"]["enable_cdi"] = True
    assert fixed == expected
    with pytest.raises(ContainerdConfigError, match=r"no \[plugins.cri\] table.*version = 2"):
        set_cri_v1_enable_cdi('version = 1\n[plugins.cri.containerd]\n  enable_cdi = true\n', "/c.toml")
    with pytest.raises(ContainerdConfigError, match="not valid TOML"):  # already there: a duplicate key
        set_cri_v1_enable_cdi('version = 1\n[plugins.cri]\n  enable_cdi = false\n', "/c.toml")


def test_effective_changes_ignores_our_keys_and_reports_others():
    before = parse_toml(GOLDEN_INPUT, "b")
    after = parse_toml(GOLDEN_V2.replace("pause:3.9", "pause:3.6"), "a")
    after["plugins"]["io.containerd.grpc.v1.cri"]["enable_cdi"] = True
    changes = effective_changes(before, after, "nvidia", 2, 2)
    assert changes == ["plugins.io.containerd.grpc.v1.cri.sandbox_image: 'registry.k8s.io/pause:3.9' ->"
                       " 'registry.k8s.io/pause:3.6'"]
    assert effective_changes(before, after, "nvidia", 2, 3) == []


def test_plan_files_and_diff_entries():
    plan = plan_files({"/d": None, "/c": "old\n", "/x": "same"}, {"/d": "new\n", "/c": "new\n", "/x": "same"})
    assert [(p["path"], p["action"]) for p in plan] == [("/d", "create"), ("/c", "update"), ("/x", "none")]
    diffs = diff_entries(plan)
    assert diffs[0] == {"before_header": "/d (absent)", "after_header": "/d", "before": "", "after": "new\n"}
    assert diffs[1]["before"] == "old\n" and len(diffs) == 2
    assert plan_files({"/a": "x"}, {"/a": None})[0]["action"] == "delete"


def test_effective_cri_tree_drop_in_replaces_section():
    top = parse_toml(GOLDEN_INPUT, "t")
    drop = parse_toml(GOLDEN_V2, "d")
    merged = effective_cri_tree(top, drop, 2)
    assert "nvidia" in runtimes_of(merged, 2) and "nvidia" not in runtimes_of(top, 2)


# ------------------------------------------------------------------------------------------------------
# the runner (I/O on private copies), with the stand-in and real containerd
# ------------------------------------------------------------------------------------------------------
def _run(argv):
    import subprocess

    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    return result.returncode, result.stdout, result.stderr


def test_runner_never_touches_live_files_and_maps_import_back(tmp_path):
    etc = tmp_path / "etc" / "containerd"
    etc.mkdir(parents=True)
    config = etc / "config.toml"
    config.write_text("version = 2\nimports = ['%s/conf.d/*.toml']\n" % etc + GOLDEN_INPUT.split("version = 2\n")[1])
    (etc / "conf.d").mkdir()
    (etc / "conf.d" / "10-other.toml").write_text("version = 2\n")
    log = tmp_path / "calls.log"
    ctk = ctk_env.ctk_wrapper(tmp_path / "bin", "1.20.0", log=str(log))
    before = ctk_env.snapshot(tmp_path)
    tmp_parent = tmp_path / "private"
    tmp_parent.mkdir()
    runner = NvidiaCtkRunner(_run, ctk, ctk_env.require_containerd(), tmp_parent=str(tmp_parent))
    live = {str(config): config.read_text(), str(etc / "conf.d" / "99-nvidia.toml"): None}
    candidate = runner.compute(str(config), str(etc / "conf.d" / "99-nvidia.toml"), "drop_in", "nvidia",
                               DEFAULT_RUNTIME_PATH, False, False, live)
    after = ctk_env.snapshot(tmp_path)
    after.pop("calls.log")
    assert after == before  # nothing live was written, mtimes included
    assert os.listdir(str(tmp_parent)) == []  # private directory removed
    top = candidate.trees[str(config)]
    assert top["imports"] == ["%s/conf.d/*.toml" % etc]  # not duplicated, not the private path
    assert candidate.files[str(etc / "conf.d" / "99-nvidia.toml")] == GOLDEN_V2
    assert candidate.dump is not None and candidate.stray == []
    assert "--runtime=containerd" in log.read_text()


def test_runner_reports_ctk_failure(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    ctk = ctk_env.ctk_wrapper(tmp_path / "bin", "1.17.8")
    runner = NvidiaCtkRunner(_run, ctk, None, tmp_parent=str(tmp_path))
    with pytest.raises(ContainerdConfigError, match="flag provided but not defined"):
        runner.compute(str(etc / "config.toml"), str(etc / "conf.d" / "99.toml"), "drop_in", "nvidia",
                       DEFAULT_RUNTIME_PATH, False, False, {str(etc / "config.toml"): None})
    assert runner.ctk_version() == (1, 17, 8)
