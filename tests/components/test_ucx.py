"""Which UCX_TLS values move GPU memory (stackmodel.ucx; sources in its docstring: the UCX FAQ and
ucp_context.c's alias table)."""

import pytest

from stackmodel.ucx import CUDA_CAPABLE_EXAMPLE, moves_gpu_memory, moves_over_rdma


@pytest.mark.parametrize(
    "tls",
    [
        None,  # unset: UCX uses all available transports, GPU ones included
        "all",
        CUDA_CAPABLE_EXAMPLE,
        "tcp,cuda",
        "tcp,self,cuda_copy",
        "rc,cuda",  # the FAQ's own example
        " TCP , CUDA_COPY ",
        "tcp,\\cuda_copy",  # '\' disables aliasing; cuda_copy is a transport name already
        "^rc",  # deny list without a CUDA transport in it
        "^cuda_ipc,gdr_copy",  # cuda_copy itself is still allowed
    ],
)
def test_lists_that_move_gpu_memory(tls: str | None) -> None:
    assert moves_gpu_memory(tls)


@pytest.mark.parametrize(
    "tls",
    [
        "tcp,self",  # the seed's setting
        "tcp",
        "tcp,sm,self",
        "tcp,shm",
        "rc",  # RDMA alone: "must also specify cuda"
        "rc,ud:aux,dc",
        "tcp,cuda_ipc",  # GPU-to-GPU on one host only: nothing recognizes CUDA pointers
        "tcp,gdr_copy",
        "tcp,\\cuda",  # '\cuda' is the literal name, not the alias
        "^cuda",
        "^tcp,cuda_copy",
        "",
    ],
)
def test_lists_that_do_not(tls: str) -> None:
    assert not moves_gpu_memory(tls)


@pytest.mark.parametrize(
    ("tls", "rdma"),
    [
        (None, True),
        ("all", True),
        ("rc,cuda", True),
        ("ib", True),
        ("ud_x,cuda_copy", True),
        ("^rc", True),  # ud and dc stay on
        ("tcp,self", False),
        ("tcp,self,cuda", False),
        ("^ib", False),
        ("sm,cuda", False),
    ],
)
def test_which_lists_can_move_kv_over_rdma(tls: str | None, rdma: bool) -> None:
    assert moves_over_rdma(tls) is rdma
