"""What ``pulumi config set --path`` stores, fed through the CLI's merge and the program.

The CLI stores ``true``/``false`` as booleans and integers as numbers below a top-level key
(``sdk/go/common/resource/config/object.go`` L566-591 ``coerce``, reached from ``map.go``
L225-245; ``pkg/cmd/pulumi/config/config.go`` L726-728, the ``config set --help`` text), at
pulumi/pulumi ``pulumi_cli.PULUMI_COMMIT``. Every text field of the stack config must take
those scalars (``configkeys.config_text.ConfigText``) and then apply its own checks.
"""

from __future__ import annotations

import copy
import shlex
import types
import typing
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from docs_text import doc_files
from markdown_it import MarkdownIt
from pulumi_cli import (
    coerce,
    merge_config,
    program_config,
    program_validates,
    read_stack,
    set_path,
    stack_values,
)
from pydantic import BaseModel

from configkeys.config_text import cli_scalar_text
from stackmodel.config import PlatformStackConfig, StackConfig
from stackmodel.errors import PROJECT, StackConfigError
from stackmodel.stacks import REPO, stack_names

STACKS = stack_names()

DOCUMENTED = [
    # (stack, path, text, what the program holds): values the docs and docstrings show.
    ("disagg-same-node", "load.runId", "2", "2"),
    ("kv-routing", "topology.workers[0].cpu", "2", "2"),
    ("kv-routing", "topology.workers[0].memoryLimit", "4000000000", "4000000000"),
    ("disagg-cross-node", "topology.workers[0].gpuMemoryUtilization", "0.8", 0.8),
    ("kv-routing", "topology.workers[0].env.VLLM_LOGGING_LEVEL", "1", "1"),
    ("kv-routing", "topology.workers[0].extraArgs[0]", "8", "8"),
    ("kv-routing", "topology.frontend.nodePort", "30080", 30080),
    ("kv-routing", "topology.readyTimeoutMinutes", "60", 60),
    ("kv-routing", "nodeClasses.gpu-24gb.nodeSelector.gpu-present", "true", "true"),
    ("kv-routing", "nodeClasses.gpu-24gb.tolerations[0].value", "true", "true"),
    ("kv-routing", "nodeClasses.gpu-24gb.gpuMemoryGiB", "24", 24.0),
    ("kv-routing", "engine.dynamoVersion", "1.6.2", "1.6.2"),
    ("kv-routing", "model.maxModelLen", "4096", 4096),
    ("kv-routing", "links.crossNode", "2.5", 2.5),
    ("platform", "platform.chartVersion", "1.6.2", "1.6.2"),
    ("platform", "platform.webhook.namespaceLabelValue", "true", "true"),
    ("platform", "platform.webhook.timeoutSeconds", "15", 15),
    ("kv-routing", "sizing.allowUnsafeMemory", "true", True),
    ("kv-routing", "load.enabled", "false", False),
    ("kv-routing", "load.failOnErrors", "true", True),
    ("kv-routing", "load.deadlineMinutes", "90", 90.0),
    ("kv-routing", "load.prefixShare", "0.5", 0.5),
    ("kv-routing", "load.concurrency[0]", "16", 16),
    ("kv-routing", "load.resultsDir", "2026", "2026"),
    ("kv-routing", "load.runId", "007", "007"),
    ("kv-routing", "load.nodeAddress", "10.0.0.5", "10.0.0.5"),
]


def value_at(cfg: StackConfig | PlatformStackConfig, path: str) -> Any:
    """The program's value at a ``config set --path`` path (camelCase keys, ``[n]`` indexes)."""
    node: Any = cfg.model_dump(by_alias=True, mode="json")
    for segment in path.split("."):
        name, *indexes = segment.replace("]", "").split("[")
        node = node[name]
        for index in indexes:
            node = node[int(index)]
    return node


def as_typed(held: Any, text: str) -> Any:
    """``text`` read as the type the program holds (``"true"`` for a bool field -> True)."""
    if isinstance(held, bool):
        return {"true": True, "false": False}[text]
    return type(held)(text) if isinstance(held, int | float) else text


