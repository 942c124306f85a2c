"""Dynamo releases: what each ships, which upgrades Dynamo supports, and the releases at which
each rule of this program that encodes upstream behaviour was read. Every version rule of the
program reads this module: the NIXL ``UCX_TLS`` check (:mod:`stackmodel.checks`), the version gate
at preview (:mod:`stackmodel.stack_layout`), the probe profiles' NIXL check, and the warning for a
release at which a rule was not read (:data:`UPSTREAM_RULES`).

**What each release ships** (:data:`RELEASE_LINES`, the vLLM runtime image; the SGLang and
TensorRT-LLM images pin their own NIXL, and this program deploys only vLLM or the mocker): the
"Upgrade to v1.7.0" panel of Dynamo's deprecations page for 1.6.2
(https://docs.nvidia.com/dynamo/v1.6.2/reference/releases/deprecations): from 1.6.2 "vLLM
0.31.0 -> 0.33.0", "NIXL · vLLM 1.4.1 -> 1.5.0", "UCX 1.21.x -> 1.22.x"; from 1.5.1 "vLLM
0.28.0", "NIXL · vLLM 1.3.2", "UCX 1.21.x"; 1.4.2 from Dynamo's release pins
(``docs/fern/components/releases.data.ts``, ``nixlVllm``, ``ucx``; ai-dynamo/dynamo at commit
0059bada94f8c52586523424ee05d4b2a1063608): vLLM 0.26.0, NIXL 1.3.2, UCX 1.21.x. Each line's
latest patch is the one that page names ("Pins shown from v1.6.2, the latest release on the
v1.6.x line"; v1.5.1, v1.4.2), and 1.7.1 (2026-12-04, tag v1.7.1 at commit c3420db): its release
notes call it "a patch release on top of v1.7.0" whose dependency changes are a transformers
ceiling, AISim 0.14.0 and the enterprise image's base ("The base still carries vLLM v0.33.0"),
none of them vLLM, NIXL or UCX, so the 1.7 line's pins are 1.7.0's. 1.6.1 and 1.6.2 are patch
releases whose dependency changes name no NIXL (the v1.6.2 release notes, commit 28f9765).

**NIXL's ``UCX_TLS`` rule.** NIXL's UCX backend refuses to start when NVIDIA GPUs are present and
``UCX_TLS`` enables no CUDA memory transport: "Invalid UCX_TLS=tcp,self for NIXL UCX backend:
NVIDIA GPU(s) are present, but this setting does not enable CUDA memory support. Add cuda_copy
for basic GPU support, or cuda to also include NVLink support." (``src/plugins/ucx/config.cpp``,
``validateTlsCudaSupport``). It came with ai-dynamo/nixl pull request #1617 ("UCX: fail on
invalid UCX_TLS for GPU support"), merged in late August 2026: after NIXL 1.4.0 (tagged
2026-08-13; the repository at 2026-08-21 has no such check), so the first release with it is
**NIXL 1.5.0**; NIXL 1.5.1 refuses ``tcp,self`` on a GPU server (docs/kv-path.md, "Measured
on a GPU server"). Dynamo 1.6.x ships NIXL 1.4.1 (no check: the seed ran ``UCX_TLS=tcp,self`` on
GPU nodes with ``vllm-runtime:1.6.2``), **Dynamo 1.7.0 ships NIXL 1.5.0**, the first with it.
Later releases are taken to ship NIXL >= 1.5.0 (NIXL versions only move forward in Dynamo's
``container/context.yaml``).

**Upgrades Dynamo supports** (same page): "Supported upgrade path: within a minor release or to
an adjacent minor. Upgrade from N.M to N.(M+1) and downgrade in the reverse direction. Apply
every intermediate minor release in order." :func:`upgrade_problem` refuses a platform upgrade
that skips a minor, naming the release to apply first. The operator and the runtime are released
together (chart version == Dynamo release); :func:`runtime_skew` says how far a graph's runtime
is from its operator: the same release, another patch of the same minor (supported), one minor
older than the operator (the state between the platform's upgrade and the graph's, which the
supported path goes through; still a risk: Dynamo's GPU-sharing example reports a 1.4.2
platform with a 1.3.0 runtime frontend that never lists its model), or beyond (newer than the
operator, which no supported order reaches, or more than one minor older).
"""

