"""The worker pods' memory while the load runs, read from the Kubernetes metrics API.

:class:`PodMemorySampler` lists the ``PodMetrics`` of one namespace's pods matching a label
selector (``GET /apis/metrics.k8s.io/v1beta1/namespaces/<ns>/pods``, the official client's
``CustomObjectsApi.list_namespaced_custom_object``) every ``interval_s`` in a background
thread, and reads each pod's spec once, when it first appears, for its containers' memory
limits. It keeps what the API said (quantities as text): turning them into bytes and series is
:mod:`loadstep.memory`'s.

What the API serves (kubernetes/metrics ``pkg/apis/metrics/v1beta1/types.go`` L65-102:
``PodMetrics`` with ``timestamp``, ``window`` and ``containers[{name, usage}]``, "The memory
usage is the memory working set"); metrics-server (kubernetes-sigs/metrics-server
``pkg/storage/types.go`` L53-69, ``resourceUsage``: memory is the last scrape's working set, in
binary SI, e.g. ``123456Ki``, at that scrape's ``timestamp``; ``pkg/storage/pod.go`` L48-100,
``GetMetrics``: a pod appears once it has two scrapes, with the pod's labels; ``pkg/api/pod.go``
L80-92, ``List``: the label selector applies to the pods). A reading changes once per
metrics-server's ``--metric-resolution`` (15 s in its manifests), so most reads of a 1 s
sampler repeat the last one; a reading is kept once per (pod, ``timestamp``).

Where the cluster does not serve the API, the aggregator answers 404 (no ``APIService`` for
``v1beta1.metrics.k8s.io``: k8s.io/apiserver ``pkg/util/notfoundhandler/not_found_handler.go``,
"the server could not find the requested resource") or 503 (registered, its service not
available: k8s.io/kube-aggregator ``pkg/apiserver/handler_proxy.go``, ``ServeHTTP``, "service
unavailable"); a refused read is 403. Any of them stops the sampler and is one warning
(:meth:`PodMemorySampler.warnings`); the load runs on. Kubernetes access is the stack's
provider's (:func:`kubeclient.client.api_client`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Unpack

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from kubeclient.client import KubeAccessError, api_client
from kubeclient.reader import NamespaceReader, ReaderAccess

METRICS_GROUP, METRICS_VERSION, METRICS_PLURAL = "metrics.k8s.io", "v1beta1", "pods"

SAMPLE_S = 1.0
"""Seconds between two reads of the metrics API."""

UNSERVED = {404: "not served", 503: "unavailable"}
"""The aggregator's answers for a metrics API the cluster does not serve (module docstring)."""

READ_TIMEOUT_S = 5.0
"""Each read waits at most this long (seconds): a slow API delays the next sample only."""


@dataclass(frozen=True)
class PodReading:
    """One ``PodMetrics`` as the API served it: the pod, its labels, ``timestamp`` (RFC 3339),
    ``window`` (a Go duration) and each container's ``usage.memory`` quantity."""

    pod: str
    labels: dict[str, str]
    timestamp: str
    window: str
    memory: dict[str, str]


def pod_readings(listed: dict[str, Any]) -> tuple[list[PodReading], list[str]]:
    """The readings in a ``PodMetricsList`` (a container without a memory usage left out), and
    the pods of the items skipped: one without a ``timestamp`` or without containers, as
    metrics-server serves a pod whose container usage it had to skip (a CPU counter or a start
    time going backwards: kubernetes-sigs/metrics-server ``pkg/storage/pod.go`` L72-76 and
    L86-89, ``GetMetrics``, at 07472af2513671308f1331dfddeed92e9be13348, keeps the pod with
    no container and a zero time, which the API writes ``"timestamp": null``)."""
    found, skipped = [], []
    for item in listed.get("items") or []:
        metadata = item.get("metadata") or {}
        if not item.get("timestamp") or not item.get("containers"):
            skipped.append(str(metadata.get("name", "?")))
            continue
        memory = {
            str(c.get("name")): str((c.get("usage") or {})["memory"])
            for c in item.get("containers") or []
            if "memory" in (c.get("usage") or {})
        }
        found.append(
            PodReading(
                pod=str(metadata.get("name", "?")),
                labels=dict(metadata.get("labels") or {}),
                timestamp=str(item.get("timestamp")),
                window=str(item.get("window")),
                memory=memory,
            )
        )
    return found, skipped


def container_limits(pod: dict[str, Any]) -> dict[str, str | None]:
    """Each app container's ``resources.limits.memory`` in a pod's spec (None: no limit)."""
    return {
        str(c.get("name")): ((c.get("resources") or {}).get("limits") or {}).get("memory")
        for c in (pod.get("spec") or {}).get("containers") or []
    }


