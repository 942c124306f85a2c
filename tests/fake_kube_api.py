"""A tiny fake Kubernetes API server (aiohttp, 127.0.0.1, free port) for the pod watch, cluster
check and in-cluster tests: `GET /api/v1/namespaces/<ns>/pods` lists the pods (label selector
applied; `GET /api/v1/pods` those of every namespace), and with `?watch=1` streams the events
after `resourceVersion` as JSON lines, live, until `timeoutSeconds`. Fault injection: drop
every watch connection after N events
(`drop_after`), or answer 410 Gone to versions older than `expired_below`. For the cluster
checks at preview it also lists `nodes` (`GET /api/v1/nodes`), `secrets` by namespace (`GET
/api/v1/namespaces/<ns>/secrets`, with `labelSelector` k=v pairs), `cluster_roles` and `graphs`
(DGDs, also by namespace), one namespace (`namespaces`) and the Deployments of one
(`deployments`, label selector applied), and answers SelfSubjectAccessReviews from the
user's RBAC rules (`grants`); a path in `forbidden` answers 403 (also to a create). With
`enforce` every request is authorized with `grants` as the API server's RBAC authorizer does
(:func:`request_attributes`, :func:`rule_allows`), and refused with its 403. For the
in-cluster load and probe, ConfigMaps, Services, Jobs and Pods are created and deleted, a Job's
status, a pod and its log (`logs`) read, and a created Job or Pod is handed to `on_job` /
`on_pod`, the test's stand-in for the controller and kubelet. Runs on its own event loop in a
thread, so the watch (a thread using the synchronous kubernetes client) and the load (another
loop) can run beside it.

What it emulates, and the source each follows (tests/incluster/test_stand_ins.py states them):
equality-based label selectors (:func:`_matches`); a watch from a ``resourceVersion``, and
the ``ERROR`` event with a 410 ``Expired`` Status for one too old (kubernetes.io docs v1.34,
"API Concepts", "Efficient detection of changes"); RBAC (:func:`request_attributes`,
:func:`rule_allows`, :func:`forbidden_status`); admission of pods, with dry runs
(:meth:`FakeKubeApi.create`, :func:`pod_quota`, :func:`restricted_pod_security`); 409 for a
name taken; deleting a Job deletes its pods, deleting an owner its dependents
(:meth:`FakeKubeApi._deleted`); the log endpoint:
400 before the container starts, 404 once the pod is gone, only the current file after a
rotation (:meth:`FakeKubeApi.pod_log`, :func:`current_log_file`); the metrics API as
metrics-server serves it (`usage`: :meth:`FakeKubeApi.pod_metrics_list`,
:meth:`FakeKubeApi.pod_metrics_get`, :func:`pod_metrics`; a pod whose usage it skipped,
`skipped`: :func:`skipped_pod_metrics`), 404 where its APIService is not registered and 503
where it is but its service is not available (`metrics_api`); a Helm release's history as Secrets,
as helm v3.20.2 writes it with ``atomic`` (:func:`helm_secret`, :class:`FakeHelm`)."""

import asyncio
import base64
import contextlib
import gzip
import json
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

NAMESPACE = "testbed"


def pod(
    name: str,
    *,
    component: str = "prefill",
    ready: bool = True,
    restarts: int = 0,
    terminated: dict[str, Any] | None = None,
    last_terminated: dict[str, Any] | None = None,
    reason: str | None = None,
    statuses: str = "containerStatuses",
    labels: Mapping[str, str] | None = None,
    memory_limit: str | None = None,
) -> dict[str, Any]:
    """A pod object as the API returns it (only the fields the watch and the memory sampler
    read); its one container ("main") is listed under `statuses` (e.g.
    "initContainerStatuses" for a sidecar), with `memory_limit` in its spec's
    `resources.limits` (None: none); `labels` beside the component's."""
    state = {"terminated": terminated} if terminated else {"running": {}}
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        statuses: [
            {
                "name": "main",
                "restartCount": restarts,
                "state": state,
                "lastState": {"terminated": last_terminated} if last_terminated else {},
            }
        ],
    }
    if reason is not None:
        status["reason"] = reason
    limits = {} if memory_limit is None else {"limits": {"memory": memory_limit}}
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"nvidia.com/dynamo-component": component, **(labels or {})},
        },
        "spec": {"containers": [{"name": "main", "resources": limits}]},
        "status": status,
    }


def oom_killed(container_id: str = "containerd://1") -> dict[str, Any]:
    """A container's `terminated` state after an OOMKill."""
    return {
        "reason": "OOMKilled",
        "exitCode": 137,
        "containerID": container_id,
        "finishedAt": "2026-11-30T12:00:09Z",
    }


