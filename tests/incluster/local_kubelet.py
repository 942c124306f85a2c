"""A local stand-in for the kubelet: starts the container of a rendered load Job's pod as a
subprocess with exactly its command, arguments and environment (plus ``JOB_COMPLETION_INDEX``,
which Kubernetes sets in an Indexed Job's pods), its ConfigMap's items written under a folder
that stands for the mount path (paths in args and env are moved there), and a ``blocked``
folder first on ``PYTHONPATH`` whose pandas, pyarrow, matplotlib, rich, kubernetes and pulumi
raise ImportError: the runtime image may not need them. The pod's stdout is its log.
`controller` plays the Job controller for the fake Kubernetes API (tests/fake_kube_api.py),
`pod_runner` the kubelet of plain pods (the KV-path probe's).

What it emulates, and the source each follows (tests/incluster/test_stand_ins.py states the
rules; the runtime tests run them):

- an Indexed Job's pods: ``JOB_COMPLETION_INDEX`` in the environment, the hostname
  ``<job>-<index>``, the ``batch.kubernetes.io/job-name`` label and the completion-index
  annotation (kubernetes.io docs v1.34, "Jobs": "Completion mode", "Job labels");
- a ConfigMap volume with ``items``: each key written as a file at its ``path`` under the
  mount (docs, "ConfigMaps", "Using ConfigMaps as files from a Pod");
- pod phases with ``restartPolicy: Never``: Running, then Succeeded on exit 0, else Failed with
  the container's ``terminated`` state (docs, "Pod Lifecycle", "Pod phase"); a SIGKILLed
  container is ``OOMKilled`` with exit 137 (128 + SIGKILL, the runtime's report of the
  cgroup OOM kill: docs, "Assign Memory Resources", "Exceed a Container's memory limit");
- the Job controller's verdict and its deletion of a failed Job's active pods
  (:func:`job_verdict`, :data:`JOB_CONTROLLER`); the defaulted ``backoffLimit``
  (:func:`backoff_limit`);
- pods the scheduler cannot place and images the kubelet cannot pull (:func:`unschedulable`,
  :func:`image_pull_backoff`), and pods the namespace's admission refuses
  (``FakeKubeApi.admit``, asked for every pod the controller creates).
"""

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fake_kube_api import FakeKubeApi

from incluster.barrier import PORT
from incluster.probe import PROBE_PORT
from simulator.localgraph import free_port

DELAY_MS = 20.0
"""The first-token delay (ms) of the tests' fixed-delay server (conftest.py); it streams 8
tokens."""

BLOCKED = ("pandas", "pyarrow", "matplotlib", "rich", "kubernetes", "pulumi", "components")


