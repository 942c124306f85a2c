"""Dynamo 1.7.0 and 1.7.1 beside 1.6.2: the release table, the version gate at preview (a graph's
runtime against its operator, a platform upgrade that skips a minor), every shipped stack at 1.7.0
and 1.7.1, the diff an upgrade makes, and probe profiles of another NIXL minor."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.program import main
from configkeys.key_paths import parse_settings
from kvpath.profile import LinkProfile
from kvpath.versions import (
    RELEASE_LINES,
    UPSTREAM_RULES,
    nixl_refuses_tls_without_cuda,
    rules_not_read_at,
    runtime_skew,
    shipped_nixl,
    upgrade_problem,
)
from simulator.provenance import provenance
from simulator.routing import graph_spec
from stackmodel.errors import StackConfigError
from stackmodel.stack_layout import VersionGateError
from stackmodel.stack_warnings import release_warnings
from stackmodel.stacks import REPO, load_stack, stack_config, stack_names
from stackmodel.validation import validate_stack
from testbed.component_diff import diff_lines
from testbed.render import EchoMocks, Rendered, render_stack, run_under_mocks
from testbed.render_files import diff_rendered

Raw = dict[str, Any]
AT_1_7 = ["engine.dynamoVersion=1.7.0", "platform.chartVersion=1.7.0"]
RELEASES_1_7 = ("1.7.0", "1.7.1")
DISAGG = ("disagg-same-node", "disagg-cross-node")


# --- the release table and Dynamo's upgrade policy ----------------------------------------------


def test_the_release_lines_are_the_deprecations_pages_pins() -> None:
    assert RELEASE_LINES[(1, 6)] == ("1.6.2", "0.31.0", "1.4.1", "1.21.x")
    # 1.7.1, a patch on 1.7.0 with the same pins (its release notes), is the line's latest.
    assert RELEASE_LINES[(1, 7)] == ("1.7.1", "0.33.0", "1.5.0", "1.22.x")
    assert [shipped_nixl(v) for v in ("1.5.1", "1.6.2", "1.7.0", "1.7.1")] == [
        "1.3.2", "1.4.1", "1.5.0", "1.5.0"
    ]  # fmt: skip
    assert [nixl_refuses_tls_without_cuda(v) for v in ("1.6.2", "1.7.0", "1.7.1")] == [
        False, True, True
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("current", "target", "expected"),
    [
        ("1.6.2", "1.7.0", None),  # adjacent minor: supported
        ("1.6.1", "1.6.2", None),  # within a minor
        ("1.7.0", "1.6.2", None),  # downgrade to the adjacent minor
        ("1.6.2", "1.6.2", None),
        ("1.5.1", "1.7.0", "1.5.1 -> 1.7.0 skips 1.6.x; Dynamo supports upgrades within a minor "
         "or to the adjacent minor only, every intermediate minor applied in order: upgrade to "
         "1.6.2 first"),
        ("1.4.2", "1.7.0", "1.4.2 -> 1.7.0 skips 1.5.x, 1.6.x; Dynamo supports upgrades within "
         "a minor or to the adjacent minor only, every intermediate minor applied in order: "
         "upgrade to 1.5.1 first"),
        ("1.7.0", "1.5.1", "1.7.0 -> 1.5.1 skips 1.6.x; Dynamo supports upgrades within a minor "
         "or to the adjacent minor only, every intermediate minor applied in order: downgrade "
         "to 1.6.2 first"),
        ("1.6.2", "1.7.1", None),  # to the adjacent minor's patch
        ("1.7.0", "1.7.1", None),  # within a minor
        ("1.7.1", "1.6.2", None),
        ("1.5.1", "1.7.1", "1.5.1 -> 1.7.1 skips 1.6.x; Dynamo supports upgrades within a minor "
         "or to the adjacent minor only, every intermediate minor applied in order: upgrade to "
         "1.6.2 first"),
        ("1.6.2", "1.8.0", "1.6.2 -> 1.8.0 skips 1.7.x; Dynamo supports upgrades within a minor "
         "or to the adjacent minor only, every intermediate minor applied in order: upgrade to "
         "1.7.1 first"),
    ],
)  # fmt: skip
def test_upgrade_path(current: str, target: str, expected: str | None) -> None:
    assert upgrade_problem(current, target) == expected


def test_a_major_change_is_outside_the_policy() -> None:
    problem = upgrade_problem("1.7.0", "2.0.0")
    assert problem is not None and "changes the major release" in problem


@pytest.mark.parametrize(
    ("runtime", "operator", "skew"),
    [
        ("1.6.2", "1.6.2", "same"),
        ("1.6.1", "1.6.2", "patch"),
        ("1.6.2", "1.7.0", "older-minor"),
        ("1.7.0", "1.6.2", "unsupported"),
        ("1.5.1", "1.7.0", "unsupported"),
        ("1.7.0", "2.0.0", "unsupported"),
        ("1.7.0", "1.7.1", "patch"),
        ("1.7.1", "1.7.1", "same"),
        ("1.6.2", "1.7.1", "older-minor"),
        ("1.7.1", "1.6.2", "unsupported"),
    ],
)
def test_runtime_skew(runtime: str, operator: str, skew: str) -> None:
    assert runtime_skew(runtime, operator) == skew


def test_each_rule_says_the_lines_it_was_read_at() -> None:
    assert rules_not_read_at("1.6.2") == []
    assert rules_not_read_at("1.7.1") == rules_not_read_at("1.7.0")
    assert [r.name for r in rules_not_read_at("1.7.0")] == ["chart values", "CRD fields"]
    assert len(rules_not_read_at("1.8.0")) == len(UPSTREAM_RULES)
    # Each rule names a module of the program, and the upgrade page lists it with its lines.
    table = (REPO / "docs" / "upgrading.md").read_text()
    for rule in UPSTREAM_RULES:
        assert importlib.util.find_spec(rule.where) is not None, rule.where
        holds = ", ".join(f"{major}.{minor}.x" for major, minor in rule.lines)
        assert f"| {rule.name} | {holds} |" in table, rule.name


def test_a_release_not_read_at_is_warned_naming_the_rules() -> None:
    at_1_8 = load_stack("kv-routing", parse_settings(["engine.dynamoVersion=1.8.0"]))
    (warning,) = [w.render() for w in release_warnings(at_1_8)]
    assert warning.startswith(
        "dynamo-testbed:engine.dynamoVersion = '1.8.0': these rules of the program were read at "
        "Dynamo 1.5.x, 1.6.x, 1.7.x only, not at this release: host mirror, host copies, "
    )
    assert release_warnings(load_stack("kv-routing")) == []
    # A plain vLLM stack runs no operator: the chart and CRD rules are not its concern.
    service = load_stack("vllm-service", parse_settings(["engine.dynamoVersion=1.7.0"]))
    assert release_warnings(service) == []


# --- the version gate on a graph stack, offline (the platform stack's outputs) ------------------


def _platform_at(version: str) -> dict[str, Any]:
    return {**render_stack("platform").outputs, "chartVersion": version}


def _render(stack: str, platform: dict[str, Any], *sets: str) -> Rendered:
    config, _ = stack_config(stack, settings=parse_settings(list(sets)))
    return run_under_mocks(
        main, stack=stack, config=config, mocks=EchoMocks({"platform": platform})
    )


def _refusal(stack: str, platform: dict[str, Any], *sets: str) -> VersionGateError:
    with pytest.raises(VersionGateError) as info:
        _render(stack, platform, *sets)
    return info.value


def test_a_runtime_newer_than_its_operator_is_refused_with_both_fixes() -> None:
    error = _refusal("kv-routing", _platform_at("1.6.2"), "engine.dynamoVersion=1.7.0")
    (problem,) = error.problems
    assert (problem.key, problem.value) == ("engine.dynamoVersion", "1.7.0")
    assert problem.message.startswith(
        "its workers run Dynamo 1.7.0 under the operator of dynamo-platform chart 1.6.2 "
        "(platform stack 'platform'): newer than its operator"
    )
    assert "set engine.dynamoVersion: 1.6.2 (or an image tagged 1.6.2) here" in problem.message
    assert "platform.chartVersion: 1.7.0 in the platform stack" in problem.message
    # Both fixes, applied, pass.
    assert _render("kv-routing", _platform_at("1.6.2"), "engine.dynamoVersion=1.6.2").outputs
    upgraded = _render("kv-routing", _platform_at("1.7.0"), "engine.dynamoVersion=1.7.0")
    assert not [w for w in upgraded.outputs["warnings"] if "under the operator" in w]


def test_a_runtime_newer_than_its_operator_names_the_platform_release_to_apply() -> None:
    """The workers' own release where it is the platform's next minor (both then match), else
    the next minor's latest release."""
    for workers in ("1.7.1", "1.8.0"):
        error = _refusal("kv-routing", _platform_at("1.6.2"), f"engine.dynamoVersion={workers}")
        (problem,) = error.problems
        assert "platform.chartVersion: 1.7.1 in the platform stack" in problem.message
    # The fix, applied: the platform at 1.7.1 runs the 1.7.1 workers without a word.
    upgraded = _render("kv-routing", _platform_at("1.7.1"), "engine.dynamoVersion=1.7.1")
    assert not [w for w in upgraded.outputs["warnings"] if "under the operator" in w]


