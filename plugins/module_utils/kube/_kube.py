# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes API access for gpuops.nvidia modules (PRIVATE: do not use from other collections).

Client construction follows kubernetes.core (plugins/module_utils/k8s/client.py): the same parameters, the same
``K8S_AUTH_*`` environment fallbacks that AWX's "OpenShift or Kubernetes API Bearer Token" credential sets, and
the same order: host + api_key (or client cert) need nothing else; else kubeconfig/context; else in-cluster config,
then the default kubeconfig. One difference: the configuration is built into a private ``Configuration`` object
instead of the client's process-wide default, so two clusters in one process do not leak into each other.

Two paths build it (issue 49). The light one (_kubeconfig) reads the common configurations itself (a kubeconfig whose
user has a token, tokenFile, client certificate and key or a username and password; the in-cluster service account;
host and api_key) into the same settings and talks to the API server over urllib3 as the client does, without
importing the ``kubernetes`` package, whose import costs about 0.15 to 0.2 CPU s per module process. Everything else
(exec credential plugins, auth providers, any kubeconfig it does not recognise, including every malformed one) is
built by the kubernetes client as before, so errors keep their wording. That hand-written kubeconfig reading is a
piece a library could replace (see _kubeconfig). The modules still require the kubernetes client to be installed,
as kubernetes.core does (its absence fails the module before anything is read): it is the fallback, and a user
whose kubeconfig changes to a credential plugin must not find the module broken then.

Also here: API errors turned into messages that say what to do (KubeError), the REST paths of the objects the
modules touch, and the two small writes several modules share (ensure_namespace, write_configmap). Name and label
syntax lives in _kube_names, finding this host's Node in _kube_nodes; both import this file, never the reverse.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import os
import socket
from urllib.parse import quote, urlencode, urlsplit

try:
    from urllib3.exceptions import HTTPError as _Urllib3Error
except ImportError:  # pragma: no cover
    _Urllib3Error = OSError

from ansible.module_utils.basic import env_fallback

from ansible_collections.gpuops.nvidia.plugins.module_utils.common._input_file import (
    InputFileError, check_regular_file, load_yaml, read_text)
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kubeconfig
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kubeconfig import ApiError

# The modules require the kubernetes client (the doc fragment's requirements, as kubernetes.core does) but import it
# only where the light path (_kubeconfig) does not read the configuration: whether it is installed is asked of the
# import system without importing it (issue 49). A client that is installed but does not import is said when it is
# needed (_client_library).
try:
    from importlib.util import find_spec as _find_spec
    HAS_KUBERNETES = _find_spec("kubernetes") is not None
except (ImportError, ValueError):  # pragma: no cover
    HAS_KUBERNETES = False
KUBERNETES_IMPORT_ERROR = None if HAS_KUBERNETES else ImportError("No module named 'kubernetes'")

# Same names, types and env fallbacks as kubernetes.core's k8s_auth_options / helm_args_common.
AUTH_ARG_SPEC = dict(
    kubeconfig=dict(type="raw", fallback=(env_fallback, ["K8S_AUTH_KUBECONFIG"])),
    context=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_CONTEXT"])),
    host=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_HOST"])),
    api_key=dict(type="str", no_log=True, fallback=(env_fallback, ["K8S_AUTH_API_KEY"])),
    validate_certs=dict(type="bool", aliases=["verify_ssl"], fallback=(env_fallback, ["K8S_AUTH_VERIFY_SSL"])),
    ca_cert=dict(type="path", aliases=["ssl_ca_cert"], fallback=(env_fallback, ["K8S_AUTH_SSL_CA_CERT"])),
    client_cert=dict(type="path", aliases=["cert_file"], fallback=(env_fallback, ["K8S_AUTH_CERT_FILE"])),
    client_key=dict(type="path", aliases=["key_file"], no_log=False,
                    fallback=(env_fallback, ["K8S_AUTH_KEY_FILE"])),
    in_cluster=dict(type="bool", default=None),
    request_timeout=dict(type="float", default=30.0),
)

# parameter -> attribute of kubernetes.client.Configuration (kubernetes.core's AUTH_ARG_MAP)
_CONFIG_ATTR = dict(host="host", api_key="api_key", validate_certs="verify_ssl", ca_cert="ssl_ca_cert",
                    client_cert="cert_file", client_key="key_file")

