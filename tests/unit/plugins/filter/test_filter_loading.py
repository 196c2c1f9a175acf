"""What a task's worker loads when a template names any gpuops.nvidia filter.

ansible-core finds a collection's filter by loading every filter file of the collection (its Jinja2 plugin loader
walks plugins/filter/), in each task's freshly forked worker, and its collection loader compiles the collection's
Python from source every time (no .pyc). A filter file that imports a planner when it loads makes every task that
uses any gpuops.nvidia filter compile that planner and what it imports: the device_plugin_skip_xids filter did that
with the health planners (docs/readings/fleet-compare-session16-2cores.md). The filters import them where they run.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
FILTER_DIR = os.path.join(ROOT, "plugins", "filter")
PREFIX = "ansible_collections.gpuops.nvidia.plugins."

# A fresh process as a worker is one: ansible-core's collection loader over this checkout's collection, then the
# lookup of one filter the way a template's use of it looks it up.
SCRIPT = """
import json, sys
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[%r])._install()
from ansible.plugins.loader import filter_loader
found = filter_loader.get('gpuops.nvidia.declared_files')
print(json.dumps({'found': found is not None,
                  'loaded': sorted(m[len(%r):] for m in sys.modules if m.startswith(%r))}))
"""


def _loaded_by_one_filter_lookup():
    script = SCRIPT % (os.path.join(ROOT, ".collections"), PREFIX, PREFIX)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_finding_one_filter_loads_every_filter_file_and_no_planner():
    seen = _loaded_by_one_filter_lookup()
    assert seen["found"]
    files = sorted("filter." + name[:-3] for name in os.listdir(FILTER_DIR)
                   if name.endswith(".py") and name != "__init__.py")
    # every filter file was loaded (so each one's top-level imports were run) ...
    assert [m for m in seen["loaded"] if m.startswith("filter.")] == files
    # ... and none of them imported the collection's module_utils or plugin_utils when it loaded
    assert [m for m in seen["loaded"] if not m.startswith("filter")] == []


def test_the_filters_still_reach_their_planners_when_they_run():
    from ansible_collections.gpuops.nvidia.plugins.filter.device_plugin_profiles import device_plugin_profiles
    from ansible_collections.gpuops.nvidia.plugins.filter.device_plugin_skip_xids import device_plugin_skip_xids
    hostvars = {"n1": {"gpu_node_sharing": "mps", "gpu_node_replicas": 4}}
    assert device_plugin_profiles(hostvars, ["n1"])["nodes"] == {"n1": "mps-4"}
    assert device_plugin_skip_xids(hostvars, ["n1"], [48, 79])["skip"] == [48, 79]
