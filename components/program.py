"""The Pulumi program: read the stack's config, validate it, register the testbed.

``__main__.py`` calls :func:`main`. ``testbed render`` runs the same :func:`main` under Pulumi's
mocks, so what it writes is what ``pulumi up`` would apply.
"""

from __future__ import annotations

from typing import Any

import pulumi

from components.config import StackConfig, parse_stack_config, project_values
from components.errors import PROJECT
from components.graph_component import GraphArgs, TestbedGraph
from components.k8s_objects import register_object
from components.manifests import (
    dgd_manifest,
    frontend_service_manifest,
    hf_secret_manifest,
    namespace_manifest,
    vllm_deployment_manifests,
)
from components.platform import testbed_namespace_labels
from components.platform_component import DynamoPlatform
from components.rbac import load_step_rbac, rbac_summary
from components.stack_sizing import stack_sizing
from components.topology import FRONTEND_PORT, build_topology

LOAD_STEP_ACCOUNT = "testbed-load"
"""ServiceAccount of the post-deploy load step (reads the frontend Service and pods only)."""


def project_config() -> dict[str, Any]:
    """Every ``dynamo-testbed:*`` config value of the running stack (see ``project_values``).

    Reads the whole config map, not only known keys, so that unknown keys can be rejected.
    """
    from pulumi.runtime import config as runtime_config

    return project_values({**runtime_config.get_config_env(), **runtime_config.CONFIG.get()})


def main() -> None:
    """Entry point of ``pulumi up``/``preview``: validate, then register everything.

    Raises:
        StackConfigError: bad config; raised before any resource is registered.
    """
    stack = pulumi.get_stack()
    cfg = parse_stack_config(stack, project_config())
    token = pulumi.Config(PROJECT).get_secret("hfToken")
    deploy(cfg, token)


def deploy(cfg: StackConfig, hf_token: pulumi.Output[str] | None) -> None:
    """Register the testbed for a validated config and export its outputs.

    Outputs: ``namespace``, ``topology`` (kind), ``dgdName`` (None for vllm-service),
    ``frontendService``, ``frontendPort``, ``placement`` (component, type, replicas, nodeClass,
    gpus), ``rbac`` (what the stack grants), ``sizing`` (numbers with units in the keys),
    ``warnings``.
    """
    topology = build_topology(cfg)
    sizing = stack_sizing(cfg)
    for warning in sizing.warnings:
        pulumi.log.warn(warning)

    uses_dynamo = topology.kind == "dynamo"
    namespace = register_object(
        namespace_manifest(
            cfg.namespace, testbed_namespace_labels(cfg.platform) if uses_dynamo else {}
        )
    )
    depends: list[pulumi.Resource] = [namespace]
    if uses_dynamo:
        platform = DynamoPlatform("platform", cfg.platform, cfg.namespace, depends_on=[namespace])
        if platform.release is not None:
            depends.append(platform.release)

    rbac_objects = load_step_rbac(cfg.namespace, LOAD_STEP_ACCOUNT)
    for obj in rbac_objects:
        register_object(obj, pulumi.ResourceOptions(depends_on=[namespace]))

    with_token = hf_token is not None
    workloads = (
        [dgd_manifest(cfg, topology, with_hf_token=with_token)]
        if uses_dynamo
        else vllm_deployment_manifests(cfg, topology, with_hf_token=with_token)
    )
    service = frontend_service_manifest(cfg, topology)
    graph = TestbedGraph(
        "graph",
        GraphArgs(
            namespace=cfg.namespace,
            workloads=workloads,
            frontend_service=service,
            secret=hf_secret_manifest(cfg.namespace, hf_token) if hf_token is not None else None,
            graph_name=topology.name,
            frontend_port=FRONTEND_PORT,
        ),
        pulumi.ResourceOptions(depends_on=depends),
    )

    pulumi.export("namespace", cfg.namespace)
    pulumi.export("topology", topology.kind)
    pulumi.export("dgdName", topology.name if uses_dynamo else None)
    pulumi.export("frontendService", graph.frontend_service)
    pulumi.export("frontendPort", graph.frontend_port)
    pulumi.export("placement", topology.placement_table())
    rbac = rbac_summary(cfg.platform, cfg.namespace, rbac_objects)
    # vllm-service installs no operator: drop the summary's operator entry (always the first).
    pulumi.export("rbac", rbac if uses_dynamo else rbac[1:])
    pulumi.export("sizing", sizing.export())
    pulumi.export("warnings", list(sizing.warnings))