DEFAULT_KUBECONFIG = "~/.kube/config"


class KubeError(Exception):
    """A Kubernetes problem, already worded for the user; ``fields``: more keys its failure reports (_module_run's
    ``failure`` adds them)."""

    def __init__(self, msg, status=None, reason=None, body=None, **fields):
        super(KubeError, self).__init__(msg)
        self.msg = msg
        self.status = status
        self.reason = reason
        self.body = body
        self.fields = fields


def missing_library_message():
    from ansible.module_utils.basic import missing_required_lib
    return missing_required_lib("kubernetes")


def _client_library():
    """The kubernetes package, imported (the fallback path); a KubeError naming what to install when it does not."""
    try:
        import kubernetes
        import kubernetes.client.rest
        import kubernetes.config
    except ImportError as exc:
        raise KubeError(missing_library_message(), exception=str(exc))
    return kubernetes


def require_client():
    """A KubeError naming what to install (and the import's error as ``exception``) when the kubernetes client does
    not import, before any input is read or anything changed. Called from a ModuleRun's ``validate``: every module
    that calls it lists KubeError in its ``errors`` (not _module_run's Failure: this file imports no other layer)."""
    if not HAS_KUBERNETES:
        raise KubeError(missing_library_message(), exception=str(KUBERNETES_IMPORT_ERROR))


# ---- client construction ----------------------------------------------------------------------------------------
def _kubeconfig_from_param(kubeconfig):
    """A kubeconfig parameter is a path, a dict, or YAML/JSON text (as AWX custom credentials may inject)."""
    if kubeconfig is None:
        return None, None
    if isinstance(kubeconfig, dict):
        return None, kubeconfig
    if isinstance(kubeconfig, str):
        text = kubeconfig.strip()
        if "\n" in text or text.startswith("{"):
            try:
                import yaml
                data = yaml.safe_load(text)
            except Exception:
                data = None
            if isinstance(data, dict) and ("clusters" in data or "current-context" in data):
                return None, data
        return os.path.expanduser(kubeconfig), None
    raise KubeError("kubeconfig must be a path, a dict or kubeconfig text, got %s" % type(kubeconfig).__name__)


def kubeconfig_secrets(config):
    """Secret values inside a kubeconfig dict, to add to module.no_log_values (as kubernetes.core does)."""
    def mapping(value):
        return value if isinstance(value, dict) else {}
    out = set()
    users = mapping(config).get("users")
    for user in users if isinstance(users, list) else []:     # a kubeconfig of another shape: nothing to mask
        data = mapping(mapping(user).get("user"))
        for key in ("token", "password", "client-key-data", "client-certificate-data"):
            if data.get(key):
                out.add(str(data[key]))
        auth = mapping(mapping(data.get("auth-provider")).get("config"))
        for key in ("access-token", "id-token", "refresh-token", "client-secret"):
            if auth.get(key):
                out.add(str(auth[key]))
    return out


def mask_kubeconfig_secrets(module):
    """Add the secrets of a kubeconfig given as content (dict or text) to module.no_log_values."""
    try:
        content = _kubeconfig_from_param(module.params.get("kubeconfig"))[1]
    except KubeError:
        return
    if content:
        module.no_log_values.update(kubeconfig_secrets(content))


def _host_error(host):
    """Why ``host`` is not the URL of an API server (http or https), or None."""
    try:
        parts = urlsplit(host)
        parts.port                                  # raises ValueError for a port that is not a number
    except ValueError as exc:
        return "is not a URL (%s); give the API server's address, e.g. https://10.0.0.1:6443" % exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "is not an http(s) URL with a host name; give the API server's address, e.g. https://10.0.0.1:6443"
    return None


