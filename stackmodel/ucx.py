"""Which UCX transport lists can move GPU memory: the rule behind ``kvTransfer.bufferDevice: cuda``.

The NIXL connector registers a worker's KV buffer with UCX as host memory (``DRAM``,
``kv_buffer_device: cpu``) or GPU memory (``VRAM``, ``cuda``): vLLM 0.31.0,
``vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py`` (``nixl_memory_type``).
UCX only recognizes GPU memory when a CUDA memory transport is enabled. From the UCX FAQ
(openucx/ucx ``docs/source/faq.md``, "Which transports does UCX use?" and "How to run UCX with
GPU support?"):

- "When specifying UCX_TLS explicitly, must also specify cuda/rocm for GPU memory support,
  otherwise the GPU memory will not be recognized. For example: ``UCX_TLS=rc,cuda``";
- "Applications using GPU memory must also specify GPU transports for detecting and handling
  non-host memory"; so RDMA transports (``rc``, ``dc``, ``ud``, ``ib``) alone do not count;
- by default (``UCX_TLS`` unset, or ``all``) UCX uses every available transport, and "if GPUs
  are present on the machine, GPU transports will be enabled";
- ``^`` at the start turns the list into a deny list.

The aliases come from ``ucp_tl_aliases`` in openucx/ucx ``src/ucp/core/ucp_context.c``:
``cuda`` = ``cuda_copy``, ``cuda_ipc``, ``gdr_copy``; ``sm``/``shm`` = ``posix``, ``sysv``,
``xpmem``, ``knem``, ``cma``. A ``\\`` prefix disables aliasing and a ``:aux`` suffix marks an
auxiliary (bootstrap) transport; both are read through here.

Of the CUDA transports, ``cuda_copy`` is the one that detects CUDA pointers and stages GPU
memory through host memory for a network transport such as ``tcp``; ``cuda_ipc`` (GPU to GPU on
one host) and ``gdr_copy`` (GPUDirect copies) only speed it up. So a list moves GPU memory
when it enables ``cuda_copy``: by ``cuda_copy`` or ``cuda`` in an allow list, by ``all``, by
not listing it in a deny list, or by leaving ``UCX_TLS`` unset. The seed ran into the other
case: ``UCX_TLS=tcp,self`` with a GPU buffer crashed inside UCX ("UCX CUDA support was not
found"), which is why it moved KV through host memory.
"""

from __future__ import annotations

UCX_TLS = "UCX_TLS"
"""The environment variable that restricts UCX's transports (UCX default: ``all``)."""

GPU_MEMORY_TRANSPORT = "cuda_copy"
"""The UCX transport that recognizes CUDA memory and copies it to and from host memory."""

_RDMA = frozenset({"rc_verbs", "rc_mlx5", "ud_verbs", "ud_mlx5", "dc_mlx5"})
"""UCX's InfiniBand/RoCE transports (the verbs and mlx5 accelerated ones)."""

_ALIASES = {
    "cuda": frozenset({"cuda_copy", "cuda_ipc", "gdr_copy"}),
    "all": frozenset({"all"}),
    # ucp_tl_aliases: "rc" = rc_verbs, rc_mlx5 (+ ud auxiliaries), "ud" = ud_verbs, ud_mlx5,
    # "dc" = dc_mlx5 (+ ud auxiliaries), "ib" = all of them; the _v/_x short names likewise.
    "rc": frozenset({"rc_verbs", "rc_mlx5"}),
    "rc_v": frozenset({"rc_verbs"}),
    "rc_x": frozenset({"rc_mlx5"}),
    "ud": frozenset({"ud_verbs", "ud_mlx5"}),
    "ud_v": frozenset({"ud_verbs"}),
    "ud_x": frozenset({"ud_mlx5"}),
    "dc": frozenset({"dc_mlx5"}),
    "dc_x": frozenset({"dc_mlx5"}),
    "ib": _RDMA,
}

RDMA_CAPABLE_EXAMPLE = "rc,cuda"
"""A transport list for GPU KV buffers over InfiniBand/RoCE: the UCX FAQ's own example."""

CUDA_CAPABLE_EXAMPLE = "tcp,self,cuda"
"""A transport list for GPU KV buffers over TCP: the FAQ's ``rc,cuda`` pattern with ``tcp``."""


def _transports(names: str) -> set[str]:
    """The transport names in a comma-separated ``UCX_TLS`` body, aliases ``cuda``/``all``
    expanded, ``\\`` prefixes and ``:aux`` suffixes removed, lower case."""
    out: set[str] = set()
    for item in names.split(","):
        name = item.strip().lower()
        explicit = name.startswith("\\")
        name = name.lstrip("\\").split(":", 1)[0]
        if name:
            out |= {name} if explicit else _ALIASES.get(name, {name})
    return out


def moves_gpu_memory(ucx_tls: str | None) -> bool:
    """True when UCX with this ``UCX_TLS`` value recognizes and moves CUDA memory.

    ``None`` (unset) and ``all`` -> True; ``tcp,self``, ``tcp,sm``, ``rc`` -> False;
    ``tcp,cuda``, ``tcp,cuda_copy`` -> True; ``^cuda``, ``^cuda_copy`` -> False; ``^rc`` -> True.
    See the module docstring for the sources.
    """
    return _enables(ucx_tls, frozenset({GPU_MEMORY_TRANSPORT}))


def moves_between_gpus(ucx_tls: str | None) -> bool:
    """True when UCX with this ``UCX_TLS`` value may copy from one GPU to another of the same
    node directly (``cuda_ipc``: CUDA IPC over NVLink or PCIe peer-to-peer, part of the
    ``cuda`` alias): unset, ``all``, ``tcp,self,cuda`` -> True; ``tcp,self,cuda_copy`` ->
    False."""
    return _enables(ucx_tls, frozenset({"cuda_ipc"}))


def moves_over_rdma(ucx_tls: str | None) -> bool:
    """True when UCX with this ``UCX_TLS`` value may use an InfiniBand/RoCE transport
    (``rc``, ``ud``, ``dc``, ``ib`` and their verbs/mlx5 forms; aliases from ``ucp_tl_aliases``
    in openucx/ucx ``src/ucp/core/ucp_context.c``): unset and ``all`` -> True; ``tcp,self,cuda``
    -> False; ``rc,cuda`` -> True; ``^ib`` -> False."""
    return _enables(ucx_tls, _RDMA)


def _enables(ucx_tls: str | None, transports: frozenset[str]) -> bool:
    """Whether the value leaves any of ``transports`` on (unset: every transport)."""
    if ucx_tls is None:
        return True
    value = ucx_tls.strip()
    if value.startswith("^"):
        return not transports <= _transports(value[1:])
    listed = _transports(value)
    return "all" in listed or bool(transports & listed)