def materialize(spec: dict[str, Any], configmap: dict[str, Any], root: Path) -> Path:
    """Write the pod spec's ConfigMap volume under ``root`` as the kubelet mounts it; returns
    the local folder that stands for the mount path."""
    (volume,) = spec["volumes"]
    (mount,) = spec["containers"][0]["volumeMounts"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    local = root / mount["mountPath"].lstrip("/")
    for item in volume["configMap"]["items"]:
        path = local / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(configmap["data"][item["key"]])
    blocked = root / "blocked"
    for name in BLOCKED:
        (blocked / name).mkdir(parents=True, exist_ok=True)
        (blocked / name / "__init__.py").write_text(
            f"raise ImportError('{name} is not needed in the load pod')\n"
        )
    return local


def start_pod(
    spec: dict[str, Any],
    configmap: dict[str, Any],
    root: Path,
    replace: dict[str, str] | None = None,
    index: int | None = None,
    node: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start the container of pod ``spec`` (pod ``index`` of an Indexed Job: its
    ``JOB_COMPLETION_INDEX``); ``replace`` maps argument values (the in-cluster URL, the
    barrier or target host and port) to local ones. Its working directory is an empty folder:
    only the mounted sources and the installed packages are importable. ``node``: a folder put
    first on its path, whose ``sitecustomize.py`` makes the process see another node (its
    clocks: ``skewed_node``)."""
    local = materialize(spec, configmap, root)
    container = spec["containers"][0]
    mount = container["volumeMounts"][0]["mountPath"]
    assert container["command"][:1] == ["python3"]
    args = [str(local) + a[len(mount) :] if a.startswith(mount) else a for a in container["args"]]
    args = [(replace or {}).get(a, a) for a in args]
    env = {"PATH": os.environ["PATH"]}
    if index is not None:
        env["JOB_COMPLETION_INDEX"] = str(index)
    for var in container["env"]:
        value = var["value"]
        env[var["name"]] = str(local) + value[len(mount) :] if value.startswith(mount) else value
    env["PYTHONPATH"] = f"{root / 'blocked'}{os.pathsep}{env['PYTHONPATH']}"
    if node is not None:
        env["PYTHONPATH"] = f"{node}{os.pathsep}{env['PYTHONPATH']}"
    cwd = root / f"cwd-{len(list(root.glob('cwd-*')))}"
    cwd.mkdir()
    command = [sys.executable, *container["command"][1:], *args]
    return subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


JOB_CONTROLLER = "kubernetes pkg/controller/job/job_controller.go (read at commit 6ae037f1)"
"""The source the stand-in Job controller follows; its functions are named where used."""

MAX_INT32 = 2**31 - 1


def backoff_limit(spec: dict[str, Any]) -> int:
    """``spec.backoffLimit`` as the API server defaults it: 6, or 2147483647 when
    ``backoffLimitPerIndex`` is set (JobSpec.backoffLimit, the Kubernetes 1.34 OpenAPI
    description: "When backoffLimitPerIndex is specified, backoffLimit defaults to
    2147483647")."""
    default = MAX_INT32 if spec.get("backoffLimitPerIndex") is not None else 6
    return int(spec.get("backoffLimit", default))


def pod_object(
    job: dict[str, Any], index: int, code: int | None, reason: str = "Error"
) -> dict[str, Any]:
    """The pod of ``index`` as the API returns it: Running (``code`` None), else Succeeded (exit
    0) or Failed with its container's ``terminated`` state; labelled
    ``batch.kubernetes.io/job-name`` and annotated ``batch.kubernetes.io/job-completion-index``
    as the Job controller's pod template makes them (``job_controller.go`` manageJob, via
    ``addCompletionIndexAnnotation``; "Job labels" in the Jobs docs at v1.34)."""
    name = f"{job['metadata']['name']}-{index}"
    state: dict[str, Any] = {"running": {}}
    phase = "Running"
    if code is not None:
        state = {
            "terminated": {
                "exitCode": code,
                "reason": reason or ("Completed" if code == 0 else "Error"),
            }
        }
        phase = "Succeeded" if code == 0 else "Failed"
    return {
        "metadata": {
            "name": name,
            "namespace": "testbed",
            "labels": {"batch.kubernetes.io/job-name": job["metadata"]["name"]},
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
        },
        "status": {
            "phase": phase,
            "containerStatuses": [
                {
                    "name": "loadgen",
                    "state": state,
                    "image": "vllm-runtime",
                    "imageID": "",
                    "ready": code is None,
                    "restartCount": 0,
                }
            ],
        },
    }


def job_verdict(
    spec: dict[str, Any], ended: dict[int, int], past_deadline: bool
) -> tuple[str, str, str] | None:
    """What ``syncJob`` decides for an Indexed Job whose pods of index -> exit code ``ended``
    (the others active): ``(condition, reason, message)`` or None (still running). In
    syncJob's order: failed pods > backoffLimit ("BackoffLimitExceeded"), then the active
    deadline ("DeadlineExceeded", ``pastActiveDeadline``), then with backoffLimitPerIndex more
    failed indexes than maxFailedIndexes ("MaxFailedIndexesExceeded") or every index ended and
    one failed ("FailedIndexes"); else Complete once every index succeeded. The reasons and
    messages are syncJob's (``newFailureCondition`` calls). A failure reason means the
    controller deletes the still-active pods ("Remove active pods if Job failed",
    ``deleteActivePods``) and sets Failed only once they are gone (``delayTerminalCondition``:
    FailureTarget first)."""
    count = int(spec["completions"])
    failed = [i for i, code in ended.items() if code != 0]
    succeeded = [i for i, code in ended.items() if code == 0]
    if len(failed) > backoff_limit(spec):
        return "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"
    if past_deadline:
        return "Failed", "DeadlineExceeded", "Job was active longer than specified deadline"
    if spec.get("backoffLimitPerIndex") is not None:
        most = spec.get("maxFailedIndexes")
        if most is not None and len(failed) > int(most):
            return (
                "Failed",
                "MaxFailedIndexesExceeded",
                "Job has exceeded the specified maximal number of failed indexes",
            )
        if failed and len(failed) + len(succeeded) >= count:
            return "Failed", "FailedIndexes", "Job has failed indexes"
    if len(succeeded) >= count:
        return "Complete", "", ""
    return None


def unschedulable(message: str) -> dict[str, Any]:
    """The status of a pod the scheduler could not place: Pending, ``PodScheduled: False``
    with reason ``Unschedulable`` and the scheduler's message (kubernetes
    ``pkg/scheduler/schedule_one.go`` ``handleSchedulingFailure``), no container status yet."""
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    return {"phase": "Pending", "conditions": [condition | {"message": message}]}


def image_pull_backoff(image: str) -> dict[str, Any]:
    """The status of a pod whose image the kubelet cannot pull: scheduled, Pending, its
    container waiting with reason ``ImagePullBackOff`` and message ``Back-off pulling image
    "<image>"`` (kubernetes ``pkg/kubelet/images/image_manager.go``, ``ErrImagePullBackOff``)."""
    waiting = {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
    return {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {"name": "loadgen", "state": {"waiting": waiting}, "image": image, "imageID": "",
             "ready": False, "restartCount": 0}
        ],
    }  # fmt: skip


def controller(
    server: str,
    root: Path,
    url: str,
    kill_after_first_run: int | None = None,
    pending: dict[str, Any] | None = None,
) -> Callable[[FakeKubeApi, dict[str, Any]], None]:
    """The Job controller and kubelet: runs every index's pod, keeps its log and state, and
    after every pod's end decides as ``syncJob`` does (:func:`job_verdict`; also when
    ``activeDeadlineSeconds`` passes): on a failure it deletes the still-active pods, their
    objects and logs with them, then sets Failed; Complete once all succeeded. Deleting the
    Job kills its pods. Retries are not emulated: the Job must allow none (a failed pod of
    backoffLimit 0, or of an index with backoffLimitPerIndex 0, is never replaced). Pod
    ``kill_after_first_run`` is SIGKILLed once it has written its first run ("OOMKilled").
    Each pod is created only if the namespace's admission admits it (``FakeKubeApi.admit``: a
    refused pod is not created; the real controller records a FailedCreate event and tries
    again later, ``job_controller.go`` ``manageJob``). With ``pending`` (:func:`unschedulable`,
    :func:`image_pull_backoff`) the pods stay in that status and never start."""

    def on_job(api: FakeKubeApi, job: dict[str, Any]) -> None:
        configmap = api.objects[("ConfigMap", job["metadata"]["name"])]
        spec = job["spec"]
        count = spec["completions"]
        assert spec.get("backoffLimitPerIndex") in (None, 0), "retries are not emulated"
        assert spec.get("backoffLimitPerIndex") == 0 or backoff_limit(spec) == 0
        name = job["metadata"]["name"]
        replace = {url: server, f"{name}-0.{name}": "127.0.0.1", str(PORT): str(free_port())}
        pod_spec = spec["template"]["spec"]
        procs: dict[int, subprocess.Popen[bytes]] = {}
        for i in range(count):
            pod = pod_object(job, i, None)
            if pending is not None:
                pod["status"] = pending
            if api.admit(pod) is not None:
                continue
            api.pods[pod["metadata"]["name"]] = pod
            if pending is None:
                api.logs[pod["metadata"]["name"]] = ""
                procs[i] = start_pod(pod_spec, configmap, root, replace, i)
        ended: dict[int, int] = {}
        deleted: set[int] = set()
        lock = threading.Lock()
        started = time.monotonic()

        before = api.on_delete  # another Job's

        def on_delete(kind: str, deleted_name: str) -> None:
            if before is not None:
                before(kind, deleted_name)
            if (kind, deleted_name) == ("Job", name):
                for proc in procs.values():
                    proc.kill()

        api.on_delete = on_delete

        def sync() -> None:
            with lock:
                if job.get("status", {}).get("conditions"):
                    return  # finished: "if job was finished previously ... return nil"
                deadline = spec.get("activeDeadlineSeconds")
                past = deadline is not None and time.monotonic() - started >= deadline
                verdict = job_verdict(spec, ended, past)
                if verdict is None:
                    return
                condition, reason, message = verdict
                if condition == "Failed":  # "Remove active pods if Job failed."
                    for i in range(count):
                        if i not in ended and i in procs:
                            deleted.add(i)
                            procs[i].kill()
                            api.pods.pop(f"{name}-{i}", None)
                            api.logs.pop(f"{name}-{i}", None)
                failed = sorted(i for i, c in ended.items() if c != 0)
                status: dict[str, Any] = {
                    "succeeded": sum(c == 0 for c in ended.values()),
                    "failed": len(failed) + len(deleted),
                    "conditions": [{"type": condition, "status": "True"}],
                }
                if reason:
                    status["conditions"][0] |= {"reason": reason, "message": message}
                if spec.get("backoffLimitPerIndex") is not None:
                    status["failedIndexes"] = ",".join(map(str, failed))
                job["status"] = status

        def follow(i: int, proc: subprocess.Popen[bytes]) -> None:
            log = f"{name}-{i}"
            assert proc.stdout is not None
            for line in proc.stdout:
                with lock:
                    if i in deleted:
                        break
                    api.logs[log] += line.decode()
                if i == kill_after_first_run and line.startswith(b'{"tb":"run"'):
                    proc.send_signal(signal.SIGKILL)
            code = proc.wait()
            with lock:
                if i in deleted or ("Job", name) not in api.objects:
                    return  # deleted: its pod object and log are gone
                ended[i] = code
                killed = code == -signal.SIGKILL
                api.pods[log] = pod_object(job, i, *((137, "OOMKilled") if killed else (code, "")))
            sync()

        for i, proc in procs.items():
            threading.Thread(target=follow, args=(i, proc), daemon=True).start()
        if spec.get("activeDeadlineSeconds") is not None:
            timer = threading.Timer(spec["activeDeadlineSeconds"], sync)
            timer.daemon = True
            timer.start()

    return on_job


def pod_runner(root: Path, port: int) -> Callable[[FakeKubeApi, dict[str, Any]], None]:
    """The kubelet for the KV-path probe's pods: runs a created Pod's container (the target on
    local ``port``, the initiator reaching it there), keeps its log, sets its phase (Running,
    then Succeeded or Failed by its exit code), kills it when it is deleted."""
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def on_delete(kind: str, name: str) -> None:
        if kind == "Pod" and name in procs:
            procs[name].kill()

    def on_pod(api: FakeKubeApi, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        configmap = api.objects[("ConfigMap", pod["spec"]["volumes"][0]["configMap"]["name"])]
        args = pod["spec"]["containers"][0]["args"]
        replace = {a: f"127.0.0.1:{port}" for a in args if a.endswith(f":{PROBE_PORT}")}
        replace[str(PROBE_PORT)] = str(port)
        proc = procs[name] = start_pod(pod["spec"], configmap, root, replace)
        api.on_delete = on_delete
        api.logs[name] = ""
        pod["status"] = {"phase": "Running"}

        def follow() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                api.logs[name] += line.decode()
            pod["status"] = {"phase": "Succeeded" if proc.wait() == 0 else "Failed"}

        threading.Thread(target=follow, daemon=True).start()

    return on_pod


def skewed_node(folder: Path, wall_ahead_s: float, boot_earlier_s: float) -> Path:
    """A ``node`` for :func:`start_pod`: a process there reads a wall clock ``wall_ahead_s``
    ahead of this machine's (``time.time``, ``time.time_ns``, ``datetime.now``: a node that
    NTP does not keep in step) and a monotonic clock ``boot_earlier_s`` ahead (CLOCK_MONOTONIC
    counts from boot, so another node's is unrelated to ours); both still tick at the same
    rate, as real clocks do over a run."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        f"""import datetime as _dt
import time as _time

_WALL, _BOOT = {wall_ahead_s!r}, {boot_earlier_s!r}
_time_ns, _time_s = _time.time_ns, _time.time
_mono_ns, _mono_s = _time.monotonic_ns, _time.monotonic
_time.time_ns = lambda: _time_ns() + int(_WALL * 1e9)
_time.time = lambda: _time_s() + _WALL
_time.monotonic_ns = lambda: _mono_ns() + int(_BOOT * 1e9)
_time.monotonic = lambda: _mono_s() + _BOOT


class _NodeDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return super().now(tz) + _dt.timedelta(seconds=_WALL)


_dt.datetime = _NodeDatetime
"""
    )
    return folder