def auth_param_errors(params):
    """What is wrong with the authentication parameters: a NUL cannot be passed to helm's environment or to a file
    name, and a line break in host, api_key or context would end an HTTP header or a variable; the files they name
    (a kubeconfig, certificates and keys) must be regular files of bounded size, a kubeconfig UTF-8 YAML of bounded
    depth (the client reads them whole and would block on a FIFO)."""
    errors = []
    for name in ("host", "api_key", "context", "kubeconfig", "ca_cert", "client_cert", "client_key"):
        value = params.get(name)
        if not isinstance(value, str):
            continue
        shown = "(hidden)" if name == "api_key" else repr(value[:80])
        host_problem = _host_error(value) if name == "host" and value else None
        if "\x00" in value:
            errors.append("%s %s contains a NUL character" % (name, shown))
        elif name in ("host", "api_key", "context") and ("\n" in value or "\r" in value):
            errors.append("%s %s contains a line break; it goes into an HTTP header or an environment variable "
                          "as one line" % (name, shown))
        elif host_problem:
            errors.append("host %s %s" % (shown, host_problem))
        elif name == "api_key" and any(not 0x20 < ord(char) < 0x7f for char in value):
            errors.append("api_key (hidden) holds characters other than printable ASCII without spaces; a bearer "
                          "token is printable ASCII (RFC 6750) and goes into an HTTP header")
        elif name == "kubeconfig":
            path = _kubeconfig_from_param(value)[0]
            if path and os.path.lexists(path):      # one that does not exist: said where it would be read
                errors.extend(kubeconfig_file_errors(path, "kubeconfig"))
        elif name in ("ca_cert", "client_cert", "client_key") and os.path.lexists(value):
            try:
                check_regular_file(value, name)
            except InputFileError as exc:
                errors.append(str(exc))
    return errors


def kubeconfig_file_errors(paths, option):
    """What is wrong with the kubeconfig file(s) ``paths`` (os.pathsep-separated, as in KUBECONFIG) that exist:
    each must be a regular UTF-8 file of at most 16 MiB holding YAML of bounded depth and size (_input_file)."""
    import yaml
    errors = []
    for path in paths.split(os.pathsep):
        if not path or not os.path.lexists(path):
            continue
        try:
            data = load_yaml(read_text(path, option), "%s %s" % (option, path), yaml)
        except InputFileError as exc:
            errors.append(str(exc))
            continue
        if data is not None and not isinstance(data, dict):
            errors.append("%s %s holds YAML that is not a mapping (a kubeconfig is a mapping with clusters, users and "
                          "contexts), got a %s" % (option, path, type(data).__name__))
    return errors


class _ClientLoaders(object):
    """The kubernetes client's Configuration and loaders (the fallback path), under the light path's names."""

    light = False

    def __init__(self):
        self.kubernetes = _client_library()
        self.ConfigException = self.kubernetes.config.ConfigException

    def configuration(self):
        return self.kubernetes.client.Configuration()

    def load_incluster(self, cfg):
        self.kubernetes.config.load_incluster_config(client_configuration=cfg)

    def load_dict(self, config, context, cfg):
        self.kubernetes.config.load_kube_config_from_dict(config, context=context, client_configuration=cfg,
                                                          persist_config=False)

    def load_files(self, path, context, cfg):
        self.kubernetes.config.load_kube_config(config_file=path, context=context, client_configuration=cfg,
                                                persist_config=False)


class _LightLoaders(object):
    """_kubeconfig's reading: no import of the kubernetes package; Unsupported where it does not read a config."""

    light = True
    ConfigException = _kubeconfig.ConfigException
    configuration = staticmethod(_kubeconfig.Configuration)
    load_incluster = staticmethod(_kubeconfig.load_incluster)
    load_dict = staticmethod(_kubeconfig.load_dict)
    load_files = staticmethod(_kubeconfig.load_files)


def build_configuration(params, environ=None, light=True):
    """Build the client configuration from module parameters (already env-fallback resolved): the light path's
    (_kubeconfig.Configuration) where it reads the configuration, else a kubernetes.client.Configuration, with the
    same settings either way (``gpuops_light`` says which). ``light=False``: the kubernetes client's only."""
    if not HAS_KUBERNETES:
        raise KubeError(missing_library_message())
    errors = auth_param_errors(params)
    if errors:
        raise KubeError("; ".join(errors))
    environ = os.environ if environ is None else environ
    if light:
        try:
            return _configuration(params, environ, _LightLoaders())
        except _kubeconfig.Unsupported:
            pass
    return _configuration(params, environ, _ClientLoaders())


