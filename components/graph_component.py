"""The serving graph as a Pulumi ComponentResource: DGD (or vLLM Deployments), Service, Secret.

Thin by design: the objects come from :mod:`manifests.graph`; this component registers them
under itself, orders the Secret before the workloads, and exposes typed outputs.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pydantic import BaseModel, ConfigDict

from components.k8s_objects import register_object


class GraphArgs(BaseModel):
    """What the graph component registers.

    Attributes:
        namespace: the testbed namespace.
        workloads: the DGD, or the vLLM Deployments (dicts).
        frontend_service: the Service the load step reaches (dict).
        secret: the HF token Secret (dict whose value is a Pulumi secret), or None.
        graph_name: DGD name (dynamo) or Deployment prefix (vllm-service).
        frontend_port: the Service's port.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    namespace: str
    workloads: list[dict[str, Any]]
    frontend_service: dict[str, Any]
    secret: dict[str, Any] | None = None
    graph_name: str
    frontend_port: int


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
        upstream = list(opts.depends_on or []) if opts is not None else []  # type: ignore[arg-type]
        child = pulumi.ResourceOptions(parent=self, depends_on=upstream)
        secret = register_object(args.secret, child) if args.secret is not None else None
        workload_opts = pulumi.ResourceOptions(
            parent=self, depends_on=[*upstream, *([secret] if secret is not None else [])]
        )
        self.workloads = [register_object(obj, workload_opts) for obj in args.workloads]
        self.service = register_object(args.frontend_service, child)
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
