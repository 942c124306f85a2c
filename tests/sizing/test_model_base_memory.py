"""A worker's base memory for its own model and GPU: the seed's base with its token tables
(max_num_seqs x max_model_len x 5 B) replaced by the worker's."""

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
