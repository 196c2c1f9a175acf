#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: cluster_lease
short_description: A cluster-wide lock on a Kubernetes Lease, for work that must run once per cluster
version_added: 0.1.0
description:
  - Takes, releases or reads a C(coordination.k8s.io/v1) Lease used as a lock, so that several ansible-playbook runs
    at once - the job slices of an AWX job template with C(job_slice_count > 1), which run on different execution
    nodes - do the once-per-cluster work (the device plugin release, the RuntimeClass) one at a time. A file lock
    cannot do this, the runs being on different machines.
  - O(state=acquired) takes the lease with optimistic concurrency (every write carries the C(resourceVersion) it
    read; of two runs that saw the same free lease one gets 409 Conflict and looks again). While another run holds
    it, the module waits up to O(wait_timeout) seconds, then fails naming the holder, since when it holds it and when
    the lease expires. A lease whose holder stopped renewing is taken over once it expired (see O(lease_duration)).
  - After taking it, the module starts a renewer process (its own session) that renews the lease every third of
    O(lease_duration) while the run that took it is alive - its ansible-playbook process, or any process carrying
    O(run_marker) in its environment (the run's later tasks and the helm they run, which finish their module even
    when ansible-playbook was killed). When the run is gone (killed, cancelled, its controller lost), the renewer
    stops and the lease expires, so the next run takes over.
  - O(state=released) clears the holder (the renewer then stops) and, with O(converged), records what the holder
    converged, which the next O(state=acquired) returns, so another slice of the same run can find the work done.
  - With O(run_id) and O(run_slices) greater than 1, O(state=acquired) first records this slice's arrival on the
    lease and waits (up to O(arrival_timeout)) until O(run_slices) slices of that run have arrived, so that the
    first holder acts on what every slice declared.
  - Check mode takes nothing and waits for nothing. It reads the lease, says who holds it, and sends the write that
    acquiring or releasing would make as a server-side dry run (so RBAC and validation are checked).
  - The lock is transient. Acquiring reports C(changed) when it took the lease, releasing when it released it;
    site.yml does not count either as a change of the cluster.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