def test_1_7_0_and_1_7_1_beside_each_other_are_warnings() -> None:
    """Either order of the two patches, and 1.6.2 workers under a 1.7.1 platform, is a step
    Dynamo supports: preview warns and names the release to use."""
    for graph, chart, said in (
        ("1.7.0", "1.7.1", "two patches of one minor, which Dynamo supports"),
        ("1.7.1", "1.7.0", "two patches of one minor, which Dynamo supports"),
        ("1.6.2", "1.7.1", "upgrade this stack next: set engine.dynamoVersion: 1.7.1"),
    ):
        rendered = _render("kv-routing", _platform_at(chart), f"engine.dynamoVersion={graph}")
        (warning,) = [w for w in rendered.outputs["warnings"] if "under the operator" in w]
        assert f"run Dynamo {graph} under the operator of dynamo-platform chart {chart}" in warning
        assert said in warning


def test_a_runtime_two_minors_behind_is_refused() -> None:
    error = _refusal("kv-routing", _platform_at("1.7.0"), "engine.dynamoVersion=1.5.1")
    (problem,) = error.problems
    assert "more than one minor older than its operator" in problem.message
    assert problem.message.endswith(
        "Fix: set engine.dynamoVersion: 1.7.0 (or an image tagged 1.7.0) here"
    )