def set_and_parse(
    stack: str, path: str, text: str, project: dict[str, Any]
) -> StackConfig | PlatformStackConfig:
    """``pulumi config set --path -s <stack> <path> <text>``, then ``pulumi preview``."""
    raw = read_stack(REPO / f"stacks/Pulumi.{stack}.yaml")
    set_path(raw, path, text)
    config, _ = program_config(merge_config(project, stack, stack_values(raw)))
    return program_validates(stack, config)


@pytest.mark.parametrize(("stack", "path", "text", "expected"), DOCUMENTED)
def test_documented_values_reach_the_program(
    project: dict[str, Any], stack: str, path: str, text: str, expected: Any
) -> None:
    cfg = set_and_parse(stack, path, text, project)
    assert value_at(cfg, path) == expected


def test_the_cli_stores_typed_scalars() -> None:
    """The rule the table above relies on, value by value (``coerce``, object.go L566-591)."""
    assert [coerce(t) for t in ("2", "true", "false", "0", "007", "0.85", "1e3", "-3", "2Gi")] == [
        2, True, False, 0, "007", "0.85", "1e3", -3, "2Gi"
    ]  # fmt: skip


def test_same_validation_after_the_scalar_is_read(project: dict[str, Any]) -> None:
    """A typed scalar is read as its text, then the field's own checks run: a number is no
    valid worker name, and a Kubernetes quantity typo is still refused by the sizing checks."""
    with pytest.raises(
        StackConfigError, match=r"topology\.workers\[0\]\.name = '-12': String should match"
    ):
        set_and_parse("kv-routing", "topology.workers[0].name", "-12", project)
    with pytest.raises(StackConfigError, match=r"engine\.dynamoVersion = '2': String should match"):
        set_and_parse("kv-routing", "engine.dynamoVersion", "2", project)
    with pytest.raises(StackConfigError, match=r"reserved for documentation \(RFC 5737\)"):
        set_and_parse("kv-routing", "load.nodeAddress", "192.0.2.10", project)


def documented_config_set_commands() -> list[list[str]]:
    """Every ``pulumi config set`` command in the code of the README and ``docs/*.md`` (fenced
    blocks and inline code), as argument lists (``&&``/``;`` chains split, ``#`` comments
    dropped); templates with ``<placeholders>`` are left out, the concrete commands beside them
    are checked."""
    tokens = [t for path in doc_files() for t in MarkdownIt().parse(path.read_text())]
    code = [t.content for t in tokens if t.type == "fence"] + [
        child.content
        for t in tokens
        if t.type == "inline"
        for child in t.children or []
        if child.type == "code_inline"
    ]
    commands = []
    for block in code:
        for line in block.splitlines():
            if "pulumi config set" not in line:
                continue
            words = shlex.split(line, comments=True)
            for command in _split_chain(words):
                templated = any(word.startswith("<") for word in command)  # `-s <stack>`
                if command[:3] == ["pulumi", "config", "set"] and not templated:
                    commands.append(command[3:])
    return commands


def _split_chain(words: list[str]) -> Iterator[list[str]]:
    current: list[str] = []
    for word in words:
        if word in ("&&", ";", "||"):
            yield current
            current = []
        else:
            current.append(word)
    yield current


def test_documented_commands_pass_the_cli_and_the_program(project: dict[str, Any]) -> None:
    """Each documented ``pulumi config set`` command, applied as the CLI stores it to the stack it
    names (every shipped stack when it names none), passes the CLI's merge and the program, and
    the program holds what was typed. ``--secret`` stores a ``secure:`` value (undeclared in
    ``Pulumi.yaml``, so no type check) that the program reads as a secret, never in the model."""
    commands = documented_config_set_commands()
    assert any("--path" in c for c in commands) and any("--secret" in c for c in commands)
    for args in commands:
        flags = {a for a in args if a.startswith("--")}
        stack_flag = args.index("-s") if "-s" in args else None
        positional = [
            a
            for i, a in enumerate(args)
            if not a.startswith("-") and (stack_flag is None or i != stack_flag + 1)
        ]
        key, text = positional
        assert flags <= {"--path", "--secret"}, args
        for stack in [args[stack_flag + 1]] if stack_flag is not None else STACKS:
            raw = read_stack(REPO / f"stacks/Pulumi.{stack}.yaml")
            if "--secret" in flags:
                raw[f"{PROJECT}:{key}"] = {"secure": "v1:ciphertext"}
            elif "--path" in flags:
                set_path(raw, key, text)
            else:
                raw[f"{PROJECT}:{key}"] = text
            config, secrets = program_config(merge_config(project, stack, stack_values(raw)))
            cfg = program_validates(stack, config)
            if "--secret" in flags:
                assert secrets == [f"{PROJECT}:{key}"]
            else:
                assert as_typed(value_at(cfg, key), text) == value_at(cfg, key), (stack, args)


