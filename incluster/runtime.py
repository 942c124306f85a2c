"""The in-cluster load step's lifecycle with the official ``kubernetes`` client: create the run's
objects (:func:`incluster.manifests.load_objects`) in the stack's namespace, wait for the Job
until it completes, fails or the step's deadline passes, read every client pod's log, turn the
logs into the results folder (:func:`incluster.collect.collect`) and delete the objects,
whatever happened (the Job with its pods: ``propagationPolicy: Background``).

:func:`run_probe_pods` does the same for the KV-path probe's pod pair (:mod:`incluster.probe`).
Imported only when a step runs in the cluster (``pulumi preview`` never pays for the client).
Access is the stack's Kubernetes provider's (:func:`kubeclient.client.api_client`).
"""

import contextlib
import hashlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from incluster.collect import collect, pod_summary
from incluster.manifests import (
    FOLDER_ANNOTATION,
    ROLE_NAME,
    LoadJob,
    dry_run_pod,
    leftover_selector,
    load_objects,
    stack_label,
)
from incluster.probe import figures_from_log
from incluster.sources import pod_files
from kubeclient.client import KubeAccessError, api_client
from measurement.results import GridResult
from outputs.folder_writer import read_result
from workload.config import LoadConfig

API_ERRORS = (ApiException, HTTPError)
"""What a call to the API raises when it answers with an error or cannot be reached."""

POLL_S = 2.0
"""How often the Job's status is read while it runs (seconds)."""


@dataclass
class ClusterRun:
    """What an in-cluster run gave: the grid so far (None: no run finished), whether the
    deadline stopped it, what went wrong, naming the pods (None: nothing), and why ``stop``
    stopped it (None: it did not)."""

    result: GridResult | None
    deadline_exceeded: bool
    failure: str | None
    stopped: str | None = None


def job_name(stack: str, folder: str) -> str:
    """The Job name of results folder ``folder`` (``<stack>/<UTC time>``):
    ``load-<stack_label>-<the first 8 hex of its SHA-256>``. The same folder gives the same
    name, so a step that resumes it finds the Job an interrupted step left
    (:func:`clear_leftovers`)."""
    digest = hashlib.sha256(folder.encode()).hexdigest()[:8]
    return f"load-{stack_label(stack)}-{digest}"


def probe_name(stack: str) -> str:
    """A fresh name for one KV-path probe of ``stack``: ``probe-<stack_label>-<8 hex>``."""
    return f"probe-{stack_label(stack)}-{uuid.uuid4().hex[:8]}"


def _create(core: Any, batch: Any, namespace: str, obj: dict[str, Any]) -> None:
    kind = obj["kind"]
    if kind == "ConfigMap":
        core.create_namespaced_config_map(namespace, obj)
    elif kind == "Service":
        core.create_namespaced_service(namespace, obj)
    elif kind == "Pod":
        core.create_namespaced_pod(namespace, obj)
    else:
        batch.create_namespaced_job(namespace, obj)


def _delete(core: Any, batch: Any, namespace: str, obj: dict[str, Any]) -> None:
    """Delete one object; one already gone is fine."""
    name, kind = obj["metadata"]["name"], obj["kind"]
    with contextlib.suppress(*API_ERRORS):  # ttlSecondsAfterFinished cleans up what stays
        if kind == "ConfigMap":
            core.delete_namespaced_config_map(name, namespace)
        elif kind == "Service":
            core.delete_namespaced_service(name, namespace)
        elif kind == "Pod":
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        else:
            batch.delete_namespaced_job(name, namespace, propagation_policy="Background")


def _log(core: Any, pod: str, namespace: str, container: str) -> str:
    """A container's log as the API serves it. Read raw (``_preload_content=False``): the
    client would otherwise try to parse a log that is one JSON line as JSON and hand back its
    Python repr."""
    response = core.read_namespaced_pod_log(
        pod, namespace, container=container, _preload_content=False
    )
    return bytes(response.data).decode("utf-8", errors="replace")


