"""tests/support/converged_lab.py: a lab variant is built once and each test gets a fresh copy, at the path it was
built in, that no other test's changes reach; a second holder at the same time gets a slot of its own; a failed
build is not run again; a changed archive is refused."""
import os
import stat

import pytest

from tests.support.converged_lab import BuildFailed, ConvergedLabs


class Builder(object):
    """A stand-in for a converge: writes a few files (one naming its own directory, one of mode 0600)."""

    def __init__(self, fail=False):
        self.dirs, self.fail = [], fail

    def __call__(self, directory):
        self.dirs.append(directory)
        if self.fail:
            raise RuntimeError("the converge failed: rc=2")
        os.makedirs(os.path.join(directory, "lab-state", "node"))
        with open(os.path.join(directory, "lab-state", "node", "config.toml"), "w") as handle:
            handle.write('imports = ["%s/lab-state/node/conf.d/*.toml"]\n' % directory)
        secret = os.path.join(directory, "kubeconfig")
        with open(secret, "w") as handle:
            handle.write("token\n")
        os.chmod(secret, 0o600)
        os.utime(secret, (1000000000, 1000000000))
        return {"api": {"objects": [["node", {"labels": {"a": "1"}}]]}}


def _files(directory):
    out = {}
    for dirpath, dummy, names in os.walk(directory):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path) as handle:
                out[os.path.relpath(path, directory)] = handle.read()
    return out


def test_built_once_and_each_test_gets_the_built_state_at_the_built_path(tmp_path):
    labs, build = ConvergedLabs(tmp_path), Builder()
    with labs.copy("lab", build) as (slot, record):
        first = _files(slot)
        assert slot == build.dirs[0]
        assert first["lab-state/node/config.toml"] == 'imports = ["%s/lab-state/node/conf.d/*.toml"]\n' % slot
        assert record == {"api": {"objects": [["node", {"labels": {"a": "1"}}]]}}
        # this test changes its copy every way it can: edits, adds, removes a file, and its record
        with open(os.path.join(slot, "lab-state", "node", "config.toml"), "a") as handle:
            handle.write("# edited\n")
        with open(os.path.join(slot, "lab-state", "extra.json"), "w") as handle:
            handle.write("{}")
        os.unlink(os.path.join(slot, "kubeconfig"))
        record["api"]["objects"][0][1]["labels"]["a"] = "2"
    with labs.copy("lab", build) as (slot, record):
        assert slot == build.dirs[0]            # the same path: files that name it are still true
        assert _files(slot) == first            # none of the first test's changes
        assert record["api"]["objects"][0][1]["labels"] == {"a": "1"}
        mode = os.stat(os.path.join(slot, "kubeconfig"))
        assert stat.S_IMODE(mode.st_mode) == 0o600 and mode.st_mtime == 1000000000     # as built
    assert len(build.dirs) == 1 and labs.builds == 1


def test_a_second_holder_at_the_same_time_gets_a_slot_of_its_own(tmp_path):
    labs, build = ConvergedLabs(tmp_path), Builder()
    with labs.copy("lab", build) as (slot, dummy):
        with labs.copy("lab", build) as (other, dummy2):
            assert other != slot and len(build.dirs) == 2
            assert _files(other)["lab-state/node/config.toml"].count(other) == 1
    # both slots are free again: a third test takes one of them, no build
    with labs.copy("lab", build) as (third, dummy):
        assert third in build.dirs and len(build.dirs) == 2


def test_a_slot_held_by_another_process_is_not_taken(tmp_path):
    # the lock is an flock on the slot's lock file: another open of it (another process's, as here another open
    # file description) cannot take it
    import fcntl
    labs, build = ConvergedLabs(tmp_path), Builder()
    with labs.copy("lab", build):
        pass
    with open(os.path.join(labs.root, "lab", "slot-0.lock"), "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        with labs.copy("lab", build) as (slot, dummy):
            assert slot.endswith("slot-1") and len(build.dirs) == 2


def test_the_slot_is_kept_in_the_tests_tmp_path_after_it(tmp_path):
    labs, build = ConvergedLabs(tmp_path / "session"), Builder()
    keep = tmp_path / "test"
    keep.mkdir()
    with labs.copy("lab", build, keep_in=keep) as (slot, dummy):
        with open(os.path.join(slot, "marker"), "w") as handle:
            handle.write("this test's")
    assert (keep / "converged-lab-slot-0" / "marker").read_text() == "this test's"
    assert not os.path.exists(slot)
    with labs.copy("lab", build) as (slot, dummy):
        assert not os.path.exists(os.path.join(slot, "marker"))


def test_a_changed_archive_is_refused(tmp_path):
    labs, build = ConvergedLabs(tmp_path), Builder()
    with labs.copy("lab", build):
        pass
    archive = os.path.join(labs.root, "lab", "slot-0.tar")
    os.chmod(archive, 0o644)
    with open(archive, "r+b") as handle:
        handle.seek(600)
        handle.write(b"X")
    with pytest.raises(AssertionError, match="changed after its build"):
        with labs.copy("lab", build):
            pass


def test_a_failed_build_fails_every_later_test_of_the_variant_without_building_again(tmp_path):
    labs, build = ConvergedLabs(tmp_path), Builder(fail=True)
    with pytest.raises(RuntimeError, match="rc=2"):
        with labs.copy("lab", build, test="tests/x.py::test_first"):
            pass
    with pytest.raises(BuildFailed, match=r"(?s)failed earlier in this session.*tests/x.py::test_first.*rc=2"):
        with labs.copy("lab", build, test="tests/x.py::test_second"):
            pass
    assert len(build.dirs) == 1


def test_one_variant_name_one_build(tmp_path):
    labs = ConvergedLabs(tmp_path)
    with labs.copy("lab", Builder()):
        pass
    with pytest.raises(ValueError, match="already built by"):
        with labs.copy("lab", Builder()):
            pass
    with pytest.raises(ValueError, match="lower-case"):
        with labs.copy("../lab", Builder()):
            pass
