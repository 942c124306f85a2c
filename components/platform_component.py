"""Pulumi component for the Dynamo platform: the `dynamo-platform` Helm release.

Thin: the release's arguments come from `stackmodel.platform.helm_release_spec`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from clusterread.checks import release_description
from stackmodel.errors import PROJECT
from stackmodel.platform import PlatformConfig, admission_scope, helm_release_spec

COMPONENT_TYPE = "dynamo-testbed:platform:DynamoPlatform"


class DynamoPlatform(pulumi.ComponentResource):
    """The Dynamo operator as one `helm.v3.Release` (none when `cfg.install` is false).

    Attributes:
        release: the Helm release, or None with install=false; make the graph depend on it.
        admission: what the operator's webhooks see (`stackmodel.platform.admission_scope`).
    """

    release: k8s.helm.v3.Release | None
    admission: dict[str, Any]

    def __init__(
        self,
        name: str,
        cfg: PlatformConfig,
        testbed_namespace: str,
        *,
        depends_on: pulumi.Input[Sequence[pulumi.Input[pulumi.Resource]]] = (),
        protect: bool = False,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """Register the release (if any) as a child named `<name>-release`, described as this
        stack's (`clusterread.checks.release_description`: a later preview tells it
        from a release installed otherwise).

        Args:
            name: Pulumi name of the component.
            cfg: the `platform` stack-config section.
            testbed_namespace: namespace of the graph; with operatorScope=namespace also the
                release's namespace, so pass its Namespace resource in `depends_on`.
            depends_on: resources the release waits for (a component's own `depends_on` does
                not reach its children), or an Output of them (the program's upgrade gate).
            protect: Pulumi `protect` on the release (the platform stack's `platform.protect`).
            opts: options of the component itself.

        Raises:
            ValueError: as `helm_release_spec` (extraValues the chart would refuse).
        """
        super().__init__(COMPONENT_TYPE, name, None, opts)
        self.release = None
        if cfg.install:
            self.release = k8s.helm.v3.Release(
                f"{name}-release",
                opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on, protect=protect),
                description=release_description(PROJECT, pulumi.get_stack()),
                **helm_release_spec(cfg, testbed_namespace),
            )
        self.admission = admission_scope(cfg, testbed_namespace)
        self.register_outputs(
            {
                "releaseStatus": self.release.status if self.release is not None else None,
                "admission": self.admission,
            }
        )
