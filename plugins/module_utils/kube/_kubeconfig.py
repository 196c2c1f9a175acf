# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The light path to the Kubernetes API (PRIVATE: do not use from other collections): a kubeconfig or a pod's service
account read into the settings the kubernetes client would make of it, and an urllib3 connection built from them as
the client's RESTClientObject builds it, without importing the ``kubernetes`` package (issue 49).

Why: ``import kubernetes`` imports the whole client (its package __init__ pulls client, config, dynamic, watch,
stream, utils, leaderelection, informer; kube_config pulls requests_oauthlib, oauthlib, dateutil, pydantic), about
0.15 to 0.2 CPU s, in every module process that talks to a cluster, on every node and every run. The modules use
nothing of it but its Configuration, its kubeconfig loaders and its urllib3 pool (see _kube.Kube).

What is read here, and only this (kubernetes-client/python v37.0.2, kubernetes/config/kube_config.py,
incluster_config.py, kubernetes/client/configuration.py and rest.py, followed line by line, quirks included):
- in-cluster: KUBERNETES_SERVICE_HOST/PORT, the service account's token (re-read after a minute, as the client
  does) and CA, with the client's own error messages;
- a kubeconfig (a dict, or files: several separated by ``:`` are merged as the client merges them, the first
  cluster/context/user of a name wins, the last current-context wins, relative paths are relative to the file an
  entry came from; files naming different current contexts go to the client, as versions differ there): the
  context (given or current), its cluster's server, certificate-authority(-data),
  insecure-skip-tls-verify, tls-server-name and proxy-url, its user's token / tokenFile, client-certificate(-data)
  and client-key(-data), or username and password;
- the proxy from the environment (https_proxy, no_proxy ...), as the client's Configuration reads it.

Anything else raises Unsupported, and _kube builds the configuration with the kubernetes client instead (today's
code): a user with ``exec`` (credential plugins) or ``auth-provider`` (oidc, gcp, azure), and every kubeconfig that
is not shaped as expected (a missing context, cluster or file, a value of another type, bad base64, duplicate
names in a dict). So nothing that worked with the client stops working, and every error is the client's, worded
as before. Data given inline (``*-data``) is written to files in a private temporary directory removed when the
process exits, as the client does.

