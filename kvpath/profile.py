"""Link profiles: how fast a request's KV moves from a prefill worker to a decode worker.

A transfer runs over the connection of its prefill/decode pair (NIXL keeps one UCX endpoint per
agent pair; over TCP one connection), shared by that pair's transfers in flight, and, between
two nodes, over the node pair's wire, shared by every pair crossing it (:mod:`kvpath.transfers`).
A profile gives the three rates:

- ``bytes_per_s``: one transfer alone;
- ``connection_bytes_per_s``: what one pair's connection carries in all with several transfers
  in flight (None: the same as one alone);
- ``wire_bytes_per_s``: the node pair's wire (None: no shared wire, as on one host).

A stack's ``links.sameNode`` / ``links.crossNode`` (:func:`resolve_link`) is a profile name from
`LINK_PROFILES`, a throughput in decimal GB/s, a profile file (``.json``, as ``testbed probe
kv-path`` writes it; relative paths from the project folder), or the figures themselves (a
mapping with this model's camelCase keys). Rates are decimal bytes per second.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from configkeys.suggest import did_you_mean, same_name
from kvpath.copies import HostCopyProfile


class ProbeSpread(BaseModel):
    """How a probed profile's figures varied over the probe's rounds, and how busy the machine
    was: each figure as (min, median, max) in decimal bytes/s; the profile's figure is the
    median.

    Attributes:
        rounds: timed rounds per count of transfers in flight (``--repeats``).
        bytes_per_s: one transfer alone, over its rounds.
        connection_bytes_per_s: one pair's connection, over every round with more than one
            transfer in flight (None: only one in flight was probed).
        load_average: the probing machine's load average (1, 5, 15 minutes) as the READs ended
            (None: unknown).
        cpu_count: that machine's CPU cores.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    rounds: int = Field(ge=1)
    bytes_per_s: tuple[float, float, float]
    connection_bytes_per_s: tuple[float, float, float] | None = None
    load_average: tuple[float, float, float] | None = None
    cpu_count: int | None = None


class LinkProfile(BaseModel):
    """A KV-transfer path and its rates (decimal bytes/s).

    Attributes:
        name: the profile name (e.g. ``1gbe``).
        bytes_per_s: one transfer alone on its pair's connection.
        connection_bytes_per_s: one pair's connection in all, several transfers in flight
            (None: ``bytes_per_s``).
        wire_bytes_per_s: the node pair's wire, shared by every pair crossing it (None: none).
        range_bytes_per_s: (low, high) observed range of ``bytes_per_s`` when known.
        source: where the numbers come from (measurement, inference or assumption).
        measured_on: the machine a probe ran on (None: not measured by a probe).
        host_copies: vLLM's copy-op rates the probe measured on that machine (None: not
            measured; :data:`kvpath.copies.DEFAULT_HOST_COPIES` applies).
        spread: a probed profile's figures over the probe's rounds, and the machine's load
            (None: not from a probe).
        nixl_version: the NIXL the probe's READs ran on, e.g. ``"1.5.1"`` (None: not from a
            probe); its copy rates (``hostCopies``) come from the same run. Preview warns a
            stack whose Dynamo release ships another NIXL minor.
        ucx_version: the UCX that NIXL loaded, e.g. ``"1.23.0"`` (None: unknown).
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    name: str = "stack config"
    bytes_per_s: float = Field(gt=0)
    connection_bytes_per_s: float | None = Field(default=None, gt=0)
    wire_bytes_per_s: float | None = Field(default=None, gt=0)
    range_bytes_per_s: tuple[float, float] | None = None
    source: str = "stack config"
    measured_on: str | None = None
    host_copies: HostCopyProfile | None = None
    spread: ProbeSpread | None = None
    nixl_version: str | None = None
    ucx_version: str | None = None

    @property
    def connection_rate(self) -> float:
        """What one pair's connection carries with several transfers in flight (bytes/s)."""
        return self.connection_bytes_per_s or self.bytes_per_s


def gb_per_s_text(bytes_per_s: float) -> str:
    """A rate for display: decimal GB/s to 3 significant figures, ``0.470983e9`` ->
    ``0.471 GB/s``, ``2.875e9`` -> ``2.88 GB/s``, ``20e9`` -> ``20 GB/s``."""
    return f"{float(f'{bytes_per_s / 1e9:.3g}'):g} GB/s"