def test_what_dynamo_tolerates_stays_a_warning() -> None:
    behind = _render("kv-routing", _platform_at("1.7.0"))  # platform upgraded, graph next
    (warning,) = [w for w in behind.outputs["warnings"] if "under the operator" in w]
    assert "run Dynamo 1.6.2 under the operator of dynamo-platform chart 1.7.0" in warning
    assert "one minor older than its operator" in warning
    assert "upgrade this stack next: set engine.dynamoVersion: 1.7.0" in warning
    patch = _render("kv-routing", _platform_at("1.6.1"))
    (warning,) = patch.outputs["warnings"]
    assert "two patches of one minor, which Dynamo supports" in warning


def test_a_standalone_stack_gates_its_own_platform(
    raw_config: Callable[[str], Raw], project_with: Callable[[str, Raw], Path]
) -> None:
    raw = {**raw_config("kv-routing"), "stackRole": "standalone"}
    raw["engine"] = {**raw["engine"], "dynamoVersion": "1.7.0"}
    with pytest.raises(StackConfigError) as info:
        render_stack("kv-routing", project_with("kv-routing", raw))
    (problem,) = info.value.problems
    assert "chart 1.6.2 (this stack's platform.chartVersion): newer than its operator" in (
        problem.message
    )
    raw["platform"] = {"chartVersion": "1.7.0"}
    assert render_stack("kv-routing", project_with("kv-routing", raw)).registrations


# --- the platform upgrade gate: the platform stack's previous outputs --------------------------


def _platform_upgrade(previous: str | None, target: str) -> Rendered:
    config, _ = stack_config(
        "platform", settings=parse_settings([f"platform.chartVersion={target}"])
    )
    stacks = {} if previous is None else {"platform": {**_platform_at(previous)}}
    return run_under_mocks(main, stack="platform", config=config, mocks=EchoMocks(stacks))


def test_a_platform_upgrade_that_skips_a_minor_is_refused_naming_the_release_between() -> None:
    with pytest.raises(VersionGateError) as info:
        _platform_upgrade("1.5.1", "1.7.0")
    (problem,) = info.value.problems
    assert (problem.key, problem.value) == ("platform.chartVersion", "1.7.0")
    assert problem.message == (
        "the platform runs chart 1.5.1 (this stack's outputs from its last update); 1.5.1 -> "
        "1.7.0 skips 1.6.x; Dynamo supports upgrades within a minor or to the adjacent minor "
        "only, every intermediate minor applied in order: upgrade to 1.6.2 first: set "
        "platform.chartVersion to that release, `pulumi up`, then to this one"
    )
    # The fix, applied: 1.6.2 first, then 1.7.0 from there.
    assert _platform_upgrade("1.5.1", "1.6.2").helm_releases()[0]["version"] == "1.6.2"
    assert _platform_upgrade("1.6.2", "1.7.0").helm_releases()[0]["version"] == "1.7.0"
    assert _platform_upgrade(None, "1.7.0").helm_releases()  # a first install: no gate
    # 1.7.1 from 1.6.2 or from 1.7.0; not from 1.5.1.
    assert _platform_upgrade("1.6.2", "1.7.1").helm_releases()[0]["version"] == "1.7.1"
    assert _platform_upgrade("1.7.0", "1.7.1").helm_releases()[0]["version"] == "1.7.1"
    with pytest.raises(VersionGateError, match=r"1\.5\.1 -> 1\.7\.1 skips 1\.6\.x"):
        _platform_upgrade("1.5.1", "1.7.1")


