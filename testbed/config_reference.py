"""``docs/config-reference.md``: every stack config key, generated from the validated model.

The model (:class:`stackmodel.config.StackConfig`, and
:class:`stackmodel.config.PlatformStackConfig` for a platform stack) holds each key's type,
default, constraints and description; this module walks it and writes one table per section.
A key's unit comes from its name (``...GiB``, ``...S``, ``...Minutes``) or its type (a memory
quantity). Descriptions missing from a field are taken from its class docstring's
``Attributes:`` entry. ``tests/test_config_reference.py`` fails when the file is out of date.

Write it: ``uv run python -m testbed.config_reference`` (``--check`` only compares).
"""

from __future__ import annotations

import enum
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from stackmodel.config import CONFIG_NAMESPACES, PlatformStackConfig, StackConfig
from stackmodel.errors import PROJECT

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "config-reference.md"
COMMAND = "uv run python -m testbed.config_reference"

UNITS = (
    (re.compile(r"GiB$"), "GiB"),
    (re.compile(r"TokensPerS$"), "tokens/s"),
    (re.compile(r"GbPerS$"), "GB/s"),
    (re.compile(r"[bB]ytesPerS$"), "bytes/s"),
    (re.compile(r"^(sameNode|crossNode)$"), "GB/s (a number)"),
    (re.compile(r"^(maxModelLen|maxPositionEmbeddings)$"), "tokens"),
    (re.compile(r"^requestRate$"), "requests/s"),
    (re.compile(r"^(gpuMemoryUtilization|prefixShare)$"), "fraction"),
    (re.compile(r"Tflops$"), "TFLOP/s"),
    (re.compile(r"Minutes$"), "min"),
    (re.compile(r"[0-9]Ms$"), "ms"),
    (re.compile(r"Seconds$"), "s"),
    (re.compile(r"Bytes$"), "B"),
    (re.compile(r"Tokens$"), "tokens"),
    (re.compile(r"[a-z]S$"), "s"),
    (re.compile(r"^(memoryLimit|baseMemory|sharedMemorySize)$"), "quantity"),
)
"""A key's unit from its (camelCase) name: the model's naming rule."""


DERIVED_DEFAULTS = {"namespace": "`testbed-<stack>`"}
"""Keys without a model default that the model fills in when they are unset
(``StackConfig._namespace_from_stack``)."""


def _unit(key: str) -> str:
    return next((unit for pattern, unit in UNITS if pattern.search(key)), "")


