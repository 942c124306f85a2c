"""Incidents from a Kubernetes pod watch: what the graph's pods did while the load ran.

`PodWatch` lists the pods of one namespace (their state then is the baseline: earlier restarts
are not incidents), then watches them with the official `kubernetes` client's watch API in a
background thread, resuming from the last `resourceVersion` it saw whenever a watch request
ends (the server's `timeoutSeconds`, a dropped connection), and listing again when that version
has expired (410 Gone), so no change is lost. Each change becomes an `Incident`
(`measurement.incidents`, source "kubernetes"):

- `terminated`: a container ended (its `state.terminated`, or the `lastState.terminated` a
  restart leaves): reason and exit code, e.g. OOMKilled / 137, Error / 1;
- `restarted`: a container's `restartCount` went up;
- `ready_lost` / `ready_regained`: the pod's `Ready` condition went False / back to True;
- `evicted`: the pod's `status.reason` became Evicted; `deleted`: the pod object went away.

`at` is when the watch event reached this machine (the load's own clock, so no skew between
the cluster's clocks and ours; the kubelet's second-resolution `finishedAt` is in the message).

Kubernetes access is the stack's Kubernetes provider's (:func:`kubeclient.client.api_client`).
Without access the watch is one warning (`GridObserver.warnings`) and the load runs anyway.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Unpack

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from kubeclient.client import KubeAccessError, api_client, list_pods
from kubeclient.reader import NamespaceReader, ReaderAccess
from loadgen.observers import GridObserver
from measurement.incidents import Incident, IncidentKind

WATCH_WINDOW_S = 5  # timeoutSeconds of one watch request: how often the thread checks for stop


RETRY_S = 1.0  # pause before resuming after a failed watch request


START_TIMEOUT_S = 30.0  # the initial list must answer within this, else the watch is a warning


COMPONENT_LABELS = (
    "nvidia.com/dynamo-component",  # the Dynamo operator's pods (DGD services)
    "app.kubernetes.io/component",
    "app.kubernetes.io/name",
    "app",
)


def component_of(pod: dict[str, Any]) -> str:
    """The DGD component or workload a pod belongs to: its first `COMPONENT_LABELS` label, else
    its name without the two generated suffixes of a Deployment's pods."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    for label in COMPONENT_LABELS:
        if labels.get(label):
            return str(labels[label])
    return str(metadata.get("name", "?")).rsplit("-", 2)[0]


def _ready(pod: dict[str, Any]) -> bool | None:
    conditions = (pod.get("status") or {}).get("conditions") or []
    for condition in conditions:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return None


# The pod status lists of container states (core/v1 PodStatus): app containers, init containers
# (restartable init containers are how sidecars run since Kubernetes 1.29, KEP-753) and
# ephemeral (debug) containers. A crash in any of them is an incident.
CONTAINER_STATUS_LISTS = {
    "containerStatuses": "container",
    "initContainerStatuses": "init container",
    "ephemeralContainerStatuses": "ephemeral container",
}


