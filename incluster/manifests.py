"""The in-cluster load step's Kubernetes objects, as plain dicts (pure; checked against the
Kubernetes 1.34 schemas in tests): the ConfigMap of the pod's sources and grid, the headless
Service of the start barrier (only with more than one client), the Indexed Job of the clients,
the Role the step needs, and the KV-path probe's pod pair.

Kubernetes behaviour relied on (kubernetes.io docs, "Jobs" at v1.34):

- ``completionMode: Indexed``: each pod gets its index in ``JOB_COMPLETION_INDEX`` and the
  hostname ``<job>-<index>``; with ``spec.template.spec.subdomain`` naming a headless Service
  that selects the pods, ``<job>-<index>.<service>`` resolves to the pod ("Completion mode";
  "Job with Pod-to-Pod Communication");
- ``batch.kubernetes.io/job-name`` is set on the Job's pods ("Job labels", since v1.27);
- ``activeDeadlineSeconds`` ends every pod of the Job when it passes (reason
  ``DeadlineExceeded``): the controller deletes them, their logs with them;
  ``ttlSecondsAfterFinished`` deletes a finished Job the step could not delete itself (e.g. the
  workstation went away).
- ``backoffLimitPerIndex: 0`` with ``restartPolicy: Never`` (GA in 1.33): a failed pod marks
  its index failed and is not replaced, and the other indexes run on; the Job fails
  (``FailedIndexes``) once every index has ended, so every pod's log stays readable until the
  step deletes the Job. Not ``backoffLimit: 0``: the first failed pod exceeds it, and the
  controller then deletes every pod still running, with the finished runs in their logs,
  before it marks the Job Failed (kubernetes/kubernetes at 6ae037f1,
  ``pkg/controller/job/job_controller.go``, ``syncJob``: ``exceedsBackoffLimit``, "Remove
  active pods if Job failed", ``deleteActivePods``). ``backoffLimit`` is left unset: with
  ``backoffLimitPerIndex`` it defaults to 2147483647 (JobSpec, Kubernetes 1.34 OpenAPI).
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from incluster.barrier import PORT
from incluster.sources import GRID_FILE, MOUNT_PATH, config_key

LOAD_LABELS = {"app.kubernetes.io/name": "testbed-load", "app.kubernetes.io/managed-by": "testbed"}
"""Labels of every object the load step creates."""

STACK_LABEL = "testbed/stack"
"""The label naming a load run's stack (:func:`stack_label`): how a step finds the Jobs an
interrupted step of its stack left behind."""

FOLDER_ANNOTATION = "testbed/results-folder"
"""The annotation naming a load run's results folder (``<stack>/<UTC time>``)."""


def stack_label(stack: str) -> str:
    """``stack`` as a DNS label of at most 37 characters (lower case, other characters ``-``):
    a label value, and the middle of the load objects' names."""
    base = "".join(c if c.isalnum() else "-" for c in stack.lower()).strip("-")[:37].strip("-")
    return base or "stack"


def leftover_selector(stack: str) -> str:
    """The label selector of every load Job of ``stack``."""
    return f"app.kubernetes.io/name={LOAD_LABELS['app.kubernetes.io/name']},{STACK_LABEL}=" + (
        stack_label(stack)
    )


NOT_LOAD_PODS = "app.kubernetes.io/name!=testbed-load"
"""A label selector for every pod but the load's own (the pod watch's: incidents are the
graph's)."""

CPU_REQUEST = "1"
"""One core per client: the pod runs its share in one event loop, which uses at most one."""

MEMORY_REQUEST = "512Mi"
MEMORY_LIMIT = "2Gi"
"""Memory of one client: the runtime's imports plus the records of one run; the entrypoint's
peak RSS is 164-234 MiB with 9,000-request runs (measured with ``bench/incluster_overhead.py``,
docs/in-cluster.md); the limit leaves room for larger runs."""

