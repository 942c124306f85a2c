"""Every problem of a stack in one run, each fix offered checked by applying it.

A stack is judged for shape and meaning together where one does not depend on the other, and a
problem that offers fixes offers only those the stack passes with: each test applies every
offered fix and loads the stack again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from configkeys.key_paths import parse_settings
from stackmodel.errors import StackConfigError
from stackmodel.stacks import load_stack
from testbed.cli import app


def problems(stack: str, *items: str) -> StackConfigError:
    with pytest.raises(StackConfigError) as caught:
        load_stack(stack, parse_settings(items))
    return caught.value


def assert_fixes_pass(stack: str, items: tuple[str, ...], error: StackConfigError) -> int:
    """Every fix of every problem, applied over ``items``, gives a stack that loads; returns how
    many fixes there were."""
    count = 0
    for problem in error.problems:
        for fix in problem.fixes:
            load_stack(stack, parse_settings([*items, *fix]))
            count += 1
    return count


def test_three_workers_on_the_8gb_node_as_typed() -> None:
    """The user's command: one run names the oversubscription with fixes that pass whole (the
    second and third rounds, GPU memory and max model length, are folded into the fix)."""
    result = CliRunner().invoke(
        app, ["render", "kv-routing", "--set", "topology.workers[1].replicas=3", "--out", "x"]
    )
    assert result.exit_code == 2, result.output
    assert "replicasPerGpu=3" in result.output
    assert "gpuMemoryUtilization=0.33" in result.output
    assert "model.maxModelLen=" in result.output
    assert "enable timeSlicing" not in result.output
    items = ("topology.workers[1].replicas=3",)
    error = problems("kv-routing", *items)
    assert [p.key for p in error.problems] == ["topology.workers[1].replicas"]
    fixes = error.problems[0].fixes
    assert ("topology.workers[1].replicas=2",) in fixes
    assert ("nodeClasses.gpu-8gb.nodes=2",) in fixes
    assert assert_fixes_pass("kv-routing", items, error) == 3


@pytest.mark.parametrize(
    ("stack", "items", "key"),
    [
        # a time-sliced GPU whose shares overcommit it (disagg-cross-node's decode at 0.44 x 3)
        ("disagg-cross-node", ("topology.workers[1].replicas=3",), "gpuMemoryUtilization"),
        # a class without time-slicing: time-slicing is offered, with the shares that fit
        (
            "kv-routing",
            ("nodeClasses.gpu-24gb.timeSlicing=null", "topology.workers[0].replicas=2"),
            "replicas",
        ),
        # vllm-service, more replicas than both classes hold
        ("vllm-service", ("topology.workers[0].replicas=6",), "replicas"),
        # a max model length that the grown replicas' KV caches cannot hold
        (
            "kv-routing",
            (
                "nodeClasses.gpu-8gb.timeSlicing.replicasPerGpu=3",
                "topology.workers[1].replicas=3",
                "topology.workers[1].gpuMemoryUtilization=0.3",
            ),
            "maxModelLen",
        ),
    ],
)
def test_held_out_fixes_pass(stack: str, items: tuple[str, ...], key: str) -> None:
    error = problems(stack, *items)
    assert any(p.key.endswith(key) for p in error.problems), str(error)
    assert assert_fixes_pass(stack, items, error) >= 1, str(error)


def test_the_raised_share_is_not_offered_when_the_replicas_leave_no_room() -> None:
    """Raising one group's share is checked against the replicas sharing its GPU: at 3 x 0.38
    the 8 GB GPU would be overcommitted, so only the max model length is offered."""
    items = (
        "nodeClasses.gpu-8gb.timeSlicing.replicasPerGpu=3",
        "topology.workers[1].replicas=3",
        "topology.workers[1].gpuMemoryUtilization=0.3",
    )
    error = problems("kv-routing", *items)
    (problem,) = error.problems
    assert problem.fixes == (("model.maxModelLen=2688",),)
    assert "would overcommit its GPU" in problem.message
    assert "raise topology.workers[1].gpuMemoryUtilization" not in problem.message


def test_shape_and_meaning_problems_in_one_run() -> None:
    """A refused value elsewhere (load.concurrency) does not hide the placement's problem."""
    items = ("load.concurrency=4,8", "topology.workers[1].replicas=3")
    error = problems("kv-routing", *items)
    assert [p.key for p in error.problems] == ["load.concurrency", "topology.workers[1].replicas"]


def test_meaning_beside_a_refused_worker_value_is_the_config_only_rules() -> None:
    """A refused share stands in at its default, so the sizing (which reads it) is not judged;
    an engine flag the program sets, in another group's extraArgs, still is."""
    items = (
        "topology.workers[0].gpuMemoryUtilization=90",
        'topology.workers[1].extraArgs=["--max-model-len", "4096"]',
    )
    error = problems("kv-routing", *items)
    keys = [p.key for p in error.problems]
    assert keys[0] == "topology.workers[0].gpuMemoryUtilization"
    assert any(k.startswith("topology.workers[1].extraArgs") for k in keys), keys
    assert len(keys) == 2


@pytest.mark.parametrize(
    ("typed", "hint", "accepted"),
    [
        ("load.concurrency=4,8", "[4,8]", "load.concurrency=[4,8]"),
        ("topology.workers[0].gpuMemoryUtilization=22", "0.22", None),
        ("load.prefixKinds=2,24", "[2,24]", "load.prefixKinds=[2,24]"),
        ("topology.workers[1].gpuMemoryUtilization=45", "0.45", None),
    ],
)
def test_shape_errors_say_what_would_be_accepted(
    typed: str, hint: str, accepted: str | None
) -> None:
    error = problems("kv-routing", typed)
    (problem,) = error.problems
    assert hint in problem.message
    assert "Input should be" not in problem.message or "(" in problem.message
    key = typed.partition("=")[0]
    load_stack("kv-routing", parse_settings([accepted or f"{key}={hint}"]))


