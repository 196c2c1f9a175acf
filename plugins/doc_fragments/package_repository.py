# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Doc fragment: the package manager and the package repository as it will be configured, which driver_plan and
package_plan ask with the node's apt or dnf from a scratch directory (plugins/module_utils/node/_package_repo.py,
REPOSITORY_OPTIONS). A module that takes more of the repository (package_plan: where its file goes, when to ask it)
documents its own O(repository)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  manager:
    description: V(apt) (Debian, Ubuntu) or V(dnf) (RHEL and its rebuilds, Fedora, Amazon Linux).
    type: str
    choices: [apt, dnf]
    required: true
  repository:
    description:
      - The repository the packages come from, as it will be configured. It is asked with the node's apt or dnf from
        a scratch directory, with a scratch copy of its key, before anything on the node is configured.
    type: dict
    suboptions:
      sources:
        description: The text of the apt C(.list) file or the dnf C(.repo) file.
        type: str
        required: true
      key:
        description: The repository's signing key, ASCII-armored.
        type: str
        required: true
      key_path:
        description:
          - Where the key will be written; where O(repository.sources) names this path (C(signed-by=),
            C(gpgkey=file://)), the scratch directory's copy of the key takes its place.
        type: path
        required: true
  package_files:
    description: Package files on the node (air-gapped installs), instead of a repository.
    type: list
    elements: path
    default: []
"""
