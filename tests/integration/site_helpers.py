"""Shared helpers for the site.yml tests: run the repository's site.yml against the lab inventory with every
state and scratch file under a test's tmp_path (extra vars), and read the simulated GPUs back."""
import os
import shutil

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _simulator_host
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from tests.support.ansible_run import ROOT, playbook_command, run_playbook

SITE = os.path.join(ROOT, "site.yml")
LAB = os.path.join(ROOT, "inventories", "lab")
HELM = os.path.join(ROOT, "tools", "bin", "helm")
CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-device-plugin")
NODES = ("lab-dgx-a100", "lab-hgx-h200")
# The lab's Blackwell node (an HGX B200, MIG all-balanced). Site runs are limited to NODES unless a test names other
# nodes: every lab node costs a whole converge (tests/integration/test_site_blackwell.py converges this one).
BLACKWELL_NODE = "lab-hgx-b200"
# The role's poll intervals in the site tests (issue 49): the fakes answer in milliseconds and start or end a pod in
# 0.2 s (tests/support/fake_daemonsets.py), so the role's defaults (2 s between two reads of the paused pods, 5 s of
# the verify and the MIG manager) were time spent waiting, not what a test proves. The role's own options; a test
# that passes its own value keeps it.
POLLS = dict(gpu_node_quiesce_interval=0.2, gpu_node_operator_poll_interval=0.5)


class Site(object):
    def __init__(self, tmp_path, limit=NODES, **extra):
        self.tmp = tmp_path
        self.state = tmp_path / "lab-state"
        self.extra = dict(POLLS, gpuops_lab_state_dir=str(self.state))
        self.extra.update(extra)
        self.env = {}        # more environment for ansible-playbook
        self.limit = tuple(limit or ())     # lab nodes the runs converge (--limit); empty: the whole lab

    def _call(self, check, diff, args, extra):
        ev = dict(self.extra)
        ev.update(extra)
        # the run's home and temporary files are the test's: what a killed module or tool leaves behind (AnsiballZ's
        # payload folder, a private copy) stays in the test's folder, not in the machine's /tmp
        temporary = self.tmp / "tmp"
        temporary.mkdir(parents=True, exist_ok=True)
        env = {"HOME": str(self.tmp), "TMPDIR": str(temporary)}
        for var in ("K8S_AUTH_KUBECONFIG", "K8S_AUTH_HOST", "KUBECONFIG"):
            env[var] = ""
        env.update(self.env)
        if self.limit:
            args = ("--limit", ",".join(self.limit)) + tuple(args)
        return dict(playbook=SITE, inventory=LAB, extra_vars=ev, check=check, diff=diff, env=env, args=args)

    def run(self, check=False, diff=False, args=(), **extra):
        data, proc = run_playbook(**self._call(check, diff, args, extra))
        assert data is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
        return Result(data, proc)

    def command(self, args=(), **extra):
        """(command line, environment) of run(): for tests that start and kill ansible-playbook themselves."""
        return playbook_command(**self._call(False, False, args, extra))

    def gpus(self, node):
        """The node's simulated GPUs (the simulator's whole state document), read through the simulator with the
        node's root where its host is modelled: a driver loaded again since the state file was last written has
        dropped what it held in the GPUs (MIG instances, compute and persistence mode) in what this returns too."""
        root = self.state / node
        return SimulatedBackend(str(self.state / ("%s.json" % node)),
                                root=str(root) if root.is_dir() else None).raw_state()

    def files(self, node, image=False):
        """The files under the node's root, by relative path. Without ``image``, those the simulated host brought
        (_simulator_host: the kernel's views under proc/ and sys/, and the image's driver files its manifest lists)
        are left out, so that what remains is what the collection wrote."""
        root = self.state / node
        brought = set() if image else _simulator_host.image_paths(str(root))
        out = {}
        for dirpath, dummy, names in os.walk(str(root)):
            for name in names:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, str(root))
                if not image and (rel in brought or rel.startswith(_simulator_host.KERNEL_VIEWS)):
                    continue
                if os.path.islink(path):    # by its text: /dev/char's links name the host's /dev/nvidia* (issue 51)
                    out[rel] = b"-> " + os.readlink(path).encode()
                    continue
                with open(path, "rb") as handle:
                    out[rel] = handle.read()
        return out

    def chart(self):
        dest = self.tmp / "chart"
        if not dest.exists():
            shutil.copytree(CHART, str(dest))
        return str(dest)


class Result(object):
    """A site.yml run's json_results document and its process (picklable: a converged lab's build records the runs
    it made for the tests that assert on them, tests/support/converged_lab.py)."""

    def __init__(self, data, proc):
        self.data, self.proc = data, proc
        self.stats = data["stats"]
        self.rc = proc.returncode

    def changed(self, node):
        return self.stats[node]["changed"]

    def task(self, name, node):
        """Results of every task whose name contains ``name`` on ``node`` (in order)."""
        found = []
        for play in self.data["plays"]:
            for task in play["tasks"]:
                if name in task["task"]["name"] and node in task["hosts"]:
                    found.append(task["hosts"][node])
        return found

    def failures(self):
        out = []
        for play in self.data["plays"]:
            for task in play["tasks"]:
                for host, res in task["hosts"].items():
                    if res.get("failed"):
                        out.append((host, task["task"]["name"], res.get("msg", "")))
        return out

    def __str__(self):
        return "rc=%s stats=%s failures=%s\n%s" % (self.rc, self.stats, self.failures(), self.proc.stderr[-2000:])

    __repr__ = __str__