from __future__ import annotations

from typing import NamedTuple

NIXL_TLS_CHECK_SINCE = (1, 5, 0)
"""The first NIXL release whose UCX backend refuses a ``UCX_TLS`` without CUDA memory support."""


def parse_version(version: str) -> tuple[int, int, int]:
    """``"1.6.2"`` -> ``(1, 6, 2)``.

    Raises:
        ValueError: not MAJOR.MINOR.PATCH.
    """
    parts = version.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"expected a MAJOR.MINOR.PATCH version, got {version!r}")
    major, minor, patch = (int(p) for p in parts)
    return major, minor, patch


class ReleaseLine(NamedTuple):
    """One minor line of Dynamo releases and what its vLLM runtime image ships.

    Attributes:
        latest: the line's latest release, e.g. ``"1.6.2"``.
        vllm: the vLLM version, e.g. ``"0.31.0"``.
        nixl: the NIXL version of the vLLM image, e.g. ``"1.4.1"``.
        ucx: the UCX line of its NIXL builds, e.g. ``"1.21.x"``.
    """

    latest: str
    vllm: str
    nixl: str
    ucx: str


RELEASE_LINES: dict[tuple[int, int], ReleaseLine] = {
    (1, 4): ReleaseLine("1.4.2", "0.26.0", "1.3.2", "1.21.x"),
    (1, 5): ReleaseLine("1.5.1", "0.28.0", "1.3.2", "1.21.x"),
    (1, 6): ReleaseLine("1.6.2", "0.31.0", "1.4.1", "1.21.x"),
    (1, 7): ReleaseLine("1.7.1", "0.33.0", "1.5.0", "1.22.x"),
}
"""(major, minor) -> the line's latest release and its pins (see the module docstring)."""

DYNAMO_NIXL: dict[tuple[int, int, int], tuple[int, int, int]] = {
    (*line, 0): parse_version(pins.nixl) for line, pins in RELEASE_LINES.items()
}
"""Dynamo release -> the NIXL its vLLM runtime image ships, where known (one entry per line of
:data:`RELEASE_LINES`); a release not listed ships that of the latest listed release below it."""

FIRST_DYNAMO_WITH_CHECK = min(d for d, n in DYNAMO_NIXL.items() if n >= NIXL_TLS_CHECK_SINCE)
"""The first Dynamo release whose NIXL has the check: 1.7.0."""


def nixl_refuses_tls_without_cuda(dynamo_version: str) -> bool:
    """True when the NIXL of this Dynamo release refuses a ``UCX_TLS`` without a CUDA memory
    transport on a GPU node: Dynamo 1.7.0 and later. ``"1.6.2"`` -> False, ``"1.7.0"`` -> True.

    Raises:
        ValueError: not a MAJOR.MINOR.PATCH version.
    """
    return parse_version(dynamo_version) >= FIRST_DYNAMO_WITH_CHECK


def shipped_nixl(dynamo_version: str) -> str | None:
    """The NIXL this Dynamo release's vLLM image ships, as far as `DYNAMO_NIXL` knows: that of
    the latest listed release at or below it (NIXL only moves forward), e.g. ``"1.6.2"`` ->
    ``"1.4.1"``, ``"1.7.0"`` -> ``"1.5.0"``; None below every listed release.

    Raises:
        ValueError: not a MAJOR.MINOR.PATCH version.
    """
    version = parse_version(dynamo_version)
    known = [d for d in DYNAMO_NIXL if d <= version]
    return ".".join(map(str, DYNAMO_NIXL[max(known)])) if known else None


def minor_of(version: str) -> tuple[int, int]:
    """``"1.6.2"`` -> ``(1, 6)``; a NIXL ``"1.5.1"`` -> ``(1, 5)``.

    Raises:
        ValueError: not MAJOR.MINOR.PATCH.
    """
    major, minor, _ = parse_version(version)
    return major, minor


def line_text(line: tuple[int, int]) -> str:
    """``(1, 6)`` -> ``"1.6.x"``."""
    return f"{line[0]}.{line[1]}.x"