def _log_or_empty(core: Any, pod: str, namespace: str) -> str:
    """The pod's log so far, "" while it has none (not started yet)."""
    try:
        return _log(core, pod, namespace, "probe")
    except ApiException:
        return ""


def _finished(job: Any) -> str | None:
    """``Complete`` or ``Failed`` (with the condition's reason and message) once the Job ended."""
    for condition in (job.status and job.status.conditions) or []:
        if condition.status == "True" and condition.type in ("Complete", "Failed"):
            if condition.type == "Complete":
                return "Complete"
            return f"Failed ({condition.reason}: {condition.message})"
    return None


class Refused(RuntimeError):
    """No access to the cluster, or it refused to create one of the objects; the message says
    what to do."""


def _forbidden(exc: Any, namespace: str, action: str) -> str:
    """The one line for a refused call: what the step may not do (``action``, e.g. "create a
    Job"), the API's answer, and the fix."""
    return (
        f"the load step may not {action} in namespace {namespace} ({exc.status} {exc.reason}); "
        f"bind the Role {ROLE_NAME} (`testbed load-role STACK`, docs/in-cluster.md) to your "
        "identity, or set load.runner: local"
    )


def _taken(obj: dict[str, Any], namespace: str) -> str:
    """The one line for a name taken (409 AlreadyExists): what holds it and the command that
    clears it (every object of a load run carries the label ``testbed/load-run: <name>``; a
    probe's object is named)."""
    name = obj["metadata"]["name"]
    run = (obj["metadata"].get("labels") or {}).get("testbed/load-run")
    what = (
        f"job,configmap,service,pod -l testbed/load-run={run}"
        if run
        else f"{obj['kind'].lower()} {name}"
    )
    return (
        f"a {obj['kind']} named {name} exists already in namespace {namespace} (left by an "
        f"interrupted step the step could not clear); `kubectl delete {what} -n {namespace}` "
        "clears it"
    )


