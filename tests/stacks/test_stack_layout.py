"""Stacks sharing one cluster: the platform stack, graph stacks that read it, one namespace per
graph stack, and no object claimed by two shipped stacks."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.program import main
from stackmodel.errors import StackConfigError
from stackmodel.stack_layout import PlatformStackError, stack_namespace
from stackmodel.stacks import stack_config, stack_names
from stackmodel.validation import validate_platform_stack, validate_stack
from testbed.render import EchoMocks, Rendered, render_stack, run_under_mocks

Raw = dict[str, Any]
REFERENCE_TYPE = "pulumi:pulumi:StackReference"
RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
PLATFORM_REF = "platform"
"""How a graph stack on a DIY backend names its platform stack (``stack_reference_name``)."""


def claimed_objects(rendered: Rendered) -> list[tuple[str, str, str]]:
    """(kind, namespace, name) of every cluster object a stack would own; a Helm release is
    ``HelmRelease`` in its namespace (Helm refuses a second release of that name there)."""
    objects = [
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
        for o in rendered.kubernetes_objects()
    ]
    releases = [("HelmRelease", r["namespace"], r["name"]) for r in rendered.helm_releases()]
    return objects + releases


def test_no_two_shipped_stacks_claim_the_same_object() -> None:
    owners: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    stacks = stack_names()  # every stacks/Pulumi.*.yaml
    assert len(stacks) >= 5
    for stack in stacks:
        for key in claimed_objects(render_stack(stack)):
            owners[key].append(stack)
    shared = {key: names for key, names in owners.items() if len(names) > 1}
    assert shared == {}
    # The control: the release and each stack's namespace are claimed, once.
    assert owners[("HelmRelease", "dynamo-system", "dynamo-platform")] == ["platform"]
    assert owners[("Namespace", "", "testbed-kv-routing")] == ["kv-routing"]
    assert owners[("Service", "testbed-disagg-same-node", "disagg-same-node-frontend-testbed")] == [
        "disagg-same-node"
    ]


def test_two_stacks_in_one_namespace_would_be_caught(
    raw_config: Callable[[str], Raw], project_with: Callable[[str, Raw], Path]
) -> None:
    """Two stacks set to one namespace claim the same Namespace."""
    raw = raw_config("kv-routing")
    raw["namespace"] = "testbed-disagg-same-node"
    forced = render_stack("kv-routing", project_with("kv-routing", raw))
    clash = set(claimed_objects(forced)) & set(claimed_objects(render_stack("disagg-same-node")))
    assert clash == {("Namespace", "", "testbed-disagg-same-node")}


@pytest.mark.parametrize(
    ("stack", "namespace"),
    [
        ("kv-routing", "testbed-kv-routing"),
        ("disagg-cross-node", "testbed-disagg-cross-node"),
        # Not a DNS label as it is: cleaned, plus the first 6 hex of SHA-256 of the name.
        ("Kv_Routing", "testbed-kv-routing-b94256"),
        ("lab.kv", "testbed-lab-kv-cdd940"),
    ],
)
def test_stack_namespace(stack: str, namespace: str) -> None:
    assert stack_namespace(stack) == namespace
    if namespace != f"testbed-{stack}":
        assert namespace.endswith(hashlib.sha256(stack.encode()).hexdigest()[:6])


def test_stack_namespace_keeps_altered_names_apart() -> None:
    names = {stack_namespace(s) for s in ("Kv_Routing", "kv_routing", "kv.routing", "kv-routing")}
    assert len(names) == 4
    long = stack_namespace("x" * 80)
    assert len(long) == 63
    assert long.startswith("testbed-xxx")


def test_namespace_override_is_used(raw_config: Callable[[str], Raw]) -> None:
    raw = raw_config("kv-routing")
    raw["namespace"] = "lab-a"
    assert validate_stack("kv-routing", raw).cfg.namespace == "lab-a"
    raw["namespace"] = ""  # Pulumi.yaml's default: derived from the stack name
    assert validate_stack("my-run", raw).cfg.namespace == "testbed-my-run"


# --- a graph stack without its platform ------------------------------------------------------


def render_with(stack: str, stacks: dict[str, dict[str, Any]], types: list[str]) -> Rendered:
    """Render a shipped stack with these referenced stacks; ``types`` records registrations."""
    config, _ = stack_config(stack)

    class Recording(EchoMocks):
        def new_resource(self, args: Any) -> tuple[str, dict[str, Any]]:
            types.append(args.typ)
            return super().new_resource(args)

    return run_under_mocks(main, stack=stack, config=config, mocks=Recording(stacks))


@pytest.mark.parametrize(
    ("stacks", "expected"),
    [
        (
            {},  # `pulumi up -s platform` never ran `stack init`: the engine's read fails
            "stack 'kv-routing': cannot read its platform stack 'platform' (unknown stack "
            '"platform"). Create and bring it up first: '
            "`pulumi stack init platform` and `pulumi up -s platform`",
        ),
        (
            {PLATFORM_REF: {}},  # initialised, never up (or destroyed): no outputs
            "stack 'kv-routing': its platform stack 'platform' has no outputs (it was created "
            "but never brought up, or it was destroyed). Bring it up first: "
            "`pulumi up -s platform`",
        ),
        (
            {PLATFORM_REF: {"namespace": "testbed-kv-routing", "results": []}},  # a graph stack
            "stack 'kv-routing': stack 'platform' is not an up-to-date platform stack (outputs "
            "chartVersion, installed, operatorNamespace, operatorRbac, operatorScope, "
            "releaseName, stackRole missing or invalid",
        ),
    ],
)
def test_missing_platform_names_the_stack_to_bring_up_first(
    stacks: dict[str, dict[str, Any]], expected: str
) -> None:
    types: list[str] = []
    with pytest.raises(PlatformStackError) as info:
        render_with("kv-routing", stacks, types)
    assert str(info.value).startswith(expected)
    # Only the reference was read: no namespace, graph or load step was registered.
    assert types == [REFERENCE_TYPE]


def test_a_platform_stack_is_read_not_registered() -> None:
    platform = render_stack("platform").outputs
    types: list[str] = []
    rendered = render_with("kv-routing", {PLATFORM_REF: platform}, types)
    assert types[0] == REFERENCE_TYPE
    assert RELEASE_TYPE not in types
    assert rendered.outputs["platform"]["operatorNamespace"] == "dynamo-system"


def test_a_platform_of_another_dynamo_release_is_a_warning() -> None:
    platform = {**render_stack("platform").outputs, "chartVersion": "1.6.1"}
    rendered = render_with("kv-routing", {PLATFORM_REF: platform}, [])
    assert rendered.outputs["warnings"] == [
        "stack 'kv-routing': its workers run Dynamo 1.6.2 under the operator of dynamo-platform "
        "chart 1.6.1 (platform stack 'platform'): two patches of one minor, which Dynamo "
        "supports; the operator and the runtime are released together, so use one release in "
        "both: engine.dynamoVersion (or the image tag) here, platform.chartVersion in the "
        "platform stack"
    ]
    same = render_with("kv-routing", {PLATFORM_REF: render_stack("platform").outputs}, [])
    assert same.outputs["warnings"] == []


def test_vllm_service_needs_no_platform() -> None:
    types: list[str] = []
    render_with("vllm-service", {}, types)  # no platform stack exists: fine
    assert REFERENCE_TYPE not in types


# --- the platform stack's config ---------------------------------------------------------------


def test_platform_stack_refuses_graph_keys_and_a_restricted_operator(
    raw_config: Callable[[str], Raw],
) -> None:
    raw = {**raw_config("kv-routing"), "stackRole": "platform"}
    with pytest.raises(StackConfigError) as info:
        validate_platform_stack("platform", raw)
    keys = [p.key for p in info.value.problems]
    # (kv-routing's load: section is loadgen's default grid, so it counts as unset.)
    assert keys == ["model", "nodeClasses", "topology"]
    assert "a platform stack registers no graph" in info.value.problems[0].message
    with pytest.raises(StackConfigError) as info:
        validate_platform_stack(
            "platform",
            {
                "stackRole": "platform",
                "platform": {"operatorScope": "namespace", "crdsPreinstalled": True},
            },
        )
    (problem,) = info.value.problems
    assert problem.key == "platform.operatorScope"
    assert "set stackRole: standalone in that graph's stack" in problem.message


def test_defaults_of_graph_keys_are_not_set_keys() -> None:
    """Pulumi.yaml's defaults reach every stack (as strings from the CLI): not an error."""
    raw = {"stackRole": "platform", "parked": "false", "namespace": "", "platformStack": "platform"}
    assert validate_platform_stack("platform", raw).platform.namespace == "dynamo-system"