def pod_metrics(
    pod: Mapping[str, Any], memory: str, timestamp: str, window: str = "15.002s"
) -> dict[str, Any]:
    """`pod`'s `PodMetrics` as metrics-server serves it (kubernetes/metrics
    ``pkg/apis/metrics/v1beta1/types.go`` L65-102; metrics-server ``pkg/storage/pod.go``
    L86-95, ``GetMetrics``: the pod's name, namespace and labels, a ``creationTimestamp`` of
    now, the ``timestamp`` and ``window`` of its readings; ``pkg/storage/types.go`` L53-69,
    ``resourceUsage``: ``cpu`` in nano cores, ``memory`` the working set in binary SI) for its
    one container "main"."""
    metadata = pod["metadata"]
    return {
        "kind": "PodMetrics",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "labels": dict(metadata.get("labels") or {}),
            "creationTimestamp": timestamp,
        },
        "timestamp": timestamp,
        "window": window,
        "containers": [{"name": "main", "usage": {"cpu": "1523841n", "memory": memory}}],
    }


def skipped_pod_metrics(pod: Mapping[str, Any]) -> dict[str, Any]:
    """`pod`'s `PodMetrics` when metrics-server skipped its container's usage (a CPU counter or
    a start time going backwards, ``pkg/storage/types.go`` ``resourceUsage``): ``GetMetrics``
    keeps the pod with no container and a zero ``TimeInfo`` (kubernetes-sigs/metrics-server
    ``pkg/storage/pod.go`` L72-76, L86-89 at 07472af2513671308f1331dfddeed92e9be13348), which
    the API serves as ``"timestamp": null`` and ``"containers": []`` (the response quoted in
    metrics-server issue 473), its window zero."""
    found = pod_metrics(pod, "0", "")
    return {**found, "timestamp": None, "window": "0s", "containers": []}


def helm_secret(
    name: str,
    namespace: str,
    description: str,
    version: int = 1,
    chart: str = "1.6.2",
    status: str = "deployed",
) -> dict[str, Any]:
    """One revision of a Helm 3 release as its Secret (helm v3.20.2
    ``pkg/storage/driver/secrets.go`` L216-256, ``newSecretsObject``: named
    ``sh.helm.release.v1.<name>.v<version>``, type ``helm.sh/release.v1``, labels ``name``,
    ``owner: helm``, ``status``, ``version``; ``data.release`` the record, gzipped JSON in base64,
    ``pkg/storage/driver/util.go`` ``encodeRelease``, which the Secret's data encodes again)."""
    record = {
        "name": name,
        "namespace": namespace,
        "version": version,
        "info": {"status": status, "description": description},
        "chart": {"metadata": {"name": "dynamo-platform", "version": chart}},
    }
    helm_text = base64.b64encode(gzip.compress(json.dumps(record).encode()))
    labels = {"owner": "helm", "name": name, "status": status, "version": str(version)}
    return {
        "metadata": {
            "name": f"sh.helm.release.v1.{name}.v{version}",
            "namespace": namespace,
            "labels": labels,
        },
        "type": "helm.sh/release.v1",
        "data": {"release": base64.b64encode(helm_text).decode()},
    }


@dataclass
class FakeHelm:
    """The history of one Helm release as helm v3.20.2 writes it with ``atomic`` (what
    pulumi-kubernetes' ``helm.v3.Release`` runs), kept as Secrets in ``api.secrets``: each
    revision (version, chart, status, description)."""

    api: "FakeKubeApi"
    name: str = "dynamo-platform"
    namespace: str = "dynamo-system"
    revisions: list[list[Any]] = field(default_factory=list)

    def _write(self) -> None:
        self.api.secrets[self.namespace] = [
            helm_secret(self.name, self.namespace, description, version, chart, status)
            for version, chart, status, description in self.revisions
        ]

    def install(self, chart: str, description: str) -> None:
        """Revision 1, ``deployed``, with the caller's description (``pkg/action/install.go``
        L486-489)."""
        self.revisions = [[1, chart, "deployed", description]]
        self._write()

    def upgrade(self, chart: str, description: str, error: str | None = None) -> None:
        """A new revision of ``chart``. Deployed: the previous one ``superseded``, the new one
        ``deployed`` with the caller's description (``pkg/action/upgrade.go`` L472-480). Failing
        with ``error``: the new one ``failed``, described ``Upgrade "<name>" failed: <error>``
        (L485-491, ``failRelease``), and, ``atomic``, a rollback to the latest ``superseded`` or
        ``deployed`` revision (L504-535): one more revision with that one's chart, described
        ``Rollback to <N>`` (``pkg/action/rollback.go`` L143-158), ``deployed``, every
        revision deployed before it ``superseded`` (L246-263)."""
        version = self.revisions[-1][0] + 1
        if error is None:
            for revision in self.revisions:
                if revision[2] == "deployed":
                    revision[2] = "superseded"
            self.revisions.append([version, chart, "deployed", description])
        else:
            failed = f'Upgrade "{self.name}" failed: {error}'
            self.revisions.append([version, chart, "failed", failed])
            good = [r for r in self.revisions if r[2] in ("superseded", "deployed")][-1]
            for revision in self.revisions:
                if revision[2] == "deployed":
                    revision[2] = "superseded"
            self.revisions.append([version + 1, good[1], "deployed", f"Rollback to {good[0]}"])
        self._write()

    def interrupt(self, operation: str, chart: str) -> None:
        """The revision ``operation`` (install, upgrade or rollback) writes before it applies
        anything, left as a killed process leaves it: ``pending-install`` "Initial install
        underway" (``pkg/action/install.go`` L330), ``pending-upgrade`` "Preparing upgrade"
        (``pkg/action/upgrade.go`` L286-297), ``pending-rollback`` "Rollback to <N>" to the
        revision before the latest (``pkg/action/rollback.go`` L109-152)."""
        version = self.revisions[-1][0] + 1 if self.revisions else 1
        description = {
            "install": "Initial install underway",
            "upgrade": "Preparing upgrade",
            "rollback": f"Rollback to {version - 2}",
        }[operation]
        self.revisions.append([version, chart, f"pending-{operation}", description])
        self._write()