This hand-written reading is a piece a library could replace: a small kubeconfig reader without the client's
imports (none exists in the client today; kubernetes-client/python would need its config package importable
without ``kubernetes/__init__.py``'s imports) would make this file a call. Until then the unit tests
(tests/unit/plugins/module_utils/test_kubeconfig.py) hold it to the client's results on a table of kubeconfigs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import atexit
import base64
import os
import shutil
import tempfile
import time

SERVICE_HOST_ENV_NAME = "KUBERNETES_SERVICE_HOST"
SERVICE_PORT_ENV_NAME = "KUBERNETES_SERVICE_PORT"
SERVICE_TOKEN_FILENAME = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_CERT_FILENAME = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
TOKEN_REFRESH_SECONDS = 60      # the client's InClusterConfigLoader._token_refresh_period
SOCKS_SCHEMES = ("socks5", "socks5h", "socks4", "socks4a")


class Unsupported(Exception):
    """The light path does not read this configuration: build it with the kubernetes client."""


class ConfigException(Exception):
    """A configuration error the light path words as the client's ConfigException (in-cluster only)."""


class ApiError(Exception):
    """No answer came (``status`` 0: TLS refused, ...), or a client before 35 raised for an answer; as the client's
    ApiException."""

    def __init__(self, status=0, reason=None, body=None):
        super(ApiError, self).__init__(reason)
        self.status = status
        self.reason = reason
        self.body = body


def _getproxies():
    from urllib.request import getproxies
    return getproxies()


def _env_proxy(proxies, host):
    from urllib.parse import urlparse
    return proxies.get(urlparse(host).scheme) or proxies.get("all")


class Configuration(object):
    """The settings of kubernetes.client.Configuration that Rest reads, under the same names and with the same
    defaults (verify on, the proxy and no_proxy from the environment, re-read for a new host's scheme)."""

    def __init__(self):
        self._host = "http://localhost"
        self.api_key = {}
        self.api_key_prefix = {}
        self.verify_ssl = True
        self.ssl_ca_cert = None
        self.ca_cert_data = None
        self.cert_file = None
        self.key_file = None
        self.assert_hostname = None
        self.tls_server_name = None
        self.retries = None
        self.socket_options = None
        self.connection_pool_maxsize = (os.cpu_count() or 1) * 5
        self.proxy_headers = None
        self.token_file = None          # in-cluster: the token re-read every TOKEN_REFRESH_SECONDS
        self._token_read = None
        proxies = _getproxies()
        self._proxy_from_env = True
        self._proxy = _env_proxy(proxies, self._host)
        self.no_proxy = proxies.get("no")

    @property
    def host(self):
        return self._host

    @host.setter
    def host(self, value):
        self._host = value
        if self._proxy_from_env:
            self._proxy = _env_proxy(_getproxies(), value)

    @property
    def proxy(self):
        return self._proxy

    @proxy.setter
    def proxy(self, value):
        self._proxy = value
        self._proxy_from_env = False

    def auth_settings(self):
        """As the client's: the authorization header's value, the in-cluster token re-read when a minute old."""
        if self.token_file and time.monotonic() - self._token_read >= TOKEN_REFRESH_SECONDS:
            try:
                self.api_key["BearerToken"] = "bearer " + _read_token(self.token_file)
            except (ConfigException, OSError, ValueError):
                pass                    # keep the last token: the API server says whether it still holds
            self._token_read = time.monotonic()
        if "BearerToken" not in self.api_key and "authorization" not in self.api_key:
            return {}
        value = self.api_key.get("BearerToken", self.api_key.get("authorization"))
        if value:
            prefix = self.api_key_prefix.get("BearerToken", self.api_key_prefix.get("authorization"))
            value = "%s %s" % (prefix, value) if prefix else value
        return {"BearerToken": {"type": "api_key", "in": "header", "key": "authorization", "value": value or None}}


# ---- in-cluster -------------------------------------------------------------------------------------------------
def _read_token(path):
    with open(path) as handle:
        content = handle.read()
    if not content:
        raise ConfigException("Token file exists but empty.")
    return content


def load_incluster(cfg):
    """The pod's service account into ``cfg``; ConfigException with the client's messages when there is none."""
    environ = os.environ
    if SERVICE_HOST_ENV_NAME not in environ or SERVICE_PORT_ENV_NAME not in environ:
        raise ConfigException("Service host/port is not set.")
    host, port = environ[SERVICE_HOST_ENV_NAME], environ[SERVICE_PORT_ENV_NAME]
    if not host or not port:
        raise ConfigException("Service host/port is set but empty.")
    template = "[%s]:%s" if ":" in host or "%" in host else "%s:%s"
    if not os.path.isfile(SERVICE_TOKEN_FILENAME):
        raise ConfigException("Service token file does not exist.")
    token = _read_token(SERVICE_TOKEN_FILENAME)
    if not os.path.isfile(SERVICE_CERT_FILENAME):
        raise ConfigException("Service certification file does not exist.")
    with open(SERVICE_CERT_FILENAME) as handle:
        if not handle.read():
            raise ConfigException("Cert file exists but empty.")
    cfg.host = "https://" + template % (host, port)
    cfg.ssl_ca_cert = SERVICE_CERT_FILENAME
    cfg.api_key["BearerToken"] = "bearer " + token
    cfg.token_file, cfg._token_read = SERVICE_TOKEN_FILENAME, time.monotonic()


# ---- kubeconfig -------------------------------------------------------------------------------------------------
_private_dir = []


def _data_file(content):
    """A private file holding ``content`` (bytes), removed when the process exits (the client's temp files)."""
    if not _private_dir:
        _private_dir.append(tempfile.mkdtemp(prefix="gpuops-kube-"))
        atexit.register(shutil.rmtree, _private_dir[0], True)
    fd, name = tempfile.mkstemp(dir=_private_dir[0])
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    return name


def _get(mapping, key):
    """``mapping[key]``, which the client requires present and not None."""
    value = mapping.get(key)
    if value is None:
        raise Unsupported("%s is null" % key)
    return value


def _file_or_data(obj, key, base, base64_content):
    """The client's FileOrData(...).as_file(): inline data (preferred) written to a file, or the file's path."""
    data = path = None
    if obj:
        if key + "-data" in obj:
            data = _get(obj, key + "-data")
        elif key in obj:
            path = os.path.normpath(os.path.join(base, _get(obj, key)))
    if not path and data:
        content = data.encode() if isinstance(data, str) else data
        path = _data_file(base64.standard_b64decode(content) if base64_content else content)
    if path and not os.path.isfile(path):
        raise Unsupported("file %s does not exist" % path)
    return path


def _named(entries, name, unique):
    """The one entry of list ``entries`` called ``name`` (a dict with its origin path), None when there is none."""
    if not isinstance(entries, list):
        raise Unsupported("not a list")
    found = [entry for entry in entries if _shaped(entry[0])["name"] == name]
    if len(found) > 1 and unique:
        raise Unsupported("duplicate name")
    return found[0] if found else None


def _shaped(entry):
    if not isinstance(entry, dict) or "name" not in entry:
        raise Unsupported("an entry is not a mapping with a name")
    return entry


def _mapping(value):
    if not isinstance(value, dict):
        raise Unsupported("not a mapping")
    return value


def _apply(doc, context, cfg):
    """The client's KubeConfigLoader(...).load_and_set(cfg) on ``doc``: {"current-context": name, "clusters",
    "contexts", "users": [(entry, path of its file or None)]}, ``unique``: whether a name may repeat."""
    name = context if context is not None else doc.get("current-context")
    if name is None:
        raise Unsupported("no current-context")
    found = _named(doc["contexts"], name, doc["unique"])
    if found is None:
        raise Unsupported("no context %s" % name)
    ctx = _mapping(_get(found[0], "context"))
    user, user_path = None, None
    if ctx.get("user") and doc["users"]:
        found = _named(doc["users"], ctx["user"], doc["unique"])
        if found is not None:
            user, user_path = _mapping(_get(found[0], "user")), found[1]
    found = _named(doc["clusters"], _get(ctx, "cluster"), doc["unique"])
    if found is None:
        raise Unsupported("no cluster")
    cluster, cluster_path = _mapping(_get(found[0], "cluster")), found[1]

    def base(path):
        return os.path.abspath(os.path.dirname(path)) if path is not None else ""

    token = None
    if user:
        if "auth-provider" in user or "exec" in user:
            raise Unsupported("a credential plugin or auth provider")
        data = path = None
        if "token" in user:
            data = _get(user, "token")
        elif "tokenFile" in user:
            path = os.path.normpath(os.path.join(base(user_path), _get(user, "tokenFile")))
        if not data and path:
            with open(path) as handle:
                data = handle.read()
        if data:
            token = "Bearer %s" % data
        elif "username" in user and "password" in user:
            username, password = _get(user, "username"), _get(user, "password")
            if not isinstance(username, str) or not isinstance(password, str):
                raise Unsupported("username or password not a string")
            from urllib3.util import make_headers
            token = make_headers(basic_auth=username + ":" + password).get("authorization")
    settings = []
    if "server" in cluster:
        server = _get(cluster, "server")
        if not isinstance(server, str):
            raise Unsupported("server not a string")
        host = server.rstrip("/")
        settings.append(("host", host))
        if host.startswith("https"):
            where = base(cluster_path)
            settings.append(("ssl_ca_cert", _file_or_data(cluster, "certificate-authority", where, True)))
            settings.append(("cert_file", _file_or_data(user, "client-certificate", where, True)))
            settings.append(("key_file", _file_or_data(user, "client-key", where, True)))
    if "insecure-skip-tls-verify" in cluster:
        settings.append(("verify_ssl", not _get(cluster, "insecure-skip-tls-verify")))
    if "tls-server-name" in cluster:
        settings.append(("tls_server_name", _get(cluster, "tls-server-name")))
    if "proxy-url" in cluster:
        settings.append(("proxy", _get(cluster, "proxy-url")))
    if token is not None:
        cfg.api_key["BearerToken"] = token
    for key, value in settings:
        setattr(cfg, key, value)


def load_dict(config, context, cfg):
    """load_kube_config_from_dict(config, context): relative paths relative to the working directory."""
    try:
        config = _mapping(config)
        doc = {"current-context": config.get("current-context"), "unique": True}
        for item in ("clusters", "contexts", "users"):
            entries = config.get(item)
            doc[item] = [(entry, None) for entry in entries] if isinstance(entries, list) else entries
        if doc["clusters"] is None or doc["contexts"] is None:
            raise Unsupported("no clusters or contexts")
        _apply(doc, context, cfg)
    except Unsupported:
        raise
    except Exception as exc:    # anything the client would word: let it
        raise Unsupported("%s: %s" % (type(exc).__name__, exc))


def load_files(paths, context, cfg):
    """load_kube_config(paths, context): the files merged as the client's KubeConfigMerger merges them."""
    try:
        import yaml
        doc = {"current-context": None, "unique": False, "clusters": [], "contexts": [], "users": []}
        seen, named = 0, False
        for path in paths.split(os.pathsep):
            path = os.path.expanduser(path) if path else path
            if not path or not os.path.exists(path):
                continue
            with open(path) as handle:
                config = _mapping(yaml.safe_load(handle))
            seen += 1
            for item in ("clusters", "contexts", "users"):
                for entry in config.get(item, []) or []:
                    if not any(_shaped(old)["name"] == _shaped(entry)["name"] for old, _where in doc[item]):
                        doc[item].append((entry, path))
            if "current-context" in config:
                if context is None and named and config["current-context"] != doc["current-context"]:
                    # client 37 takes the last file's, older clients and kubectl the first's: the installed one says
                    raise Unsupported("files name different current contexts")
                doc["current-context"], named = config["current-context"], True
        if not seen:
            raise Unsupported("no file")
        _apply(doc, context, cfg)
    except Unsupported:
        raise
    except Exception as exc:
        raise Unsupported("%s: %s" % (type(exc).__name__, exc))


# ---- the connection ---------------------------------------------------------------------------------------------
def _bypass_proxy(url, no_proxy):
    """The client's should_bypass_proxies: whether ``url`` matches the comma-separated ``no_proxy`` rules."""
    import ipaddress
    from urllib.parse import urlparse
    parsed = urlparse(url)
    if not parsed.hostname:
        return True
    host, host_and_port = parsed.hostname.lower(), parsed.netloc.lower()
    try:
        host_ip = ipaddress.ip_address(host)
    except ValueError:
        host_ip = None
    for entry in (entry.strip().lower() for entry in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        if host_ip is not None:
            try:
                if host_ip in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
        entry = entry.lstrip(".")
        if host in (entry,) or host.endswith("." + entry) or host_and_port == entry \
                or host_and_port.endswith("." + entry):
            return True
    return False


def pool_arguments(cfg):
    """(manager class name, keyword arguments) of the urllib3 pool the client's RESTClientObject makes of ``cfg``."""
    import ssl
    args = {"cert_reqs": ssl.CERT_REQUIRED if cfg.verify_ssl else ssl.CERT_NONE, "ca_certs": cfg.ssl_ca_cert,
            "cert_file": cfg.cert_file, "key_file": cfg.key_file}
    if cfg.ca_cert_data is not None:    # urllib3 before 2 has no such key (client 37 passes None: the same default)
        args["ca_cert_data"] = cfg.ca_cert_data
    if cfg.assert_hostname is not None:
        args["assert_hostname"] = cfg.assert_hostname
    if cfg.retries is not None:
        args["retries"] = cfg.retries
    if cfg.tls_server_name:
        args["server_hostname"] = cfg.tls_server_name
    if cfg.socket_options is not None:
        args["socket_options"] = cfg.socket_options
    if cfg.connection_pool_maxsize is not None:
        args["maxsize"] = cfg.connection_pool_maxsize
    if cfg.proxy and not _bypass_proxy(cfg.host, cfg.no_proxy or ""):
        args["proxy_url"] = cfg.proxy
        if cfg.proxy.split("://")[0].lower() in SOCKS_SCHEMES and "://" in cfg.proxy:
            args["headers"] = cfg.proxy_headers
            return "SOCKSProxyManager", args
        args["proxy_headers"] = cfg.proxy_headers
        return "ProxyManager", args
    return "PoolManager", args


class Rest(object):
    """The client's RESTClientObject for the requests Kube makes (JSON bodies): the same urllib3 pool, timeout and
    TLS errors (ApiError, status 0, reason "SSLError\\n...")."""

    def __init__(self, cfg):
        import urllib3
        kind, args = pool_arguments(cfg)
        if kind == "SOCKSProxyManager":
            from urllib3.contrib.socks import SOCKSProxyManager as manager
        else:
            manager = getattr(urllib3, kind)
        self.configuration = cfg
        self.pool_manager = manager(**args)

    def request(self, method, url, headers=None, body=None, _request_timeout=None):
        import json
        import urllib3
        timeout = urllib3.Timeout(total=_request_timeout) if _request_timeout else None
        try:
            return self.pool_manager.request(method, url, body=None if body is None else json.dumps(body),
                                             timeout=timeout, headers=headers or {}, preload_content=False)
        except urllib3.exceptions.SSLError as exc:
            raise ApiError(status=0, reason="\n".join([type(exc).__name__, str(exc)]))