options:
  name:
    description: Name of the Lease (a DNS subdomain).
    type: str
    default: gpuops-nvidia-cluster
  namespace:
    description: Namespace of the Lease.
    type: str
    required: true
  state:
    description:
      - C(acquired) takes the lease (waiting while another run holds it), C(released) gives it back if this run
        holds it, C(query) only reads it.
    type: str
    choices: [acquired, released, query]
    default: acquired
  holder:
    description:
      - Who takes the lease, for people reading it (for example C(AWX job 4711)). The module adds the controller's
        hostname, the PID of the owning ansible-playbook and a short token to make C(spec.holderIdentity) unique
        to this run.
    type: str
    default: ansible-playbook
  lease_duration:
    description:
      - C(spec.leaseDurationSeconds), 3 to 86400 (one day). Another run takes the lease over when its record has not changed
        for this long (measured on that run's own clock from when it first saw the record), or when its renewTime
        is more than twice this long in the past.
      - The renewer renews every third of it, so the work may take much longer than the duration.
    type: int
    default: 60
  wait_timeout:
    description: Seconds to wait while another run holds the lease before failing (0 - do not wait; at most 86400).
    type: int
    default: 900
  renew:
    description: Start the renewer process after taking the lease.
    type: bool
    default: true
  owner_pid:
    description:
      - The process whose life the lease follows. Default - the ansible-playbook process this module runs under
        (found through C(/proc)), else the module's parent process.
    type: int
  create_namespace:
    description: Create O(namespace) when it does not exist.
    type: bool
    default: true
  run_marker:
    description:
      - The lease is also kept while any process whose environment holds C(GPUOPS_CLUSTER_RUN=<run_marker>) lives.
        Set that variable (a value unique to the run) on the tasks that work under the lock - site.yml does - so
        that a module still running (helm upgrading the release) keeps the lease after its ansible-playbook was
        killed; ansible-core runs each task in a worker of its own session, which finishes its module first.
      - Falls back to E(GPUOPS_CLUSTER_RUN) in this task's environment.
    type: str
  run_id:
    description:
      - An identifier shared by the job slices of one run (site.yml uses AWX's C(awx_workflow_job_id), which every
        slice of a sliced job gets). Used by the arrival barrier and recorded with O(converged).
    type: str
    default: ""
  run_slices:
    description: How many slices the run has (1 to 1000); greater than 1 enables the arrival barrier (needs O(run_id)).
    type: int
    default: 1
  slice_id:
    description: This slice's name in the arrivals (default - the holder identity).
    type: str
    default: ""
  arrival_timeout:
    description: Seconds to wait for the other slices of the run to arrive (at most 86400); then the module goes on
      without them.
    type: int
    default: 120
  converged:
    description:
      - With O(state=released) - what this holder converged (for example a digest of the desired cluster state),
        recorded with O(run_id), the holder and the time (a record of the same digest and run is kept as it was, since
        it names the holder that did the work). Releasing without it removes an earlier record, so a failed holder
        never leaves a record that says the work is done.
    type: str
attributes:
  check_mode:
    support: full
    details: Reads the lease and dry-runs the write; never waits, never holds the lease.
  diff_mode:
    support: full
  idempotent:
    support: full
    details: Acquiring a lease this run already holds, or releasing one it does not hold, changes nothing.
notes:
  - RBAC - C(get), C(create) and C(update) on C(leases) (API group C(coordination.k8s.io)) in O(namespace), and
    C(get), C(create) on C(namespaces) with O(create_namespace=true).
  - The owner is found through Linux's C(/proc). Without it the lease follows the owner PID alone.
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Once-per-cluster work, one job slice at a time
  block:
    - name: Take the cluster lock
      gpuops.nvidia.cluster_lease:
        namespace: nvidia-device-plugin
        holder: "AWX job {{ awx_job_id | default('local') }}"
        run_id: "{{ awx_workflow_job_id | default('') }}"
      delegate_to: localhost
      run_once: true
      register: lock

    - name: The work
      ansible.builtin.debug:
        msg: "{{ lock.lease.holder }} holds the lock"
      run_once: true
  always:
    - name: Release the cluster lock
      gpuops.nvidia.cluster_lease:
        namespace: nvidia-device-plugin
        state: released
      delegate_to: localhost
      run_once: true
      when: lock.acquired | default(false)

- name: Who holds the lock?
  gpuops.nvidia.cluster_lease:
    namespace: nvidia-device-plugin
    state: query
  delegate_to: localhost
"""

RETURN = r"""
acquired:
  description: Whether this run holds the lease after the task (never in check mode).
  returned: always
  type: bool
how:
  description:
    - How the lease was taken - C(created) (no Lease yet), C(free) (released before), C(taken) (expired, from a run
      that stopped renewing), C(held) (this run already held it), C(would wait) (check mode, held by another run).
  returned: state=acquired
  type: str
identity:
  description: This run's holder identity.
  returned: always
  type: str
  sample: "AWX job 4711 on awx-ee-5f9c pid 31 #a1b2c3d4"
previous_holder:
  description: The holder whose expired lease this run took over, or who holds it (check mode).
  returned: state=acquired
  type: str
waited:
  description: Seconds spent waiting for the lease.
  returned: state=acquired
  type: float
lease:
  description: The lease after the task (holder, lease_duration, acquire_time, renew_time, transitions).
  returned: always
  type: dict
converged:
  description: What the last holder recorded as converged (digest, run, by, at), or an empty dict.
  returned: always
  type: dict
arrivals:
  description: The arrival barrier - run, slices that arrived, expected, complete, waited.
  returned: when run_slices is greater than 1
  type: dict
renewer_pid:
  description: PID of the renewer process.
  returned: when the lease was taken and renew is true
  type: int
msg:
  description: What happened, in words.
  returned: always
  type: str
"""

import os
import time

from ansible.module_utils.basic import env_fallback

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_names
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _lease
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._bounds import seconds_error
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube import KubeError
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import ModuleRun, run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import WAITS

# More slices than this is a typo: a slice runs ansible-playbook on an execution node of its own.
MAX_SLICES = 1000
# Linux's largest pid_max (2**22, /proc/sys/kernel/pid_max): no process ID is larger.
MAX_PID = 4194304


def _public(lease):
    if not lease:
        return {}
    return dict((k, lease[k]) for k in ("holder", "lease_duration", "acquire_time", "renew_time", "transitions"))


def _diffable(lease):
    return dict((k, v) for k, v in _public(lease).items() if k in ("holder", "lease_duration", "transitions"))


def validate(p):
    errors = (_kube_names.dns_subdomain_errors(p["name"], "name")
              + _kube_names.dns_label_errors(p["namespace"], "namespace"))
    if not p["holder"] or len(p["holder"]) > 200 or "\n" in p["holder"]:
        errors.append("holder must be one line of 1 to 200 characters, got %r" % (p["holder"],))
    error = seconds_error("lease_duration", p["lease_duration"], minimum=3)
    if error:
        errors.append(error + " (the renewer renews every third of it)")
    for key in ("wait_timeout", "arrival_timeout"):
        error = seconds_error(key, p[key])
        if error:
            errors.append(error)
    if not 1 <= p["run_slices"] <= MAX_SLICES:
        errors.append("run_slices must be from 1 to %d, got %d" % (MAX_SLICES, p["run_slices"]))
    elif p["run_slices"] > 1 and not p["run_id"]:
        errors.append("run_slices=%d needs run_id, the identifier the slices of one run share" % p["run_slices"])
    if p["converged"] is not None and p["state"] != "released":
        errors.append("converged is recorded on release: use it with state=released, not state=%s" % p["state"])
    if p["owner_pid"] is not None and not 1 <= p["owner_pid"] <= MAX_PID:
        errors.append("owner_pid must be a process ID (1 to %d), got %d" % (MAX_PID, p["owner_pid"]))
    return errors


class ClusterLeaseRun(ModuleRun):
    """validate -> converge: the Lease's own compare-and-swap (_lease: read and write are one step; in check mode
    its dry run) for state=acquired, released or query."""

    argument_spec = dict(
        name=dict(type="str", default="gpuops-nvidia-cluster"),
        namespace=dict(type="str", required=True),
        state=dict(type="str", default="acquired", choices=["acquired", "released", "query"]),
        holder=dict(type="str", default="ansible-playbook"),
        lease_duration=dict(type="int", default=60),
        wait_timeout=dict(type="int", default=WAITS["lease_free"].timeout),
        renew=dict(type="bool", default=True),
        owner_pid=dict(type="int"),
        create_namespace=dict(type="bool", default=True),
        run_marker=dict(type="str", no_log=False, fallback=(env_fallback, [_lease.MARKER_ENV])),
        run_id=dict(type="str", default=""),
        run_slices=dict(type="int", default=1),
        slice_id=dict(type="str", default=""),
        arrival_timeout=dict(type="int", default=WAITS["lease_arrivals"].timeout),
        converged=dict(type="str"),
    )
    argument_spec.update(_kube.AUTH_ARG_SPEC)
    errors = (_lease.LeaseBusy, _lease.LeaseError, KubeError)

    def validate(self):
        _kube.require_client()
        return validate(self.params)

    def converge(self):
        module, p = self.module, self.params
        _kube.mask_kubeconfig_secrets(module)
        check = module.check_mode
        result = self.result
        owner = _lease.owner_info(p["owner_pid"] or _lease.find_owner() or os.getppid())
        identity = _lease.identity_for(p["holder"], owner)
        result.update(acquired=False, identity=identity)
        kube = _kube.Kube.from_params(p)
        lease = _lease.ClusterLease(kube, p["namespace"], p["name"])

        if p["state"] == "query":
            current = _lease.view(lease.read())
            result.update(lease=_public(current), converged=(current or {}).get("converged") or {},
                          msg="%s is %s" % (lease.what, _lease.describe(current)))
            return result

        if p["state"] == "released":
            note = None
            if p["converged"]:
                note = {"digest": p["converged"], "run": p["run_id"], "by": identity,
                        "at": _lease.format_time(time.time())}
            res = lease.release(identity, note, check=check)
            result.update(changed=res["changed"], lease=_public(res["lease"]),
                          converged=(res["lease"] or {}).get("converged") or {})
            if res["released"]:
                result["msg"] = "%s released%s" % (lease.what, " (check mode: dry run)" if check else "")
            elif res["holder"]:
                result["msg"] = ("%s is held by %r, not by this run (%s): this run's lease expired and another run "
                                 "took it over, or this run never held it. Nothing was released."
                                 % (lease.what, res["holder"], identity))
                module.warn(result["msg"])
            else:
                result["msg"] = "%s is not held: nothing to release" % lease.what
            if res["changed"]:
                self.set_diff(_diffable(res["before"]), _diffable(res["lease"]))
            return result

        # state=acquired
        namespace = _kube.ensure_namespace(kube, p["namespace"], dry_run=check, create=p["create_namespace"])
        if namespace == "would be created":
            result.update(changed=True, how="created", previous_holder="", waited=0, lease={}, converged={},
                          msg="namespace %s and %s would be created and taken (check mode)"
                          % (p["namespace"], lease.what))
            self.set_diff({}, {"holder": identity, "lease_duration": p["lease_duration"], "transitions": 0})
            return result
        if p["run_slices"] > 1 and not check:
            result["arrivals"] = lease.arrive(p["run_id"], p["slice_id"] or identity, p["run_slices"],
                                              p["arrival_timeout"], p["lease_duration"])
            if not result["arrivals"]["complete"]:
                module.warn("only %d of %d slices of run %s arrived within %d s (arrival_timeout); going on. A slice "
                            "that arrives later adds what its nodes declare when it holds the lock."
                            % (len(result["arrivals"]["slices"]), p["run_slices"], p["run_id"],
                               p["arrival_timeout"]))
        res = lease.acquire(identity, p["lease_duration"], p["wait_timeout"], check=check)
        current = res["lease"]
        result.update(changed=res["changed"], acquired=not check, how=res["how"], previous_holder=res["previous"],
                      waited=res["waited"], lease=_public(current),
                      converged=(current or {}).get("converged") or {})
        if check:
            result["msg"] = ("check mode: %s is %s; a real run would %s" % (
                lease.what, _lease.describe(res["before"]),
                "wait for it" if res["how"] == "would wait" else "take it"))
        else:
            if p["renew"] and res["how"] != "held":
                result["renewer_pid"] = _lease.spawn_renewer(kube, p["namespace"], p["name"], identity,
                                                             p["lease_duration"], p["lease_duration"] / 3.0, owner,
                                                             p["run_marker"])
            taken = " from %r, whose lease had expired" % res["previous"] if res["how"] == "taken" else ""
            result["msg"] = "%s taken%s after waiting %.1f s; this run holds it as %r" % (
                lease.what, taken, res["waited"], identity)
        if res["changed"]:
            after = _diffable(current) if not check or res["how"] != "would wait" else dict(
                _diffable(res["before"]), holder=identity)
            self.set_diff(_diffable(res["before"]), after)
        return result


def main():
    run_module(ClusterLeaseRun)


if __name__ == "__main__":
    main()