class PodMemorySampler(NamespaceReader):
    """Sample the memory of the pods of ``namespace`` matching ``label_selector`` while the
    block runs: ``with PodMemorySampler(...) as memory: ...; memory.readings()``.

    Entering starts the thread (``namespace`` None: nothing, as without a cluster); leaving
    stops it within one read. Without access, or where the API is not served or refused
    (module docstring), the sampler stops and :meth:`warnings` holds one line; a failed read
    otherwise (a dropped connection) is retried at the next interval.
    """

    def __init__(
        self,
        namespace: str | None,
        *,
        interval_s: float = SAMPLE_S,
        **access: Unpack[ReaderAccess],
    ) -> None:
        super().__init__(namespace, join_s=READ_TIMEOUT_S * 2 + interval_s, **access)
        self.interval_s = interval_s
        self.reads = 0
        self.failed_reads = 0
        self.skipped: dict[str, int] = {}  # pod -> items skipped (pod_readings)
        self._readings: dict[tuple[str, str], PodReading] = {}
        self._limits: dict[str, dict[str, str | None]] = {}
        self._api: client.ApiClient | None = None

    def __enter__(self) -> PodMemorySampler:
        if self.namespace is None:
            return self
        try:
            self._api = api_client(self.kubeconfig, self.context)
        except KubeAccessError as exc:
            self._problem = str(exc)
            return self
        self._start("pod-memory", self._sample)
        return self

    @property
    def problem(self) -> str | None:
        """Why the sampler stopped (None: it did not)."""
        return self._problem

    def readings(self) -> list[PodReading]:
        """Every distinct reading so far, by pod and then timestamp."""
        with self._lock:
            return sorted(self._readings.values(), key=lambda r: (r.pod, r.timestamp))

    def limits(self) -> dict[str, dict[str, str | None]]:
        """Each pod's containers' memory limits (:func:`container_limits`), for the pods whose
        spec could be read."""
        with self._lock:
            return dict(self._limits)

    def warnings(self) -> list[str]:
        """One line when the memory could not be sampled (the load ran without it), one when
        readings were skipped (:func:`pod_readings`)."""
        said = []
        if self._problem is not None:
            said.append(
                f"no pod memory series: {self._problem}; the load ran without it (docs/"
                "metrics.md, Pod memory)"
            )
        with self._lock:
            skipped = dict(self.skipped)
        if skipped:
            pods = ", ".join(f"{name} {count}" for name, count in sorted(skipped.items()))
            said.append(
                f"{sum(skipped.values())} pod memory readings skipped, without a timestamp or"
                f" containers (metrics-server could not compute their usage), by pod: {pods}"
            )
        return said

    def _sample(self) -> None:
        assert self._api is not None
        try:
            while not self._stop.is_set():
                try:
                    self._read()
                except _Unserved as exc:
                    self._problem = str(exc)
                    return
                except (urllib3.exceptions.HTTPError, OSError, ValueError, ApiException):
                    self.failed_reads += 1  # a dropped read: the next interval tries again
                self._stop.wait(self.interval_s)
        finally:
            self._api.close()

    def _read(self) -> None:
        assert self._api is not None and self.namespace is not None
        metrics = client.CustomObjectsApi(self._api)
        try:
            listed = metrics.list_namespaced_custom_object(
                METRICS_GROUP,
                METRICS_VERSION,
                self.namespace,
                METRICS_PLURAL,
                label_selector=self.label_selector,
                _request_timeout=READ_TIMEOUT_S,
            )
        except ApiException as exc:
            if exc.status in UNSERVED:
                raise _Unserved(
                    f"the cluster's metrics API ({METRICS_GROUP}/{METRICS_VERSION}) is "
                    f"{UNSERVED[exc.status]} (HTTP {exc.status} {exc.reason}; install "
                    "metrics-server to sample pod memory)"
                ) from None
            if exc.status in (401, 403):
                raise _Unserved(
                    f"may not list pods.{METRICS_GROUP} in namespace {self.namespace} "
                    f"(HTTP {exc.status} {exc.reason}; the load step's Role grants it: "
                    "docs/in-cluster.md)"
                ) from None
            raise
        self.reads += 1
        found, skipped = pod_readings(listed)
        with self._lock:
            for name in skipped:
                self.skipped[name] = self.skipped.get(name, 0) + 1
            for reading in found:
                self._readings.setdefault((reading.pod, reading.timestamp), reading)
            new = {r.pod for r in found} - set(self._limits)
        for name in sorted(new):
            self._read_limits(name)

    def _read_limits(self, name: str) -> None:
        """Read pod ``name``'s spec for its limits; a pod that cannot be read has none known."""
        assert self._api is not None and self.namespace is not None
        try:
            response = client.CoreV1Api(self._api).read_namespaced_pod(
                name, self.namespace, _preload_content=False, _request_timeout=READ_TIMEOUT_S
            )
            limits = container_limits(json.loads(response.data))
        except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError):
            return
        with self._lock:
            self._limits[name] = limits


class _Unserved(Exception):
    """The metrics API is not served, or refused: sampling stops (the message says why)."""