@pytest.mark.parametrize("stack", STACKS)
def test_every_shipped_value_survives_being_set_with_path(
    project: dict[str, Any], stack: str
) -> None:
    """Set every scalar of the stack again with ``config set --path`` as it is written in the
    file: the CLI then stores ``0.85`` as text, ``"2"`` as a number and ``true`` as a boolean,
    and the program reads the same config."""
    raw = read_stack(REPO / f"stacks/Pulumi.{stack}.yaml")
    retyped = copy.deepcopy(raw)
    leaves = list(_leaves(raw))
    assert len(leaves) >= (3 if stack == "platform" else 20)
    changed = []
    for path, value in leaves:
        text = value if isinstance(value, str) else str(value).lower()
        set_path(retyped, path, text)
        if coerce(text) != value or type(coerce(text)) is not type(value):
            changed.append(path)
    assert bool(changed) == (stack != "platform")  # graph stacks hold floats, e.g. 0.85
    as_cli = [
        program_config(merge_config(project, stack, stack_values(r)))[0] for r in (raw, retyped)
    ]
    assert (as_cli[0] != as_cli[1]) == bool(changed)
    before, after = (program_validates(stack, c) for c in as_cli)
    assert after == before


def _leaves(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """``(config set --path path, scalar)`` for every scalar below the top-level keys (a key
    with a dot, e.g. the node label ``nvidia.com/gpu.product``, quoted as ``["..."]``)."""
    if isinstance(node, dict):
        for key, value in node.items():
            name = key.partition(":")[2] if not path else key
            if "." in name and path:
                yield from _leaves(value, f'{path}["{name}"]')
            else:
                yield from _leaves(value, f"{path}.{name}" if path else name)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _leaves(value, f"{path}[{index}]")
    elif "." in path or "[" in path:
        yield path, node


def _text_leaves(model: type[BaseModel], path: str = "") -> Iterator[tuple[str, bool]]:
    """``(path, takes CLI scalars)`` for every text leaf of a config model, recursively."""
    for name, field in model.model_fields.items():
        where = f"{path}.{field.alias or name}".lstrip(".")
        direct = any(getattr(m, "func", None) is cli_scalar_text for m in field.metadata)
        yield from _annotation_text_leaves(field.annotation, where, direct)


def _annotation_text_leaves(annotation: Any, path: str, direct: bool) -> Iterator[tuple[str, bool]]:
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        base, *metadata = typing.get_args(annotation)
        takes = any(getattr(m, "func", None) is cli_scalar_text for m in metadata)
        yield from _annotation_text_leaves(base, path, direct or takes)
    elif annotation is str:
        yield path, direct
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield from _text_leaves(annotation, path)
    elif origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if str in args and (float in args or int in args):
            return  # e.g. a link: a profile name or a number that means GB/s
        for arg in args:
            yield from _annotation_text_leaves(arg, path, direct)
    elif origin in (dict, tuple, list):
        args = typing.get_args(annotation)
        for arg in args[1:] if origin is dict else args:
            yield from _annotation_text_leaves(arg, f"{path}[]", direct)


def test_every_text_field_takes_cli_scalars() -> None:
    """The whole kind, not field by field: every ``str`` leaf reachable from a stack's config
    (``load:`` included) is a ``ConfigText``, so new fields are caught here."""
    leaves = dict(_text_leaves(StackConfig))
    assert len(leaves) >= 25
    assert {"load.runId", "topology.workers[].cpu", "nodeClasses[].nodeSelector[]"} <= set(leaves)
    assert [path for path, takes in leaves.items() if not takes] == []
