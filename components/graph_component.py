"""The serving graph as a Pulumi ComponentResource: DGD (or vLLM Deployments), Service, Secret.

Thin by design: the objects come from :mod:`manifests.graph`; this component registers them
under itself, orders the Secret before the workloads, and exposes typed outputs.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pydantic import BaseModel, ConfigDict

from components.k8s_objects import register_object, resource_name, stable_name


class GraphArgs(BaseModel):
    """What the graph component registers.

    Attributes:
        namespace: the testbed namespace.
        workloads: the DGD, or the vLLM Deployments (dicts).
        frontend_service: the Service the load step reaches (dict).
        secret: the HF token Secret (dict whose value is a Pulumi secret), or None.
        graph_name: DGD name (dynamo) or Deployment prefix (vllm-service).
        frontend_port: the Service's port.
        replace_graph: replace the DGD on a change of its spec instead of updating it in
            place (:attr:`clusterread.rollout.Rollout.replace_graph`).
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    namespace: str
    workloads: list[dict[str, Any]]
    frontend_service: dict[str, Any]
    secret: dict[str, Any] | None = None
    graph_name: str
    frontend_port: int
    replace_graph: bool = False


class TestbedGraph(pulumi.ComponentResource):
    """Registers the serving graph; outputs its name, the frontend Service name and port.

    Pass ``depends_on`` (the platform Helm release, the namespace) in ``opts``. Pulumi does not
    pass a parent's ``depends_on`` to its children, so every child gets it explicitly: the DGD
    then waits for the operator on ``up``, and ``pulumi destroy`` deletes it while the operator
    still runs to clear its finalizers.

    Outputs:
        graph_name (str), frontend_service (str), frontend_port (int), workloads (list of
        registered resources; the DGD first for a dynamo topology).
    """

    graph_name: pulumi.Output[str]
    frontend_service: pulumi.Output[str]
    frontend_port: pulumi.Output[int]

    __test__ = False  # not a pytest class despite the name

    def __init__(
        self, name: str, args: GraphArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("dynamo-testbed:index:TestbedGraph", name, None, opts)
        # a list of resources, or an Output of one (the platform check, without a namespace)
        upstream: Any = (opts.depends_on if opts is not None else None) or []
        child = pulumi.ResourceOptions(parent=self, depends_on=upstream)
        secret = register_object(args.secret, child) if args.secret is not None else None
        extra = [secret] if secret is not None else []
        workload_deps = (
            [*upstream, *extra]
            if isinstance(upstream, list)
            else pulumi.Output.from_input(upstream).apply(lambda deps: [*deps, *extra])
        )
        self.workloads = [
            self._register_replaceable(obj, workload_deps, args.replace_graph)
            for obj in args.workloads
        ]
        self.service = self._register_replaceable(args.frontend_service, upstream, False)
        self.graph_name = pulumi.Output.from_input(args.graph_name)
        self.frontend_service = pulumi.Output.from_input(args.frontend_service["metadata"]["name"])
        self.frontend_port = pulumi.Output.from_input(args.frontend_port)
        self.register_outputs(
            {
                "graphName": self.graph_name,
                "frontendService": self.frontend_service,
                "frontendPort": self.frontend_port,
            }
        )

    def _register_replaceable(
        self, obj: dict[str, Any], depends_on: Any, replace_on_spec: bool
    ) -> pulumi.CustomResource:
        """Register a workload or the Service under :func:`stable_name`, delete-before-replace
        (a renamed DGD frees its GPU shares, a renamed Service its nodePort, before the new one
        is created), aliased to :func:`resource_name` (a stack whose state holds the object
        under that name keeps its resource); with ``replace_on_spec`` a change of ``spec``
        replaces it.

        A Deployment is replaced on a change of ``spec.strategy``: one created without the
        program's ``Recreate`` (by an earlier version of the program) carries the
        ``rollingUpdate`` block the API server defaulted at create (``SetDefaults_Deployment``,
        kubernetes ``pkg/apis/apps/v1/defaults.go``); server-side apply keeps a field it did not
        set, and validation refuses ``rollingUpdate`` beside ``type: Recreate``
        (``ValidateDeploymentStrategy``, ``pkg/apis/apps/validation/validation.go``;
        pulumi/pulumi-kubernetes#2843, open), while the Python SDK cannot send the
        ``rollingUpdate: null`` that would clear it (:func:`stackmodel.platform.null_paths`).
        The provider's diff of the old inputs (no ``strategy``) against the new lists
        ``spec.strategy`` (``provider/pkg/provider/provider.go`` L1494-1550: the live object
        pruned to the old inputs, then patched, at ``tests/cli_rules/kubernetes_await.
        PULUMI_KUBERNETES_COMMIT``), and the engine turns a listed path into a replacement
        (pulumi/pulumi ``pkg/resource/deploy/step_generator.go`` L1946, L3170-3206), delete
        first, as Recreate would have stopped the old pods first.
        """
        replace_on = ["spec"] if replace_on_spec else []
        if obj["kind"] == "Deployment":
            replace_on.append("spec.strategy")
        opts = pulumi.ResourceOptions(
            parent=self,
            depends_on=depends_on,
            delete_before_replace=True,
            aliases=[pulumi.Alias(name=resource_name(obj))],
            replace_on_changes=replace_on or None,
        )
        return register_object(obj, opts, stable_name(obj))
