"""Kubernetes memory quantities: parsing, formatting, and agreement with the kubernetes client."""

import math
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stackmodel.quantities import ceil_mib, format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("quantity", "num_bytes"),
    [
        ("3584Mi", 3_758_096_384),
        ("10Gi", 10_737_418_240),
        ("4G", 4_000_000_000),
        ("512M", 512_000_000),
        ("1.5Gi", 1_610_612_736),
        ("1e9", 1_000_000_000),
        ("1E3", 1_000),
        ("1E", 10**18),
        ("+1Ki", 1_024),
        ("100m", 1),
        (".5Ki", 512),
        ("2048", 2_048),
        (123, 123),
    ],
)
def test_parse_quantity(quantity: str | int, num_bytes: int) -> None:
    assert parse_quantity(quantity) == num_bytes


INVALID = (
    "",
    "Mi",
    "1mi",
    "1ki",
    "1.5.5Gi",
    "abc",
    "-1Gi",
    "1 Gi",
    "Infinity",
    "NaN",
    "1e",
    "1e99999999",
)


@pytest.mark.parametrize("bad", [*INVALID, True, 1.5, -3])
def test_parse_quantity_rejects_invalid(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_quantity(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("num_bytes", "quantity"),
    [
        (10_737_418_240, "10Gi"),
        (3_758_096_384, "3584Mi"),
        (1_610_612_736, "1536Mi"),
        (1_024, "1Ki"),
        (1_023, "1023"),
        (0, "0"),
    ],
)
def test_format_quantity(num_bytes: int, quantity: str) -> None:
    assert format_quantity(num_bytes) == quantity


def test_ceil_mib_rounds_up_to_whole_mib() -> None:
    assert ceil_mib(5_933_498_368) == 5_659 * 2**20
    assert ceil_mib(5_659 * 2**20) == 5_659 * 2**20
    assert ceil_mib(0) == 0
    with pytest.raises(ValueError):
        format_quantity(-1)


@settings(deadline=None)  # no timed assertions: machines are noisy
@given(st.integers(min_value=0, max_value=2**62))
def test_format_then_parse_round_trips(num_bytes: int) -> None:
    assert parse_quantity(format_quantity(num_bytes)) == num_bytes


@settings(deadline=None)  # no timed assertions: machines are noisy
@given(
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(["Ki", "Mi", "Gi", "Ti", "k", "M", "G", "T", ""]),
)
def test_parse_then_format_round_trips_binary_multiples(number: int, suffix: str) -> None:
    num_bytes = parse_quantity(f"{number}{suffix}")
    assert parse_quantity(format_quantity(num_bytes)) == num_bytes


@settings(deadline=None)  # no timed assertions: machines are noisy
@given(
    st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False, allow_infinity=False),
    st.sampled_from(["Ki", "Mi", "Gi", "Ti", "Pi", "k", "M", "G", "T", "P", "m", "", "e3", "E2"]),
)
def test_parse_agrees_with_kubernetes_client(number: Decimal, suffix: str) -> None:
    quantity = pytest.importorskip("kubernetes.utils.quantity")
    text = f"{number:f}{suffix}"
    assert parse_quantity(text) == math.ceil(quantity.parse_quantity(text))