def _configuration(params, environ, loaders):
    cfg = loaders.configuration()
    host = params.get("host")
    if host:
        host = host.rstrip("/")
    api_key = params.get("api_key")
    kube_path, kube_dict = _kubeconfig_from_param(params.get("kubeconfig"))
    context = params.get("context")
    has_direct = bool(host and (api_key or (params.get("client_cert") and params.get("client_key"))))
    in_cluster = params.get("in_cluster")
    source = None
    try:
        if in_cluster:
            loaders.load_incluster(cfg)
            source = "in-cluster service account"
        elif has_direct:
            source = "host and credentials"
        elif kube_dict is not None:
            source = "kubeconfig content"
            loaders.load_dict(kube_dict, context, cfg)
        elif kube_path or context:
            path = kube_path or environ.get("KUBECONFIG") or os.path.expanduser(DEFAULT_KUBECONFIG)
            if not os.path.exists(path.split(os.pathsep)[0]):
                raise KubeError("kubeconfig file %s does not exist: give kubeconfig (a path, or the file's content), "
                                "or host and api_key (K8S_AUTH_HOST / K8S_AUTH_API_KEY)" % path)
            source = "kubeconfig %s" % path
            if not kube_path:           # the parameter's file was checked with the parameters
                _raise_any(kubeconfig_file_errors(path, "kubeconfig (KUBECONFIG or %s)" % DEFAULT_KUBECONFIG))
            loaders.load_files(path, context, cfg)
        else:
            # kubernetes.core: in-cluster first, then the default kubeconfig.
            try:
                loaders.load_incluster(cfg)
                source = "in-cluster service account"
            except loaders.ConfigException:
                path = environ.get("KUBECONFIG") or os.path.expanduser(DEFAULT_KUBECONFIG)
                if not os.path.exists(path.split(os.pathsep)[0]) and not host:
                    raise KubeError(
                        "no Kubernetes credentials found: not in a pod (no service account), no kubeconfig at %s. "
                        "Give kubeconfig and context, or host and api_key (AWX: attach an 'OpenShift or Kubernetes "
                        "API Bearer Token' credential, which sets K8S_AUTH_HOST and K8S_AUTH_API_KEY)" % path)
                if os.path.exists(path.split(os.pathsep)[0]):
                    source = "kubeconfig %s" % path
                    _raise_any(kubeconfig_file_errors(path, "kubeconfig (KUBECONFIG or %s)" % DEFAULT_KUBECONFIG))
                    loaders.load_files(path, None, cfg)
                else:
                    source = "host"
    except (loaders.ConfigException, IOError, OSError, ValueError) as exc:
        raise KubeError("cannot load Kubernetes configuration from %s: %s" % (_source_option(source, in_cluster), exc))
    except (TypeError, AttributeError, KeyError) as exc:
        # the client walks the kubeconfig as kubectl writes it and breaks on another shape (a user that is a number)
        raise KubeError("cannot load Kubernetes configuration from %s: it is not shaped as a kubeconfig (clusters, "
                        "contexts and users: lists of mappings with name and cluster/context/user mappings): %s: %s"
                        % (_source_option(source, in_cluster), type(exc).__name__, exc))
    # Parameters override what the kubeconfig said (kubernetes.core does the same).
    if host:
        cfg.host = host
    if api_key:
        cfg.api_key = {"authorization": "Bearer %s" % api_key}
        cfg.api_key_prefix = {}
    if params.get("validate_certs") is not None:
        cfg.verify_ssl = params["validate_certs"]
    for name in ("ca_cert", "client_cert", "client_key"):
        if params.get(name):
            setattr(cfg, _CONFIG_ATTR[name], params[name])
    if not cfg.host:
        raise KubeError("no API server address: set host (K8S_AUTH_HOST) or a kubeconfig with a cluster server")
    cfg.gpuops_source = source
    cfg.gpuops_light = loaders.light
    return cfg


def _raise_any(errors):
    if errors:
        raise KubeError("; ".join(errors))


def _source_option(source, in_cluster):
    """The option a configuration that failed to load came from, for the message."""
    if in_cluster:
        return "in_cluster=true (a pod's service account; outside a pod there is none)"
    if source and source.startswith("kubeconfig"):
        return "%s (option kubeconfig, or KUBECONFIG)" % source
    if source:
        return source
    return "kubeconfig/context (option kubeconfig, context) or an in-cluster service account"


