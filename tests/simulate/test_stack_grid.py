"""Which grid `testbed simulate STACK` runs: the stack's own load section, the reduced grid
for the seed's two stacks by name (the README's main job), and an SLO given on the command
line in either."""

from simulator.simulate import REDUCED_GRID, stack_load
from stackmodel.stacks import load_stack
from workload.slo import parse_slo


def test_a_stack_runs_its_own_grid_and_the_seeds_two_the_reduced_one() -> None:
    own = load_stack("vllm-service").cfg
    load = stack_load("vllm-service", own, full=False)
    assert (load.prefix_kinds, load.concurrency, load.repetitions) == (
        own.load.prefix_kinds,
        own.load.concurrency,
        own.load.repetitions,
    )
    assert load.requests_per_run == own.load.requests_per_run
    seed = load_stack("kv-routing").cfg
    reduced = stack_load("kv-routing", seed, full=False)
    assert (reduced.prefix_kinds, reduced.concurrency, reduced.repetitions) == (
        REDUCED_GRID["prefix_kinds"],
        REDUCED_GRID["concurrency"],
        REDUCED_GRID["repetitions"],
    )
    assert stack_load("kv-routing", seed, full=True).prefix_kinds == seed.load.prefix_kinds
    slo = parse_slo("ttft_p99_ms=500")
    assert stack_load("vllm-service", own, full=False, grid={"slo": slo}).slo == slo