TTL_AFTER_FINISHED_S = 3600
"""A finished Job left behind is deleted by the TTL controller after an hour."""

DEADLINE_MARGIN_S = 30
"""The Job's ``activeDeadlineSeconds`` is the step's deadline plus this: the step stops waiting
first and still reads every pod's log before the Job ends them."""


class LoadJob(BaseModel):
    """One in-cluster run of a grid.

    Attributes:
        name: the Job's name (also the ConfigMap's and the barrier Service's), a DNS label of at
            most 52 characters, so ``<name>-<index>`` stays a valid hostname.
        namespace: the stack's namespace.
        image: the stack's runtime image (the nodes have pulled it already).
        url: the frontend's in-cluster base URL, e.g. ``http://testbed-frontend.ns.svc:8000``.
        model: served model name.
        grid_json: the :class:`workload.config.LoadConfig` as JSON.
        clients: pods that split each run (``load.clients``).
        deadline_s: the step's deadline, seconds.
        model_wait_s: the pods' wait for the model and the readiness gate, seconds.
        ready_successes: the readiness gate's completions in a row (None: no gate).
        tolerations: the pods' tolerations (every node class's, as for the frontend).
        node_selectors: the workers' node classes' selectors; the pods must run on a node that
            matches one of them (the runtime image is there; none: any node).
        skip: runs (prefix kinds, concurrency, repetition) already in the results folder being
            resumed: the pods measure only the others.
        tokens_per_word, sizing_source: the resumed runs' prompt sizing, which the pods reuse
            instead of calibrating (None: calibrate).
        stack: the stack (labelled :data:`STACK_LABEL`).
        folder: the results folder, ``<stack>/<UTC time>`` (annotated
            :data:`FOLDER_ANNOTATION`).
        owner: the stack's frontend Service, which every object of the run is a dependent of
            (:func:`incluster.runtime.run_in_cluster`), so that deleting it deletes them; None:
            no owner.
        prefill_metrics, decode_metrics: the base URLs of the prefill (and aggregated) and the
            decode workers' own ``/metrics`` (:mod:`loadstep.worker_urls`), which shard 0
            scrapes before and after every run (:class:`loadgen.server_metrics.ServerMetrics`).
    """

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=52)
    namespace: str
    image: str
    url: str
    model: str
    grid_json: str
    clients: int = Field(ge=1)
    deadline_s: float = Field(gt=0)
    model_wait_s: float = Field(gt=0)
    ready_successes: int | None = None
    tolerations: tuple[dict[str, str], ...] = ()
    node_selectors: tuple[dict[str, str], ...] = ()
    skip: tuple[tuple[int, int, int], ...] = ()
    tokens_per_word: float | None = None
    sizing_source: str | None = None
    stack: str
    folder: str
    owner: str | None = None
    prefill_metrics: tuple[str, ...] = ()
    decode_metrics: tuple[str, ...] = ()

    def metadata(self, name: str | None = None) -> dict[str, Any]:
        """``metadata`` of one of the run's objects."""
        labels = {
            **LOAD_LABELS,
            "testbed/load-run": self.name,
            STACK_LABEL: stack_label(self.stack),
        }
        return {
            "name": name or self.name,
            "namespace": self.namespace,
            "labels": labels,
            "annotations": {FOLDER_ANNOTATION: self.folder},
        }


def source_configmap(job: LoadJob, files: dict[str, str]) -> dict[str, Any]:
    """The ConfigMap holding the pod's files (:func:`incluster.sources.pod_files`), one key
    per file (:func:`~incluster.sources.config_key`)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": job.metadata(),
        "data": {config_key(path): text for path, text in sorted(files.items())},
    }


def barrier_service(job: LoadJob) -> dict[str, Any]:
    """The headless Service that gives the client pods their DNS names (the barrier's)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": job.metadata(),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"batch.kubernetes.io/job-name": job.name},
            "ports": [{"name": "barrier", "port": PORT, "protocol": "TCP"}],
        },
    }