class Kube(object):
    """The API calls the modules make, as plain REST over urllib3: the light path's Configuration and Rest
    (_kubeconfig), or the kubernetes client's own HTTP layer, its Configuration (kubeconfig, in-cluster account, TLS,
    proxy, token refresh) and its RESTClientObject, for what the light path does not read. Objects are the JSON dicts
    the API server sends. The client's typed API classes are not used: with kubernetes 37 building CoreV1Api alone
    costs about 2.5 s of CPU per module run (pydantic models), more than everything else a module does; older
    clients import every model at once instead. Their models also refuse answers they cannot read."""

    def __init__(self, configuration, timeout=30.0):
        self.configuration = configuration
        self.timeout = timeout
        if isinstance(configuration, _kubeconfig.Configuration):
            self.rest = _kubeconfig.Rest(configuration)
        else:
            self.rest = _ClientRest(configuration)

    @classmethod
    def from_params(cls, params):
        timeout = request_timeout(params.get("request_timeout"))
        cfg = build_configuration(params)
        return cls(cfg, timeout=timeout)

    def request(self, what, method, path, query=None, body=None, content_type="application/json", text=False):
        """One API request; returns the decoded JSON answer (a dict), or with ``text`` the answer's text as it came
        (a pod's proxied /metrics), or raises KubeError worded with ``what``."""
        host = self.configuration.host
        url = host + path + ("?" + urlencode(query) if query else "")
        headers = {"Accept": "text/plain, */*" if text else "application/json", "User-Agent": "gpuops.nvidia"}
        if body is not None:
            headers["Content-Type"] = content_type
        for auth in (self.configuration.auth_settings() or {}).values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        try:
            answer = self.rest.request(method, url, headers=headers, body=body, _request_timeout=self.timeout)
            status, reason = answer.status, answer.reason
            data = answer.data if getattr(answer, "data", None) is not None else answer.read()
        except ApiError as exc:
            # clients before 35 raise for every answer that is not 2xx; all raise status 0 when no answer came
            status, reason, data = exc.status, exc.reason, exc.body
            if not status:
                raise KubeError(_UNREACHABLE % (host, what, reason, self.timeout))
        except (_Urllib3Error, socket.error, OSError) as exc:
            raise KubeError(_UNREACHABLE % (host, what, exc, self.timeout))
        except UnicodeError:
            # http.client sends headers as Latin-1: a token from a kubeconfig (api_key is checked before) that is not
            raise KubeError("cannot send a request to the Kubernetes API at %s while trying to %s: the credentials hold "
                            "characters that cannot go into an HTTP header (a bearer token is printable ASCII). Check "
                            "the kubeconfig's user token" % (host, what))
        if isinstance(data, bytes):
            data = data.decode("utf-8", "replace")
        if not 200 <= int(status) < 300:
            raise api_error(int(status), reason, data, what, host)
        if text:
            return data or ""
        try:
            return json.loads(data) if data else {}
        except ValueError:
            raise KubeError("the Kubernetes API at %s answered something that is not JSON while trying to %s: %.200s"
                            % (host, what, data))

    def get(self, what, path, **query):
        return self.request(what, "GET", path, query=query or None)

    def create(self, what, path, body, dry_run=False):
        return self.request(what, "POST", path, query=_dry(dry_run), body=body)

    def patch(self, what, path, patch, dry_run=False, strategic=False):
        """A JSON merge patch (RFC 7386): maps merge, null deletes a key. With ``strategic``, a strategic merge patch
        (the API's own type: a list with a patch merge key, such as a Node's status.conditions by type, is merged
        element by element instead of replaced; an element ``{key: K, "$patch": "delete"}`` removes one)."""
        return self.request(what, "PATCH", path, query=_dry(dry_run), body=patch,
                            content_type="application/strategic-merge-patch+json" if strategic
                            else "application/merge-patch+json")

    def delete(self, what, path, dry_run=False, precondition=None):
        """With ``precondition`` (a resourceVersion), DeleteOptions.preconditions: the API server deletes only an
        object still at that version, else answers 409 Conflict."""
        body = None
        if precondition:
            body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": precondition}}
        return self.request(what, "DELETE", path, query=_dry(dry_run), body=body)

    def replace(self, what, path, body, dry_run=False, field_manager=None):
        """A PUT of the whole object. With ``metadata.resourceVersion`` in ``body`` the API server applies it only
        if the object is still at that version, else answers 409 Conflict (optimistic concurrency)."""
        query = dict(_dry(dry_run) or {})
        if field_manager:
            query["fieldManager"] = field_manager
        return self.request(what, "PUT", path, query=query or None, body=body)