# Share of line rate the seed's 1 GbE link carried: 115 MB/s of 125 MB/s.
_SEED_ETHERNET_EFFICIENCY = 0.92
_ETHERNET_SOURCE = (
    "assumption: line rate x 0.92, the share of line rate the seed measured on 1 GbE; the seed's "
    "same-node TCP path (UCX_TLS=tcp, host buffers) reached only ~1 GB/s without any wire, so with "
    "that transport expect at most ~1 GB/s whatever the NIC"
)


def _ethernet(name: str, line_rate_gbit_per_s: int) -> LinkProfile:
    """A profile for an Ethernet link at the seed's measured share of its line rate."""
    rate = line_rate_gbit_per_s * 1e9 / 8 * _SEED_ETHERNET_EFFICIENCY
    return LinkProfile(name=name, bytes_per_s=rate, wire_bytes_per_s=rate, source=_ETHERNET_SOURCE)


def _nvlink(name: str, gb_per_s: int, gpus: str) -> LinkProfile:
    """Prefill and decode GPUs of one node joined by NVLink, KV in GPU buffers copied by UCX's
    ``cuda_ipc``: the datasheet's rate per direction at 80%, as the RDMA profile takes its
    NIC's (NVIDIA A100 and H100 datasheets: 600 and 900 GB/s both directions together)."""
    rate = gb_per_s * 1e9 * 0.8
    return LinkProfile(
        name=name,
        bytes_per_s=rate,
        wire_bytes_per_s=rate,
        source=(
            f"assumption: NVLink of {gpus}, {gb_per_s} GB/s per direction (datasheet) at 80%; "
            "one node only, KV in GPU buffers (kvTransfer.bufferDevice: cuda) with cuda_ipc in "
            "UCX_TLS; probe it: testbed probe kv-path STACK --in-cluster same-node"
        ),
    )


LINK_PROFILES: dict[str, LinkProfile] = {
    profile.name: profile
    for profile in (
        LinkProfile(
            name="same-node-tcp",
            bytes_per_s=1e9,
            connection_bytes_per_s=1.2e9,
            source=(
                "one transfer: seed (inferred, not timed): disaggregation on one node added "
                "~250 ms to TTFT for ~272 MB of KV over host-memory TCP, i.e. ~1 GB/s; one "
                "pair's connection: NIXL 1.5.1 READs over UCX/TCP between two processes, 2-8 in "
                "flight shared 1.10-1.37 GB/s (NVIDIA H200 server, 16 cores; docs/kv-path.md, "
                "the default figures)"
            ),
        ),
        LinkProfile(
            name="1gbe",
            bytes_per_s=115e6,
            wire_bytes_per_s=115e6,
            range_bytes_per_s=(110e6, 117e6),
            source="seed (measured): 1 GbE between the two nodes carried 110-117 MB/s",
        ),
        _ethernet("10gbe", 10),
        _ethernet("25gbe", 25),
        _ethernet("100gbe", 100),
        LinkProfile(
            name="rdma",
            bytes_per_s=20e9,
            wire_bytes_per_s=20e9,
            source=(
                "assumption (not measured in the seed, which says only 'tens of GB/s'): a "
                "200 Gb/s InfiniBand/RoCE NIC with GPUDirect RDMA at 80% of its 25 GB/s line rate"
            ),
        ),
        _nvlink("nvlink3", 300, "A100 SXM: 12 third-generation links"),
        _nvlink("nvlink4", 450, "H100/H200 SXM: 18 fourth-generation links"),
    )
}

HOST_STAGED = (
    "KV in GPU buffers between two GPUs of one node without a direct path (no CUDA peer-to-peer "
    "access, as on GeForce cards, or no cuda_ipc in UCX_TLS): UCX's cuda_ipc maps the peer's "
    "buffer by opening its IPC handle (cuIpcOpenMemHandle with lazy peer access, openucx/ucx "
    "v1.21.0 src/uct/cuda/cuda_ipc/cuda_ipc_cache.c line 282) and takes the peer as unreachable "
    "when that fails (cuda_ipc_md.c lines 331-395, uct_cuda_ipc_is_peer_accessible), so "
    "cuda_copy stages the KV through host memory and it crosses the same-node TCP path"
)
"""Why a same-node GPU-buffer transfer without a direct path goes at the host path's rate
(:func:`host_staged`)."""


