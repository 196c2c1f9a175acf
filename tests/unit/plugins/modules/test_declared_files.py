"""declared_files: a role's declared directories and files converged in one module run. Check mode reports and writes
nothing; apply writes (changed, the changed paths listed); again changes nothing; a mode-only change is fixed without
rewriting; a file's old version is kept with backup; a diff per entry except where diff is off; bad input (a relative
path, an unknown state, a text not given, a directory where a file is declared) is refused with nothing changed; and
what the module leaves is what the node plan's comparison (_node_plan.file_reason) calls as declared."""
import os
import stat

from tests.support.ansible_run import run_module
from tests.support.modrun import run_here

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _node_plan

MODULE = "gpuops.nvidia.declared_files"
SCRIPT = "#!/usr/bin/python3\nprint('apply')\n"
BUNDLE = '{"gpu/_gpu.py": "import os\\n"}'
UNIT = "[Unit]\nDescription=re-apply\n"


def declared(root):
    lib, unit_dir = os.path.join(root, "usr/lib/gpuops"), os.path.join(root, "etc/systemd/system")
    files = [
        {"path": lib, "state": "directory", "mode": "0755"},
        {"path": unit_dir, "state": "directory", "mode": "0755"},
        {"path": lib + "/apply.py", "content": "script", "mode": "0755"},
        {"path": lib + "/bundle.json", "content": "bundle", "mode": "0644", "diff": False},
        {"path": unit_dir + "/gpuops-mig.service", "content": "unit", "mode": "0644"},
    ]
    return {"files": files, "contents": {"script": SCRIPT, "bundle": BUNDLE, "unit": UNIT, "unused": "x"}}


def tree(root):
    """Every path under root: (kind, mode, text of a file)."""
    out = {}
    for base, dirs, names in os.walk(root):
        for name in dirs + names:
            path = os.path.join(base, name)
            st = os.lstat(path)
            text = open(path).read() if stat.S_ISREG(st.st_mode) else None
            out[os.path.relpath(path, root)] = (stat.S_IFMT(st.st_mode), "%04o" % stat.S_IMODE(st.st_mode), text)
    return out


def plan_agrees(args):
    """The node plan's own comparison finds nothing to do at any entry."""
    for entry in args["files"]:
        want = dict(entry, state=entry.get("state", "file"))
        if want["state"] == "file":
            want["checksum"] = _node_plan.sha1(args["contents"][entry["content"]])
        assert _node_plan.file_reason(want, _node_plan.observe(entry["path"])) is None, entry["path"]


def test_check_apply_again_through_ansible(tmp_path):
    root = str(tmp_path / "root")
    os.mkdir(root)
    args = declared(root)
    paths = [e["path"] for e in args["files"]]

    check = run_module(MODULE, args, check=True, diff=True)[0]
    assert check["changed"] is True and check["changed_paths"] == paths, check
    assert tree(root) == {}, "check mode wrote something"
    diffs = check["diff"]
    # one diff per entry that shows one: the bundle's (diff false) is not there, its text nowhere in the output
    assert [d["after_header"] for d in diffs] == [p for p in paths if not p.endswith("bundle.json")]
    assert diffs[2]["before"] == "" and diffs[2]["after"] == SCRIPT
    assert "import os" not in str(check)
    # the texts are not repeated in the invocation: each is named by its length and sha1
    assert check["invocation"]["module_args"]["contents"]["bundle"] == "(%d characters, sha1 %s)" % (
        len(BUNDLE), _node_plan.sha1(BUNDLE))

    applied = run_module(MODULE, args, diff=True)[0]
    assert applied["changed"] is True and applied["changed_paths"] == paths, applied
    got = tree(root)
    assert got["usr/lib/gpuops"][:2] == (stat.S_IFDIR, "0755")
    assert got["usr/lib/gpuops/apply.py"] == (stat.S_IFREG, "0755", SCRIPT)
    assert got["usr/lib/gpuops/bundle.json"] == (stat.S_IFREG, "0644", BUNDLE)
    assert got["etc/systemd/system/gpuops-mig.service"] == (stat.S_IFREG, "0644", UNIT)
    assert set(got) == {"usr", "etc", "usr/lib", "etc/systemd", "usr/lib/gpuops", "etc/systemd/system",
                        "usr/lib/gpuops/apply.py", "usr/lib/gpuops/bundle.json", "etc/systemd/system/gpuops-mig.service"}
    plan_agrees(args)

    again = run_module(MODULE, args, diff=True)[0]
    assert again["changed"] is False and again["changed_paths"] == [] and "diff" not in again, again
    assert tree(root) == got


