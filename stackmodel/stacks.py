"""Loading a stack by name: ``stacks/Pulumi.<stack>.yaml`` over the project's declared defaults,
with the command line's ``--set`` items applied, read the way the Pulumi CLI passes it to the
program (structured values as JSON strings, secrets marked secret), then validated.

The one way every command reads a stack (`load_stack`: ``render``, ``simulate``, ``probe``,
``init-stack``); ``pulumi up`` hands the program the same map (:func:`stack_config` builds
what the CLI would), and both validate it with :func:`stackmodel.validation.validate_stack`,
which resolves it into the stack's plan.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from configkeys.key_paths import KeyPathError, Setting, apply_settings, with_new_entries
from configkeys.suggest import closest, did_you_mean
from stackmodel.config import config_key, project_values, stack_role
from stackmodel.errors import PROJECT, ConfigProblem, StackConfigError
from stackmodel.plan import PROJECT_DIR, StackPlan
from stackmodel.stack_layout import VersionGateError, stack_namespace
from stackmodel.validation import validate_stack

REPO = PROJECT_DIR
"""The project root (holds ``Pulumi.yaml`` and ``stacks/``): the folder ``model.configJson``
is relative to too (:data:`stackmodel.plan.PROJECT_DIR`)."""

SECRET_PLACEHOLDER = "[secret]"
"""What a secret value renders as: the plain value never leaves the program."""


def stack_names(project_dir: Path = REPO) -> list[str]:
    """The stacks that have a config file in ``stacks/``, sorted."""
    return sorted(
        p.name[len("Pulumi.") : -len(".yaml")] for p in project_dir.glob("stacks/Pulumi.*.yaml")
    )


NEW_STACK_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
"""A new stack's name (``testbed init-stack NAME``): it is also the graph's name
(``topology.name``), a DNS label of at most 40 characters
(:class:`stackmodel.config.TopologyConfig`'s ``name``)."""


def stack_config(
    stack: str, project_dir: Path = REPO, settings: Sequence[Setting] = ()
) -> tuple[dict[str, str], list[str]]:
    """The config map the Pulumi CLI would pass to the program for ``stack``, with the
    command line's ``--set`` items (:mod:`configkeys.key_paths`) applied on top of the file.

    Returns:
        ``({"dynamo-testbed:<key>": <str or JSON string>}, [secret keys])``. Declared defaults
        from ``Pulumi.yaml`` come first; ``secure:`` values (encrypted, cannot be read here)
        become :data:`SECRET_PLACEHOLDER` and are listed as secret.

    Raises:
        FileNotFoundError: no ``stacks/Pulumi.<stack>.yaml``; the message names the closest
            stack ("did you mean"), lists the known ones and how to make a new one.
        StackFileError: the file is not YAML, or has no ``config:`` mapping.
        KeyPathError: a ``--set`` that cannot be applied.
    """
    path = project_dir / "stacks" / f"Pulumi.{stack}.yaml"
    if not path.exists():
        names = stack_names(project_dir)
        # A file's name given for the stack's (stacks/Pulumi.lab.yaml): the stack it names.
        named = Path(stack).name.removeprefix("Pulumi.").removesuffix(".yaml")
        named = named.removesuffix(".yml")
        close = closest(named, names)
        hint = did_you_mean(named, names)
        new = named if NEW_STACK_NAME.match(named) else "my-cluster"
        known = ", ".join(names) or "(none)"
        raise FileNotFoundError(
            f"stack '{stack}': no stacks/Pulumi.{stack}.yaml in the project; {hint}a new "
            f"stack: testbed init-stack {new} --from {close or 'kv-routing'}; "
            f"known stacks: {known}"
        )
    project = yaml.safe_load((project_dir / "Pulumi.yaml").read_text())
    values: dict[str, Any] = {}
    for key, decl in (project.get("config") or {}).items():
        if isinstance(decl, dict) and "default" in decl:
            values[f"{PROJECT}:{key}"] = decl["default"]
    secrets: list[str] = []
    for key, value in _stack_file_config(stack, path).items():
        full = config_key(key)
        if isinstance(value, dict) and set(value) == {"secure"}:
            value = SECRET_PLACEHOLDER
            secrets.append(full)
        values[full] = value
    as_strings = {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
    if settings:
        own = _project_settings(settings)
        graph = [s for s in own if s.path[0] != PLATFORM_KEY]
        role = stack_role(apply_settings(project_values(as_strings), graph))
        if role == "graph":  # its platform stack's keys: the platform's render takes them
            own = graph
        changed = apply_settings(project_values(as_strings), own)
        as_strings |= {
            f"{PROJECT}:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in changed.items()
        }
    return as_strings, secrets


PLATFORM_KEY = "platform"
"""The config section of the Dynamo platform. On a graph stack, a ``--set platform.<key>`` is for
its platform stack: :func:`stack_config` leaves it out, and ``testbed render`` renders the
platform stack with it (``--set engine.dynamoVersion=1.7.0 --set platform.chartVersion=1.7.0``
renders a graph at 1.7.0 under a 1.7.0 platform)."""


def platform_settings(settings: Sequence[Setting]) -> list[Setting]:
    """The ``--set`` items of ``settings`` under ``platform.`` (the platform stack's keys)."""
    return [s for s in _project_settings(settings) if s.path[0] == PLATFORM_KEY]


def _project_settings(settings: Sequence[Setting]) -> list[Setting]:
    """``--set`` items with keys below the project namespace (``dynamo-testbed:`` dropped).

    Raises:
        KeyPathError: a key of another namespace.
    """
    for setting in settings:
        if ":" in str(setting.path[0]) and not str(setting.path[0]).startswith(f"{PROJECT}:"):
            raise KeyPathError(
                f"--set {setting.text}: only {PROJECT} keys can be set here (no namespace)"
            )
    return [
        Setting(s.text, (str(s.path[0]).removeprefix(f"{PROJECT}:"), *s.path[1:]), s.value)
        for s in settings
    ]


def settings_error(
    exc: StackConfigError, settings: Sequence[Setting], project_dir: Path = REPO
) -> StackConfigError:
    """``exc``, raised for a stack read with ``settings``, with each problem under a ``--set``
    naming it, a ``--set`` that adds a map entry (a misspelt node class) saying so
    (:func:`configkeys.key_paths.with_new_entries`), and a problem under another key that the
    stack file alone does not have (read again without ``settings``) said to come from them."""
    raw = project_values(stack_config(exc.stack, project_dir)[0])
    try:
        load_stack(exc.stack, (), project_dir)
        file_keys: frozenset[str] = frozenset()
    except StackConfigError as alone:
        file_keys = frozenset(p.key for p in alone.problems)
    return StackConfigError(
        exc.stack, exc.problems, with_new_entries(raw, _project_settings(settings)), file_keys
    )


def stack_error(
    stack: str, problems: Sequence[ConfigProblem], settings: Sequence[Setting], project_dir: Path
) -> StackConfigError:
    """The error of a stack read with ``settings`` (:func:`settings_error` when there are
    any)."""
    error = StackConfigError(stack, problems)
    return settings_error(error, settings, project_dir) if settings else error


class StackFileError(ValueError):
    """A stack file that cannot be read as a Pulumi stack config (names the file and line), or
    the platform stack where a command needs a graph stack (names the graph stacks)."""


LOAD_ERRORS: tuple[type[Exception], ...] = (
    FileNotFoundError,
    StackFileError,
    StackConfigError,
    KeyPathError,
    VersionGateError,
)
"""What reading a stack raises for a bad stack name, file, config or ``--set``, or the version
gate's refusal (worded as a config error, raised once the platform's version is read); each is
one line for the user."""


def _stack_file_config(stack: str, path: Path) -> dict[str, Any]:
    """The ``config:`` mapping of a stack file.

    Raises:
        StackFileError: not YAML (with the line), or no ``config:`` mapping at the top.
    """
    where = f"stack '{stack}': {path}"
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise StackFileError(f"{where}{line}: not valid YAML: {problem}") from None
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise StackFileError(
            f"{where}: no `config:` mapping at the top of the file; a stack file looks like\n"
            "config:\n  dynamo-testbed:nodeClasses: {...}\n  dynamo-testbed:topology: {...}"
        )
    return config


def namespace_problems_of(
    stack: str, values: dict[str, Any], project_dir: Path = REPO
) -> list[ConfigProblem]:
    """Another graph stack of the project that deploys into this stack's namespace while both
    create it (``createNamespace``, the default: each would own it, and ``pulumi destroy`` of
    either deletes the other's objects with it) or both name one graph (``topology.name``: one
    set of objects, which each stack would overwrite). A stack that joins another's namespace
    (``createNamespace: false``) under its own graph name passes. The fix is each stack's own
    namespace, the default ``testbed-<stack>`` (``namespace`` unset). ``values``: this
    stack's (as :func:`project_values` gives them)."""
    if stack_role(values) == "platform":
        return []
    mine = values.get("namespace") or stack_namespace(stack)
    out = []
    for other in stack_names(project_dir):
        if other == stack:
            continue
        theirs = project_values(stack_config(other, project_dir)[0])
        if stack_role(theirs) == "platform":
            continue
        if (theirs.get("namespace") or stack_namespace(other)) != mine:
            continue
        creates = [
            name
            for name, v in ((stack, values), (other, theirs))
            if str(v.get("createNamespace", True)).lower() != "false"  # the CLI passes text
        ]
        same_graph = (values.get("topology") or {}).get("name") == (
            theirs.get("topology") or {}
        ).get("name")
        if len(creates) < 2 and not same_graph:
            continue
        why = (
            "both create it (createNamespace), so `pulumi destroy` of either deletes the "
            "other's objects with it"
            if len(creates) == 2
            else f"both deploy the graph '{values['topology']['name']}', one set of objects"
        )
        out.append(
            ConfigProblem(
                "namespace",
                mine,
                f"stack '{other}' also deploys into namespace {mine}: {why}; give this stack "
                f"its own namespace (set namespace to '' for the default, "
                f"{stack_namespace(stack)}), or set createNamespace: false and another "
                "topology.name on the one that joins it",
            )
        )
    return out


def load_stack(stack: str, settings: Sequence[Setting] = (), project_dir: Path = REPO) -> StackPlan:
    """A stack's plan (its validated config, ``.cfg``, resolved once), read as the Pulumi CLI
    would pass it, with the command line's ``--set`` items applied (:func:`stack_config`;
    ``settings`` as :func:`configkeys.key_paths.parse_settings` parses ``KEY=VALUE`` texts).

    Raises:
        FileNotFoundError: no ``stacks/Pulumi.<stack>.yaml``.
        StackFileError: the platform stack, which has no graph (names the graph stacks).
        KeyPathError: a ``--set`` that cannot be applied.
        StackConfigError: invalid config (a problem under a ``--set`` names it).
    """
    config, _ = stack_config(stack, project_dir, settings)
    values = project_values(config)
    if stack_role(values) == "platform":
        graphs = [
            name
            for name in stack_names(project_dir)
            if stack_role(project_values(stack_config(name, project_dir)[0])) != "platform"
        ]
        raise StackFileError(
            f"stack '{stack}' is the platform stack (stackRole: platform): it deploys no graph "
            f"to simulate, load or probe; name a graph stack instead: {', '.join(graphs)}"
        )
    shared = namespace_problems_of(stack, values, project_dir)
    try:
        plan = validate_stack(stack, values, config)
    except StackConfigError as exc:
        raise stack_error(stack, [*exc.problems, *shared], settings, project_dir) from None
    if shared:
        raise stack_error(stack, shared, settings, project_dir)
    return plan