def host_staged(link: LinkProfile) -> LinkProfile:
    """``link`` (a same-node setting) as KV in GPU buffers takes it between two GPUs of one
    node that have no direct path (:data:`HOST_STAGED`): at most the ``same-node-tcp``
    profile's rates. A probed profile is kept as measured; a slower setting is kept, its source
    saying why; a faster one (a PCIe or NVLink rate) becomes ``same-node-tcp``, keeping its copy
    rates."""
    tcp = LINK_PROFILES["same-node-tcp"]
    if link.measured_on is not None:
        return link
    if link.bytes_per_s <= tcp.bytes_per_s:
        return link.model_copy(update={"source": f"{link.source}; {HOST_STAGED}"})
    return tcp.model_copy(
        update={"source": f"{tcp.source}; {HOST_STAGED}", "host_copies": link.host_copies}
    )


PLAUSIBLE_BYTES_PER_S = (10e6, 2e12)
"""The rates (decimal bytes/s) a KV path can have; a figure outside is refused as a slip of
units. Low: 80 Mbit/s, below 100 Mb Ethernet at the seed's 92% of line rate (11.5 MB/s). High:
2 TB/s, above NVLink 5's 1.8 TB/s per GPU (NVIDIA's Blackwell datasheet), the fastest GPU
interconnect."""

_TEN_GBE = "10GbE is ~1.15 GB/s"


def _rate_mistake(what: str, bytes_per_s: float, as_gb_per_s: bool) -> str | None:
    """Why a rate cannot be right and what was likely meant, or None when it is plausible.

    ``as_gb_per_s``: the user wrote it as a plain number (GB/s); else as a bytes/s figure.
    """
    low, high = PLAUSIBLE_BYTES_PER_S
    if low <= bytes_per_s <= high:
        return None
    written = bytes_per_s / 1e9 if as_gb_per_s else bytes_per_s
    unit = "GB/s" if as_gb_per_s else "bytes/s"
    bound = (
        f"below {gb_per_s_text(low)} (slower than 100 Mb Ethernet)"
        if bytes_per_s < low
        else f"above {gb_per_s_text(high)} (faster than any GPU interconnect)"
    )
    # The other unit: a plain number read as bytes/s, a bytes/s figure read as GB/s.
    other = written / 1e9 if as_gb_per_s else written * 1e9
    if as_gb_per_s and low <= other * 1e9 <= high:
        hint = f"did you mean bytes/s? {written:g} bytes/s is {other:g} GB/s: write {other:g}"
    elif not as_gb_per_s and low <= other <= high:
        hint = f"did you mean GB/s? write {what}: {other:.0f} (bytes/s)"
    else:
        hint = "a plain number is GB/s, a profile's figures bytes/s"
    return f"{what} {written:g} {unit} is {bound}: {hint}; {_TEN_GBE} (or name a profile: 10gbe)"


def _plausible(profile: LinkProfile, as_gb_per_s: bool = False) -> LinkProfile:
    """``profile`` when each of its rates is plausible (:data:`PLAUSIBLE_BYTES_PER_S`).

    Raises:
        ValueError: a rate outside the bounds, naming its key and the likely slip of units.
    """
    rates = (
        ("bytesPerS", profile.bytes_per_s),
        ("connectionBytesPerS", profile.connection_bytes_per_s),
        ("wireBytesPerS", profile.wire_bytes_per_s),
    )
    for key, rate in rates:
        what = "" if as_gb_per_s else key
        mistake = None if rate is None else _rate_mistake(what, rate, as_gb_per_s)
        if mistake is not None:
            raise ValueError(mistake.strip())
    return profile


ETHERNET_GBIT_PER_S = (1, 10, 25, 40, 100, 200, 400)
"""Common Ethernet line rates, Gb/s: a plain-number ``links.crossNode`` equal to one is refused
(:func:`ethernet_rate_mistake`)."""