def test_mode_only_change_content_change_backup_and_link(tmp_path):
    root = str(tmp_path)
    args = declared(root)
    assert run_here(MODULE, args)["changed"] is True
    script = args["files"][2]["path"]
    unit = args["files"][4]["path"]
    lib = args["files"][0]["path"]
    os.chmod(script, 0o700)
    os.chmod(lib, 0o700)
    inode = os.stat(script).st_ino

    check = run_here(MODULE, args, check=True, diff=True)
    assert check["changed"] is True and check["changed_paths"] == [lib, script], check
    assert os.stat(script).st_mode & 0o777 == 0o700
    assert check["diff"][0]["before"] == {"path": lib, "state": "directory", "mode": "0700"}
    assert check["diff"][0]["after"] == {"path": lib, "state": "directory", "mode": "0755"}
    res = run_here(MODULE, args)
    assert res["changed"] is True and res["changed_paths"] == [lib, script]
    assert os.stat(script).st_mode & 0o777 == 0o755 and os.stat(lib).st_mode & 0o777 == 0o755
    assert os.stat(script).st_ino == inode, "a mode-only change rewrote the file"

    # a changed text is written atomically (a new inode), the old one kept with backup
    with open(unit, "w") as handle:
        handle.write("[Unit]\nDescription=old\n")
    args["backup"] = True
    res = run_here(MODULE, args, diff=True)
    assert res["changed_paths"] == [unit] and res["diff"] == [
        {"before_header": unit, "after_header": unit, "before": "[Unit]\nDescription=old\n", "after": UNIT}]
    assert open(unit).read() == UNIT and open(res["backup_files"][unit]).read() == "[Unit]\nDescription=old\n"

    # a symlink where a file is declared: the link is replaced, the file it pointed to is left alone
    other = str(tmp_path / "other")
    with open(other, "w") as handle:
        handle.write("not ours\n")
    os.unlink(script)
    os.symlink(other, script)
    res = run_here(MODULE, args)
    assert res["changed_paths"] == [script] and not os.path.islink(script) and open(script).read() == SCRIPT
    assert open(other).read() == "not ours\n"
    plan_agrees(args)

    # force false (a seed): written where nothing is there, then never compared, its text nor its mode
    seed = {"files": [{"path": str(tmp_path / "seed.toml"), "content": "seed", "mode": "0644", "force": False}],
            "contents": {"seed": "version = 2\n"}}
    assert run_here(MODULE, seed)["changed"] is True and open(seed["files"][0]["path"]).read() == "version = 2\n"
    with open(seed["files"][0]["path"], "w") as handle:
        handle.write("version = 3\n")
    os.chmod(seed["files"][0]["path"], 0o600)
    assert run_here(MODULE, seed)["changed"] is False and open(seed["files"][0]["path"]).read() == "version = 3\n"

    # absent: a file declared absent is removed (check mode first: reported, left)
    marker = str(tmp_path / "marker")
    open(marker, "w").close()
    gone = {"files": [{"path": marker, "state": "absent"}]}
    assert run_here(MODULE, gone, check=True)["changed_paths"] == [marker] and os.path.exists(marker)
    assert run_here(MODULE, gone)["changed"] is True and not os.path.exists(marker)
    assert run_here(MODULE, gone)["changed"] is False


def test_bad_input_is_refused_with_nothing_changed(tmp_path):
    root = str(tmp_path / "root")
    good = declared(root)

    relative = declared(root)
    relative["files"].append({"path": "etc/gpuops.conf", "content": "unit", "mode": "0644"})
    res = run_here(MODULE, relative)
    assert res.get("failed") and res["changed"] is False, res
    assert "files[5] (etc/gpuops.conf): the path must be absolute" in res["msg"] and "nothing changed" in res["msg"]
    assert not os.path.exists(root)
    # a refusal's invocation names the texts by length and sha1 too, as a run's does
    assert res["invocation"]["module_args"]["contents"]["bundle"].startswith("(%d characters, sha1 " % len(BUNDLE))

    unknown = declared(root)
    unknown["files"][1]["state"] = "link"
    res = run_here(MODULE, unknown)
    assert res.get("failed") and "state" in res["msg"] and "file, directory, absent" in res["msg"], res
    assert not os.path.exists(root)

    for change, words in (({"content": "missing"}, "content 'missing' is not one of the texts in contents"),
                          ({"mode": "u+rwx"}, "mode must be a quoted octal string like '0644'"),
                          ({"checksum": "0" * 40}, "does not have the declared checksum"),
                          ({"src": "/srv/pkg.deb"}, "copy it with ansible.builtin.copy")):
        bad = declared(root)
        bad["files"][2].update(change)
        res = run_here(MODULE, bad)
        assert res.get("failed") and words in res["msg"] and "nothing changed" in res["msg"], (change, res)
        assert not os.path.exists(root)

    # a directory where a file is declared: found before any write, so the directories before it are not made either
    os.makedirs(good["files"][4]["path"])
    res = run_here(MODULE, good)
    assert res.get("failed") and res["changed"] is False, res
    assert "gpuops-mig.service) is a directory, declared a file" in res["msg"] and "nothing changed" in res["msg"]
    assert not os.path.exists(good["files"][0]["path"])