def _is_forbidden(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status in (401, 403)


def _api_message(exc: ApiException) -> str:
    """The ``message`` of the API's Status answer, else its reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


def _dry_run(core: Any, ns: str, pod: dict[str, Any]) -> None:
    """Create ``pod`` as a server-side dry run (``dryRun=All``: validated and admitted, never
    stored; kubernetes.io docs v1.34, "API Concepts", "Dry-run").

    Raises:
        Refused: RBAC refused the create (the Role's fix), or admission did (its message:
            PodSecurity's ``violates PodSecurity ...``, the quota's ``exceeded quota: ...``,
            both 403 Forbidden), or the pod is invalid.
    """
    try:
        core.create_namespaced_pod(ns, pod, dry_run="All")
    except ApiException as exc:
        message = _api_message(exc)
        rbac = exc.status == 403 and "cannot create resource" in message  # not admission's
        if rbac or exc.status == 401:
            raise Refused(_forbidden(exc, ns, "create a Pod (the load pod's dry run)")) from None
        raise Refused(
            f"the namespace {ns} refused the load pod ({exc.status} {exc.reason}): {message}"
        ) from None
    except HTTPError as exc:
        raise Refused(f"create Pod (dry run): {exc}") from None


def _owned(core: Any, ns: str, owner: str, objects: list[dict[str, Any]]) -> None:
    """Make each of ``objects`` a dependent of Service ``owner`` (``metadata.ownerReferences``
    with its ``uid``): once the Service is deleted, the garbage collector deletes them, and the
    Job's pods with the Job (Kubernetes docs v1.34, "Owners and dependents" and "Garbage
    Collection", "Cascading deletion"; ``pkg/controller/garbagecollector/garbagecollector.go``
    ``attemptToDeleteItem``: a dependent whose owners are all gone is deleted). No
    ``blockOwnerDeletion``, which would need the ``update`` of the Service's finalizers
    (``OwnerReferencesPermissionEnforcement``). A Service that is not there (404) owns
    nothing.

    Raises:
        Refused: the Service could not be read (forbidden: naming the rule).
    """
    try:
        service = core.read_namespaced_service(owner, ns, _request_timeout=REQUEST_TIMEOUT_S)
    except ApiException as exc:
        if exc.status == 404:
            return
        if _is_forbidden(exc):
            raise Refused(_forbidden(exc, ns, f"read Service {owner}")) from None
        raise Refused(f"read Service {owner}: {exc.reason}") from None
    except API_ERRORS as exc:
        raise Refused(f"read Service {owner}: {exc}") from None
    reference = {"apiVersion": "v1", "kind": "Service", "name": owner, "uid": service.metadata.uid}
    for obj in objects:
        obj["metadata"]["ownerReferences"] = [reference]


@contextlib.contextmanager
def _created(
    objects: list[dict[str, Any]],
    kubeconfig: str | None,
    context: str | None,
    dry_run: dict[str, Any] | None = None,
    owner: str | None = None,
) -> Iterator[tuple[Any, Any, Any]]:
    """``(api client, CoreV1Api, BatchV1Api)`` with ``objects`` created in order in their
    namespace, after ``dry_run`` (a pod, if any) passed a server-side dry run, each a dependent
    of Service ``owner`` if given (:func:`_owned`); on leaving, whatever happened, those created
    are deleted (last first). A process killed inside leaves them to the owner's deletion.

    Raises:
        Refused: no access, or a create (or the dry run, or the owner's read) was refused
            (nothing is left behind).
    """
    try:
        api = api_client(kubeconfig, context)
    except KubeAccessError as exc:
        raise Refused(f"no access to the cluster: {exc}") from None
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    ns = objects[0]["metadata"]["namespace"]
    created: list[dict[str, Any]] = []
    try:
        if owner is not None:
            _owned(core, ns, owner, objects)
        if dry_run is not None:
            _dry_run(core, ns, dry_run)
        for obj in objects:
            try:
                _create(core, batch, ns, obj)
            except API_ERRORS as exc:
                kind = obj["kind"]
                reason = exc.reason if isinstance(exc, ApiException) else exc
                message = (
                    _forbidden(exc, ns, f"create a {kind}")
                    if _is_forbidden(exc)
                    else _taken(obj, ns)
                    if isinstance(exc, ApiException) and exc.status == 409
                    else f"create {kind}: {reason}"
                )
                raise Refused(message) from None
            created.append(obj)
        yield api, core, batch
    finally:
        for obj in reversed(created):
            _delete(core, batch, ns, obj)
        api.close()


START_GRACE_S = 120.0
"""How long a load pod may stay unschedulable or fail to pull its image, and the Job may lack
pods, before the step gives up (seconds): the scheduler retries an unschedulable pod and the
kubelet a failed pull with a back-off, so a passing state is not an error, but the step's
deadline (an hour and more) is no time to wait for one that stays."""

NEVER_STARTS = frozenset({"InvalidImageName", "ErrImageNeverPull"})
"""Container waiting reasons no retry ends (Kubernetes 1.34 ``pkg/kubelet/images/types.go``)."""

MAY_NOT_START = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "CreateContainerError"}
)
"""Container waiting reasons the kubelet retries (Kubernetes 1.34; the image's:
``pkg/kubelet/images/types.go``, ``image_manager.go`` ``EnsureImageExists``, "Back-off pulling
image"; the container's: ``pkg/kubelet/kuberuntime/kuberuntime_container.go``,
``ErrCreateContainerConfig``, ``ErrCreateContainer``): an error once they last
:data:`START_GRACE_S`."""


def _start_problem(pod: dict[str, Any]) -> tuple[str, bool] | None:
    """Why a pending pod is not starting and whether no retry ends it, or None: a container
    waiting with a reason of :data:`NEVER_STARTS` / :data:`MAY_NOT_START` (its message), or the
    scheduler's ``PodScheduled: False`` condition with reason ``Unschedulable`` (Kubernetes
    1.34 ``pkg/scheduler/schedule_one.go``, ``handleSchedulingFailure``; its message says which
    nodes lack what)."""
    status = pod.get("status") or {}
    if status.get("phase", "Pending") != "Pending":
        return None
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in NEVER_STARTS | MAY_NOT_START:
            message = f": {waiting['message']}" if waiting.get("message") else ""
            return f"{reason}{message}", reason in NEVER_STARTS
    for condition in status.get("conditions") or []:
        if (condition.get("type"), condition.get("status")) == ("PodScheduled", "False") and (
            condition.get("reason") == "Unschedulable"
        ):
            message = f": {condition['message']}" if condition.get("message") else ""
            return f"Unschedulable{message}", False
    return None


@dataclass
class PodStartWatch:
    """Tells a pod that cannot start (:func:`_start_problem`) once its state has lasted
    ``grace_s`` (the load Job's pods, the KV-path probe's)."""

    grace_s: float
    since: dict[str, float] = field(default_factory=dict)

    def check(self, pods: list[dict[str, Any]], now: float) -> str | None:
        """The first pod that cannot start, as ``<pod> cannot start: <reason>: <message>``;
        None while all may yet start."""
        for pod in pods:
            name = pod["metadata"]["name"]
            problem = _start_problem(pod)
            if problem is None:
                self.since.pop(name, None)
                continue
            why, final = problem
            first = self.since.setdefault(name, now)
            if final or now - first >= self.grace_s:
                lasted = "" if final else f" (for {now - first:.0f} s)"
                return f"{name} cannot start: {why}{lasted}"
        return None


@dataclass(kw_only=True)
class StartWatch(PodStartWatch):
    """A load Job's :class:`PodStartWatch`, which also tells a Job that has had fewer pods than
    clients for ``grace_s`` since ``created`` (the namespace's quota or admission refused the
    rest: the Job controller only records events)."""

    job: LoadJob
    created: float

    def check(self, pods: list[dict[str, Any]], now: float) -> str | None:
        """The first pod that cannot start, or the missing pods; None while all may yet
        start."""
        found = super().check(pods, now)
        if found is not None:
            return found
        if len(pods) < self.job.clients and now - self.created >= self.grace_s:
            return (
                f"Job {self.job.name} has {len(pods)} of {self.job.clients} pods after "
                f"{self.grace_s:.0f} s: the namespace refused the others (`kubectl describe job "
                f"{self.job.name} -n {self.job.namespace}` shows why)"
            )
        return None


def _job_pods(api: Any, core: Any, job: LoadJob) -> list[dict[str, Any]]:
    """The Job's pods (camelCase dicts, as the API returns them)."""
    selector = f"batch.kubernetes.io/job-name={job.name}"
    items = core.list_namespaced_pod(job.namespace, label_selector=selector).items
    return [api.sanitize_for_serialization(p) for p in items]