@dataclass
class FakeKubeApi:
    """The server's state: pods by name, the event log (resourceVersion, type, pod)."""

    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    version: int = 100
    drop_after: int | None = None  # events per watch connection before it is cut
    expired_below: int = 0  # watch versions below this get 410 Gone
    watches: list[int] = field(default_factory=list)  # resourceVersion of every watch request
    lists: int = 0
    url: str = ""
    nodes: list[dict[str, Any]] = field(default_factory=list)
    secrets: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    cluster_roles: list[dict[str, Any]] = field(default_factory=list)
    graphs: list[dict[str, Any]] | None = None  # DGDs; None: the CRD is not installed (404)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> labels; else 404
    deployments: list[dict[str, Any]] = field(default_factory=list)  # apps/v1, any namespace
    # The user's RBAC rules, each with the namespace its RoleBinding is in (None: bound by a
    # ClusterRoleBinding); None: allowed everything. Answers SelfSubjectAccessReviews.
    grants: list[tuple[str | None, dict[str, Any]]] | None = None
    reviews: list[dict[str, Any]] = field(default_factory=list)  # resourceAttributes asked
    forbidden: set[str] = field(default_factory=set)  # request paths answered 403
    enforce: bool = False  # authorize every request with `grants`, as RBAC does
    refused: list[str] = field(default_factory=list)  # what RBAC refused: "verb resource"
    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    created: list[tuple[str, str]] = field(default_factory=list)
    deleted: list[tuple[str, str]] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)  # pod name -> its log so far
    on_job: Callable[["FakeKubeApi", dict[str, Any]], None] | None = None
    on_pod: Callable[["FakeKubeApi", dict[str, Any]], None] | None = None
    on_delete: Callable[[str, str], None] | None = None  # (kind, name) of a deleted object
    admission: Callable[["FakeKubeApi", dict[str, Any]], str | None] | None = None
    dry_runs: list[tuple[str, str]] = field(default_factory=list)  # (kind, name) dry-run creates
    log_max_bytes: int | None = None  # the kubelet's containerLogMaxSize; None: never rotated
    # The metrics API: "served", "unregistered" (no APIService: 404) or "unavailable" (503).
    metrics_api: str = "served"
    usage: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod -> (memory, timestamp)
    skipped: set[str] = field(default_factory=set)  # pods whose usage metrics-server skipped
    metrics_reads: int = 0
    _changed: asyncio.Event | None = None  # set (and replaced) on every event
    _loop: asyncio.AbstractEventLoop | None = None

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stamped = json.loads(json.dumps(obj))
        stamped["metadata"]["resourceVersion"] = str(self.version)
        return stamped

    def put(self, obj: dict[str, Any]) -> None:
        """Set a pod before the watch starts (no event)."""
        self.pods[obj["metadata"]["name"]] = self._stamp(obj)

    async def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        assert self._changed is not None
        stamped = self._stamp(obj)
        if kind == "DELETED":
            self.pods.pop(obj["metadata"]["name"], None)
        else:
            self.pods[obj["metadata"]["name"]] = stamped
        self.events.append((self.version, kind, stamped))
        self._changed.set()
        self._changed = asyncio.Event()

    def emit(self, kind: str, obj: dict[str, Any]) -> None:
        """From any thread: the pod changes now (ADDED, MODIFIED or DELETED)."""
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self._emit(kind, obj), self._loop).result(5)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") not in ("1", "true", "True"):
            self.lists += 1
            items = list(self.pods.values())
            items = [p for p in items if _matches(p, request.query.get("labelSelector", ""))]
            return web.json_response(
                {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(self.version)},
                    "items": items,
                }
            )
        since = int(request.query.get("resourceVersion") or self.version)
        self.watches.append(since)
        if since < self.expired_below:
            status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
            line = json.dumps({"type": "ERROR", "object": status}) + "\n"
            return web.Response(text=line, content_type="application/json")
        response = web.StreamResponse(headers={"content-type": "application/json"})
        await response.prepare(request)
        sent = 0
        deadline = asyncio.get_running_loop().time() + float(request.query["timeoutSeconds"])
        assert self._changed is not None
        while True:
            changed = self._changed
            pending = [e for e in self.events if e[0] > since]
            for version, kind, obj in pending:
                if not _matches(obj, request.query.get("labelSelector", "")):
                    since = version
                    continue
                await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                since, sent = version, sent + 1
                if self.drop_after is not None and sent >= self.drop_after:
                    assert request.transport is not None
                    request.transport.abort()  # cut mid-stream, no final chunk
                    return response
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return response
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)

    async def list_all_pods(self, request: web.Request) -> web.StreamResponse:
        """``GET /api/v1/pods``: the pods of every namespace (:meth:`handle`); 403 when the path
        is in `forbidden` (a user bound to one namespace)."""
        if request.path in self.forbidden:
            status = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "no"}
            return web.json_response(status, status=403)
        return await self.handle(request)

    async def list_objects(self, request: web.Request) -> web.Response:
        """A list of nodes, of one namespace's secrets (label selector applied) or of
        ClusterRoles; 403 for a path in `forbidden`."""
        if request.path in self.forbidden:
            status = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "no"}
            return web.json_response(status, status=403)
        namespace = request.match_info.get("namespace")
        if request.path.endswith("/dynamographdeployments"):
            if self.graphs is None:
                status = {"kind": "Status", "code": 404, "reason": "NotFound", "message": "no"}
                return web.json_response(status, status=404)
            items = [
                g
                for g in self.graphs
                if namespace in (None, g["metadata"]["namespace"])
                and _matches(g, request.query.get("labelSelector", ""))
            ]
        elif request.path.endswith("/deployments"):
            items = [
                d
                for d in self.deployments
                if d["metadata"]["namespace"] == namespace
                and _matches(d, request.query.get("labelSelector", ""))
            ]
        elif request.path == "/api/v1/nodes":
            items = self.nodes
        elif request.path.endswith("/clusterroles"):
            items = self.cluster_roles
        else:
            wanted = dict(
                pair.split("=", 1)
                for pair in request.query.get("labelSelector", "").split(",")
                if pair
            )
            items = [
                s
                for s in self.secrets.get(request.match_info["namespace"], [])
                if all(s["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
            ]
        return web.json_response({"kind": "List", "metadata": {}, "items": items})

    async def read_namespace(self, request: web.Request) -> web.Response:
        """GET of one namespace: 200 with its labels if in `namespaces`, else 404 (403 for a path in
        `forbidden`)."""
        name = request.match_info["namespace"]
        if request.path in self.forbidden:
            status = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "no"}
            return web.json_response(status, status=403)
        if name not in self.namespaces:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        metadata = {"name": name, "labels": self.namespaces[name]}
        return web.json_response({"kind": "Namespace", "metadata": metadata})

    async def access_review(self, request: web.Request) -> web.Response:
        """POST of a SelfSubjectAccessReview: allowed when one of `grants` covers its
        resourceAttributes (:func:`rule_allows`) in its namespace."""
        body = await request.json()
        asked = body["spec"]["resourceAttributes"]
        self.reviews.append(asked)
        allowed = self.grants is None or any(
            rule_allows(rule, asked) and bound in (None, asked.get("namespace"))
            for bound, rule in self.grants
        )
        return web.json_response({**body, "status": {"allowed": allowed}}, status=201)

    def admit(self, pod: dict[str, Any]) -> str | None:
        """What the namespace's admission says of a pod about to be created (None: admitted);
        the controller stand-in asks it for every pod it creates, as the API server does."""
        return None if self.admission is None else self.admission(self, pod)

    async def create(self, request: web.Request) -> web.Response:
        """POST of a ConfigMap, Service, Job or Pod: stored by kind and name (403 for a path in
        `forbidden`); a Job is handed to `on_job` (the stand-in kubelet), if set. A Pod passes
        `admission` first (its refusal: 403 Forbidden, as PodSecurity and ResourceQuota
        answer); with ``?dryRun=All`` it is only admitted, never stored (the API server runs
        admission for a dry run and persists nothing). A name already taken answers 409
        AlreadyExists (k8s.io/apiserver ``pkg/registry/generic/registry/store.go`` ``Create``:
        ``storage.IsExist`` -> ``errors.NewAlreadyExists``)."""
        obj = await request.json()
        kind = obj["kind"]
        if request.path in self.forbidden:
            status = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "no"}
            return web.json_response(status, status=403)
        refused = self.admit(obj) if kind == "Pod" else None
        if refused is not None:
            status = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": refused}
            return web.json_response(status, status=403)
        if request.query.get("dryRun") == "All":
            self.dry_runs.append((kind, obj["metadata"]["name"]))
            return web.json_response(obj, status=201)
        if (kind, obj["metadata"]["name"]) in self.objects:  # the registry's NewAlreadyExists
            resource = request.path.rsplit("/", 1)[-1]
            message = f'{resource} "{obj["metadata"]["name"]}" already exists'
            status = {"kind": "Status", "code": 409, "reason": "AlreadyExists", "message": message}
            return web.json_response(status, status=409)
        obj = self._stamp(obj)
        # ObjectMeta.uid, set by the API server on create (k8s.io/apiserver
        # pkg/registry/rest/create.go BeforeCreate: FillObjectMetaSystemFields)
        obj["metadata"]["uid"] = str(uuid.uuid4())
        self.objects[(kind, obj["metadata"]["name"])] = obj
        self.created.append((kind, obj["metadata"]["name"]))
        if kind == "Job" and self.on_job is not None:
            self.on_job(self, obj)
        if kind == "Pod":
            self.pods[obj["metadata"]["name"]] = obj
            if self.on_pod is not None:
                self.on_pod(self, obj)
        return web.json_response(obj, status=201)

    async def delete(self, request: web.Request) -> web.Response:
        """DELETE of a stored object; 404 if unknown. A Job's pods go with it at once: the end
        state of every ``propagationPolicy`` (the garbage collector deletes the dependents,
        later for Background; for Foreground the Job stays until they are gone: Kubernetes
        docs, "Garbage Collection", "Cascading deletion")."""
        kind = {"configmaps": "ConfigMap", "services": "Service", "jobs": "Job", "pods": "Pod"}[
            request.match_info["resource"]
        ]
        name = request.match_info["name"]
        obj = self.objects.pop((kind, name), None)
        if obj is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        self._deleted(obj)
        return web.json_response({"kind": "Status", "status": "Success"})

    def _deleted(self, obj: dict[str, Any]) -> None:
        """What goes with a deleted object: a Job's pods, and every object whose
        ``ownerReferences`` name it by ``uid`` (the garbage collector deletes a dependent whose
        owners are all gone: kubernetes ``pkg/controller/garbagecollector/garbagecollector.go``
        ``attemptToDeleteItem``; each of ours has one owner), at once: the end state."""
        kind, name = obj["kind"], obj["metadata"]["name"]
        self.deleted.append((kind, name))
        if self.on_delete is not None:
            self.on_delete(kind, name)
        if kind == "Pod":
            self.pods.pop(name, None)
        if kind == "Job":
            for pod in [p for p in self.pods.values() if _job_of(p) == name]:
                self.pods.pop(pod["metadata"]["name"])
        uid = obj["metadata"].get("uid")
        dependents = [
            key
            for key, other in self.objects.items()
            if uid is not None
            and any(o.get("uid") == uid for o in other["metadata"].get("ownerReferences") or [])
        ]
        for key in dependents:
            self._deleted(self.objects.pop(key))

    def delete_object(self, kind: str, name: str) -> None:
        """A client's delete of a stored object (``pulumi destroy``), from a stand-in hook."""
        self._deleted(self.objects.pop((kind, name)))

    async def read_service(self, request: web.Request) -> web.Response:
        """GET of one stored Service; 404 if unknown."""
        obj = self.objects.get(("Service", request.match_info["name"]))
        if obj is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        return web.json_response(obj)

    async def list_jobs(self, request: web.Request) -> web.Response:
        """The Jobs (label selector applied), as ``GET .../jobs`` lists them."""
        selector = request.query.get("labelSelector", "")
        items = [
            o for (kind, _), o in self.objects.items() if kind == "Job" and _matches(o, selector)
        ]
        return web.json_response(
            {"kind": "JobList", "apiVersion": "batch/v1", "metadata": {}, "items": items}
        )

    async def read_job(self, request: web.Request) -> web.Response:
        obj = self.objects.get(("Job", request.match_info["name"]))
        if obj is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        return web.json_response(obj)

    async def read_pod(self, request: web.Request) -> web.Response:
        obj = self.pods.get(request.match_info["name"])
        if obj is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        return web.json_response(obj)

    async def pod_log(self, request: web.Request) -> web.Response:
        """The pod's log so far. A pod whose container has not started answers 400 (kubernetes
        ``pkg/kubelet/kubelet_pods.go`` ``validateContainerLogStatus``: "is waiting to
        start"), a pod that is gone (deleted, with its log) 404."""
        name = request.match_info["name"]
        if name not in self.logs:
            code = 400 if name in self.pods else 404
            return web.json_response({"kind": "Status", "code": code}, status=code)
        return web.Response(text=current_log_file(self.logs[name], self.log_max_bytes))

    def _metrics_unserved(self) -> web.Response | None:
        """The aggregator's answer where the metrics API is not served: 404 with the API
        server's NotFound Status when no APIService is registered for the group
        (k8s.io/apiserver ``pkg/util/notfoundhandler/not_found_handler.go``, ``ServeHTTP``:
        "the server could not find the requested resource"), 503 "service unavailable" in
        plain text when it is but its service is not available (k8s.io/kube-aggregator
        ``pkg/apiserver/handler_proxy.go``, ``ServeHTTP``: ``proxyError`` -> ``http.Error``);
        None while it is served."""
        self.metrics_reads += 1
        if self.metrics_api == "unregistered":
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "the server could not find the requested resource",
                "reason": "NotFound",
                "code": 404,
            }
            return web.json_response(status, status=404)
        if self.metrics_api == "unavailable":
            return web.Response(text="service unavailable\n", status=503)
        return None

    def _metrics_of(self, name: str) -> dict[str, Any] | None:
        """The pod's `PodMetrics`, None while it has no reading (metrics-server leaves out a
        pod without two scrapes: ``pkg/storage/pod.go`` L51-59, ``GetMetrics``)."""
        if name in self.skipped and name in self.pods:
            return skipped_pod_metrics(self.pods[name])
        if name not in self.usage or name not in self.pods:
            return None
        memory, timestamp = self.usage[name]
        return pod_metrics(self.pods[name], memory, timestamp)

    async def pod_metrics_list(self, request: web.Request) -> web.Response:
        """``GET .../namespaces/<ns>/pods`` of the metrics API: the pods the label selector
        picks (metrics-server ``pkg/api/pod.go`` L80-110, ``List``: its pod lister with the
        selector), those with a reading, sorted by name (L160-179, ``getMetrics``)."""
        unserved = self._metrics_unserved()
        if unserved is not None:
            return unserved
        selector = request.query.get("labelSelector", "")
        items = [
            found
            for name, p in sorted(self.pods.items())
            if _matches(p, selector) and (found := self._metrics_of(name)) is not None
        ]
        return web.json_response(
            {"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {},
             "items": items}
        )  # fmt: skip

    async def pod_metrics_get(self, request: web.Request) -> web.Response:
        """``GET .../namespaces/<ns>/pods/<name>`` of the metrics API: the pod's
        `PodMetrics`, 404 NotFound for an unknown pod or one without a reading (metrics-server
        ``pkg/api/pod.go`` L113-138, ``Get``)."""
        unserved = self._metrics_unserved()
        if unserved is not None:
            return unserved
        found = self._metrics_of(request.match_info["name"])
        if found is None:
            status = {"kind": "Status", "code": 404, "reason": "NotFound"}
            return web.json_response(status, status=404)
        return web.json_response(found)

    def kubeconfig(self, folder: Path) -> Path:
        """A kubeconfig file whose current context points at this server."""
        path = folder / "kubeconfig"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
                    "current-context": "fake",
                }
            )
        )
        return path


