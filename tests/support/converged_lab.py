"""Converged labs shared by the site tests: a lab variant is converged by site.yml once, and each test that starts from
it gets a fresh copy of the converged state instead of converging again.

A variant is a name and a build function. ``build(directory)`` converges a lab whose every file lives under
``directory`` and returns what a test needs besides those files, picklable: the fake API server's objects
(``FakeKubeApi.snapshot()``), the fake controllers' state, and what the converge showed (its results, the requests
it made) for the tests that assert on the converge itself.

Why the copy lives at the very path its lab was converged in: a converged node's files name their own paths
(containerd's imports, the boot units, mig.json), and the verified-state stamps of containerd_runtime and cdi_spec
record those paths and the digests of files that contain them. A copy elsewhere, its paths rewritten, would not be a
converged node: its stamps would miss and gpu_node_plan would find work. So a variant's labs live in *slots*,
``<session>/converged/<variant>/slot-N``: a slot is converged once (its build) and archived; a test that takes it
empties the slot's directory and unpacks the archive there again. One test at a time holds a slot (a lock held for
the test's duration); a test takes a free slot of its variant, and converges a new one only when every slot is
busy (pytest-xdist's other worker holds it) or none is built yet. A session thus converges a variant once when its
tests do not overlap in time, and at most once per worker.

What keeps one test's changes out of another's copy:

- the archive is written once, by its build, renamed into place whole, and its sha256 checked before every unpack;
- the slot's directory is removed before the unpack: nothing a test wrote stays there for the next one;
- the record is unpickled afresh for each test: no object is shared between tests;
- after the test the slot's directory is moved into the test's own tmp_path (kept for a post-mortem as pytest keeps
  tmp_path; its files name the slot's path), so the next test starts from the archive again.

A build that fails is recorded (``slot-N.failed``, with the test that ran it and its error): every later test of the
variant fails at once with that message instead of converging again.
"""
import contextlib
import fcntl
import hashlib
import os
import pickle
import re
import shutil
import tarfile
import traceback

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def session_root(tmp_path_factory):
    """A directory shared by every pytest-xdist worker of this test session (and new in each session)."""
    root = tmp_path_factory.getbasetemp()
    if root.name.startswith("popen-gw"):
        root = root.parent          # pytest-xdist: one basetemp per worker, under the session's own directory
    return root


class BuildFailed(Exception):
    """The variant's converge failed (in this test or in an earlier one): the message says where and why."""


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def _locked(path):
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _try_lock(path):
    """An open handle holding ``path``'s exclusive lock, or None when another process holds it."""
    handle = open(path, "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


class ConvergedLabs(object):
    """The session's converged labs, under ``root`` (session_root(): shared by the xdist workers)."""

    def __init__(self, root):
        self.root = os.path.join(str(root), "converged")
        self.builds = 0             # converges this process ran (tests/integration/test_converged_lab.py reads it)
        self._builders = {}         # variant -> build function: one name, one recipe

    def _variant_dir(self, variant, build):
        if not _NAME.match(variant):
            raise ValueError("variant %r: use lower-case letters, digits and dashes" % (variant,))
        known = self._builders.setdefault(variant, build)
        if known is not build:
            raise ValueError("variant %r is already built by %s, not %s" % (
                variant, getattr(known, "__qualname__", known), getattr(build, "__qualname__", build)))
        path = os.path.join(self.root, variant)
        os.makedirs(path, exist_ok=True)
        return path

    @staticmethod
    def _slots(vdir):
        return sorted(int(name[5:-5]) for name in os.listdir(vdir) if re.match(r"^slot-\d+\.lock$", name))

    def _take(self, vdir, variant):
        """(slot number, its held lock handle, whether it must be built): a free built slot, else a new one."""
        with _locked(os.path.join(vdir, "pool.lock")):
            numbers = self._slots(vdir)
            for number in numbers:
                failed = os.path.join(vdir, "slot-%d.failed" % number)
                if os.path.exists(failed):
                    with open(failed) as handle:
                        raise BuildFailed("the converge of lab variant %r failed earlier in this session:\n%s" % (
                            variant, handle.read()))
            for number in numbers:
                if not os.path.exists(os.path.join(vdir, "slot-%d.tar" % number)):
                    continue        # being built by another worker
                handle = _try_lock(os.path.join(vdir, "slot-%d.lock" % number))
                if handle is not None:
                    return number, handle, False
            number = (numbers[-1] + 1) if numbers else 0
            handle = _try_lock(os.path.join(vdir, "slot-%d.lock" % number))
            assert handle is not None, "a new slot's lock is held by another process"
            return number, handle, True

    def _build(self, vdir, number, build, test):
        slot = os.path.join(vdir, "slot-%d" % number)
        if os.path.exists(slot):
            shutil.rmtree(slot)
        os.makedirs(slot)
        self.builds += 1
        try:
            record = build(slot)
        except BaseException as error:
            with open(os.path.join(vdir, "slot-%d.failed" % number), "w") as handle:
                handle.write("built for %s:\n%s" % (test, "".join(
                    traceback.format_exception(type(error), error, error.__traceback__))[-6000:]))
            raise
        tmp = os.path.join(vdir, "slot-%d.tar.part" % number)
        with tarfile.open(tmp, "w") as tar:
            tar.add(slot, arcname=".")
        with open(os.path.join(vdir, "slot-%d.record" % number), "wb") as handle:
            pickle.dump(record, handle)
        with open(os.path.join(vdir, "slot-%d.sha256" % number), "w") as handle:
            handle.write(_sha256(tmp))
        os.chmod(tmp, 0o444)
        os.rename(tmp, os.path.join(vdir, "slot-%d.tar" % number))

    @staticmethod
    def _unpack(vdir, number):
        slot = os.path.join(vdir, "slot-%d" % number)
        archive = os.path.join(vdir, "slot-%d.tar" % number)
        with open(os.path.join(vdir, "slot-%d.sha256" % number)) as handle:
            want = handle.read().strip()
        got = _sha256(archive)
        assert got == want, "the converged archive %s changed after its build (sha256 %s, built %s)" % (
            archive, got, want)
        if os.path.exists(slot):
            shutil.rmtree(slot)
        os.makedirs(slot)
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "fully_trusted_filter"):
                tar.extractall(slot, filter="fully_trusted")    # our own archive: modes and times as built
            else:
                tar.extractall(slot)
        with open(os.path.join(vdir, "slot-%d.record" % number), "rb") as handle:
            return slot, pickle.load(handle)

    @contextlib.contextmanager
    def copy(self, variant, build, keep_in=None, test=""):
        """Hold a slot of ``variant`` for the ``with`` block: yields (the slot's directory, a fresh copy of the
        build's record), the directory as the build left it. The slot is converged first when no free one is
        built. At the end its directory is moved into ``keep_in`` (the test's tmp_path) when given."""
        vdir = self._variant_dir(variant, build)
        number, lock, must_build = self._take(vdir, variant)
        try:
            if must_build:
                self._build(vdir, number, build, test)
            slot, record = self._unpack(vdir, number)
            try:
                yield slot, record
            finally:
                if keep_in is not None:
                    try:
                        os.rename(slot, os.path.join(str(keep_in), "converged-%s-slot-%d" % (variant, number)))
                    except OSError:
                        pass        # kept in place: the next test of the slot removes it before its unpack
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()
