"""The Pulumi CLI's config rules, restated in Python because the CLI cannot run here.

Pulumi's mocks run only the program; what the CLI does before it starts (merging project defaults
into the stack's config, refusing missing or mistyped keys, storing ``config set --path`` values
typed) is restated here, function by function, each citing the Go source it restates in
pulumi/pulumi at :data:`PULUMI_COMMIT` (file and lines), so that a new CLI version is re-checked
by reading those lines again. The tests in this folder feed the shipped ``Pulumi.yaml`` and
stacks through these rules and then through the program's own validation.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from configkeys.key_paths import parse_key_path
from stackmodel.config import PlatformStackConfig, StackConfig, project_values, stack_role
from stackmodel.errors import PROJECT
from stackmodel.validation import validate_platform_stack, validate_stack

PULUMI_COMMIT = "1b5949891b3cefcb9974752b24a5ecef0acc86c8"
"""pulumi/pulumi commit whose source the rules restate (on master, after v3.187.0)."""

SOURCE = f"https://github.com/pulumi/pulumi/blob/{PULUMI_COMMIT}"

MIN_CLI_VERSION = "3.187.0"
"""First CLI that accepts ``type: object`` project config with object values: #20129 added the
type to the schema in v3.186.0, #20132 ("Support parsing object types in `Pulumi.yaml`",
CHANGELOG.md "## 3.187.0 (2025-07-31)": "[yaml] Allow config values to be parsed with type
`object`") added the check ``ValidateConfigValue`` needs in v3.187.0."""


class CliConfigError(Exception):
    """What the CLI prints and stops with before the program runs."""


@dataclass(frozen=True)
class StackValue:
    """One top-level stack config value as the CLI holds it (``config.Value``).

    ``text`` is the string the program receives: the plain text of a scalar, JSON of an object
    (``sdk/go/common/resource/config/object.go`` L403-419, ``MarshalString``: numbers and
    booleans become their JSON text, maps and lists JSON with ``object`` set).
    """

    text: str
    secure: bool = False
    object: bool = False

    def content(self) -> Any:
        """The value ``validateStackConfigValue`` type-checks: the parsed JSON of an object,
        else the string (``pkg/workspace/config.go`` L136-143)."""
        return json.loads(self.text) if self.object else self.text


def stack_value(raw: Any) -> StackValue:
    """A value as read from a stack file (YAML) or stored by ``config set``.

    ``{"secure": "v1:..."}`` is a secret (``object.go`` L410-411); dicts and lists are objects;
    other scalars become their JSON text (``object.go`` L405-409).
    """
    if isinstance(raw, dict) and set(raw) == {"secure"}:
        return StackValue(str(raw["secure"]), secure=True)
    if isinstance(raw, dict | list):
        return StackValue(json.dumps(raw), object=True)
    return StackValue(raw if isinstance(raw, str) else json.dumps(raw))


def read_stack(path: Path) -> dict[str, Any]:
    """The ``config:`` mapping of a stack file, as written (keys with the project prefix)."""
    config: dict[str, Any] = yaml.safe_load(path.read_text())["config"]
    return config


def stack_values(config: Mapping[str, Any]) -> dict[str, StackValue]:
    """A stack file's ``config:`` mapping as the CLI holds it (see :func:`stack_value`)."""
    return {key: stack_value(raw) for key, raw in config.items()}


def load_project(path: Path) -> dict[str, Any]:
    """``Pulumi.yaml`` with the shorthand ``key: value`` declarations rewritten as
    ``{"default": value}`` (``sdk/go/common/workspace/project.go`` L486-517,
    ``RewriteShorthandConfigValues``), then checked by :func:`validate_project`."""
    project: dict[str, Any] = yaml.safe_load(path.read_text())
    config = project.get("config") or {}
    for key, decl in config.items():
        if not isinstance(decl, dict):
            config[key] = {"default": decl}
    project["config"] = config
    validate_project(project)
    return project