def release_to_apply(line: tuple[int, int]) -> str:
    """The release to upgrade to on a minor line: its latest (:data:`RELEASE_LINES`), else
    ``MAJOR.MINOR.0``. ``(1, 6)`` -> ``"1.6.2"``, ``(1, 7)`` -> ``"1.7.1"``, ``(1, 9)`` ->
    ``"1.9.0"``."""
    known = RELEASE_LINES.get(line)
    return known.latest if known else f"{line[0]}.{line[1]}.0"


def upgrade_problem(current: str, target: str) -> str | None:
    """Why moving a platform from chart ``current`` to ``target`` is outside Dynamo's supported
    path (see the module docstring), naming the release to apply first; None when it is within
    a minor or to an adjacent one (either direction).

    ``("1.6.2", "1.7.0")`` -> None; ``("1.5.1", "1.7.0")`` -> "... skips 1.6.x: upgrade to 1.6.2
    first ..."; ``("1.7.0", "1.5.1")`` -> "... downgrade to 1.6.2 first ...".

    Raises:
        ValueError: either is not MAJOR.MINOR.PATCH.
    """
    old, new = minor_of(current), minor_of(target)
    if old[0] != new[0]:
        return (
            f"{current} -> {target} changes the major release; Dynamo documents upgrades only "
            "within a minor or to the adjacent minor (N.M -> N.(M+1))"
        )
    step = 1 if new[1] > old[1] else -1
    skipped = [(old[0], m) for m in range(old[1] + step, new[1], step)]
    if not skipped:
        return None
    way = "upgrade" if step > 0 else "downgrade"
    return (
        f"{current} -> {target} skips {', '.join(line_text(m) for m in skipped)}; Dynamo "
        "supports upgrades within a minor or to the adjacent minor only, every intermediate "
        f"minor applied in order: {way} to {release_to_apply(skipped[0])} first"
    )


def runtime_skew(runtime: str, operator: str) -> str:
    """How a graph's runtime release stands to its operator's (the platform's chart version):

    - ``"same"``: the same release;
    - ``"patch"``: another patch of the same minor (supported);
    - ``"older-minor"``: one minor older than the operator (the supported path's state between
      the platform's upgrade and the graph's);
    - ``"unsupported"``: newer than the operator by a minor or more, more than one minor
      older, or another major.

    ``("1.6.2", "1.6.2")`` -> ``"same"``, ``("1.6.1", "1.6.2")`` -> ``"patch"``,
    ``("1.6.2", "1.7.0")`` -> ``"older-minor"``, ``("1.7.0", "1.6.2")`` -> ``"unsupported"``.

    Raises:
        ValueError: either is not MAJOR.MINOR.PATCH.
    """
    if parse_version(runtime) == parse_version(operator):
        return "same"
    ran, ops = minor_of(runtime), minor_of(operator)
    if ran == ops:
        return "patch"
    if ran[0] == ops[0] and ran[1] == ops[1] - 1:
        return "older-minor"
    return "unsupported"


class UpstreamRule(NamedTuple):
    """A rule of this program that encodes upstream behaviour, and the releases it holds for.

    Attributes:
        name: what the rule is about, e.g. ``"host mirror"``.
        where: the module that encodes it.
        lines: the Dynamo minor lines it was read (or observed) at, e.g. ``((1, 6), (1, 7))``.
        evidence: the files, lines and versions read.
        dynamo_only: the rule concerns the operator's objects (chart, CRDs), not a plain vLLM
            stack.
    """

    name: str
    where: str
    lines: tuple[tuple[int, int], ...]
    evidence: str
    dynamo_only: bool = False


_V33 = "vllm 0.33.0 wheel (PyPI)"
_D17 = "ai-dynamo 1.7.0.dev20261026 wheel (PyPI; 1.7.0 itself is not on the index here)"

