"""Property-based checks: the floor and the transfer cost move the right way."""

from hypothesis import given, settings
from hypothesis import strategies as st

from components.links import transfer_seconds
from components.models import ModelGeometry
from components.sizing import kv_bytes_per_request, memory_floor_bytes

geometries = st.fixed_dictionaries(
    {
        "num_layers": st.integers(1, 128),
        "num_kv_heads": st.integers(1, 64),
        "head_dim": st.sampled_from([64, 80, 96, 128, 256]),
        "kv_cache_dtype_bytes": st.sampled_from([1, 2, 4]),
        "num_parameters": st.integers(1, 10**12),
    }
).map(ModelGeometry.model_validate)
byte_counts = st.integers(0, 2**40)
margins = st.floats(1.0, 4.0)
concurrencies = st.integers(0, 512)
prompt_lengths = st.integers(0, 131_072)


@settings(deadline=None)  # no timed assertions: machines are noisy
@given(byte_counts, concurrencies, concurrencies, byte_counts, margins)
def test_more_concurrency_never_lowers_the_floor(
    base: int, low: int, high: int, kv: int, margin: float
) -> None:
    low, high = sorted((low, high))
    assert memory_floor_bytes(base, low, kv, margin) <= memory_floor_bytes(base, high, kv, margin)


@settings(deadline=None)  # no timed assertions: machines are noisy
@given(geometries, prompt_lengths, prompt_lengths, byte_counts, concurrencies, margins)
def test_longer_prompts_never_lower_the_floor(
    geometry: ModelGeometry, short: int, long: int, base: int, concurrency: int, margin: float
) -> None:
    short, long = sorted((short, long))
    assert memory_floor_bytes(
        base, concurrency, kv_bytes_per_request(geometry, short), margin
    ) <= memory_floor_bytes(base, concurrency, kv_bytes_per_request(geometry, long), margin)


@settings(deadline=None)  # no timed assertions: machines are noisy
@given(byte_counts, concurrencies, byte_counts, margins, margins)
def test_a_bigger_margin_never_lowers_the_floor(
    base: int, concurrency: int, kv: int, small: float, big: float
) -> None:
    small, big = sorted((small, big))
    assert memory_floor_bytes(base, concurrency, kv, small) <= memory_floor_bytes(
        base, concurrency, kv, big
    )


@settings(deadline=None)  # no timed assertions: machines are noisy
@given(byte_counts, concurrencies, byte_counts, margins)
def test_floor_covers_base_plus_in_flight_kv(
    base: int, concurrency: int, kv: int, margin: float
) -> None:
    assert memory_floor_bytes(base, concurrency, kv, margin) >= base + concurrency * kv


@settings(deadline=None)  # no timed assertions: machines are noisy
@given(byte_counts, st.floats(1e3, 1e12), st.floats(1e3, 1e12))
def test_a_faster_link_never_raises_the_transfer_cost(kv: int, slow: float, fast: float) -> None:
    slow, fast = sorted((slow, fast))
    assert transfer_seconds(kv, fast) <= transfer_seconds(kv, slow)
