"""Link profiles: the throughput that carries a request's KV cache from prefill to decode.

Throughputs are decimal bytes per second (1 GB/s = 1e9 B/s). A stack names a profile from
`LINK_PROFILES` or gives its own value in GB/s; `resolve_link` accepts either.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

# Share of line rate the seed's 1 GbE link carried: 115 MB/s of 125 MB/s.
_SEED_ETHERNET_EFFICIENCY = 0.92
_ETHERNET_SOURCE = (
    "assumption: line rate x 0.92, the share of line rate the seed measured on 1 GbE; the seed's "
    "same-node TCP path (UCX_TLS=tcp, host buffers) reached only ~1 GB/s without any wire, so with "
    "that transport expect at most ~1 GB/s whatever the NIC"
)


class LinkProfile(BaseModel):
    """A named KV-transfer path and its throughput.

    Attributes:
        name: the profile name used in stack config (e.g. ``1gbe``).
        bytes_per_s: the point value used for estimates (decimal bytes per second).
        range_bytes_per_s: (low, high) observed range when the source gives one, else None.
        source: where the number comes from (measurement, inference or assumption).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    bytes_per_s: float = Field(gt=0)
    range_bytes_per_s: tuple[float, float] | None = None
    source: str


def _ethernet(name: str, line_rate_gbit_per_s: int) -> LinkProfile:
    """A profile for an Ethernet link at the seed's measured share of its line rate."""
    return LinkProfile(
        name=name,
        bytes_per_s=line_rate_gbit_per_s * 1e9 / 8 * _SEED_ETHERNET_EFFICIENCY,
        source=_ETHERNET_SOURCE,
    )


LINK_PROFILES: dict[str, LinkProfile] = {
    profile.name: profile
    for profile in (
        LinkProfile(
            name="same-node-tcp",
            bytes_per_s=1e9,
            source=(
                "seed (inferred, not timed): disaggregation on one node added ~250 ms to TTFT "
                "for ~272 MB of KV over host-memory TCP, i.e. ~1 GB/s"
            ),
        ),
        LinkProfile(
            name="1gbe",
            bytes_per_s=115e6,
            range_bytes_per_s=(110e6, 117e6),
            source="seed (measured): 1 GbE between the two nodes carried 110-117 MB/s",
        ),
        _ethernet("10gbe", 10),
        _ethernet("25gbe", 25),
        _ethernet("100gbe", 100),
        LinkProfile(
            name="rdma",
            bytes_per_s=20e9,
            source=(
                "assumption (not measured in the seed, which says only 'tens of GB/s'): a "
                "200 Gb/s InfiniBand/RoCE NIC with GPUDirect RDMA at 80% of its 25 GB/s line rate"
            ),
        ),
    )
}


def resolve_link(link: str | float) -> LinkProfile:
    """The profile for a profile name, or a custom profile for a throughput in GB/s.

    Args:
        link: a name from `LINK_PROFILES`, or a throughput in decimal GB/s (e.g. ``2.5``).

    Raises:
        ValueError: an unknown name (the message lists the known ones), or a throughput that
            is not a finite number above 0.
    """
    if isinstance(link, str):
        if link in LINK_PROFILES:
            return LINK_PROFILES[link]
        raise ValueError(
            f"unknown link profile {link!r}; known: {', '.join(LINK_PROFILES)}, "
            "or a throughput in GB/s (e.g. 2.5)"
        )
    if not (math.isfinite(link) and link > 0):
        raise ValueError(f"link throughput must be a finite number of GB/s above 0, got {link}")
    return LinkProfile(name=f"{link:g}GB/s", bytes_per_s=link * 1e9, source="stack config")


def transfer_seconds(kv_bytes: int, link_bytes_per_s: float) -> float:
    """Seconds to move ``kv_bytes`` over a link of ``link_bytes_per_s`` (bytes/s).

    The seed's cost model: KV bytes / throughput, with no latency or protocol overhead term
    (for ~272 MB transfers those are negligible next to the bandwidth term).

    Raises:
        ValueError: ``kv_bytes`` < 0 or ``link_bytes_per_s`` <= 0.
    """
    if kv_bytes < 0:
        raise ValueError(f"kv_bytes must be >= 0, got {kv_bytes}")
    if link_bytes_per_s <= 0:
        raise ValueError(f"link_bytes_per_s must be > 0, got {link_bytes_per_s}")
    return kv_bytes / link_bytes_per_s
