"""The Kubernetes API client every cluster read of the program uses, configured as the stack's
Kubernetes provider is: a kubeconfig (`kubernetes:kubeconfig`, a path or the kubeconfig text,
else `$KUBECONFIG`, else `~/.kube/config`) and a context (`kubernetes:context`, else the
current one), with a timeout on every call (:func:`api_client`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

DEFAULT_KUBECONFIG = "~/.kube/config"  # kubectl's and the provider's default without $KUBECONFIG


REQUEST_TIMEOUT_S = 30.0
"""Seconds a request through :func:`api_client` may wait to connect and between reads where its
caller gives no ``_request_timeout``: no API call of the program waits forever on a silent API
server."""


class KubeAccessError(RuntimeError):
    """No usable Kubernetes access (no kubeconfig, unknown context, API not reachable or
    forbidden); the message is one line."""


def request_timeout(seconds: float | tuple[float, float] | None) -> tuple[float, float]:
    """A ``_request_timeout`` the kubernetes client (32.0.1) applies: (connect, read) seconds.
    It sets a timeout only for an ``int`` or a 2-tuple and ignores a float silently
    (``kubernetes/client/rest.py`` ``RESTClientObject.request`` L147-153: ``timeout = None``
    unless ``isinstance(_request_timeout, int)`` or a tuple of two), and None is no timeout at
    all; None here is :data:`REQUEST_TIMEOUT_S`."""
    if isinstance(seconds, tuple):
        return seconds
    value = float(REQUEST_TIMEOUT_S if seconds is None else seconds)
    return (value, value)


class _TimedApiClient(client.ApiClient):  # type: ignore[misc]
    """An ``ApiClient`` whose every call has a timeout that takes effect
    (:func:`request_timeout`): the generated API methods pass ``_request_timeout`` to
    ``ApiClient.call_api`` by keyword (kubernetes client 32.0.1,
    ``kubernetes/client/api_client.py`` L305-310)."""

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["_request_timeout"] = request_timeout(kwargs.get("_request_timeout"))
        return super().call_api(*args, **kwargs)


def api_client(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    """An API client configured as the stack's Kubernetes provider is: `kubeconfig` is the
    `kubernetes:kubeconfig` config value (a file path, or the kubeconfig's YAML itself), None
    for `$KUBECONFIG` / `~/.kube/config`; `context` the `kubernetes:context` value, None for the
    current context.

    Every call through it has a timeout (:class:`_TimedApiClient`). Built as the client's
    ``new_client_from_config`` builds one (kubernetes client 32.0.1,
    ``kubernetes/config/kube_config.py`` L866-881).

    Raises KubeAccessError (one line) when no configuration is found or it is invalid.
    """
    configuration = type.__call__(client.Configuration)
    try:
        if kubeconfig is None:  # read now, not when the kubernetes package was imported
            default = os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
            config.load_kube_config(default, context, client_configuration=configuration)
        elif "\n" not in kubeconfig and Path(kubeconfig).expanduser().is_file():
            path = str(Path(kubeconfig).expanduser())
            config.load_kube_config(path, context, client_configuration=configuration)
        else:
            loaded = yaml.safe_load(kubeconfig)
            if not isinstance(loaded, dict):
                raise ConfigException("kubernetes:kubeconfig is neither a file nor a kubeconfig")
            config.load_kube_config_from_dict(loaded, context, client_configuration=configuration)
        return _TimedApiClient(configuration=configuration)
    except (ConfigException, OSError, yaml.YAMLError, TypeError, KeyError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise KubeAccessError(message) from None


def list_pods(
    core: client.CoreV1Api,
    namespace: str,
    label_selector: str | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """``GET /api/v1/namespaces/{namespace}/pods?labelSelector=`` as the raw ``PodList`` JSON
    (read as text, not into the client's models); ``timeout_s``: the call's
    ``_request_timeout`` (None: :data:`REQUEST_TIMEOUT_S` through :func:`api_client`).

    Raises KubeAccessError (one line): the list refused (``HTTP <status> <reason>``), the API
    unreachable, or an answer that is not JSON.
    """
    try:
        response = core.list_namespaced_pod(
            namespace,
            label_selector=label_selector,
            _preload_content=False,
            _request_timeout=timeout_s,
        )
        listed: dict[str, Any] = json.loads(response.data)
    except ApiException as exc:
        raise KubeAccessError(f"HTTP {exc.status} {exc.reason}") from None
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        raise KubeAccessError(" ".join(f"{type(exc).__name__}: {exc}".split())) from None
    return listed