class _ClientRest(object):
    """The kubernetes client's RESTClientObject (the fallback path), its ApiException raised as ApiError."""

    def __init__(self, configuration):
        kubernetes = _client_library()
        self.rest = kubernetes.client.rest.RESTClientObject(configuration)
        self.api_exception = kubernetes.client.rest.ApiException

    def request(self, method, url, headers=None, body=None, _request_timeout=None):
        try:
            return self.rest.request(method, url, headers=headers, body=body, _request_timeout=_request_timeout)
        except self.api_exception as exc:
            raise ApiError(status=exc.status, reason=exc.reason, body=exc.body)


def write_configmap(kube, namespace, name, data, current, dry_run=False, labels=None):
    """Make ConfigMap ``namespace/name`` hold exactly ``data``: create it when ``current`` is None, else one merge
    patch of the keys that differ (removed keys as null), guarded by ``current``'s resourceVersion (a concurrent
    writer makes it fail 409, and the caller reads again). Returns the API server's answer (the dry run's in check
    mode), or ``current`` when nothing differs."""
    if current is None:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
                "data": data}
        if labels:
            body["metadata"]["labels"] = labels
        return kube.create("create ConfigMap %s/%s" % (namespace, name), configmap_path(namespace), body,
                           dry_run=dry_run)
    old = current.get("data") or {}
    changes = dict((k, v) for k, v in data.items() if old.get(k) != v)
    changes.update((k, None) for k in old if k not in data)
    missing = dict((k, v) for k, v in (labels or {}).items()
                   if ((current.get("metadata") or {}).get("labels") or {}).get(k) != v)
    if not changes and not missing:
        return current
    patch = {"metadata": {"resourceVersion": current["metadata"].get("resourceVersion")}}
    if changes:
        patch["data"] = changes
    if missing:
        patch["metadata"]["labels"] = missing
    return kube.patch("patch ConfigMap %s/%s" % (namespace, name), configmap_path(namespace, name), patch,
                      dry_run=dry_run)


_UNREACHABLE = ("cannot reach the Kubernetes API at %s while trying to %s: %s. Check host/kubeconfig, the network path "
                "and that the API server is up (each request waits up to request_timeout=%s s).")
MAX_REQUEST_TIMEOUT = 3600


