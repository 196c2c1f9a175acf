"""A STAND-IN for the containerd-config step of k3s's and RKE2's agent (not their code), on a simulated node root.

What it reproduces, from k3s-io/k3s (pkg/agent/containerd/runtimes.go at commit cd1fadb931e0, pkg/agent/templates)
and the k3s docs (k3s-io/docs docs/advanced/advanced.md), RKE2 running the same agent code:
- at every start the agent writes /var/lib/rancher/<dist>/agent/etc/containerd/config.toml, rendered from the
  administrator's template where one exists (containerd 2.x: config-v3.toml.tmpl first, then config.toml.tmpl;
  containerd 1.x: config.toml.tmpl), else from its stock ("base") config;
- ``{{ template "base" . }}`` in a template is replaced by the stock config; ``{{ .SystemdCgroup }}`` by the
  agent's SystemdCgroup value;
- the stock config defines runc (with SystemdCgroup) and every runtime whose executable it finds in its PATH:
  nvidia, nvidia-experimental, nvidia-cdi (runc.v2, BinaryName the path found), and ``default_runtime_name`` from
  ``default-runtime`` in /etc/rancher/<dist>/config.yaml.
The stock config here is a short one of our own with the same table layout (version 2: the
``io.containerd.grpc.v1.cri`` plugin; version 3: ``io.containerd.cri.v1.runtime``), with a ``release`` that changes
its sandbox image and CNI directory: a distribution upgrade (a new generated base). Any other template action is
an error here (the real agent would render it; the collection's template uses none other).

Run as a program (``install_agent`` puts it at the unit's ExecStart, /usr/local/bin/<dist>, so that a restart of the
unit through tests/support/systemctl_standin.py runs it) it starts the agent of the node named by
GPUOPS_SIMULATED_ROOT, at the release and containerd major recorded in the root (``upgrade`` changes them: a
distribution upgrade), and appends each start to the root's ``.standin-<dist>-agent.log``.
"""

import json
import os
import re
import sys

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_target import (
    AGENT_PATH, DETECTED_RUNTIMES, DISTRIBUTIONS, yaml_scalar)

BASE_ACTION = '{{ template "base" . }}'


def under(root, path):
    return os.path.join(str(root), path.lstrip("/"))


def make_root(root, dist, unit=None, config_yaml=None, tarball=False, enabled=True):
    """The layout of a node running ``dist`` (``k3s`` or ``rke2``): its directories, its unit (``enabled``: linked into
    multi-user.target.wants, as ``systemctl enable`` does), its config.yaml. ``tarball``: both of the distribution's
    units installed in /usr/local/lib/systemd/system, as RKE2's tarball does, ``unit`` the one enabled."""
    d = DISTRIBUTIONS[dist]
    unit = unit or d.services[0]
    os.makedirs(under(root, d.containerd_dir), exist_ok=True)
    os.makedirs(under(root, os.path.dirname(d.config_yaml)), exist_ok=True)
    folder = "/usr/local/lib/systemd/system" if tarball else "/etc/systemd/system"
    os.makedirs(under(root, folder), exist_ok=True)
    for name in d.services if tarball else (unit,):
        with open(under(root, "%s/%s.service" % (folder, name)), "w") as handle:
            handle.write("[Unit]\nDescription=%s\n[Service]\nExecStart=/usr/local/bin/%s\n"
                         "[Install]\nWantedBy=multi-user.target\n" % (name, dist))
    if enabled:
        wants = under(root, "/etc/systemd/system/multi-user.target.wants")
        os.makedirs(wants, exist_ok=True)
        # relative, so that it resolves inside the simulated root (systemctl enable writes the absolute path)
        os.symlink(os.path.relpath(under(root, "%s/%s.service" % (folder, unit)), wants),
                   os.path.join(wants, unit + ".service"))
    if config_yaml is not None:
        with open(under(root, d.config_yaml), "w") as handle:
            handle.write(config_yaml)


def install_executable(root, path):
    """An executable file at ``path`` under ``root`` (the toolkit's nvidia-container-runtime, say)."""
    real = under(root, path)
    os.makedirs(os.path.dirname(real), exist_ok=True)
    with open(real, "w") as handle:
        handle.write("#!/bin/sh\nexit 0\n")
    os.chmod(real, 0o755)


def _state_path(root, dist):
    return under(root, "/.standin-%s-agent.json" % dist)


def upgrade(root, dist, release, containerd_major):
    """The installed distribution's release and its containerd's major version (what its next start generates)."""
    with open(_state_path(root, dist), "w") as handle:
        json.dump({"release": release, "containerd_major": containerd_major}, handle)