def test_a_standalone_stack_gates_its_platform_upgrade_on_its_own_outputs(
    raw_config: Callable[[str], Raw], project_with: Callable[[str, Raw], Path]
) -> None:
    raw = {**raw_config("kv-routing"), "stackRole": "standalone"}
    raw["engine"] = {**raw["engine"], "dynamoVersion": "1.7.0"}
    raw["platform"] = {"chartVersion": "1.7.0"}
    config, _ = stack_config("kv-routing", project_with("kv-routing", raw))
    last = {"platform": {"chartVersion": "1.5.1"}}  # its outputs from the last update

    def preview(outputs: dict[str, Any]) -> Rendered:
        mocks = EchoMocks({"kv-routing": outputs})
        return run_under_mocks(main, stack="kv-routing", config=config, mocks=mocks)

    with pytest.raises(VersionGateError) as info:
        preview(last)
    (problem,) = info.value.problems
    assert problem.key == "platform.chartVersion"
    assert "1.5.1 -> 1.7.0 skips 1.6.x" in problem.message
    assert "upgrade to 1.6.2 first" in problem.message
    assert preview({"platform": {"chartVersion": "1.6.2"}}).helm_releases()


# --- every shipped stack at 1.7.0 and 1.7.1 -----------------------------------------------------


def _sets_at(stack: str, release: str) -> list[str]:
    """The stack's settings at a release: the two versions (the platform stack takes only its
    own)."""
    sets = [f"engine.dynamoVersion={release}", f"platform.chartVersion={release}"]
    return sets[1:] if stack == "platform" else sets


def _named_fixes(error: StackConfigError) -> list[str]:
    """The ``--set`` each UCX_TLS problem names: its key with the value after "e.g."."""
    fixes = []
    for problem in error.problems:
        found = re.search(r"Add cuda_copy to env\.UCX_TLS \(e\.g\. '([^']+)'", problem.message)
        assert found, problem.message
        fixes.append(f"{problem.key}={found.group(1)}")
    return fixes


@pytest.mark.parametrize("release", RELEASES_1_7)
@pytest.mark.parametrize("stack", [s for s in stack_names() if s not in DISAGG])
def test_a_stack_renders_at_1_7_x(stack: str, release: str) -> None:
    rendered = render_stack(stack, settings=parse_settings(_sets_at(stack, release)))
    if stack == "platform":
        assert rendered.helm_releases()[0]["version"] == release
        return
    images = {c["image"] for o in rendered.kubernetes_objects() for c in _containers(o)}
    assert images and all(i.endswith(f":{release}") for i in images), images
    # The simulation takes the same graph at 1.7.x: the release changes no routing input.
    at_1_7 = load_stack(stack, parse_settings(_sets_at(stack, release)))
    assert graph_spec(at_1_7) == graph_spec(load_stack(stack))


@pytest.mark.parametrize("release", RELEASES_1_7)
@pytest.mark.parametrize("stack", DISAGG)
def test_a_disaggregated_stack_at_1_7_x_needs_the_ucx_tls_its_error_names(
    stack: str, release: str
) -> None:
    with pytest.raises(StackConfigError) as info:
        render_stack(stack, settings=parse_settings(_sets_at(stack, release)))
    fixes = _named_fixes(info.value)
    assert fixes == [
        "topology.workers[0].env.UCX_TLS=tcp,self,cuda_copy",
        "topology.workers[1].env.UCX_TLS=tcp,self,cuda_copy",
    ]
    settings = parse_settings([*_sets_at(stack, release), *fixes])
    rendered = render_stack(stack, settings=settings)
    warnings = rendered.outputs["warnings"]
    (unread,) = [w for w in warnings if "rules of the program were read" in w]
    assert "chart values, CRD fields" in unread
    # The simulation takes the same graph at 1.7.x: the release changes no routing input.
    at_1_7 = load_stack(stack, settings)
    assert graph_spec(at_1_7) == graph_spec(load_stack(stack))


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container of a DGD's components or a Deployment (none of other objects)."""
    spec = obj.get("spec") or {}
    if obj["kind"] == "Deployment":
        return list(spec["template"]["spec"]["containers"])
    if obj["kind"] == "DynamoGraphDeployment":
        return [c for comp in spec["components"] for c in comp["podTemplate"]["spec"]["containers"]]
    return []