def request_timeout(value):
    """The request_timeout parameter checked: a finite number of seconds, more than 0 and at most an hour (a bound
    chosen here: kube-apiserver ends a request itself after its --request-timeout, 60 s by default; past an hour
    a value is a typo, and near 1e308 the socket layer overflows). None: 30."""
    if value is None:
        return 30.0
    nan = isinstance(value, float) and math.isnan(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or nan or not 0 < value <= MAX_REQUEST_TIMEOUT:
        raise KubeError("request_timeout must be a number of seconds above 0 and at most %d, got %r"
                        % (MAX_REQUEST_TIMEOUT, value))
    return float(value)


def _dry(dry_run):
    return {"dryRun": "All"} if dry_run else None


def read_or_none(kube, what, path):
    """GET an object; None when the API answers 404 Not Found."""
    try:
        return kube.get(what, path)
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise


def namespace_path(name=None):
    return "/api/v1/namespaces" + ("/%s" % quote(name, safe="") if name else "")


def ensure_namespace(kube, namespace, dry_run=False, create=True):
    """Create ``namespace`` when it does not exist (as helm's --create-namespace does). Returns "present",
    "created", or "would be created" (dry run: the API validated the create, nothing was stored). With
    ``create=False`` a missing namespace is a KubeError that says so."""
    if read_or_none(kube, "read namespace %s" % namespace, namespace_path(namespace)) is not None:
        return "present"
    if not create:
        raise KubeError("namespace %s does not exist and create_namespace=false: create it, or let the module create "
                        "it (create_namespace=true); nothing changed" % namespace)
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    try:
        kube.create("create namespace %s" % namespace, namespace_path(), body, dry_run=dry_run)
    except KubeError as exc:
        if exc.status != 409:   # created meanwhile by someone else: fine
            raise
        return "present"
    return "would be created" if dry_run else "created"


def node_path(name, sub=None):
    """A Node's path; ``sub``: a subresource (``status``)."""
    return "/api/v1/nodes/%s" % quote(name, safe="") + ("/" + sub if sub else "")


def runtime_class_path(name=None):
    return "/apis/node.k8s.io/v1/runtimeclasses" + ("/%s" % quote(name, safe="") if name else "")


def configmap_path(namespace, name=None):
    path = "/api/v1/namespaces/%s/configmaps" % quote(namespace, safe="")
    return path + ("/%s" % quote(name, safe="") if name else "")


def pods_path(namespace=None, name=None, sub=None):
    path = "/api/v1/namespaces/%s/pods" % quote(namespace, safe="") if namespace else "/api/v1/pods"
    if name:
        path += "/%s" % quote(name, safe="")
    return path + ("/" + sub if sub else "")


# The DRA API the collection reads and writes (DeviceClass, ResourceClaimTemplate, ResourceSlice): resource.k8s.io/v1,
# GA in Kubernetes 1.34. NVIDIA's DRA chart also accepts v1beta2 and v1beta1 (_helpers.tpl resourceApiVersion), the
# collection does not.
DRA_GROUP = "resource.k8s.io"
DRA_VERSION = "v1"
DRA_API_VERSION = DRA_GROUP + "/" + DRA_VERSION


def dra_path(resource, namespace=None, name=None):
    """The path of DRA ``resource`` (deviceclasses, resourceslices, resourceclaimtemplates ...) at DRA_API_VERSION,
    in ``namespace`` when given, of object ``name`` when given."""
    path = "/apis/%s" % DRA_API_VERSION
    if namespace:
        path += "/namespaces/%s" % quote(namespace, safe="")
    path += "/" + resource
    return path + ("/%s" % quote(name, safe="") if name else "")


def pod_proxy_path(namespace, name, port, path):
    """The API server's proxy to port ``port`` of pod ``name`` (``pods/<name>:<port>/proxy/<path>``): the controller
    reads a pod's HTTP endpoint through the API server, which reaches the pod network."""
    return "%s:%d/proxy/%s" % (pods_path(namespace, name), port, path.lstrip("/"))


def daemonsets_path(namespace, name=None):
    path = "/apis/apps/v1/namespaces/%s/daemonsets" % quote(namespace, safe="")
    return path + ("/%s" % quote(name, safe="") if name else "")


def _status_message(body, reason):
    try:
        doc = json.loads(body)
        return doc.get("message") or reason, doc.get("reason"), doc
    except (TypeError, ValueError, AttributeError):
        return reason or body or "", None, None


def api_error(status, reason, body, what, host):
    """A KubeError for an API answer that is not 2xx, worded after its status code."""
    message, reason, doc = _status_message(body, reason)
    if status == 401:
        msg = ("the Kubernetes API at %s refused the credentials (401 Unauthorized) while trying to %s: the token or "
               "client certificate is missing, wrong or expired. Check api_key / K8S_AUTH_API_KEY or the kubeconfig "
               "user." % (host, what))
    elif status == 403:
        msg = ("the Kubernetes API at %s denied access (403 Forbidden) while trying to %s: %s. The credentials work "
               "but lack RBAC permission for this; grant it to the user or service account." % (host, what, message))
    elif status == 404:
        msg = "not found (404) while trying to %s: %s" % (what, message)
    elif status == 409:
        msg = "conflict (409) while trying to %s: %s" % (what, message)
    elif status == 422:
        msg = "the Kubernetes API rejected the request as invalid (422) while trying to %s: %s" % (what, message)
    else:
        msg = "Kubernetes API error %s while trying to %s: %s" % (status, what, message)
    return KubeError(msg, status=status, reason=reason, body=doc)


def served_group_versions(kube, group):
    """The versions of API group ``group`` the API server serves (discovery, ``/apis``), its preferred first; [] when
    it serves none."""
    doc = kube.get("read the API groups the server serves (discovery, /apis)", "/apis")
    for item in doc.get("groups") or []:
        if isinstance(item, dict) and item.get("name") == group:
            return [v.get("version") for v in item.get("versions") or [] if isinstance(v, dict) and v.get("version")]
    return []


def server_git_version(kube):
    """The API server's gitVersion (``/version``), e.g. v1.34.1; None when it does not say."""
    return (kube.get("read the API server's version (/version)", "/version") or {}).get("gitVersion")


def pods_on_node(kube, node):
    """Every pod bound to ``node`` in every namespace (field selector spec.nodeName)."""
    doc = kube.get("list pods on node %s" % node, pods_path(), fieldSelector="spec.nodeName=%s" % node)
    return [pod for pod in doc.get("items") or [] if isinstance(pod, dict)]
