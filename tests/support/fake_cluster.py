"""What the site tests' fake clusters have in common: the fake API server (``self.api``, tests/support/fake_kube_api.py)
and the fake DaemonSet controller (``self.fake``, tests/support/fake_daemonsets.py) that a test class starts, and the
reads every such test makes of them. A class that holds one node only sets ``default_node``."""
import time


def node_writes(requests, name):
    """The real (not dry-run) PATCHes of node ``name`` among the API server's recorded ``requests``."""
    return [r for r in requests if r["method"] == "PATCH" and not r["query"].get("dryRun")
            and r["path"] == "/api/v1/nodes/%s" % name]


class FakeCluster(object):
    default_node = None

    def stop(self):
        self.fake.stop()
        self.api.stop()
        assert self.fake.errors == [], self.fake.errors[0]

    def wait_settled(self, bound_s=60):
        """Wait (bounded) until the fake controller has nothing under way (no pod starting or ending, no wipe due)."""
        deadline = time.monotonic() + bound_s
        while not self.fake.settled():
            assert time.monotonic() < deadline, "the fake DaemonSets did not settle within %d s" % bound_s
            time.sleep(0.05)

    def node(self, name=None):
        return self.api.get("", "nodes", name or self.default_node)

    def allocatable(self, name=None):
        return dict((k, v) for k, v in self.node(name)["status"]["allocatable"].items() if k.startswith("nvidia.com/"))

    def node_writes(self, name=None, since=0):
        return node_writes(self.api.requests[since:], name or self.default_node)
