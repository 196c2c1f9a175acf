# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""PRIVATE doc fragment: Kubernetes authentication options (same names and env as kubernetes.core)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file, or the kubeconfig itself as a dict or as YAML text.
      - Secrets inside given content (tokens, passwords, client keys) are masked in all output.
      - Falls back to E(K8S_AUTH_KUBECONFIG), then (when no other option says how to connect) the in-cluster
        service account, then E(KUBECONFIG) / C(~/.kube/config), as kubernetes.core does.
    type: raw
  context:
    description: Kubeconfig context to use. Falls back to E(K8S_AUTH_CONTEXT).
    type: str
  host:
    description:
      - API server URL. With O(api_key) (or a client certificate) no kubeconfig is read.
      - Falls back to E(K8S_AUTH_HOST), which AWX's "OpenShift or Kubernetes API Bearer Token" credential sets.
    type: str
  api_key:
    description: Bearer token. Never logged. Falls back to E(K8S_AUTH_API_KEY) (set by the AWX credential).
    type: str
  validate_certs:
    description: Verify the API server's TLS certificate. Falls back to E(K8S_AUTH_VERIFY_SSL).
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description: CA bundle for the API server. Falls back to E(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description: Client certificate file. Falls back to E(K8S_AUTH_CERT_FILE).
    type: path
    aliases: [cert_file]
  client_key:
    description: Client key file. Falls back to E(K8S_AUTH_KEY_FILE).
    type: path
    aliases: [key_file]
  in_cluster:
    description:
      - V(true) uses the pod's service account only. Left unset, the in-cluster account is tried when no other
        option says how to connect.
    type: bool
  request_timeout:
    description: Seconds to wait for each API request, above 0 and at most 3600.
    type: float
    default: 30.0
requirements:
  - kubernetes >= 24.2.0 (Python library, where the module runs)
"""
