"""Checks of the free-form values a stack passes on to vLLM, NIXL and UCX: environment
variables, extra engine arguments and the model's ``config.json``. What the program cannot
know in full (every flag of vLLM, every variable of UCX) is judged by what it does know: a
value outside UCX's own names, or a name one slip away from one the program knows, is a typo
the cluster would only show as a worker that starts and behaves otherwise.

- ``UCX_TLS``: each item a UCX transport or alias (openucx/ucx ``src/ucp/core/ucp_context.c``,
  ``ucp_tl_aliases``, and the transports ``src/uct`` registers), optionally with ``^``
  (exclude, the whole list) or ``:aux``; ``all`` alone.
- an environment variable of UCX or vLLM (``UCX_``, ``VLLM_``) spelt one slip from a known one
  (:data:`KNOWN_ENV`): UCX and vLLM ignore a variable they do not know.
- an ``extraArgs`` flag spelt one slip from an engine flag the program knows (the engine's
  :attr:`~stackmodel.engines.EngineProfile.known_flags`): vLLM's parser refuses an unknown
  flag, so the worker would not start.
- ``model.configJson`` of another model family than ``model.name`` (its ``model_type``): the
  sizing would size another model.

Each problem offers the fix it passes with (:mod:`stackmodel.fixes`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from configkeys.suggest import closest
from stackmodel.config import StackConfig
from stackmodel.engine_args import parse_engine_args
from stackmodel.errors import ConfigProblem
from stackmodel.fixes import Check, Fix, accepted_fixes, checking, fixes_text
from stackmodel.models import ModelGeometry
from stackmodel.ucx import UCX_TLS

UCX_TRANSPORTS = frozenset(
    {
        # aliases (ucp_tl_aliases)
        "mm", "sm", "shm", "ib", "ud_v", "ud_x", "ud", "rc_v", "rc_x", "rc", "dc", "dc_x",
        "ugni", "cuda", "rocm",
        # transports and connection managers
        "self", "tcp", "posix", "sysv", "xpmem", "knem", "cma", "rc_verbs", "ud_verbs",
        "rc_mlx5", "ud_mlx5", "dc_mlx5", "ugni_smsg", "ugni_udt", "ugni_rdma", "cuda_copy",
        "cuda_ipc", "gdr_copy", "rocm_copy", "rocm_ipc", "rocm_gdr", "ze_copy", "ze_ipc",
        "rdmacm", "sockcm", "tcp_sockcm", "all",
    }
)  # fmt: skip
"""Every name ``UCX_TLS`` takes (openucx/ucx ``ucp_context.c`` ``ucp_tl_aliases`` and the
transports and connection managers of ``src/uct``)."""

KNOWN_ENV = frozenset(
    {
        "UCX_TLS", "UCX_RNDV_THRESH", "UCX_RNDV_SCHEME", "UCX_ZCOPY_THRESH", "UCX_NET_DEVICES",
        "UCX_MEMTYPE_CACHE", "UCX_IB_GPU_DIRECT_RDMA", "UCX_MAX_RNDV_RAILS", "UCX_LOG_LEVEL",
        "UCX_PROTO_ENABLE", "UCX_TCP_CM_REUSEADDR", "UCX_SOCKADDR_TLS_PRIORITY",
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "VLLM_NIXL_SIDE_CHANNEL_HOST",
        "VLLM_NIXL_SIDE_CHANNEL_PORT", "VLLM_LOGGING_LEVEL", "VLLM_ATTENTION_BACKEND",
        "VLLM_WORKER_MULTIPROC_METHOD", "VLLM_HOST_IP", "VLLM_USE_DEEP_GEMM",
    }
)  # fmt: skip
"""UCX (``ucp_context.c`` config table, UCX_ prefix) and vLLM (``vllm/envs.py``) variables a
stack of this kind sets; a name one slip from one of them is refused."""

SLIP = 0.85
"""How close (``difflib`` ratio) a name must be to a known one to be taken for its typo."""


def _close(name: str, known: frozenset[str]) -> str | None:
    """The known name ``name`` is one slip from (None when it is known, or close to none)."""
    return None if name in known else closest(name, sorted(known), SLIP)


def _key(i: int, field: str) -> str:
    return f"topology.workers[{i}].{field}"


def _offer(cfg: StackConfig, fix: Fix, check: Check, key: str) -> tuple[tuple[Fix, ...], str]:
    fixes = () if checking() else accepted_fixes(cfg, [fix], check, key)
    return fixes, f"; {fixes_text(fixes)}" if fixes else ""


def freeform_problems(cfg: StackConfig, check: Check) -> list[ConfigProblem]:
    """The environment's and the extra arguments' problems (the module docstring);
    ``check`` judges the fixes offered."""
    out: list[ConfigProblem] = []
    for i, w in enumerate(cfg.topology.workers):
        out += _env_problems(cfg, i, w.env, check)
        for arg in parse_engine_args(w.extra_args):
            if not arg.flag.startswith("--"):
                continue
            close = _close(arg.flag, cfg.engine.profile.known_flags)
            if close is None:
                continue
            index = w.extra_args.index(arg.text)
            key = _key(i, f"extraArgs[{index}]")
            fixed = close + arg.text[len(arg.text.split("=", 1)[0]) :]
            fixes, offer = _offer(cfg, (f"{key}={fixed}",), check, key)
            out.append(
                ConfigProblem(
                    key,
                    arg.text,
                    f"{cfg.engine.profile.name} has no flag {arg.flag} and refuses to start on "
                    f"it; did you mean "
                    f"{close}?{offer}",
                    fixes,
                )
            )
    return out


def _env_problems(
    cfg: StackConfig, i: int, env: dict[str, str], check: Check
) -> list[ConfigProblem]:
    out = []
    for name, value in env.items():
        close = _close(name, KNOWN_ENV) if name.startswith(("UCX_", "VLLM_")) else None
        if close is not None:
            key = _key(i, f"env.{name}")
            out.append(
                ConfigProblem(
                    key,
                    value,
                    f"{name} is read by nothing (UCX and vLLM ignore a variable they do not "
                    f"know); did you mean {close}? Rename the key",
                )
            )
        if name == UCX_TLS:
            out += _tls_problems(cfg, i, value, check)
    return out


def _tls_problems(cfg: StackConfig, i: int, value: str, check: Check) -> list[ConfigProblem]:
    items = [item.strip() for item in value.lstrip("^").split(",")]
    unknown = [t for t in items if t.split(":", 1)[0] not in UCX_TRANSPORTS]
    if not unknown:
        return []
    guess: Callable[[str], str] = lambda t: (  # noqa: E731
        closest(t.split(":", 1)[0], sorted(UCX_TRANSPORTS)) or t
    )
    fixed = ",".join(guess(t) if t in unknown else t for t in items)
    fixed = ("^" if value.startswith("^") else "") + fixed
    key = _key(i, f"env.{UCX_TLS}")
    fixes, offer = _offer(cfg, (f"{key}={fixed}",), check, key)
    names = ", ".join(repr(t) for t in unknown)
    return [
        ConfigProblem(
            key,
            value,
            f"{names} {'is' if len(unknown) == 1 else 'are'} no UCX transport or alias (UCX "
            f"refuses the list, and NIXL cannot start); {fixed!r} is the closest{offer}",
            fixes,
        )
    ]


def _family(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def config_json_problems(cfg: StackConfig, geometry: ModelGeometry | None) -> list[ConfigProblem]:
    """``configJson`` (read into ``geometry`` by the plan's inputs) whose ``model_type``'s
    family (its leading letters: ``qwen`` of ``qwen3_moe``, ``llama``) is not in
    ``model.name``."""
    if cfg.model.config_json is None or geometry is None or not geometry.model_type:
        return []
    family = re.match(r"[a-z]+", geometry.model_type.lower())
    if family is None or family[0] in _family(cfg.model.name):
        return []
    return [
        ConfigProblem(
            "model.configJson",
            cfg.model.config_json,
            f"its model_type is {geometry.model_type!r}, not a model of {cfg.model.name}'s "
            "family: the sizing would size another model (vLLM loads the model's own "
            f"config); give {cfg.model.name}'s config.json, or the model.name it belongs to",
        )
    ]