def install_agent(root, dist, python, paths, release=1, containerd_major=1):
    """The distribution's own binary at its unit's ExecStart (/usr/local/bin/<dist>): this stand-in, run by ``python``
    with ``paths`` (the repository and its collection path) importable."""
    upgrade(root, dist, release, containerd_major)
    real = under(root, "/usr/local/bin/" + dist)
    os.makedirs(os.path.dirname(real), exist_ok=True)
    with open(real, "w") as handle:
        handle.write("#!/bin/sh\n# TEST STAND-IN for %s's agent (tests/support/rancher_agent_standin.py), NOT %s\n"
                     "PYTHONPATH=%s exec %s -m tests.support.rancher_agent_standin %s\n"
                     % (dist, dist, ":".join(paths), python, dist))
    os.chmod(real, 0o755)


def starts(root, dist):
    """How often the agent was started through its program (its unit restarted)."""
    path = under(root, "/.standin-%s-agent.log" % dist)
    if not os.path.exists(path):
        return 0
    with open(path) as handle:
        return len(handle.read().splitlines())


def _base(root, dist, version, release, systemd_cgroup):
    d = DISTRIBUTIONS[dist]
    plugin = "'io.containerd.cri.v1.runtime'" if version == 3 else '"io.containerd.grpc.v1.cri"'
    images = "'io.containerd.cri.v1.images'" if version == 3 else '"io.containerd.grpc.v1.cri"'
    default = None
    if os.path.exists(under(root, d.config_yaml)):
        with open(under(root, d.config_yaml)) as handle:
            default = yaml_scalar(handle.read(), "default-runtime")
    lines = ["# File generated by %s. DO NOT EDIT. Use config%s.toml.tmpl instead." % (dist, "-v3" if version == 3
                                                                                       else ""),
             "version = %d" % version, "",
             "[plugins.%s]" % images,
             '  sandbox_image = "rancher/mirrored-pause:3.%d"' % (6 + release) if version == 2 else
             "[plugins.%s.pinned_images]\n  sandbox = \"rancher/mirrored-pause:3.%d\"" % (images, 6 + release)]
    if version == 3:
        lines += ["", "[plugins.%s]" % plugin]
    lines += ["  [plugins.%s.cni]" % plugin,
              '    bin_dir = "/var/lib/rancher/%s/data/release-%d/bin"' % (dist, release),
              '    conf_dir = "/var/lib/rancher/%s/agent/etc/cni/net.d"' % dist]
    if default:
        lines += ["", "[plugins.%s.containerd]" % plugin, '  default_runtime_name = "%s"' % default]
    runtimes = [("runc", None)]
    for name, binary in DETECTED_RUNTIMES:
        for directory in AGENT_PATH:
            path = directory + "/" + binary
            if os.access(under(root, path), os.X_OK):
                runtimes.append((name, path))
                break
    for name, path in runtimes:
        lines += ["", "[plugins.%s.containerd.runtimes.'%s']" % (plugin, name),
                  '  runtime_type = "io.containerd.runc.v2"',
                  "[plugins.%s.containerd.runtimes.'%s'.options]" % (plugin, name)]
        if path:
            lines.append('  BinaryName = "%s"' % path)
        lines.append("  SystemdCgroup = %s" % ("true" if systemd_cgroup else "false"))
    return "\n".join(lines) + "\n"


def start(root, dist, containerd_major=1, release=1, systemd_cgroup=True):
    """The agent starts: it writes config.toml as the distribution does and returns its text."""
    d = DISTRIBUTIONS[dist]
    names = (["config-v3.toml.tmpl"] if containerd_major >= 2 else []) + ["config.toml.tmpl"]
    template, version = None, 3 if containerd_major >= 2 else 2
    for name in names:
        path = under(root, d.containerd_dir + "/" + name)
        if os.path.exists(path):
            with open(path) as handle:
                template = handle.read()
            version = 3 if name == "config-v3.toml.tmpl" else 2
            break
    base = _base(root, dist, version, release, systemd_cgroup)
    if template is None:
        text = base
    else:
        text = template.replace(BASE_ACTION, base).replace("{{ .SystemdCgroup }}",
                                                           "true" if systemd_cgroup else "false")
        left = re.search(r"\{\{.*?\}\}", text)
        if left:
            raise ValueError("the stand-in renders only the base and .SystemdCgroup, not %s" % left.group(0))
    with open(under(root, d.generated), "w") as handle:
        handle.write(text)
    return text


def main(argv):
    dist = argv[1]
    root = os.environ["GPUOPS_SIMULATED_ROOT"]
    with open(_state_path(root, dist)) as handle:
        state = json.load(handle)
    start(root, dist, containerd_major=state["containerd_major"], release=state["release"])
    with open(under(root, "/.standin-%s-agent.log" % dist), "a") as handle:
        handle.write("started release %(release)d containerd %(containerd_major)d\n" % state)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
