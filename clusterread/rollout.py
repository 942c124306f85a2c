"""Whether a change of a deployed stack can roll out on the GPU shares its cluster has (pure).

Preview reads what runs in the stack's namespace now (its DynamoGraphDeployment, its vLLM
Deployments: the API's JSON, :func:`clusterread.read.read_cluster`) and compares it with what
the program is about to apply. On the seed's cluster every GPU share is taken by the running
workers (4 time-sliced units on the 24 GB node, 2 on the 8 GB node), so any step that starts a
new GPU pod before an old one is gone leaves it Pending, and the wait of ``pulumi up`` runs to
its timeout. Each way a pod can start early, and what the program does about it:

- a vLLM Deployment's RollingUpdate: its pods take GPUs, so it rolls out with ``Recreate``
  (:func:`manifests.graph.vllm_deployment_manifests`), which stops the old pods first;
- an object whose identity changes (``topology.name`` or ``namespace``): pulumi-kubernetes
  replaces it (``.metadata.name`` and ``.metadata.namespace`` force a replacement:
  provider/pkg/provider/provider.go L1559-1560 at ``tests/cli_rules/kubernetes_await.
  PULUMI_KUBERNETES_COMMIT``), and the workloads are registered delete-before-replace
  (:class:`components.graph_component.TestbedGraph`), so the old one is deleted first;
- an in-place update of a DGD whose worker spec changed: the operator's managed rolling
  update hashes every worker component's spec together (``desiredWorkerHashes``:
  ``dynamo.ComputeDGDWorkersSpecHash``), so one worker's change starts a new generation of
  every worker's DynamoComponentDeployments beside the old ones, and deletes the old only once
  each worker component's new generation is ready (``continueRollingUpdate``,
  ``completedWorkerComponents``, ``completeRollingUpdate``: ai-dynamo/dynamo at
  03dfed81c3d05d88bf4ca06d21f021160c7cb97d,
  ``deploy/operator/internal/controller/dgd_worker_rollout_reconciler.go``); where those pods
  do not fit the free shares, the DGD is replaced instead
  (:attr:`Rollout.replace_graph`), the old one deleted first. Dynamo 1.7.1's operator "keeps
  the old prefill workers serving during an operator rollout" until the new generation can
  serve (its release notes; its source at tag v1.7.1 could not be read): its new prefill pods
  start beside every old one, which is what this check counts for every worker, so on a full
  cluster the replacement is what makes the change at 1.7.1 as at 1.7.0. A replacement involves
  no rollout of the operator's (``tests/cli_rules/test_rollout_rules.py`` states both);
- a vLLM Deployment that grows (more replicas, same pods): its added pods start beside the
  running ones; where they do not fit, they stay Pending (the sizing check,
  :func:`clusterread.checks.cluster_problems`, names the node class), and the rollout says so;
- an object that only the new program has (a vLLM Deployment of a renamed component, the DGD
  of a stack that was vllm-service): the engine creates it before it deletes what the program
  no longer registers (pulumi/pulumi ``pkg/resource/deploy/deployment_executor.go`` L486:
  ``GenerateDeletes`` runs once the program's registrations are done, at
  ``tests/cli_rules/pulumi_cli.PULUMI_COMMIT``), so where its pods do not fit the free shares
  the change is refused: park the stack first.

A replacement deletes first where the resource's ``deleteBeforeReplace`` option says so (it
overrides the provider's choice: ``pkg/resource/deploy/step_generator.go`` L2043-2047), and
``replaceOnChanges`` turns an update of the listed properties into a replacement (L1945-1946,
``applyReplaceOnChanges``); ``tests/cli_rules/test_rollout_rules.py`` states each rule.

Free shares per node class are the class's allocatable ``nvidia.com/gpu``
(:func:`clusterread.checks.class_gpu_units`) less what the stack's running pods request; pods
of other stacks are not subtracted, so a pass is necessary, not sufficient. A pod group whose
``nodeSelector`` is none of the node classes' counts nowhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clusterread.checks import GPU_RESOURCE
from manifests.graph import COMPONENT_LABEL, DGD_KIND

DEPLOYMENT_KIND = "Deployment"


@dataclass(frozen=True)
class PodGroup:
    """Identical pods of one workload: a DGD component or a Deployment.

    Attributes:
        owner: ``<kind> <name>`` of the workload.
        component: the DGD component's name, or the Deployment's component label.
        selector: the pods' ``nodeSelector``.
        gpus: ``nvidia.com/gpu`` one pod's containers request (limits), units.
        replicas: pods.
        template: what defines the pods: the DGD component without ``replicas``, the
            Deployment's ``spec.template``.
    """

    owner: str
    component: str
    selector: dict[str, str]
    gpus: int
    replicas: int
    template: Any


@dataclass
class Rollout:
    """How the change rolls out, as preview says it.

    Attributes:
        replace_graph: register the DGD so that this update replaces it (delete first)
            instead of updating it in place.
        hand_over_namespace: register the stack's namespace once more, kept on delete and
            without the program's label (:func:`clusterread.checks.namespace_handover`).
        notes: one line per decision, what ``pulumi up`` will do and why.
        problem: why the change cannot roll out, with the fix; None when it can.
    """

    replace_graph: bool = False
    hand_over_namespace: bool = False
    notes: list[str] = field(default_factory=list)
    problem: str | None = None


def _pod_gpus(pod_spec: Mapping[str, Any]) -> int:
    return sum(
        int(((c.get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE) or 0)
        for c in pod_spec.get("containers") or []
    )


def pod_groups(obj: Mapping[str, Any]) -> list[PodGroup]:
    """The pod groups of a DGD (one per component) or a Deployment (one); [] for any other
    kind."""
    owner = f"{obj['kind']} {obj['metadata']['name']}"
    spec = obj.get("spec") or {}
    if obj["kind"] == DGD_KIND:
        groups = []
        for component in spec.get("components") or []:
            pod_spec = (component.get("podTemplate") or {}).get("spec") or {}
            groups.append(
                PodGroup(
                    owner=owner,
                    component=str(component.get("name")),
                    selector=dict(pod_spec.get("nodeSelector") or {}),
                    gpus=_pod_gpus(pod_spec),
                    replicas=int(component.get("replicas") or 0),
                    template={k: v for k, v in component.items() if k != "replicas"},
                )
            )
        return groups
    if obj["kind"] == DEPLOYMENT_KIND:
        template = spec.get("template") or {}
        pod_spec = template.get("spec") or {}
        labels = obj["metadata"].get("labels") or {}
        return [
            PodGroup(
                owner=owner,
                component=str(labels.get(COMPONENT_LABEL, obj["metadata"]["name"])),
                selector=dict(pod_spec.get("nodeSelector") or {}),
                gpus=_pod_gpus(pod_spec),
                replicas=int(spec.get("replicas", 1)),
                template=template,
            )
        ]
    return []


def changed(live: Any, new: Any) -> bool:
    """Whether ``new`` (what the program renders) differs from ``live`` (what the API
    returns): every value ``new`` sets must be in ``live`` at the same path; what the API
    server or the operator's webhook added to ``live`` is not a change. Scalars compare as text
    (the API returns ``"1"`` where a manifest may say ``1``)."""
    if isinstance(new, Mapping):
        return not isinstance(live, Mapping) or any(
            k not in live or changed(live[k], v) for k, v in new.items()
        )
    if isinstance(new, list):
        return (
            not isinstance(live, list)
            or len(live) != len(new)
            or any(changed(a, b) for a, b in zip(live, new, strict=True))
        )
    return str(live) != str(new)


def _strategy(deployment: Mapping[str, Any]) -> str:
    """A Deployment's ``spec.strategy.type``; the API server's default, ``RollingUpdate``, when
    unset (``SetDefaults_Deployment``, kubernetes ``pkg/apis/apps/v1/defaults.go``)."""
    return str(((deployment.get("spec") or {}).get("strategy") or {}).get("type", "RollingUpdate"))


def _identity(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """What pairs a live object with a new one: the Pulumi resource it is (kind, and a
    Deployment's component), as :func:`components.k8s_objects.stable_name` names it."""
    labels = obj["metadata"].get("labels") or {}
    return obj["kind"], str(labels.get(COMPONENT_LABEL, "")) if obj["kind"] != DGD_KIND else ""


def _class_of(group: PodGroup, selectors: Mapping[str, Mapping[str, str]]) -> str | None:
    for name, selector in selectors.items():
        if dict(selector) == group.selector:
            return name
    return None


def plan_rollout(
    stack: str,
    new: Sequence[Mapping[str, Any]],
    live: Sequence[Mapping[str, Any]],
    classes: Mapping[str, tuple[Mapping[str, str], int]],
) -> Rollout:
    """How the stack's workloads go from ``live`` to ``new``.

    Args:
        stack: the stack (named in the fix).
        new: the DGD or the Deployments the program registers ([] when parked).
        live: the DGDs and Deployments of the stack running in its namespace.
        classes: per node class of the stack, its ``nodeSelector`` and its allocatable GPU
            units (:func:`clusterread.checks.class_gpu_units`).
    """
    rollout = Rollout()
    if not live or not new:
        return rollout
    selectors = {name: selector for name, (selector, _) in classes.items()}
    used = dict.fromkeys(classes, 0)
    for obj in live:
        for group in pod_groups(obj):
            where = _class_of(group, selectors)
            if where is not None:
                used[where] += group.gpus * group.replicas
    free = {name: units - used[name] for name, (_, units) in classes.items()}
    surge: dict[str, list[tuple[PodGroup, int]]] = {name: [] for name in classes}
    added: set[str] = set()
    in_place: list[str] = []

    def start(group: PodGroup, pods: int) -> None:
        where = _class_of(group, selectors)
        if where is not None and group.gpus and pods > 0:
            surge[where].append((group, group.gpus * pods))

    live_by_key = {_key(o): o for o in live}
    for obj in new:
        old = live_by_key.get(_key(obj))
        if old is None:  # created before what the program dropped is deleted
            added.add(f"{obj['kind']} {obj['metadata']['name']}")
            for group in pod_groups(obj):
                start(group, group.replicas)
            continue
        if _identity(old) != _identity(obj):
            rollout.notes.append(
                f"{old['kind']} {old['metadata']['namespace']}/{old['metadata']['name']} becomes"
                f" {obj['metadata']['namespace']}/{obj['metadata']['name']}: `pulumi up` replaces"
                " it, deleting the old one first, so its GPU shares are free before the new"
                " pods start"
            )
            continue
        if obj["kind"] == DEPLOYMENT_KIND and _strategy(old) != _strategy(obj):
            rollout.notes.append(
                f"Deployment {obj['metadata']['name']}: created with the {_strategy(old)}"
                f" strategy (an earlier version of the program), now {_strategy(obj)}:"
                " `pulumi up` replaces it, deleting the old one first (an update in place would"
                " keep the rollingUpdate the API server defaulted, which Recreate forbids)"
            )
            continue
        old_groups = {g.component: g for g in pod_groups(old)}
        groups = pod_groups(obj)
        respec = [
            g
            for g in groups
            if g.component not in old_groups
            or changed(old_groups[g.component].template, g.template)
        ]
        rolls = obj["kind"] == DGD_KIND and any(g.gpus for g in respec)
        for group in groups:
            before = old_groups.get(group.component)
            if rolls and group.gpus:  # a new generation of every worker
                start(group, group.replicas)
            elif before is not None and group not in respec:
                start(group, group.replicas - before.replicas)
        if rolls:
            in_place.append(
                f"DynamoGraphDeployment {obj['metadata']['name']}: updated in place; the"
                " operator starts the new pods of every worker beside the old ones, and they"
                " fit the free GPU shares"
            )
        if obj["kind"] == DEPLOYMENT_KIND and respec:
            rollout.notes.append(
                f"Deployment {obj['metadata']['name']}: its pods change; it rolls out with"
                " Recreate, every old pod stops before a new one starts (GPU pods: a"
                " RollingUpdate's surge pod would wait for a share none frees)"
            )
    return _fit(rollout, stack, new, classes, surge, free, added, in_place)


def _fit(
    rollout: Rollout,
    stack: str,
    new: Sequence[Mapping[str, Any]],
    classes: Mapping[str, tuple[Mapping[str, str], int]],
    surge: Mapping[str, list[tuple[PodGroup, int]]],
    free: Mapping[str, int],
    added: set[str],
    in_place: list[str],
) -> Rollout:
    """:func:`plan_rollout`'s verdict: where the pods that start (``surge``, GPU units per node
    class) fit the ``free`` units, the updates in place (``in_place``) are noted; where they do
    not, objects ``added`` make it a problem (park first), Deployments wait Pending, and a DGD
    is replaced instead (``replace_graph``)."""
    short = {
        name: (sum(units for _, units in starts), free[name])
        for name, starts in surge.items()
        if sum(units for _, units in starts) > free[name]
    }
    if not short:
        rollout.notes += in_place
        return rollout
    where = "; ".join(
        f"node class {name} has {has} free of {classes[name][1]} and the new pods need {need}"
        for name, (need, has) in short.items()
    )
    if added:
        rollout.problem = (
            f"{', '.join(sorted(added))} would start before what it replaces is deleted"
            " (Pulumi deletes what the program no longer registers last) and its pods do not"
            f" fit: {where}; park the stack first (`pulumi config set -s {stack} parked true`,"
            f" `pulumi up -s {stack}`), then make the change with `parked: false`"
        )
        return rollout
    dgd = next((o for o in new if o["kind"] == DGD_KIND), None)
    if dgd is None:  # Deployments that grow: the sizing check names what does not fit
        rollout.notes.append(
            f"the added pods do not fit ({where}): they stay Pending until shares free"
        )
        return rollout
    starters = sorted({g.component for starts in surge.values() for g, _ in starts})
    rollout.replace_graph = True
    rollout.notes.append(
        f"DynamoGraphDeployment {dgd['metadata']['name']}: updated in place, the operator would"
        f" start the new pods of {', '.join(starters)} beside the old ones, and {where}:"
        " `pulumi up` replaces the DGD instead, deleting the old one first (no serving until"
        " the new workers are ready; the load step and its stored results stay)"
    )
    return rollout
