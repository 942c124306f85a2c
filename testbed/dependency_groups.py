"""The dependency groups a command needs beyond the program's own dependencies, and the one
line a command prints when its group is not installed.

No group is installed by default (``pyproject.toml``, ``[tool.uv] default-groups = []``), so a
user who forgets ``--group sim`` would otherwise see a ``ModuleNotFoundError`` from every
process the simulation starts. Whether a group is there is found without importing it
(``importlib.util.find_spec``: the import path only).
"""

from __future__ import annotations

import importlib.util

from kvpath.probe.nixl_part import NIXL_DISTRIBUTIONS

GROUP_MODULES: dict[str, tuple[str, ...]] = {
    # ai-dynamo: the Dynamo frontend and the mocker (`python -m dynamo.frontend`, ...).
    "sim": ("dynamo",),
    # NIXL's Python API, one wheel per CUDA major.
    "kvprobe": tuple(dist.replace("-", "_") for dist in NIXL_DISTRIBUTIONS),
}
"""Each group a command needs, and the top-level modules of which any one means it is
installed (``pyproject.toml``'s ``[dependency-groups]``)."""


def group_installed(group: str) -> bool:
    """Whether any module of ``group`` (:data:`GROUP_MODULES`) can be imported."""
    return any(importlib.util.find_spec(module) is not None for module in GROUP_MODULES[group])


def missing_group(group: str, needs: str, command: str) -> str | None:
    """The line to print when ``group`` is not installed, else None.

    ``missing_group("sim", "the simulation needs ...", "testbed simulate kv-routing")`` ->
    ``"the simulation needs ..., which is in the `sim` dependency group: run `uv run --group
    sim testbed simulate kv-routing`"``.
    """
    if group_installed(group):
        return None
    return (
        f"{needs}, which is in the `{group}` dependency group: run "
        f"`uv run --group {group} {command}`"
    )
