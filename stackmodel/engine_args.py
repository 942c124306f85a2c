"""Engine arguments of a stack's ``extraArgs`` as vLLM's parser reads them: one parser for every
rule that looks at them (the checks, the step budget, the simulation's warnings).

vLLM 0.31.0's ``FlexibleArgumentParser`` takes a flag's ``_`` for ``-`` (``--max_model_len`` is
``--max-model-len``: ``vllm/utils/argparse_utils.py``, lines 120 and 339) and its value after
``=`` or as the next item; argparse keeps the last of a repeated flag.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def flag_name(item: str) -> str:
    """An item's flag as vLLM reads it: ``--max_model_len=8192`` -> ``--max-model-len``; an item
    that is no long flag (a value, ``-q``) as it is."""
    name = item.split("=", 1)[0]
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


@dataclass(frozen=True)
class EngineArg:
    """One item of an argument list.

    Attributes:
        text: the item as written.
        flag: :func:`flag_name` of it.
        value: what follows its ``=``, else the next item ('' for the last item).
    """

    text: str
    flag: str
    value: str


def parse_engine_args(items: Sequence[str]) -> tuple[EngineArg, ...]:
    """Every item of ``items`` with its flag and value (a value item is also an item of its own,
    whose flag is itself)."""
    return tuple(
        EngineArg(
            text=item,
            flag=flag_name(item),
            value=item.partition("=")[2] or (items[i + 1] if i + 1 < len(items) else ""),
        )
        for i, item in enumerate(items)
    )