def _type_text(annotation: Any) -> str:
    """A type as a user writes it in YAML: ``int``, ``number``, ``one of a, b``, ``list of
    int``, ``map of string to NodeClass``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin in (typing.Union, types.UnionType):
        parts = [_type_text(a) for a in args if a is not type(None)]
        return " or ".join(dict.fromkeys(parts))
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (list, tuple):
        return f"list of {_type_text(args[0])}"
    if origin is dict:
        return f"map of {_type_text(args[0])} to {_type_text(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(str(m.value) for m in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation.__name__
    names = {bool: "bool", int: "int", float: "number", str: "string", Any: "any"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _constraints(field: FieldInfo) -> str:
    out = []
    for item in field.metadata:
        for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            value = getattr(item, attr, None)
            if value is not None:
                out.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
        for attr, text in (("min_length", "length >= {}"), ("max_length", "length <= {}")):
            value = getattr(item, attr, None)
            if value is not None:
                out.append(text.format(value))
        pattern = getattr(item, "pattern", None)
        if pattern:
            out.append(f"matches `{pattern}`")
    return "; ".join(out)


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "(section defaults)"
    if value in ({}, (), []):
        return "empty"
    if value is None:
        return "unset"
    if isinstance(value, tuple | list) and all(isinstance(v, BaseModel) for v in value):
        dumped = [v.model_dump(mode="json", by_alias=True, exclude_none=True) for v in value]
        return f"`{json.dumps(dumped)}`"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return str(value).lower()
    return f"`{value}`"


def _attribute_docs(model: type[BaseModel]) -> dict[str, str]:
    """``name: text`` entries of a class docstring's ``Attributes:`` section."""
    doc = model.__doc__ or ""
    if "Attributes:" not in doc:
        return {}
    entries: dict[str, str] = {}
    current = None
    for line in doc.split("Attributes:", 1)[1].splitlines():
        match = re.match(r"^\s{4,8}(\w+): (.*)$", line)
        if match:
            current = match.group(1)
            entries[current] = match.group(2)
        elif current and line.strip():
            entries[current] += " " + line.strip()
        elif current and not line.strip():
            current = None
    return entries


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """The section model inside a field's type and how its keys continue the path: ``""``
    (a section), ``"[]"`` (a list of them) or ``".<name>"`` (a map of them)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _model_of(args[0])
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            model, suffix = _model_of(arg)
            if model is not None:
                return model, suffix
        return None, ""
    if origin in (list, tuple) and args:
        model, _ = _model_of(args[0])
        return model, "[]"
    if origin is dict and len(args) == 2:
        model, _ = _model_of(args[1])
        return model, ".<name>"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, ""
    return None, ""


def _rows(model: type[BaseModel], prefix: str) -> list[tuple[str, str, str, str, str]]:
    """(key, type, default, unit, description) of every key under ``prefix``, depth first."""
    keys = getattr(model, "config_keys", None)
    if keys is not None:  # a model that takes keys from a registry (`workload.slo.Slo`)
        return [(f"{prefix}.{key}", "number", "unset", _unit(key), text) for key, text in keys()]
    rows = []
    docs = _attribute_docs(model)
    for name, field in model.model_fields.items():
        key = field.alias or name
        path = f"{prefix}.{key}" if prefix else key
        sub, suffix = _model_of(field.annotation)
        section = (sub.__doc__ or "").strip().split("\n\n")[0] if sub is not None else ""
        text = field.description or docs.get(name) or section
        description = " ".join(text.split()).replace("``", "`")
        constraints = _constraints(field)
        if constraints:
            description = f"{description} ({constraints})" if description else f"({constraints})"
        default = DERIVED_DEFAULTS.get(path) or _default(field)
        rows.append((path, _type_text(field.annotation), default, _unit(key), description))
        if sub is not None:
            rows += _rows(sub, f"{path}{suffix}")
    return rows


def _table(rows: list[tuple[str, str, str, str, str]]) -> list[str]:
    lines = ["| key | type | default | unit | description |", "|---|---|---|---|---|"]
    for key, type_text, default, unit, description in rows:
        cells = (f"`{key}`", type_text, default, unit, description)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def config_reference() -> str:
    """The whole reference as Markdown."""
    lines = [
        "# Stack config reference",
        "",
        f"Generated from the validated model by `{COMMAND}` (do not edit by hand; "
        "`tests/test_config_reference.py` fails when it is out of date). Every key is written "
        f"under `config:` in `stacks/Pulumi.<stack>.yaml` as `{PROJECT}:<key>`; `--set KEY=VALUE` "
        "on `testbed render`, `diff` and `simulate` (`--set-b` for the second stack only; "
        "`load.<key>` on `testbed load`) takes "
        "the same keys, spelled as the Pulumi CLI's config set --path spells them, e.g. "
        '`nodeClasses["gpu-24gb"].'
        "gpuMemoryGiB=48`. `<name>` stands for a key you choose, `[]` for each item of a list. "
        "Unknown keys are refused; a key of a namespace other than "
        + ", ".join(f"`{n}:`" for n in CONFIG_NAMESPACES)
        + " is read by nothing and refused (a misspelt `dynamo-tesbed:`) unless `otherNamespaces` "
        "names it (another program's keys in the same file). A quantity is a "
        "Kubernetes memory quantity (`3584Mi`, `10Gi`; a plain number is bytes).",
        "",
        "## Graph and standalone stacks",
        "",
        *_table(_rows(StackConfig, "")),
        "",
        "## Platform stack (`stackRole: platform`)",
        "",
        *_table(_rows(PlatformStackConfig, "")),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Write :data:`REFERENCE`; with ``--check``, only say whether it is up to date (exit 1)."""
    text = config_reference()
    if "--check" in argv:
        current = REFERENCE.read_text() if REFERENCE.exists() else ""
        if current != text:
            print(f"{REFERENCE} is out of date: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    REFERENCE.write_text(text)
    print(f"wrote {REFERENCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