def pod_args(job: LoadJob) -> list[str]:
    """The entrypoint's arguments (:func:`incluster.pod.main`)."""
    args = [
        "--url", job.url,
        "--model", job.model,
        "--grid", f"{MOUNT_PATH}/{GRID_FILE}",
        "--clients", str(job.clients),
        "--barrier-host", f"{job.name}-0.{job.name}",
        "--barrier-port", str(PORT),
        "--model-wait-s", f"{job.model_wait_s:g}",
    ]  # fmt: skip
    if job.ready_successes is not None:
        args += ["--ready-successes", str(job.ready_successes)]
    for key in job.skip:
        args += ["--skip", ":".join(map(str, key))]
    if job.tokens_per_word is not None and job.sizing_source is not None:
        args += ["--tokens-per-word", repr(job.tokens_per_word), "--sizing", job.sizing_source]
    for url in job.prefill_metrics:
        args += ["--prefill-metrics", url]
    for url in job.decode_metrics:
        args += ["--decode-metrics", url]
    return args


def load_job(job: LoadJob, files: dict[str, str]) -> dict[str, Any]:
    """The Indexed Job of ``job.clients`` pods running ``python3 -m incluster.pod`` in the
    runtime image (its venv's ``python3`` is first on ``PATH``: ``ENV PATH`` of the runtime
    stage of ai-dynamo/dynamo ``container/Dockerfile.vllm``) with the ConfigMap's ``files``
    mounted at :data:`~incluster.sources.MOUNT_PATH`. The pods need no API access (no token
    mounted) and no Service links."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [
            {
                "name": "loadgen",
                "image": job.image,
                "command": ["python3", "-m", "incluster.pod"],
                "args": pod_args(job),
                "env": [
                    {"name": "PYTHONPATH", "value": MOUNT_PATH},
                    {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                ],
                "volumeMounts": [{"name": "loadgen", "mountPath": MOUNT_PATH, "readOnly": True}],
                "resources": {
                    "requests": {"cpu": CPU_REQUEST, "memory": MEMORY_REQUEST},
                    "limits": {"memory": MEMORY_LIMIT},
                },
            }
        ],
        "volumes": [
            {
                "name": "loadgen",
                "configMap": {
                    "name": job.name,
                    "items": [{"key": config_key(p), "path": p} for p in sorted(files)],
                },
            }
        ],
    }
    if job.clients > 1:
        spec["subdomain"] = job.name
    if job.tolerations:
        spec["tolerations"] = [dict(t) for t in job.tolerations]
    if job.node_selectors:
        spec["affinity"] = worker_node_affinity(job.node_selectors)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": job.metadata(),
        "spec": {
            "completionMode": "Indexed",
            "completions": job.clients,
            "parallelism": job.clients,
            "backoffLimitPerIndex": 0,
            "activeDeadlineSeconds": int(job.deadline_s) + DEADLINE_MARGIN_S,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
            "template": {"metadata": {"labels": job.metadata()["labels"]}, "spec": spec},
        },
    }


def worker_node_affinity(selectors: tuple[dict[str, str], ...]) -> dict[str, Any]:
    """A required node affinity to any node that one of ``selectors`` matches: one
    ``nodeSelectorTerm`` per selector (terms are ORed, a term's expressions ANDed: Kubernetes
    docs, "Assigning Pods to Nodes", "Node affinity"), each label an ``In`` of its value."""
    terms = [
        {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in sel.items()]}
        for sel in selectors
    ]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }


def dry_run_pod(job_manifest: dict[str, Any]) -> dict[str, Any]:
    """A pod of the Job's template, for a server-side dry run (``dryRun=All``) before the Job is
    created: the namespace's admission (PodSecurity, ResourceQuota, LimitRange) answers for it
    at once, where the Job controller would only record a FailedCreate event per try."""
    template = job_manifest["spec"]["template"]
    meta = job_manifest["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-dry-run",
            "namespace": meta["namespace"],
            "labels": dict(template["metadata"]["labels"]),
        },
        "spec": template["spec"],
    }


def load_objects(job: LoadJob, files: dict[str, str]) -> list[dict[str, Any]]:
    """Every object of one run, in creation order: ConfigMap, barrier Service (more than one
    client), Job."""
    service = [barrier_service(job)] if job.clients > 1 else []
    return [source_configmap(job, files), *service, load_job(job, files)]


ROLE_NAME = "testbed-load-step"

LOAD_STEP_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "list", "delete"]},
    {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["configmaps", "services"], "verbs": ["create", "delete"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get", "list"]},
)
"""What the in-cluster load step does with the user's credentials, in the stack's namespace
only (:mod:`incluster.runtime`): create, read, list (its stack's leftover Jobs) and delete its
Job and read the Job's status (``GET .../jobs/<name>/status``: RBAC matches ``jobs/status``, a
resource of its own that a ``jobs`` rule does not cover: Kubernetes 1.34
``pkg/apis/rbac/v1/evaluation_helpers.go``, ``ResourceMatches``), create and delete its ConfigMap
and barrier Service, read the frontend Service (the owner of the run's objects: its ``uid``),
list and watch pods (its own, and the graph's for incidents: :mod:`kubeclient.pod_watch`) and
read their logs; create pods (the load pod's server-side dry run before the Job, and the
KV-path probe's two pods: :mod:`incluster.probe`) and delete them; and read the worker pods'
memory from the metrics API (:mod:`kubeclient.pod_memory`). That last one is what RBAC checks
for ``GET /apis/metrics.k8s.io/v1beta1/namespaces/<ns>/pods``: the resource ``pods`` of API group
``metrics.k8s.io`` (not a ``pods/metrics`` subresource of the core group), as metrics-server's
own ``system:aggregated-metrics-reader`` ClusterRole grants it (kubernetes-sigs/metrics-server
``manifests/base/rbac.yaml`` L3-13: apiGroups ``metrics.k8s.io``, resources ``pods`` and
``nodes``, verbs get, list, watch; aggregated into view, edit and admin); the step lists and
never watches, and reads no node. A test runs the step against a fake API that allows exactly
these rules."""


def load_step_role(namespace: str) -> dict[str, Any]:
    """A namespaced Role granting :data:`LOAD_STEP_RULES`: what a cluster admin binds to the
    identity that runs ``pulumi up`` when it has less (docs/in-cluster.md); nothing
    cluster-wide."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": ROLE_NAME, "namespace": namespace, "labels": dict(LOAD_LABELS)},
        "rules": [dict(rule) for rule in LOAD_STEP_RULES],
    }


def rbac_entry(namespace: str) -> dict[str, Any]:
    """The load step's entry of the ``rbac`` stack output (beside the operator's:
    :func:`stackmodel.rbac.rbac_summary`)."""
    rules = [
        f"{verb} {'/'.join(filter(None, [rule['apiGroups'][0], resource]))}"
        for rule in LOAD_STEP_RULES
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]
    return {
        "subject": "load step (load.runner: cluster), with your kubeconfig's identity",
        "scope": f"namespace/{namespace}",
        "rules": rules,
        "role": ROLE_NAME,
    }


def load_step_binding(namespace: str, subjects: list[dict[str, str]]) -> dict[str, Any]:
    """The RoleBinding of :func:`load_step_role` to ``subjects`` (RBAC ``Subject`` dicts:
    ``{"kind": "User" | "Group", "apiGroup": "rbac.authorization.k8s.io", "name": ...}`` or
    ``{"kind": "ServiceAccount", "name": ..., "namespace": ...}``) in ``namespace``."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": ROLE_NAME, "namespace": namespace, "labels": dict(LOAD_LABELS)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE_NAME},
        "subjects": subjects,
    }
