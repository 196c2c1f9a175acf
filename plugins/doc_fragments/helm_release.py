# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Doc fragment: the helm release options that every chart module shares (plugins/module_utils/kube/_helm_release.py,
release_argument_spec)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  create_namespace:
    description: Create the namespace when missing (C(--create-namespace)).
    type: bool
    default: true
  wait:
    description: Wait for the rollout (C(helm --wait)).
    type: bool
    default: false
  timeout:
    description: Helm timeout (Go duration) with O(wait).
    type: str
    default: 5m0s
  rollback_on_failure:
    description: Roll back to the previous revision when an upgrade fails.
    type: bool
    default: true
  pending_timeout:
    description:
      - Seconds after which a release still C(pending-*) is taken as abandoned by whoever started the operation
        and recovered. A pending release that this controller's own dead run left is recovered at once.
      - From 0 to 86400 (one day).
    type: int
    default: 900
  record_dir:
    description:
      - Directory on the host running this module (the controller when delegated to localhost) where the helm
        operation in progress is recorded, held under a lock while helm runs, so a later run can tell that a
        pending release was left by a run that died. Keep it on persistent storage in execution environments.
    type: path
    default: ~/.ansible/gpuops
  render_check:
    description: Render the chart with C(helm template) before any change (catches the chart's own checks).
    type: bool
    default: true
  binary_path:
    description: Path of the helm binary (default - C(helm) on PATH).
    type: path
"""