def _matches(obj: dict[str, Any], selector: str) -> bool:
    """Equality-based label selector (``k=v``, ``k!=v``, comma-separated, all must hold), as
    the API reads it: a missing label matches ``!=`` (kubernetes.io docs v1.34, "Labels and
    Selectors", "Equality-based requirement": ``tier!=frontend`` also selects "all resources
    with no labels with the tier key")."""
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        else:
            key, value = term.split("=", 1)
            if labels.get(key) != value:
                return False
    return True


def rule_allows(rule: Mapping[str, Any], asked: Mapping[str, Any]) -> bool:
    """Whether one PolicyRule grants the asked verb, group, resource[/subresource] and name
    (``asked``: a SelfSubjectAccessReview's ``resourceAttributes``, or a request's:
    :func:`request_attributes`), as kubernetes ``plugin/pkg/auth/authorizer/rbac/rbac.go``
    ``RuleAllows`` does with ``pkg/apis/rbac/v1/evaluation_helpers.go``: ``VerbMatches``,
    ``APIGroupMatches`` and ``ResourceMatches`` (``*`` matches all; a subresource matches only
    ``resource/sub`` or ``*/sub``, never the bare resource: ``jobs`` does not cover
    ``jobs/status``), ``ResourceNameMatches`` (no names listed: every name)."""
    resource = asked.get("resource", "")
    if asked.get("subresource"):
        resource = f"{resource}/{asked['subresource']}"
    sub = asked.get("subresource")
    names = rule.get("resourceNames") or []
    return (
        any(v in ("*", asked.get("verb")) for v in rule.get("verbs", []))
        and any(g in ("*", asked.get("group", "")) for g in rule.get("apiGroups", []))
        and any(
            r in ("*", resource) or (sub and r == f"*/{sub}") for r in rule.get("resources", [])
        )
        and (not names or asked.get("name") in names)
    )


