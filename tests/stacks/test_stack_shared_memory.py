"""/dev/shm is set per component and counted in the memory floor.

The Dynamo operator mounts an 8Gi memory-backed /dev/shm when a DGD component leaves
``sharedMemorySize`` unset (ai-dynamo/dynamo deploy/operator/internal/consts/consts.go
``DefaultSharedMemorySize``; the v1beta1 DGD CRD at 2a6da14c says "nil selects the operator
default (8Gi)": ``deploy/operator/config/crd/bases/nvidia.com_dynamographdeployments.yaml``
L21152-21154), and what is written there counts against the container's memory limit
(kubernetes.io/docs/concepts/storage/volumes/#emptydir)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from test_stack_render import components, main_container, objects_of

from stackmodel.errors import StackConfigError
from stackmodel.validation import validate_stack
from testbed.render import Rendered

Raw = dict[str, Any]
DYNAMO_STACKS = ("disagg-cross-node", "disagg-same-node", "kv-routing")


@pytest.mark.parametrize("stack", DYNAMO_STACKS)
def test_every_dgd_component_sets_its_shared_memory(
    rendered: dict[str, Rendered], stack: str
) -> None:
    sizes = {name: c["sharedMemorySize"] for name, c in components(rendered[stack]).items()}
    assert set(sizes.values()) == {"256Mi"}
    assert "frontend" in sizes


def test_vllm_service_mounts_a_memory_backed_dev_shm(rendered: dict[str, Rendered]) -> None:
    for deployment in objects_of(rendered["vllm-service"], "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["volumes"] == [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}}
        ]
        assert main_container(pod)["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]


def test_the_floor_counts_shared_memory(rendered: dict[str, Rendered]) -> None:
    rows = rendered["kv-routing"].outputs["sizing"]["components"]
    assert {(r["shared_memory_bytes"], r["memory_floor_quantity"]) for r in rows} == {
        (256 * 2**20, "3584Mi")  # base 3,328Mi + /dev/shm 256Mi: the seed's part-3 limit
    }


def test_a_bigger_dev_shm_fails_a_limit_that_no_longer_holds_it(
    raw_config: Callable[[str], Raw],
) -> None:
    raw = raw_config("kv-routing")
    raw["topology"]["workers"][0]["sharedMemorySize"] = "8Gi"  # the operator's default
    with pytest.raises(StackConfigError) as info:
        validate_stack("kv-routing", raw)
    (problem,) = info.value.problems
    assert problem.key == "topology.workers[0].memoryLimit"
    assert "base 3328Mi + /dev/shm 8Gi = 11520Mi" in problem.message
    raw["topology"]["workers"][0]["memoryLimit"] = "11520Mi"
    validate_stack("kv-routing", raw)


def test_a_bad_shared_memory_quantity_names_its_key(raw_config: Callable[[str], Raw]) -> None:
    raw = raw_config("kv-routing")
    raw["topology"]["frontend"] = {"sharedMemorySize": "lots"}
    raw["topology"]["workers"][1]["sharedMemorySize"] = "1 GB"
    with pytest.raises(StackConfigError) as info:
        validate_stack("kv-routing", raw)
    assert sorted(p.key for p in info.value.problems) == [
        "topology.frontend.sharedMemorySize",
        "topology.workers[1].sharedMemorySize",
    ]
