"""The names the program reads other stacks by, parsed by each backend's rules.

A graph stack reads its platform stack and its comparison baseline by the name
:func:`stackmodel.stack_layout.stack_reference_name` gives. These tests feed those names
through the three parsers of :mod:`pulumi_backends` (DIY project layout, DIY old non-project
layout, Pulumi Cloud) and check each resolves to the intended stack of this project.
"""

from __future__ import annotations

import pytest
from pulumi_backends import BackendRefError, cloud, diy_legacy, diy_project

from stackmodel.config import project_values
from stackmodel.errors import PROJECT
from stackmodel.stack_layout import DEFAULT_ORGANIZATION, stack_reference_name
from stackmodel.stacks import stack_config, stack_names


@pytest.mark.parametrize("stack", ["platform", "kv-routing", "disagg-same-node", "Kv_Routing.2"])
def test_a_diy_stack_reads_the_stack_in_both_layouts(stack: str) -> None:
    name = stack_reference_name(stack, DEFAULT_ORGANIZATION, PROJECT)
    assert diy_project(name, PROJECT) == ("organization", PROJECT, stack)
    assert diy_legacy(name) == (None, None, stack)


def test_a_cloud_stack_reads_its_own_organization_not_the_default() -> None:
    name = stack_reference_name("kv-routing", "acme", PROJECT)
    assert name == "acme/dynamo-testbed/kv-routing"
    assert cloud(name, default_org="someone", current_project=PROJECT) == (
        "acme",
        PROJECT,
        "kv-routing",
    )
    # The bare name would resolve to the user's default organization instead.
    assert cloud("kv-routing", "someone", PROJECT)[0] == "someone"


def test_the_full_diy_name_fails_in_the_old_layout() -> None:
    """Why the bare name: the old layout refuses the ``organization/<project>/`` prefix."""
    with pytest.raises(BackendRefError, match=r"invalid character '/' at position 12"):
        diy_legacy("organization/dynamo-testbed/platform")
    assert diy_project("organization/dynamo-testbed/platform", None)[2] == "platform"


def test_a_name_with_slashes_is_used_as_given() -> None:
    name = stack_reference_name("team/other-project/kv", "acme", PROJECT)
    assert name == "team/other-project/kv"
    assert cloud(name, "acme", PROJECT) == ("team", "other-project", "kv")
    assert diy_project("organization/other-project/kv", PROJECT) == (
        "organization",
        "other-project",
        "kv",
    )
    with pytest.raises(BackendRefError, match="must be 'organization'"):
        diy_project(name, PROJECT)


def test_every_referenced_stack_of_the_shipped_stacks_parses_everywhere() -> None:
    """The stacks the shipped configs reference (``platformStack``, ``baselineStack``), in all
    three forms."""
    referenced = {"platform"}
    for stack in stack_names():
        raw = project_values(stack_config(stack)[0])
        referenced |= {raw[k] for k in ("platformStack", "baselineStack") if raw.get(k)}
    assert referenced == {"platform", "kv-routing", "disagg-same-node"}
    for stack in sorted(referenced):
        diy = stack_reference_name(stack, DEFAULT_ORGANIZATION, PROJECT)
        assert diy_project(diy, PROJECT) == ("organization", PROJECT, stack)
        assert diy_legacy(diy) == (None, None, stack)
        hosted = stack_reference_name(stack, "acme", PROJECT)
        assert cloud(hosted, "someone", PROJECT) == ("acme", PROJECT, stack)