def _job_of(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name")


def current_log_file(log: str, max_bytes: int | None) -> str:
    """What the log endpoint serves of a container's output ``log`` when the kubelet rotates
    at ``max_bytes`` (``containerLogMaxSize``, default 10 MiB): only the current file. Once
    the file has reached the size the kubelet renames it and has the runtime reopen a new one
    (kubernetes ``pkg/kubelet/logs/container_log_manager.go``, commit 030880a5:
    ``processContainer``, "if info.Size() < c.policy.MaxSize ... return", then ``rotateLog``
    -> ``rotateLatestLog``: ``Rename(log, rotated)``, ``ReopenContainerLog``), and a log read
    opens the container's current log path only. The kubelet checks every 10 s
    (``containerLogMonitorInterval``); here after every line, which cuts as much at the sizes
    that matter (a run's records: megabytes)."""
    if max_bytes is None:
        return log
    current = ""
    for line in log.splitlines(keepends=True):
        if len(current.encode()) >= max_bytes:
            current = ""  # rotated: the file so far is renamed, a new one begins
        current += line
    return current


def pod_quota(limit: int) -> Callable[[FakeKubeApi, dict[str, Any]], str | None]:
    """A ResourceQuota of ``limit`` pods in the namespace, as its admission plugin refuses a
    pod past it (kubernetes ``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/
    controller.go``: "exceeded quota: %s, requested: %s, used: %s, limited: %s"; pods in a
    terminal phase do not count)."""

    def admit(api: FakeKubeApi, pod: dict[str, Any]) -> str | None:
        phases = [(p.get("status") or {}).get("phase") for p in api.pods.values()]
        used = sum(phase not in ("Succeeded", "Failed") for phase in phases)
        if used < limit:
            return None
        return (
            f'pods "{pod["metadata"]["name"]}" is forbidden: exceeded quota: testbed-quota, '
            f"requested: pods=1, used: pods={used}, limited: pods={limit}"
        )

    return admit


def restricted_pod_security(api: FakeKubeApi, pod: dict[str, Any]) -> str | None:
    """PodSecurity at ``enforce: restricted``: four of its checks on every container
    (k8s.io/pod-security-admission ``policy/check_allowPrivilegeEscalation.go``,
    ``check_capabilities_restricted.go``, ``check_runAsNonRoot.go``,
    ``check_seccompProfile_restricted.go``), refused as its admission answers: ``violates
    PodSecurity "restricted:latest": <check> (<detail>), ...``."""
    spec = pod["spec"]
    pod_context = spec.get("securityContext") or {}
    found = []
    for container in spec["containers"]:
        ctx = container.get("securityContext") or {}
        name = container["name"]
        if ctx.get("allowPrivilegeEscalation") is not False:
            found.append(
                f'allowPrivilegeEscalation != false (container "{name}" must set '
                "securityContext.allowPrivilegeEscalation=false)"
            )
        if "ALL" not in ((ctx.get("capabilities") or {}).get("drop") or []):
            found.append(
                f'unrestricted capabilities (container "{name}" must set '
                'securityContext.capabilities.drop=["ALL"])'
            )
        if not (ctx.get("runAsNonRoot") or pod_context.get("runAsNonRoot")):
            found.append(
                "runAsNonRoot != true (pod or container "
                f'"{name}" must set securityContext.runAsNonRoot=true)'
            )
        seccomp = ctx.get("seccompProfile") or pod_context.get("seccompProfile") or {}
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            found.append(
                f'seccompProfile (pod or container "{name}" must set '
                'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
            )
    if not found:
        return None
    return (
        f'pods "{pod["metadata"]["name"]}" is forbidden: violates PodSecurity '
        f'"restricted:latest": {", ".join(found)}'
    )


VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch"}
VERBS["DELETE"] = "delete"


def request_attributes(method: str, path: str, query: Mapping[str, str]) -> dict[str, str]:
    """A resource request's attributes as ``RequestInfoFactory.NewRequestInfo`` resolves them:
    ``/api/v1/...`` is the core group (""), ``/apis/<group>/<version>/...`` its group; then
    ``namespaces/<ns>/`` and ``resource[/name[/subresource]]``; the method gives the verb
    (POST create, GET get, PUT update, PATCH patch, DELETE delete), a GET without a name is
    ``list``, and ``watch`` when it asks ``?watch=1``; a DELETE without a name
    ``deletecollection``. The shape of a SelfSubjectAccessReview's ``resourceAttributes``
    (``verb``, ``group``, ``resource``, ``subresource``, ``namespace``, ``name``)."""
    parts = [p for p in path.split("/") if p]
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource, name, subresource = [*rest, "", "", ""][:3]
    verb = VERBS[method]
    if not name and verb == "get":
        verb = "watch" if query.get("watch") in ("1", "true", "True") else "list"
    if not name and verb == "delete":
        verb = "deletecollection"
    return {
        "verb": verb,
        "group": group,
        "resource": resource,
        "subresource": subresource,
        "namespace": namespace,
        "name": name,
    }


def forbidden_status(attrs: Mapping[str, str]) -> dict[str, Any]:
    """The 403 the API server answers (k8s.io/apiserver ``pkg/endpoints/handlers/
    responsewriters/errors.go`` ``ForbiddenStatusError``: ``<resource> "<name>" is forbidden:
    User "<user>" cannot <verb> resource "<resource/sub>" in API group "<group>" in the
    namespace "<ns>"``)."""
    sub = attrs["subresource"]
    combined = f"{attrs['resource']}/{sub}" if sub else attrs["resource"]
    ns = attrs["namespace"]
    where = f' in the namespace "{ns}"' if ns else " at the cluster scope"
    message = (
        f'{attrs["resource"]} "{attrs["name"]}" is forbidden: User "u" cannot {attrs["verb"]} '
        f'resource "{combined}" in API group "{attrs["group"]}"{where}'
    )
    return {"kind": "Status", "code": 403, "reason": "Forbidden", "message": message}


@contextlib.contextmanager
def fake_kube_api() -> Iterator[FakeKubeApi]:
    """A running `FakeKubeApi` on its own loop in a daemon thread; stopped on exit."""
    api = FakeKubeApi()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    stop = threading.Event()

    async def serve() -> None:
        api._loop, api._changed = loop, asyncio.Event()

        @web.middleware
        async def rbac(request: web.Request, handler: Any) -> web.StreamResponse:
            """With ``enforce``, every request is authorized against ``grants`` (a rule bound in
            a namespace grants only there; one bound cluster-wide everywhere). Any user may
            ask a SelfSubjectAccessReview (the ``system:basic-user`` ClusterRole, kubernetes
            ``plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go``)."""
            if not api.enforce or api.grants is None:
                return await handler(request)
            attrs = request_attributes(request.method, request.path, request.query)
            review = (attrs["group"], attrs["resource"]) == (
                "authorization.k8s.io",
                "selfsubjectaccessreviews",
            )
            if review or any(
                rule_allows(rule, attrs) and bound in (None, attrs["namespace"])
                for bound, rule in api.grants
            ):
                return await handler(request)
            combined = "/".join(filter(None, [attrs["resource"], attrs["subresource"]]))
            api.refused.append(f"{attrs['verb']} {combined}")
            return web.json_response(forbidden_status(attrs), status=403)

        app = web.Application(middlewares=[rbac])
        app.router.add_get(f"/api/v1/namespaces/{NAMESPACE}/pods", api.handle)
        # every namespace's pods, as the API lists them (the API reference's "list Pod": GET
        # /api/v1/pods): the stored pods carry their own namespaces
        app.router.add_get("/api/v1/pods", api.list_all_pods)
        app.router.add_get("/api/v1/nodes", api.list_objects)
        app.router.add_get("/api/v1/namespaces/{namespace}/secrets", api.list_objects)
        app.router.add_get("/apis/rbac.authorization.k8s.io/v1/clusterroles", api.list_objects)
        app.router.add_get("/apis/nvidia.com/v1beta1/dynamographdeployments", api.list_objects)
        app.router.add_get(
            "/apis/nvidia.com/v1beta1/namespaces/{namespace}/dynamographdeployments",
            api.list_objects,
        )
        app.router.add_get("/apis/apps/v1/namespaces/{namespace}/deployments", api.list_objects)
        app.router.add_get("/api/v1/namespaces/{namespace}", api.read_namespace)
        app.router.add_post(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", api.access_review
        )
        core, batch = "/api/v1/namespaces/{namespace}", "/apis/batch/v1/namespaces/{namespace}"
        app.router.add_get(core + "/pods/{name}/log", api.pod_log)
        app.router.add_get(core + "/pods/{name}", api.read_pod)
        app.router.add_get(core + "/services/{name}", api.read_service)
        resources = ((core, "configmaps"), (core, "services"), (core, "pods"), (batch, "jobs"))
        for prefix, resource in resources:
            app.router.add_post(f"{prefix}/{resource}", api.create)
            app.router.add_delete(prefix + "/{resource}/{name}", api.delete)
        app.router.add_get(batch + "/jobs/{name}/status", api.read_job)
        app.router.add_get(batch + "/jobs/{name}", api.read_job)
        app.router.add_get(batch + "/jobs", api.list_jobs)
        metrics = "/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods"
        app.router.add_get(metrics, api.pod_metrics_list)
        app.router.add_get(metrics + "/{name}", api.pod_metrics_get)
        runner = web.AppRunner(app, shutdown_timeout=0.5)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        api.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        started.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await runner.cleanup()

    thread = threading.Thread(target=lambda: loop.run_until_complete(serve()), daemon=True)
    thread.start()
    assert started.wait(5), "the fake Kubernetes API did not start"
    try:
        yield api
    finally:
        stop.set()
        thread.join(10)
        loop.close()


@contextlib.contextmanager
def silent_kube_api(folder: Path) -> Iterator[Path]:
    """Fault injection, not a stand-in: a kubeconfig (in ``folder``) at an API server that takes
    connections (its listen backlog) and never answers, as a hung apiserver or a black-holed
    route does."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        api = FakeKubeApi(url=f"http://127.0.0.1:{silent.getsockname()[1]}")
        yield api.kubeconfig(folder)
