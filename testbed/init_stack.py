"""``testbed init-stack NAME --from STACK``: a new stack file to adapt to your own cluster.

The new ``stacks/Pulumi.<NAME>.yaml`` is a copy of a shipped stack (its comments say what each
key is for) with the graph renamed to NAME and a header listing the keys a new cluster changes;
``testbed render NAME`` and ``testbed simulate NAME`` check it. Imports of what the command runs
are inside it (``tests/test_cli_help.py``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

HEADER = """\
# Made by `testbed init-stack {name} --from {source}`. Adapt it to your cluster, then check it
# with `testbed render {name}` and `testbed simulate {name}` (README: "Adapt it to your cluster"):
#   nodeClasses  one entry per kind of GPU node: nodeSelector (your nodes' labels),
#                tolerations (their taints), gpu (e.g. l40s), gpuMemoryGiB, hostMemoryGiB,
#                gpusPerNode, nodes, timeSlicing
#   model        name (a Hugging Face id; known models need nothing else) or configJson (the
#                model's config.json), maxModelLen
#   topology     workers: role, replicas, nodeClass, gpuMemoryUtilization, memoryLimit
#   links        sameNode / crossNode: 1gbe, 10gbe, 25gbe, 100gbe, rdma or GB/s
#   load         the grid: prefixKinds, concurrency, repetitions, promptTokens
# Every key: docs/config-reference.md.
"""


def new_stack_text(name: str, source: str, text: str) -> str:
    """``text`` (the stack file of ``source``) as stack ``name``: the header above instead of
    the source's own, the graph renamed (``topology.name``) and ``-s <source>`` in comments
    made ``-s <name>``; the comments on each key stay.

    Raises:
        ValueError: the source names its graph other than ``name: <source>`` on one line.
    """
    renamed, count = re.subn(
        rf"^(\s+name:\s*){re.escape(source)}\s*$", rf"\g<1>{name}", text, flags=re.MULTILINE
    )
    if count != 1:
        raise ValueError(f"stacks/Pulumi.{source}.yaml has no `name: {source}` line to rename")
    renamed = renamed.replace(f"-s {source} ", f"-s {name} ")
    body = renamed[renamed.index("config:") :]  # the source's own header describes the source
    return HEADER.format(name=name, source=source) + body


def write_new_stack(name: str, source: str, project_dir: Path) -> Path:
    """Write ``project_dir/stacks/Pulumi.<name>.yaml`` from stack ``source`` and check it
    validates; returns its path.

    Raises:
        ValueError: a bad NAME, an unknown or unsuitable ``source``, a file that exists, or a
            copy that does not validate (then nothing is left written); one line each.
    """
    from configkeys.suggest import did_you_mean
    from stackmodel.errors import StackConfigError
    from stackmodel.stacks import NEW_STACK_NAME, StackFileError, load_stack, stack_names

    if not NEW_STACK_NAME.match(name):
        raise ValueError(
            f"NAME {name!r}: use lower-case letters, digits and '-', at most 40 characters "
            "(it names the graph too), e.g. my-cluster"
        )
    known = stack_names(project_dir)
    if source not in known:
        hint = did_you_mean(source, known)
        raise ValueError(f"--from {source}: no such stack; {hint}known stacks: {', '.join(known)}")
    target = project_dir / "stacks" / f"Pulumi.{name}.yaml"
    if target.exists():
        raise ValueError(f"{target} exists: choose another NAME, or delete that file first")
    text = (project_dir / "stacks" / f"Pulumi.{source}.yaml").read_text()
    target.write_text(new_stack_text(name, source, text))
    try:
        load_stack(name, project_dir=project_dir)
    except (StackConfigError, StackFileError) as exc:
        target.unlink()
        raise ValueError(f"--from {source}: the copy is not a valid graph stack: {exc}") from None
    return target


def init_stack_command(
    name: Annotated[str, typer.Argument(help="The new stack's name (also its graph's name).")],
    source: Annotated[
        str, typer.Option("--from", help="The stack to start from: a shipped one or your own.")
    ] = "kv-routing",
) -> None:
    """Write stacks/Pulumi.NAME.yaml, a copy of a shipped stack to adapt to your cluster.

    Example: testbed init-stack my-cluster --from kv-routing
    """
    from stackmodel.stacks import REPO
    from testbed.console import fail

    try:
        target = write_new_stack(name, source, REPO)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    typer.echo(
        f"wrote stacks/{target.name}: edit nodeClasses, model, topology.workers, links and load "
        f"for your cluster, then check it with `testbed render {name}` and "
        f"`testbed simulate {name}`"
    )
