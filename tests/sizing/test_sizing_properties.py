"""Property-based checks: the floor and the transfer cost move the right way."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kvpath.memory import host_mirror_bytes, memory_floor_bytes
from kvpath.transfers import transfer_seconds

byte_counts = st.integers(0, 2**40)


@settings(deadline=None)  # no timed assertions: machines are noisy
@given(byte_counts, byte_counts, byte_counts, byte_counts)
def test_a_bigger_kv_cache_never_lowers_the_floor(base: int, shm: int, a: int, b: int) -> None:
    small, big = sorted((a, b))
    mirror = [host_mirror_bytes(kv, 114_688, 16) for kv in (small, big)]
    assert mirror[0] <= mirror[1] <= big
    assert memory_floor_bytes(base, shm, mirror[0]) <= memory_floor_bytes(base, shm, mirror[1])


@settings(deadline=None)
@given(byte_counts, st.floats(1e3, 1e12), st.floats(1e3, 1e12))
def test_a_faster_link_never_raises_the_transfer_cost(kv: int, slow: float, fast: float) -> None:
    slow, fast = sorted((slow, fast))
    assert transfer_seconds(kv, fast) <= transfer_seconds(kv, slow)