def value_matches(type_name: str, items: Mapping[str, Any] | None, value: Any) -> bool:
    """``ValidateConfigValue`` (``project.go`` L771-831): string, integer (also whole floats and
    integer strings), boolean (also "true"/"false"), object (a map), array (with ``items``)."""
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        if isinstance(value, int) and not isinstance(value, bool):
            return True
        if isinstance(value, float):
            return value == math.trunc(value)
        if isinstance(value, str):
            try:
                int(value)
            except ValueError:
                return False
            return True
        return False
    if type_name == "boolean":
        return isinstance(value, bool) or value in ("true", "false")
    if type_name == "object":
        return isinstance(value, dict)
    if not isinstance(value, list) or items is None:
        return False
    return all(value_matches(items["type"], items.get("items"), item) for item in value)


def validate_project(project: Mapping[str, Any]) -> None:
    """``Project.Validate`` (``project.go`` L837-889) for this project's own keys: not both
    ``default`` and ``value``; an array declares ``items``; a typed default has its type.

    Raises:
        CliConfigError: with the CLI's message.
    """
    for key, decl in project["config"].items():
        if "default" in decl and "value" in decl:
            raise CliConfigError(f"project config '{key}' cannot have both a 'default' and 'value'")
        if decl.get("type") == "array" and decl.get("items") is None:
            raise CliConfigError(
                f"The configuration key '{key}' declares an array but does not specify the "
                "underlying type via the 'items' attribute"
            )
        default = decl.get("default")
        typed = "type" in decl and default is not None
        if typed and not value_matches(decl["type"], decl.get("items"), default):
            raise CliConfigError(
                f"The default value specified for configuration key '{key}' is not of the "
                f"expected type '{decl['type']}'"
            )


def merge_config(
    project: Mapping[str, Any], stack: str, stack_config: Mapping[str, StackValue]
) -> dict[str, StackValue]:
    """``mergeConfig`` with ``validate=true`` (``pkg/workspace/config.go`` L255-366), as
    ``pulumi preview``/``up`` run it (``ValidateStackConfigAndApplyProjectConfig``, L368-378).

    Args:
        project: from :func:`load_project`.
        stack: the stack name, for messages.
        stack_config: ``{"dynamo-testbed:<key>": StackValue}`` as read from the stack file.

    Returns:
        The config the program receives: the stack's values, plus each declared key the stack
        does not set, given its ``default`` (L327-347: ``createConfigValue``, L179-193, stores a
        string/int/bool as its text and anything else as a JSON object, never as a secret).

    Raises:
        CliConfigError: a declared key with neither a stack value nor a default (L316-324,
            message L53-64); then, for explicitly typed keys (L101), a ``secret: true`` key
            whose value is not encrypted (L128-134) or a value not of the declared type
            (L136-153).
    """
    merged = dict(stack_config)
    missing = []
    for key in sorted(project["config"]):
        decl = project["config"][key]
        full = key if ":" in key else f"{PROJECT}:{key}"
        if full in merged:
            continue
        default = decl.get("default", decl.get("value"))
        if default is None:
            missing.append(key)
            continue
        merged[full] = (
            StackValue(json.dumps(default) if isinstance(default, bool) else str(default))
            if isinstance(default, str | int | bool)
            else StackValue(json.dumps(default), object=True)
        )
    if missing:
        values = "value" if len(missing) == 1 else "values"
        raise CliConfigError(
            f"Stack '{stack}' is missing configuration {values} "
            + ", ".join(f"'{k}'" for k in missing)
        )
    for key in sorted(project["config"]):
        decl = project["config"][key]
        value = merged[key if ":" in key else f"{PROJECT}:{key}"]
        if "type" not in decl:
            continue
        if decl.get("secret") and not value.secure:
            raise CliConfigError(
                f"Stack '{stack}' with configuration key '{key}' must be encrypted as it's secret"
            )
        if not value_matches(decl["type"], decl.get("items"), value.content()):
            raise CliConfigError(
                f"Stack '{stack}' with configuration key '{key}' must be of type '{decl['type']}'"
            )
    return merged