def _wait_for_job(
    api: Any,
    core: Any,
    batch: Any,
    job: LoadJob,
    deadline: float,
    poll_s: float,
    stop: Callable[[], str | None],
    grace_s: float,
) -> tuple[str | None, bool, str | None, str | None]:
    """Poll the Job until it ends (:func:`_finished`), ``deadline`` passes, ``stop`` says why
    to stop or a pod cannot start (:class:`StartWatch`): (how it ended, None if it had not;
    whether the deadline stopped the wait; what ``stop`` said; which pod cannot start)."""
    watch = StartWatch(grace_s, job=job, created=time.monotonic())
    while True:
        ended = _finished(batch.read_namespaced_job_status(job.name, job.namespace))
        if ended is not None:
            return ended, False, None, None
        if time.monotonic() >= deadline:
            return None, True, None, None
        reason = stop()
        if reason is not None:
            return None, False, reason, None
        cannot_start = watch.check(_job_pods(api, core, job), time.monotonic())
        if cannot_start is not None:
            return None, False, None, cannot_start
        time.sleep(min(poll_s, max(deadline - time.monotonic(), 0.0)))


def _never() -> str | None:
    return None


def _pods_and_logs(
    api: Any, core: Any, job: LoadJob
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The Job's pods (camelCase dicts, as the API returns them) and their logs by pod name (a
    pod that never started has none)."""
    try:
        pods = _job_pods(api, core, job)
    except API_ERRORS:
        return [], {}
    logs = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        with contextlib.suppress(*API_ERRORS):  # a pod that never started has no log
            logs[name] = _log(core, name, job.namespace, "loadgen")
    return pods, logs


LEFTOVER_WAIT_S = 120.0
"""How long the step waits for a leftover Job to be gone (seconds): deleted in the foreground,
the Job stays until the garbage collector has deleted its pods (Kubernetes docs, "Garbage
Collection", "Foreground cascading deletion"), whose grace period is 30 s by default."""


def _delete_and_wait(
    core: Any, batch: Any, job: dict[str, Any], wait_s: float, poll_s: float
) -> bool:
    """Delete a leftover Job in the foreground, its ConfigMap and barrier Service (same name),
    and wait until the Job is gone (then its pods are, too); False if it was not within
    ``wait_s``."""
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    with contextlib.suppress(*API_ERRORS):
        batch.delete_namespaced_job(
            name, ns, propagation_policy="Foreground", _request_timeout=REQUEST_TIMEOUT_S
        )
    for kind in ("ConfigMap", "Service"):
        _delete(core, batch, ns, {"kind": kind, "metadata": {"name": name}})
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        try:
            batch.read_namespaced_job(name, ns, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            if exc.status == 404:
                return True
        except HTTPError:
            pass
        time.sleep(poll_s)
    return False


@dataclass
class Leftovers:
    """What :func:`clear_leftovers` did: one note per leftover Job (what it kept, what it
    deleted), why it could not look (None: it looked), and why the step must not start (None:
    it may)."""

    notes: list[str]
    unseen: str | None = None
    failure: str | None = None


@dataclass(frozen=True)
class Resumed:
    """The in-cluster run a step is about to start: its Job, grid and results folder. A
    leftover Job of the same name (the folder's: :func:`job_name`) is collected into it."""

    job: LoadJob
    config: LoadConfig
    run_dir: Path


REQUEST_TIMEOUT_S = 10.0
"""Each call of the leftover check waits at most this long (seconds): it runs before every
step, also one with ``load.runner: local`` that may not reach the cluster at all."""


def clear_leftovers(
    namespace: str,
    stack: str,
    resumed: Resumed | None = None,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    wait_s: float = LEFTOVER_WAIT_S,
    poll_s: float = POLL_S,
) -> Leftovers:
    """Before a step runs its grid: find the load Jobs an interrupted step of ``stack`` left in
    ``namespace`` (:func:`incluster.manifests.leftover_selector`; a second Ctrl-C SIGKILLs the
    provider, so its cleanup never ran) and clear them, so that none loads the frontend beside
    the new grid. The Job of the ``resumed`` run's folder (the same name) is collected first,
    running or ended: the runs its clients finished are written to its ``run_dir`` as any
    collection's, so the step then skips them; any other is deleted without collecting (its
    folder is not the one being resumed). Each is deleted in the foreground and waited for, so
    that no pod of it still loads the frontend or answers at the barrier's name when the new
    Job starts."""
    try:
        api = api_client(kubeconfig, context)
    except KubeAccessError as exc:
        return Leftovers([], f"no access to the cluster: {exc}")
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    notes: list[str] = []
    try:
        try:
            found = batch.list_namespaced_job(
                namespace,
                label_selector=leftover_selector(stack),
                _request_timeout=REQUEST_TIMEOUT_S,
            ).items
        except API_ERRORS as exc:
            why = _forbidden(exc, namespace, "list Jobs") if _is_forbidden(exc) else exc
            return Leftovers([], f"could not look for a leftover load Job: {why}")
        for item in found:
            left = api.sanitize_for_serialization(item)
            name = left["metadata"]["name"]
            state = _finished(item) or "still running"
            if resumed is not None and name == resumed.job.name:
                job, run_dir = resumed.job, resumed.run_dir
                before = read_result(run_dir)
                _, logs = _pods_and_logs(api, core, job)
                clients = int(left["spec"]["completions"])
                after = collect(logs, clients, job.url, job.model, resumed.config, run_dir)
                runs = len(after.result.runs if after.result else [])
                kept = runs - len(before.runs if before else [])
                notes.append(
                    f"found Job {name} of this results folder, left by an interrupted step "
                    f"({state}): kept the {kept} runs it finished, then deleted it"
                )
            else:
                folder = (left["metadata"].get("annotations") or {}).get(FOLDER_ANNOTATION)
                notes.append(
                    f"deleted leftover load Job {name} ({state}) of results folder "
                    f"{folder or 'unknown'}, left by an interrupted step; its runs were not "
                    "collected"
                )
            if not _delete_and_wait(core, batch, left, wait_s, poll_s):
                return Leftovers(
                    notes,
                    failure=f"leftover load Job {name} was still being deleted after "
                    f"{wait_s:g} s; run `pulumi up` again once `kubectl get job {name} -n "
                    f"{namespace}` finds none",
                )
    finally:
        api.close()
    return Leftovers(notes)


def run_in_cluster(
    job: LoadJob,
    config: LoadConfig,
    run_dir: Path,
    deadline: float,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    poll_s: float = POLL_S,
    stop: Callable[[], str | None] = _never,
    start_grace_s: float = START_GRACE_S,
) -> ClusterRun:
    """Run ``job`` and collect it into ``run_dir`` before ``deadline`` (monotonic s). Never
    raises for cluster trouble: no access, a refused create, a failed or OOMKilled pod and the
    deadline are in :attr:`ClusterRun.failure`, with the runs that finished kept.

    ``stop`` is asked at every poll (the load step's stop file:
    :func:`loadstep.folder.stop_requested`); when it gives a reason the step stops
    waiting, keeps the runs every client finished and deletes the Job: the run in flight is
    dropped (a pod cannot see the file), and the next step resumes the folder.

    Before the Job, a pod of its template is created as a server-side dry run: the namespace's
    admission (PodSecurity, quota) refuses it at once, with its reason. A pod that then cannot
    start (unschedulable, its image not pulled) ends the wait after ``start_grace_s``, naming
    the pod and the reason."""
    objects = load_objects(job, pod_files(job.grid_json))
    try:
        with _created(objects, kubeconfig, context, dry_run_pod(objects[-1]), job.owner) as (
            api,
            core,
            batch,
        ):
            ended, exceeded, lost, stopped, cannot_start = None, False, None, None, None
            try:
                ended, exceeded, stopped, cannot_start = _wait_for_job(
                    api, core, batch, job, deadline, poll_s, stop, start_grace_s
                )
            except API_ERRORS as exc:
                lost = (
                    _forbidden(exc, job.namespace, f"read the status of Job {job.name}")
                    if _is_forbidden(exc)
                    else f"lost the Kubernetes API while waiting for Job {job.name}: {exc}"
                )
            finally:  # also on Ctrl-C: what the pods finished is kept before they are deleted
                pods, logs = _pods_and_logs(api, core, job)
                collected = collect(logs, job.clients, job.url, job.model, config, run_dir)
    except Refused as exc:
        return ClusterRun(None, False, str(exc))
    named = cannot_start.split(" ", 1)[0] if cannot_start else None
    summary = [p for p in pod_summary(pods) if p.split(" ", 1)[0] != named]
    problems = [p for p in (cannot_start, lost, collected.failure, *summary) if p]
    if ended is not None and ended != "Complete":
        problems.insert(0, f"Job {job.name} {ended}")
    if collected.missing:
        problems.append(f"no log from {', '.join(collected.missing)}")
    return ClusterRun(collected.result, exceeded, "; ".join(problems) or None, stopped)


@dataclass
class ProbeRun:
    """What the in-cluster KV-path probe gave: the initiator's figures (``{"nixl": ...,
    "copies": ...}``, :mod:`incluster.probe_pod`; None: none) and what went wrong (None:
    nothing), naming the pod."""

    figures: dict[str, Any] | None
    failure: str | None


def _pod_state(pod: dict[str, Any]) -> str:
    """``Pending: <why it is not scheduled>``, or the phase."""
    status = pod.get("status") or {}
    phase = str(status.get("phase", "Pending"))
    if phase == "Pending":
        why = [c.get("message") for c in status.get("conditions") or [] if c.get("message")]
        return f"Pending: {why[0]}" if why else phase
    return phase


def run_probe_pods(
    objects: list[dict[str, Any]],
    deadline: float,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    poll_s: float = POLL_S,
    start_grace_s: float = START_GRACE_S,
) -> ProbeRun:
    """Create the probe's objects (:func:`incluster.probe.probe_objects`: ConfigMap, Service,
    target, initiator), the initiator only once the target's log says ``READY`` (it accepts
    one connection and the initiator does not retry), wait until the initiator pod ends or
    ``deadline`` (monotonic s) passes, read the figures from its log
    (:func:`incluster.probe.figures_from_log`) and delete everything. A pod that cannot start
    for ``start_grace_s`` (:class:`PodStartWatch`: unschedulable, its image not pulled) ends the
    wait at once, naming it. Never raises for cluster trouble (no access, refused create, a pod
    that never scheduled, no figures)."""
    ns = objects[0]["metadata"]["namespace"]
    target, initiator = (obj["metadata"]["name"] for obj in objects[-2:])
    state, log = "Pending", ""
    starts = PodStartWatch(start_grace_s)
    try:
        with _created(objects[:-1], kubeconfig, context) as (api, core, _):
            while "READY " not in _log_or_empty(core, target, ns):
                pod = api.sanitize_for_serialization(core.read_namespaced_pod(target, ns))
                cannot_start = starts.check([pod], time.monotonic())
                if cannot_start is not None:
                    return ProbeRun(None, cannot_start)
                if _pod_state(pod) == "Failed" or time.monotonic() >= deadline:
                    tail = " | ".join(_log_or_empty(core, target, ns).strip().splitlines()[-3:])
                    return ProbeRun(None, f"{target} {_pod_state(pod)}: not ready ({tail})")
                time.sleep(poll_s)
            with _created(objects[-1:], kubeconfig, context):
                while True:
                    pod = api.sanitize_for_serialization(core.read_namespaced_pod(initiator, ns))
                    state = _pod_state(pod)
                    cannot_start = starts.check([pod], time.monotonic())
                    if cannot_start is not None:
                        return ProbeRun(None, cannot_start)
                    if state in ("Succeeded", "Failed") or time.monotonic() >= deadline:
                        break
                    time.sleep(poll_s)
                log = _log(core, initiator, ns, "probe")
    except Refused as exc:
        return ProbeRun(None, str(exc))
    except API_ERRORS as exc:
        return ProbeRun(None, f"the Kubernetes API failed while the probe ran: {exc}")
    figures = figures_from_log(log)
    if figures is not None and "error" in figures:
        return ProbeRun(None, f"{initiator} {state}: {figures['error']}")
    if figures is not None:
        return ProbeRun(figures, None if state == "Succeeded" else f"{initiator} {state}")
    tail = " | ".join(log.strip().splitlines()[-3:])
    return ProbeRun(None, f"{initiator} {state}: no figures" + (f" ({tail})" if tail else ""))