UPSTREAM_RULES: tuple[UpstreamRule, ...] = (
    UpstreamRule(
        "host mirror",
        "kvpath.memory",
        ((1, 6), (1, 7)),
        "vLLM 0.31.0 and 0.33.0: a pageable torch.empty(..., device='cpu') per layer when "
        "kv_buffer_device == 'cpu' (0.33.0 nixl/base_worker.py L794-810, L1311-1313; "
        f"base_scheduler.py L92-93; {_V33}); free-block order v1/core/block_pool.py L721 "
        "popleft_n, L767 append_n (0.31.0 free_blocks L777-808: prepend_n for blocks without "
        "a hash, append_n for cached ones)",
    ),
    UpstreamRule(
        "host copies",
        "kvpath.copies",
        ((1, 6), (1, 7)),
        "vLLM 0.31.0 and 0.33.0: save_kv_to_host and sync_recved_kv_to_device stay "
        "'intentionally synchronous' (0.33.0 nixl/base_worker.py L3007-3038, L2981-2997), ops "
        "in platforms/cuda.py L659-680, one torch thread while serving (utils/torch_utils.py "
        f"L255 set_torch_threads_for_runtime; {_V33})",
    ),
    UpstreamRule(
        "NixlConnector arguments and kv_role",
        "stackmodel.config",
        ((1, 6), (1, 7)),
        "vLLM 0.31.0 and 0.33.0: kv_connector, kv_role, kv_buffer_device of KVTransferConfig "
        "(0.33.0 config/kv_transfer.py L11-12, L67-73); kv_both with NixlConnector deprecated "
        "with a warning (nixl/connector.py L97-103); NixlConnector is the pull connector "
        f"(connector.py L432, NixlConnector = NixlPullConnector; {_V33})",
    ),
    UpstreamRule(
        "UCX_TLS",
        "stackmodel.checks",
        ((1, 6), (1, 7)),
        "NIXL 1.4.1 (Dynamo 1.6.x) accepts a UCX_TLS without CUDA; NIXL 1.5.0 (Dynamo 1.7.0) "
        "refuses it on a GPU node (this module's docstring)",
    ),
    UpstreamRule(
        "worker and router flags",
        "stackmodel.topology",
        ((1, 6), (1, 7)),
        "dynamo.vllm --disaggregation-mode (1.7.0.dev vllm/backend_args.py L124), the mocker's "
        "--num-gpu-blocks-override, --speedup-ratio, --kv-transfer-bandwidth, "
        "--kv-bytes-per-token (mocker/args.py L189, L260, L575, L604), the frontend's "
        "DYN_ROUTER_MODE (common/configuration/groups/router_args.py L227), the modules "
        "dynamo.vllm and dynamo.mocker (__main__.py); vLLM's --max-model-len, "
        "--gpu-memory-utilization, --kv-cache-memory-bytes, --kv-transfer-config, "
        f"--kv-events-config (0.33.0 engine/arg_utils.py L614-615, L789-790, L991, L1883; {_V33}); "
        f"ai-dynamo 1.6.1 wheel and {_D17}",
    ),
    UpstreamRule(
        "frontend metric names",
        "loadgen.server_metrics",
        ((1, 6), (1, 7)),
        "dynamo_frontend_{requests_total, time_to_first_token_seconds, "
        "inter_token_latency_seconds, input_sequence_tokens, cached_tokens, "
        "output_sequence_tokens}: scraped from ai-dynamo 1.6.1's frontend; present in "
        "ai-dynamo-runtime 1.7.0.dev20261026's dynamo/_core.abi3.so",
    ),
    UpstreamRule(
        "chart values",
        "stackmodel.platform",
        ((1, 5), (1, 6)),
        "dynamo-platform chart of the 1.5 line (ai-dynamo/dynamo "
        "2a6da14c83617f5412caba5777dbf0e2399e9c5f), taken to hold for 1.6.x; not read at 1.7.0",
        dynamo_only=True,
    ),
    UpstreamRule(
        "CRD fields",
        "manifests.graph",
        ((1, 5), (1, 6)),
        "DGD v1beta1 of the 1.5 line (ai-dynamo/dynamo "
        "2a6da14c83617f5412caba5777dbf0e2399e9c5f), taken to hold for 1.6.x (the seed deployed "
        "its DGDs on 1.6.2); not read at 1.7.0",
        dynamo_only=True,
    ),
)
"""Each rule that encodes upstream behaviour and the Dynamo lines it holds for (read at)."""


def rules_not_read_at(dynamo_version: str) -> list[UpstreamRule]:
    """The rules of :data:`UPSTREAM_RULES` not read at this release's minor line:
    ``"1.6.2"`` -> [], ``"1.7.0"`` -> chart values and CRD fields, ``"1.8.0"`` -> every rule.

    Raises:
        ValueError: not MAJOR.MINOR.PATCH.
    """
    line = minor_of(dynamo_version)
    return [rule for rule in UPSTREAM_RULES if line not in rule.lines]
