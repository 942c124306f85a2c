"""A worker's base memory for its own model and GPU: the seed's base with its token tables
(max_num_seqs x max_model_len x 5 B) replaced by the worker's."""

import pytest

from stackmodel.errors import StackConfigError
from stackmodel.quantities import MI
from stackmodel.sizing import (
    default_max_num_seqs,
    model_base_memory,
    token_table_bytes,
)
from stackmodel.stacks import load_stack
from stackmodel.validation import validate_config
from steptime.gpus import catalog_gpu


def test_token_tables_of_the_seed_and_of_a_long_context_worker() -> None:
    assert token_table_bytes(256, 8_192) == 10 * MI
    assert token_table_bytes(1_024, 131_072) == 640 * MI


def test_base_is_the_seed_figure_at_the_seed_settings_and_grows_with_the_tables() -> None:
    assert model_base_memory(256, 8_192) == 3_328 * MI
    assert model_base_memory(256, None) == 3_328 * MI  # context unknown: the seed's base
    assert model_base_memory(1_024, 131_072) == (3_328 - 10 + 640) * MI
    assert model_base_memory(256, 40_960) == (3_328 - 10 + 50) * MI


def test_vllm_default_max_num_seqs_by_gpu() -> None:
    assert default_max_num_seqs(catalog_gpu("rtx-4090"), 24) == 256
    assert default_max_num_seqs(catalog_gpu("h100-sxm"), 80) == 1_024
    assert default_max_num_seqs(catalog_gpu("a100-sxm-80gb"), 80) == 256


def test_seed_stacks_keep_their_floors() -> None:
    plan = load_stack("kv-routing")
    floors = {c.name: c.memory_floor_quantity for c in plan.sizing.report.components}
    assert floors == {"worker-24gb": "3584Mi", "worker-8gb": "3584Mi"}


def test_a_worker_with_more_request_slots_gets_a_higher_floor_and_a_set_base_wins() -> None:
    plan = load_stack("kv-routing")
    cfg = plan.cfg
    workers = list(cfg.topology.workers)
    workers[0] = workers[0].model_copy(
        update={"extra_args": ("--max-num-seqs", "1024"), "memory_limit": "8Gi"}
    )
    workers[1] = workers[1].model_copy(update={"base_memory": "3000Mi"})
    topology = cfg.topology.model_copy(update={"workers": tuple(workers)})
    sized = validate_config("lab", cfg.model_copy(update={"topology": topology}))
    floors = {c.name: c.memory_floor_bytes for c in sized.sizing.report.components}
    # 3,328Mi - 10Mi (256 x 8,192 x 5 B) + 40Mi (1,024 x 8,192 x 5 B) + 256Mi of /dev/shm
    assert floors["worker-24gb"] == (3_328 - 10 + 40 + 256) * MI
    assert floors["worker-8gb"] == (3_000 + 256) * MI


def test_a_limit_below_the_floor_is_refused_with_the_floor_and_its_parts() -> None:
    """The seed's 3,584Mi limit is the floor of the seed's settings exactly; 512 request slots
    raise it, and the refusal gives this worker's floor and where its base comes from."""
    plan = load_stack("kv-routing")
    cfg = plan.cfg
    workers = list(cfg.topology.workers)
    workers[0] = workers[0].model_copy(update={"extra_args": ("--max-num-seqs", "512")})
    workers[1] = workers[1].model_copy(update={"base_memory": "3400Mi"})
    topology = cfg.topology.model_copy(update={"workers": tuple(workers)})
    with pytest.raises(StackConfigError) as refused:
        validate_config("lab", cfg.model_copy(update={"topology": topology}))
    said = {p.key: p.message for p in refused.value.problems}
    slots = said["topology.workers[0].memoryLimit"]
    assert "below its floor base 3338Mi + /dev/shm 256Mi = 3594Mi (3,768,582,144 B)" in slots
    assert (
        "(what the worker needs without host-buffered KV; base: the seed's 3328Mi with its "
        "token tables (256 request slots x 8,192 tokens x 5 B = 10Mi) replaced by this "
        "worker's (512 x 8,192 x 5 B = 20Mi)). Raise memoryLimit to at least 3594Mi"
    ) in slots
    set_base = said["topology.workers[1].memoryLimit"]
    assert "floor base 3400Mi + /dev/shm 256Mi = 3656Mi" in set_base
    assert "base: baseMemory 3400Mi as set)" in set_base
    assert "add up to" not in slots + set_base
