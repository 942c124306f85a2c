"""Which NIXL a Dynamo release ships, and the NIXL rule on ``UCX_TLS`` that follows from it.

NIXL's UCX backend refuses to start when NVIDIA GPUs are present and ``UCX_TLS`` enables no CUDA
memory transport: "Invalid UCX_TLS=tcp,self for NIXL UCX backend: NVIDIA GPU(s) are present, but
this setting does not enable CUDA memory support. Add cuda_copy for basic GPU support, or cuda
to also include NVLink support." (``src/plugins/ucx/config.cpp``, ``validateTlsCudaSupport``).
It came with ai-dynamo/nixl pull request #1617 ("UCX: fail on invalid UCX_TLS for GPU support"),
merged in late August 2026: after NIXL 1.4.0 (tagged 2026-08-13; the repository at 2026-08-21
has no such check), so the first release with it is **NIXL 1.5.0**; NIXL 1.5.1 refuses
``tcp,self`` (``../shared/notes/kv-path-measured.md``).

Dynamo releases and the NIXL of their **vLLM** runtime image (the engine this program deploys;
the SGLang and TensorRT-LLM images pin their own NIXL), from Dynamo's release pins
(``docs/fern/components/releases.data.ts``, ``nixlVllm``; ai-dynamo/dynamo at commit
0059bada94f8c52586523424ee05d4b2a1063608 for 1.0.0-1.4.2; the 1.6.x docs' upgrade panel,
https://docs.nvidia.com/dynamo/v1.6.1/reference/releases/deprecations, "Upgrade to v1.6.0":
"vLLM 0.28.0 -> 0.31.0", "NIXL · vLLM 1.3.2 -> 1.4.1", "NIXL · SGLang 1.4.0 -> 1.5.0"):

- 1.4.0-1.4.2 (vLLM 0.26.0): NIXL 1.3.2;
- **1.6.0 (vLLM 0.31.0): NIXL 1.4.1**, no check. 1.6.1 and 1.6.2 are patch releases whose
  dependency changes name no NIXL (the v1.6.2 release notes, commit 28f9765: OS packages, the
  SGLang image's CPython, the Planner's Python, Mooncake 0.3.14), and the seed ran
  ``UCX_TLS=tcp,self`` on GPU nodes with ``vllm-runtime:1.6.2`` and its workers started;
- **1.7.0: NIXL 1.5.0** (``../shared/notes/kv-path-measured.md``; the 1.7.0 pin table was not
  found in the search index here), the first with the check.

Later Dynamo releases are taken to ship NIXL >= 1.5.0 (NIXL versions only move forward in
Dynamo's ``container/context.yaml``). Dynamo 1.6's SGLang image already ships NIXL 1.5.0; the
rule is for the vLLM image only, as ``engine.kind`` is ``vllm`` or ``mocker``.
"""

from __future__ import annotations

NIXL_TLS_CHECK_SINCE = (1, 5, 0)
"""The first NIXL release whose UCX backend refuses a ``UCX_TLS`` without CUDA memory support."""

DYNAMO_NIXL: dict[tuple[int, int, int], tuple[int, int, int]] = {
    (1, 4, 0): (1, 3, 2),
    (1, 6, 0): (1, 4, 1),
    (1, 7, 0): (1, 5, 0),
}
"""Dynamo release -> the NIXL its vLLM runtime image ships, where known (see the module
docstring); a release not listed ships that of the latest listed release below it."""

FIRST_DYNAMO_WITH_CHECK = min(d for d, n in DYNAMO_NIXL.items() if n >= NIXL_TLS_CHECK_SINCE)
"""The first Dynamo release whose NIXL has the check: 1.7.0."""


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
