# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes writes that are read, planned and written again when another writer came first (PRIVATE to
gpuops.nvidia).

A write that carries the resourceVersion it read (a PUT, a merge patch with ``metadata.resourceVersion``, a delete
with preconditions), or a create of a name that exists meanwhile, is answered 409 Conflict by the API server when
someone else wrote in between (optimistic concurrency). The answer is always the same: read again, plan again on what
is there now, write again, a bounded number of times. ``retry_on_conflict`` is that loop, once for the collection
(kubernetes.core keeps its writes and their retry in one place too, plugins/module_utils/k8s/service.py); its callers
pass their own read -> plan -> write as one function and keep only what differs: how many tries, what a failed try
leaves to undo, and what the last conflict means (an error of theirs, or, for a Lease's compare-and-swap, a normal
answer: another run took it). The 409 itself is mapped to a KubeError with ``status`` 409 by _kube.api_error.

``KubeRun`` is the base of every module that talks to the API: a ``_module_run.ModuleRun`` whose ``kube`` is the
client built once from the authentication options (the secrets of a kubeconfig given as content masked before
anything is read or reported), whose KubeError is a failure with the API's status and reason, and whose read -> plan
-> apply is tried again on a conflict (``conflict_tries``), so that no module writes that loop or overrides
``converge`` for it. Target-side code: Python 3.9+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube import KubeError
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import ModuleRun

CONFLICT = 409


def retry_on_conflict(attempt, tries=3, between=None, exhausted=None):
    """Call ``attempt()`` (one read -> plan -> write) and return what it returns; where it raises the API's 409
    Conflict, call it again, ``tries`` calls in all. Any other error passes through at once.

    ``between(conflict)``: called after each conflict that another try follows (to undo what the failed try reported,
    or to wait a little). ``exhausted(conflict)``: called with the last conflict when every try ended in one; what it
    returns is the answer, what it raises is raised. Without it the last conflict (the KubeError) is raised."""
    if tries < 1:
        raise ValueError("tries must be 1 or more, got %r" % (tries,))
    for dummy in range(tries - 1):
        try:
            return attempt()
        except KubeError as exc:
            if exc.status != CONFLICT:
                raise
            if between is not None:
                between(exc)
    try:
        return attempt()
    except KubeError as exc:
        if exc.status != CONFLICT or exhausted is None:
            raise
        return exhausted(exc)


def write_as_planned(planned, replan, write, tries=3):
    """Write ``planned`` (what a module planned on the object as it read it) with ``write(plan)``; where the API answers
    409 Conflict, ``replan()`` (read the object again and plan on what is there now) and write that, ``tries`` writes
    in all (``retry_on_conflict``). Returns what the last ``write`` returned."""
    first = [planned]
    return retry_on_conflict(lambda: write(first.pop() if first else replan()), tries=tries)


class KubeRun(ModuleRun):
    """A module run against the Kubernetes API (``_module_run.ModuleRun`` with the client and the conflict retry).

    ``conflict_tries``: how many read -> plan -> apply attempts a run makes when a write carrying the resourceVersion
    it read is answered 409 Conflict (1: none again; the conflict fails the run). Between two attempts ``forget`` is
    called with the conflict (drop what the failed attempt reported, or pause); when every attempt met one,
    ``exhausted`` gives the answer or raises (default: the last conflict is raised). ``kube``: the client, built on
    first use. The kubernetes library is required before ``validate`` (a KubeError naming what to install)."""

    errors = (KubeError,)
    conflict_tries = 1
    _client = None

    @property
    def kube(self):
        if self._client is None:
            self._client = _kube.Kube.from_params(self.params)
        return self._client

    @kube.setter
    def kube(self, client):
        self._client = client

    def forget(self, conflict):
        """Called between two attempts with the conflict that ended the first: what it reported is not the run's."""

    exhausted = None

    def run(self):
        _kube.mask_kubeconfig_secrets(self.module)
        _kube.require_client()
        return super(KubeRun, self).run()

    def retry(self, attempt):
        return retry_on_conflict(attempt, tries=self.conflict_tries, between=self.forget, exhausted=self.exhausted)