def ethernet_rate_mistake(gb_per_s: float) -> str | None:
    """Why a plain-number link between hosts of ``gb_per_s`` (decimal GB/s) is likely a line
    rate in Gb/s, with the spellings that say either; None when it is no common Ethernet rate
    (:data:`ETHERNET_GBIT_PER_S`).

    ``10`` -> "... for 10 GbE write 10gbe (1.15 GB/s); for 10 GB/s write {bytesPerS: 10000000000}";
    a rate without a profile (``40``) names its figure at the Ethernet profiles' share of line
    rate (``4.6``)."""
    if gb_per_s not in ETHERNET_GBIT_PER_S:
        return None
    rate = int(gb_per_s)
    profile = f"{rate}gbe"
    if profile in LINK_PROFILES:
        ethernet = f"{profile} ({gb_per_s_text(LINK_PROFILES[profile].bytes_per_s)})"
    else:
        figure = rate * 1e9 / 8 * _SEED_ETHERNET_EFFICIENCY
        ethernet = f"{figure / 1e9:.3g} (GB/s: line rate x {_SEED_ETHERNET_EFFICIENCY:g})"
    return (
        f"{rate} reads as {rate} GB/s ({rate * 8} Gb/s), but {rate} is a common Ethernet rate in "
        f"Gb/s: for {rate} GbE write {ethernet}; for {rate} GB/s write "
        f"{{bytesPerS: {rate * 10**9}}}"
    )


LinkSetting = str | float | Mapping[str, Any] | LinkProfile
"""What ``links.sameNode`` / ``links.crossNode`` hold (see the module docstring)."""

PROFILE_FILE_SUFFIX = ".json"

ProfileT = TypeVar("ProfileT", bound=BaseModel)


def read_profile_file(path: Path, model: type[ProfileT], what: str) -> ProfileT:
    """The ``model`` in a JSON file of its keys; ``what`` names the file in errors.

    Raises:
        ValueError: the file is missing, not JSON or not a profile (the message names it).
    """
    try:
        return model.model_validate(json.loads(path.read_text()))
    except OSError as exc:
        raise ValueError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None
    except (json.JSONDecodeError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise ValueError(f"{what} {str(path)!r} is not a profile: {first}") from None


def load_profile_file(path: Path) -> LinkProfile:
    """The profile in a file ``testbed probe kv-path`` wrote (JSON, this model's keys).

    Raises:
        ValueError: see :func:`read_profile_file`.
    """
    return read_profile_file(path, LinkProfile, "link profile file")


def resolve_link(link: LinkSetting, base_dir: Path | None = None) -> LinkProfile:
    """The profile a link setting stands for.

    Args:
        link: a name from `LINK_PROFILES` (case, spaces and hyphens aside: ``10GbE``), a
            throughput in decimal GB/s (e.g. ``2.5``: one
            link of that rate shared by every transfer crossing it), a
            profile file ending in ``.json``, a mapping of profile figures, or a profile.
        base_dir: the folder relative file names start from (default: the working directory).

    Raises:
        ValueError: an unknown name (the message lists the known ones), a throughput that is
            not a finite number above 0, an unreadable file, invalid figures, or a rate outside
            :data:`PLAUSIBLE_BYTES_PER_S` (the message names the likely slip of units).
    """
    if isinstance(link, LinkProfile):
        return _plausible(link)
    if isinstance(link, Mapping):
        try:
            return _plausible(LinkProfile.model_validate(dict(link)))
        except ValidationError as exc:
            raise ValueError(f"invalid link profile figures: {str(exc).splitlines()[0]}") from None
    if isinstance(link, str):
        if link.endswith(PROFILE_FILE_SUFFIX):
            return _plausible(load_profile_file((base_dir or Path.cwd()) / link))
        name = same_name(link, LINK_PROFILES)
        if name is not None:
            return LINK_PROFILES[name]
        raise ValueError(
            f"unknown link profile {link!r}; {did_you_mean(link, LINK_PROFILES)}known: "
            f"{', '.join(LINK_PROFILES)}, a profile file (*.json, from `testbed probe kv-path`), "
            "or a throughput in GB/s (e.g. 2.5)"
        )
    if isinstance(link, bool) or not (math.isfinite(link) and link > 0):
        raise ValueError(f"link throughput must be a finite number of GB/s above 0, got {link}")
    rate = link * 1e9
    profile = LinkProfile(
        name=f"{link:g}GB/s", bytes_per_s=rate, wire_bytes_per_s=rate, source="stack config"
    )
    return _plausible(profile, as_gb_per_s=True)