def coerce(text: str) -> Any:
    """What ``pulumi config set --path`` stores for ``text`` below a top-level key.

    ``coerce`` (``sdk/go/common/resource/config/object.go`` L566-591), reached from
    ``Map.Set`` (``map.go`` L225-245) through ``Value.coerceObject`` (``value.go`` L145-166):
    ``"true"``/``"false"`` -> bool; a decimal integer without a leading zero -> int (``"0"``
    too); everything else, floats included, stays a string.
    """
    if text in ("true", "false"):
        return text == "true"
    if len(text) > 1 and text[0] == "0":
        return text
    return int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else text


def set_path(stack_config: dict[str, Any], path: str, text: str) -> None:
    """``pulumi config set --path <path> <text>`` on a stack file's ``config:`` mapping.

    ``path`` is ``key.sub[0]["a.b"].leaf`` (``[n]`` indexes a list, ``["..."]`` quotes a key
    with a dot, as ``parseKeyPath`` reads it: ``configkeys.key_paths.parse_key_path``); the
    top-level key gets the project prefix. Below the top level the value is stored as
    :func:`coerce` returns it; a top-level value always as the text (``config set --help``,
    ``pkg/cmd/pulumi/config/config.go`` L726-728). Missing maps are created.
    """
    parts = list(parse_key_path(path))
    top = str(parts[0])
    top = top if ":" in top else f"{PROJECT}:{top}"
    if len(parts) == 1:
        stack_config[top] = text
        return
    node: Any = stack_config.setdefault(top, {})
    for part, after in itertools.pairwise(parts[1:]):
        if isinstance(part, int):
            node = node[part]
        else:
            node = node.setdefault(part, [] if isinstance(after, int) else {})
    last = parts[-1]
    if isinstance(last, int) and last == len(node):
        node.append(coerce(text))
    else:
        node[last] = coerce(text)


def program_config(merged: Mapping[str, StackValue]) -> tuple[dict[str, str], list[str]]:
    """The config map the language host hands the program (``PULUMI_CONFIG``: every value as
    its text, objects as JSON) and the secret keys (``PULUMI_CONFIG_SECRET_KEYS``), as
    ``stackmodel.stacks.stack_config`` also returns them."""
    return (
        {key: value.text for key, value in merged.items()},
        sorted(key for key, value in merged.items() if value.secure),
    )


def program_validates(stack: str, config: Mapping[str, str]) -> StackConfig | PlatformStackConfig:
    """The program's own validation of the config map the CLI hands it, by stack role (as
    ``components.program.main`` dispatches).

    Raises:
        StackConfigError: the program's refusal, naming stack, keys and fixes.
    """
    raw = project_values(config)
    if stack_role(raw) == "platform":
        return validate_platform_stack(stack, raw)
    return validate_stack(stack, raw).cfg


PENDING_CREATE_FLAGS = {
    "--import-pending-creates": "A list of form [[URN ID]...] describing the provider IDs of"
    " pending creates",
    "--clear-pending-creates": "Clear all pending creates, dropping them from the state",
    "--skip-pending-creates": "Skip importing pending creates in interactive mode",
}
"""``pulumi refresh``'s flags for the pending creates an interrupted update leaves
(``pkg/cmd/pulumi/operations/refresh.go`` L481-489 at :data:`PULUMI_COMMIT`; added with the
interactive resolution in v3.39.0, pulumi/pulumi #10394, CHANGELOG.md "## 3.39.0", so every CLI
from :data:`MIN_CLI_VERSION` has them). ``--import-pending-creates`` takes URN and ID pairs
(``pendingCreatesToImports``, L564-590: an odd count is refused) and marks each create an
import of that ID; the next ``pulumi up`` then updates the object instead of creating it."""