def test_the_platform_stack_is_not_a_graph() -> None:
    with pytest.raises(StackConfigError, match="this is the platform stack"):
        validate_stack("platform", {"stackRole": "platform"})


# --- everything in one stack -------------------------------------------------------------------


def test_standalone_stack_installs_the_platform_itself(
    raw_config: Callable[[str], Raw], project_with: Callable[[str, Raw], Path]
) -> None:
    raw = {**raw_config("kv-routing"), "stackRole": "standalone"}
    rendered = render_stack("kv-routing", project_with("kv-routing", raw))
    assert not [r for r in rendered.registrations if r.type == REFERENCE_TYPE]
    (release,) = [r for r in rendered.registrations if r.type == RELEASE_TYPE]
    namespace = rendered.by_name("namespace-testbed-kv-routing")
    dgd = next(r for r in rendered.registrations if r.type.endswith("DynamoGraphDeployment"))
    assert release.dependencies == [namespace.urn]
    assert release.urn in dgd.dependencies  # destroy removes the DGD while the operator runs
    assert rendered.outputs["platform"]["stack"] == "kv-routing"
    assert rendered.outputs["rbac"][0]["subject"].startswith("dynamo-operator (Helm release")
    assert rendered.outputs["warnings"] == []
    older = {**raw, "platform": {"chartVersion": "1.6.1"}}
    warned = render_stack("kv-routing", project_with("kv-routing", older))
    (warning,) = warned.outputs["warnings"]
    assert "chart 1.6.1 (this stack's platform.chartVersion): two patches of one minor" in warning