def _containers(pod: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(what, status) for every container status of `pod`, `what` naming the list it came from
    ("container", "init container", "ephemeral container")."""
    status = pod.get("status") or {}
    return [
        (what, container)
        for key, what in CONTAINER_STATUS_LISTS.items()
        for container in status.get(key) or []
    ]


def _termination_key(pod_name: str, container: str, terminated: dict[str, Any]) -> str:
    """Identifies one container instance's end, so a termination seen first in `state` and
    again in `lastState` after the restart is reported once."""
    instance = terminated.get("containerID") or terminated.get("finishedAt") or ""
    return f"{pod_name}/{container}/{instance}"


def pod_incidents(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    at: datetime,
    reported: set[str],
) -> list[Incident]:
    """The incidents between two states of one pod (`old` None: first seen; only terminations
    not in `reported` count then, and they are added to it). Pure."""
    name = str((new.get("metadata") or {}).get("name", "?"))
    component = component_of(new)

    def incident(kind: IncidentKind, **fields: Any) -> Incident:
        return Incident(
            source="kubernetes", component=component, instance=name, kind=kind, at=at, **fields
        )

    found: list[Incident] = []
    old_restarts = {
        (what, c.get("name")): c.get("restartCount", 0) for what, c in _containers(old or {})
    }
    for what, status in _containers(new):
        name_in_pod = str(status.get("name"))
        container = name_in_pod if what == "container" else f"{name_in_pod} ({what})"
        for where in ("state", "lastState"):
            terminated = (status.get(where) or {}).get("terminated")
            if not terminated:
                continue
            key = _termination_key(name, container, terminated)
            if key in reported:
                continue
            reported.add(key)
            if old is None:
                continue  # ended before the watch began: the baseline, not an incident
            detail = terminated.get("message") or ""
            found.append(
                incident(
                    "terminated",
                    reason=terminated.get("reason"),
                    exit_code=terminated.get("exitCode"),
                    message=f"container {container} finished at "
                    f"{terminated.get('finishedAt')} (kubelet){'; ' + detail if detail else ''}",
                )
            )
        restarts = status.get("restartCount", 0)
        if old is not None and restarts > old_restarts.get((what, name_in_pod), restarts):
            found.append(
                incident("restarted", message=f"container {container}: restart count {restarts}")
            )
    if old is None:
        return found
    reason = (new.get("status") or {}).get("reason")
    if reason == "Evicted" and (old.get("status") or {}).get("reason") != "Evicted":
        found.append(
            incident("evicted", reason=reason, message=(new.get("status") or {}).get("message", ""))
        )
    was, now = _ready(old), _ready(new)
    if was is True and now is False:
        found.append(incident("ready_lost", message="Ready condition False"))
    elif was is False and now is True:
        found.append(incident("ready_regained", message="Ready condition True"))
    return found


class PodWatch(NamespaceReader, GridObserver):
    """Watch the pods of `namespace` (optionally only those matching `label_selector`) while
    the block runs: `with PodWatch(...) as pods: run_grid(..., observers=[pods])`.

    Entering lists the pods (the baseline) and starts the watch thread; leaving stops it
    (within `window_s`, the `timeoutSeconds` of each watch request: default `WATCH_WINDOW_S`).
    Without Kubernetes access (see `api_client`, or the list fails) entering does not raise:
    `warnings()` holds one line and `incidents()` stays empty.
    `resumes` counts watch requests after the first (each resumed from the last version seen);
    `relists` counts lists after the first (the version had expired).
    """

    def __init__(
        self,
        namespace: str,
        *,
        window_s: int = WATCH_WINDOW_S,
        **access: Unpack[ReaderAccess],
    ) -> None:
        super().__init__(namespace, join_s=window_s + START_TIMEOUT_S, **access)
        self.window_s = window_s
        self.resumes = 0
        self.relists = 0
        self._pods: dict[str, dict[str, Any]] = {}
        self._reported: set[str] = set()
        self._incidents: list[Incident] = []
        self._api: client.CoreV1Api | None = None

    def __enter__(self) -> PodWatch:
        try:
            self._api = client.CoreV1Api(api_client(self.kubeconfig, self.context))
            version = self._list()
        except KubeAccessError as exc:
            self._problem = str(exc)
            return self
        self._start("pod-watch", self._watch, version)
        return self

    def incidents(self) -> list[Incident]:
        """The incidents seen so far, in the order they arrived."""
        with self._lock:
            return list(self._incidents)

    def warnings(self) -> list[str]:
        """One line when the pods could not be watched (the load ran without the watch)."""
        if self._problem is None:
            return []
        return [
            f"no pod incidents: cannot watch pods in namespace {self.namespace!r} "
            f"({self._problem}); the load ran without the pod watch"
        ]

    def _list(self) -> str:
        """List the pods, record incidents against the last known states (first time: the
        baseline), return the list's resourceVersion. Raises KubeAccessError."""
        assert self._api is not None and self.namespace is not None
        listed = list_pods(self._api, self.namespace, self.label_selector, START_TIMEOUT_S)
        now = datetime.now(UTC)
        seen = set()
        for pod in listed.get("items") or []:
            seen.add(pod["metadata"]["name"])
            self._observe(
                "MODIFIED" if pod["metadata"]["name"] in self._pods else "ADDED", pod, now
            )
        for gone in set(self._pods) - seen:
            self._observe("DELETED", self._pods[gone], now)
        return str(listed["metadata"]["resourceVersion"])

    def _observe(self, kind: str, pod: dict[str, Any], at: datetime) -> None:
        name = pod["metadata"]["name"]
        old = self._pods.get(name)
        with self._lock:
            self._incidents += pod_incidents(old, pod, at, self._reported)
            if kind == "DELETED":
                self._pods.pop(name, None)
                self._incidents.append(
                    Incident(
                        source="kubernetes",
                        component=component_of(pod),
                        instance=name,
                        kind="deleted",
                        at=at,
                    )
                )
            else:
                self._pods[name] = pod

    def _events(self, version: str) -> Iterator[dict[str, Any]]:
        assert self._api is not None
        # return_type "object": events keep the API's JSON (no V1Pod models to build).
        stream = watch.Watch(return_type="object").stream(
            self._api.list_namespaced_pod,
            self.namespace,
            label_selector=self.label_selector,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.window_s,
            _request_timeout=self.window_s + RETRY_S + 5,
        )
        yield from stream

    def _watch(self, version: str) -> None:
        first = True
        while not self._stop.is_set():
            if not first:
                self.resumes += 1
            first = False
            try:
                for event in self._events(version):
                    pod = event["object"]
                    version = pod.get("metadata", {}).get("resourceVersion", version)
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._observe(event["type"], pod, datetime.now(UTC))
            except ApiException as exc:
                if exc.status == 410:  # the version expired: list again, diff against states
                    with contextlib.suppress(KubeAccessError):
                        version = self._list()
                        self.relists += 1
                        continue
                self._stop.wait(RETRY_S)
            except (urllib3.exceptions.HTTPError, OSError, ValueError):
                self._stop.wait(RETRY_S)  # a dropped watch: resume from the last version seen


def pod_watch(
    namespace: str | None,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    label_selector: str | None = None,
) -> PodWatch | contextlib.nullcontext[GridObserver]:
    """`PodWatch` of `namespace` (its pods matching `label_selector`, if given) with that
    Kubernetes access; without a namespace, a context manager giving an observer that does
    nothing (no watch asked for)."""
    if namespace is None:
        return contextlib.nullcontext(GridObserver())
    return PodWatch(
        namespace, kubeconfig=kubeconfig, context=context, label_selector=label_selector
    )
