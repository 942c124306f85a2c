"""A Kubernetes toleration as the stack config writes it (node classes, the operator).

Kept apart from :mod:`stackmodel.config` so that :mod:`stackmodel.platform`, which the config
imports, can use it too.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from configkeys.config_text import ConfigText


class Toleration(BaseModel):
    """A ``core/v1 Toleration`` (same fields): tolerates a taint on the nodes a pod may use."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    key: ConfigText | None = Field(
        default=None, description="The taint's key; unset with Exists: every taint."
    )
    operator: Literal["Exists", "Equal"] = Field(
        default="Equal", description="Exists: any value; Equal: the value must match."
    )
    value: ConfigText | None = Field(default=None, description="The taint's value (Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="The taint effect tolerated; unset: every effect."
    )

    def manifest(self) -> dict[str, str]:
        """The toleration as the Kubernetes API takes it (camelCase, unset fields left out)."""
        return self.model_dump(by_alias=True, exclude_none=True)


GPU_TAINT_TOLERATION = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
"""Tolerates the taint GPU nodes commonly carry (``nvidia.com/gpu:NoSchedule``; the shipped
stacks' node classes tolerate the same): every node of the seed's cluster is a GPU node."""