def test_replicas_per_gpu_of_one_says_to_delete_time_slicing() -> None:
    error = problems("kv-routing", "nodeClasses.gpu-8gb.timeSlicing.replicasPerGpu=1")
    assert "delete the node class's timeSlicing" in error.problems[0].message
    load_stack(
        "kv-routing",
        parse_settings(["nodeClasses.gpu-8gb.timeSlicing=null", "topology.workers[1].replicas=1"]),
    )


@pytest.mark.parametrize(
    "items",
    [
        ("topology.workers[0].sharedMemorySize=1",),
        ("topology.workers[1].baseMemory=3",),
        ("topology.frontend.sharedMemorySize=512",),
        # held out: two at once, each with its own fix
        ("topology.workers[0].baseMemory=3", "topology.workers[1].sharedMemorySize=256"),
    ],
)
def test_a_memory_quantity_without_a_unit_is_refused_with_a_checked_unit(
    items: tuple[str, ...],
) -> None:
    error = problems("kv-routing", *items)
    assert len(error.problems) == len(items)
    for problem in error.problems:
        assert "without a unit is" in problem.message and problem.fixes
    # every fix clears its own problem; all first fixes together give a stack that loads
    load_stack("kv-routing", parse_settings([*items, *(p.fixes[0][0] for p in error.problems)]))


def test_a_limit_in_decimal_units_is_shown_as_written(tmp_path: Path) -> None:
    """As typed: memoryLimit 13G was shown as 13000000000 in render's memory table."""
    limit = "topology.workers[1].memoryLimit=13G"
    result = CliRunner().invoke(
        app, ["render", "disagg-cross-node", "--set", limit, "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert "13000000000" not in result.output
    assert " 13G " in result.output


NVLINK_FIX = tuple(
    f"topology.workers[{i}].{k}"
    for i in (0, 1)
    for k in ("kvTransfer.bufferDevice=cuda", "env.UCX_TLS=tcp,self,cuda")
)


@pytest.mark.parametrize("profile", ["nvlink4", "nvlink3"])
def test_an_nvlink_link_option_as_typed(profile: str) -> None:
    """One node's prefill and decode GPUs over NVLink: a named link, taken by the verdict and
    the simulation once the KV is in GPU buffers moved by cuda_ipc (the fixes it offers)."""
    error = problems("disagg-same-node", f"links.sameNode={profile}")
    assert [p.key for p in error.problems] == [
        "topology.workers[0].kvTransfer.bufferDevice",
        "topology.workers[1].kvTransfer.bufferDevice",
    ]
    for problem in error.problems:  # each group's own fix clears its own problem
        assert problem.fixes and "checked by applying it" in problem.message
    plan = load_stack(
        "disagg-same-node", parse_settings([f"links.sameNode={profile}", *NVLINK_FIX])
    )
    verdict = plan.sizing.report.disaggregation
    assert verdict.link == profile
    assert verdict.link_bytes_per_s == {"nvlink4": 360e9, "nvlink3": 240e9}[profile]


@pytest.mark.parametrize(
    "items",
    [
        ("links.crossNode=nvlink4",),  # NVLink does not cross nodes
        # held out: GPU buffers, but a UCX_TLS without cuda_ipc
        (
            "links.sameNode=nvlink4",
            *NVLINK_FIX[:1],
            *NVLINK_FIX[2:3],
            "topology.workers[0].env.UCX_TLS=tcp,self,cuda_copy",
            "topology.workers[1].env.UCX_TLS=tcp,self,cuda",
        ),
    ],
)
def test_an_nvlink_link_where_kv_cannot_take_it_is_refused(items: tuple[str, ...]) -> None:
    error = problems("disagg-same-node", *items)
    assert any("NVLink" in p.message or "cuda_ipc" in p.message for p in error.problems)


def test_a_namespace_another_stack_deploys_into_is_refused_by_render_and_diff(
    tmp_path: Path,
) -> None:
    """As typed: kv-routing pointed at disagg-same-node's namespace passed render and diff."""
    into = "namespace=testbed-disagg-same-node"
    for args in (
        ["render", "kv-routing", "--set", into, "--out", str(tmp_path)],
        ["diff", "kv-routing", "--set-b", into],
    ):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "also deploys into namespace testbed-disagg-same-node" in result.output
    error = problems("kv-routing", into)
    assert [p.key for p in error.problems] == ["namespace"]
    load_stack("kv-routing", parse_settings([into, "namespace="]))  # the fix it names


@pytest.mark.parametrize(
    ("items", "allowed"),
    [
        # held out: joining without creating it, under another graph name
        (("namespace=testbed-disagg-same-node", "createNamespace=false"), True),
        # joining without creating it, but as the same graph
        (
            (
                "namespace=testbed-disagg-same-node",
                "createNamespace=false",
                "topology.name=disagg-same-node",
            ),
            False,
        ),
    ],
)
def test_joining_another_stacks_namespace(items: tuple[str, ...], allowed: bool) -> None:
    if allowed:
        load_stack("kv-routing", parse_settings(items))
        return
    assert problems("kv-routing", *items).problems[0].key == "namespace"