def test_diff_shows_what_the_upgrade_changes() -> None:
    stack = "disagg-same-node"
    fixes = [f"topology.workers[{i}].env.UCX_TLS=tcp,self,cuda_copy" for i in (0, 1)]
    a = render_stack(stack)
    b = render_stack(stack, settings=parse_settings([*AT_1_7, *fixes]))
    lines = diff_lines(stack, stack, a, b, diff_rendered(a, b))
    assert lines[0] == f"{stack} -> {stack}: components 3 changed"
    for component in ("frontend", "prefill", "decode"):
        assert f"~ {component}:" in lines
    images = [line for line in lines if "image" in line]
    assert images and all(
        "vllm-runtime:1.6.2 -> nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.7.0" in i for i in images
    ), lines
    assert "    ~ env UCX_TLS: tcp,self -> tcp,self,cuda_copy" in lines


# --- probe profiles of another NIXL minor -------------------------------------------------------


def _probed(nixl: str) -> dict[str, Any]:
    profile = LinkProfile(
        name="probed-disagg-cross-node",
        bytes_per_s=110e6,
        source="testbed probe kv-path disagg-cross-node",
        nixl_version=nixl,
        ucx_version="1.23.0",
    )
    return profile.model_dump(by_alias=True, exclude_none=True)


def test_a_profile_of_another_nixl_minor_warns(raw_config: Callable[[str], Raw]) -> None:
    raw = raw_config("disagg-cross-node")
    raw["links"] = {**raw.get("links", {}), "crossNode": _probed("1.5.1")}
    (warning,) = [w.render() for w in release_warnings(validate_stack("disagg-cross-node", raw))]
    assert warning.startswith("dynamo-testbed:links.crossNode = ")
    assert (
        "profile 'probed-disagg-cross-node' was measured with NIXL 1.5.1 (UCX 1.23.0), but "
        "Dynamo 1.6.2 ships NIXL 1.4.1"
    ) in warning
    raw["links"]["crossNode"] = _probed("1.4.0")  # the same minor: no warning
    assert release_warnings(validate_stack("disagg-cross-node", raw)) == []
    raw["engine"]["dynamoVersion"] = "1.7.0"
    for worker in raw["topology"]["workers"]:
        worker["env"]["UCX_TLS"] = "tcp,self,cuda_copy"
    raw["links"]["crossNode"] = _probed("1.5.1")  # 1.7.0 ships 1.5.0: same minor
    warnings = release_warnings(validate_stack("disagg-cross-node", raw))
    assert [w for w in warnings if "links.crossNode" in w.render()] == []


def test_render_says_a_platform_set_is_for_the_platform_stack(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from testbed.cli import app

    args = ["render", "kv-routing", "--out", str(tmp_path), *[f"--set={s}" for s in AT_1_7]]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (
        "kv-routing: platform.chartVersion = 1.7.0 (--set; for its platform stack 'platform', "
        "which render and diff apply it to)"
    ) in result.output
    assert "not at this release: chart values, CRD fields" in " ".join(result.output.split())


def test_the_simulation_says_which_dynamo_it_routes_with() -> None:
    from importlib import metadata

    installed = metadata.version("ai-dynamo")  # the locked sim group: 1.6.1
    _, at_1_6 = provenance(load_stack("kv-routing"))
    assert not [w for w in at_1_6 if "ai-dynamo" in w]
    _, at_1_7 = provenance(load_stack("kv-routing", parse_settings(AT_1_7)))
    assert (
        f"engine.dynamoVersion 1.7.0: the routing run uses the installed ai-dynamo {installed} "
        "frontend and mockers, not Dynamo 1.7.0's"
    ) in " ".join(at_1_7)


def test_a_platform_at_a_release_whose_chart_was_not_read_is_warned() -> None:
    """The chart values and CRD fields were read at the 1.5/1.6 lines only: a platform stack
    installing chart 1.7.0 says so (its `warnings` output, printed by render and preview); at
    the pinned 1.6.2 it says nothing."""
    at_170 = render_stack("platform", settings=parse_settings(["platform.chartVersion=1.7.0"]))
    assert at_170.outputs["warnings"] == [
        "dynamo-testbed:platform.chartVersion = '1.7.0': these rules of the program were read "
        "at Dynamo 1.5.x, 1.6.x only, not at this release: chart values, CRD fields "
        "(docs/upgrading.md); check them against its release notes before installing it"
    ]
    assert "warnings" not in render_stack("platform").outputs
