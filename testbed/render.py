"""Run the Pulumi program offline, under Pulumi's own mocks, and capture what it would apply.

No cluster and no Pulumi CLI: the stack's config is read from ``Pulumi.yaml`` (declared
defaults) and ``stacks/Pulumi.<stack>.yaml`` the way the CLI passes it (structured values as
JSON strings, secrets marked secret), then ``components.program.main`` runs under
``pulumi.runtime.set_mocks`` with a monitor that records every resource registration: its type,
name, parent, dependencies and inputs (secret values replaced by ``[secret]``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pulumi
from pulumi.output import Unknown
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc

from components.program import READ_STACK_OUTPUTS, main
from configkeys.key_paths import Setting
from stackmodel.config import project_values, stack_role
from stackmodel.errors import PROJECT, StackConfigError
from stackmodel.stack_layout import DEFAULT_PLATFORM_STACK, stack_reference_name
from stackmodel.stacks import (
    REPO,
    SECRET_PLACEHOLDER,
    namespace_problems_of,
    platform_settings,
    stack_config,
    stack_error,
    stack_names,
)

UNKNOWN_PLACEHOLDER = "[unknown]"
"""What a value known only after deploy renders as at preview (e.g. the load step's URL, built
from the NodePort Kubernetes assigns), as ``pulumi preview`` shows ``output<string>``."""

_K8S_PREFIX = "kubernetes:"
_HELM_RELEASE = "kubernetes:helm.sh/v3:Release"


@dataclass
class Registration:
    """One resource the program registered.

    Attributes:
        type: Pulumi type token, e.g. ``kubernetes:apps/v1:Deployment``.
        name: Pulumi resource name.
        urn: its URN.
        parent: the parent's URN ('' for the stack).
        dependencies: URNs from ``depends_on`` (explicit dependencies).
        inputs: the inputs, secrets replaced by :data:`SECRET_PLACEHOLDER`, integral floats
            (the mock transport sends every number as a float) turned back into ints.
        custom: False for component resources.
        protect: the ``protect`` option (the engine refuses to delete it).
        retain_on_delete: the ``retain_on_delete`` option (the engine drops it from the state
            without deleting it).
        delete_before_replace: the ``delete_before_replace`` option.
        replace_on_changes: the ``replace_on_changes`` option (property paths).
        aliases: the names (or URNs) of the ``aliases`` option (the SDK's own type aliases, which
            set neither, left out).
    """

    type: str
    name: str
    urn: str
    parent: str
    dependencies: list[str]
    inputs: dict[str, Any]
    custom: bool
    protect: bool = False
    retain_on_delete: bool = False
    delete_before_replace: bool = False
    replace_on_changes: list[str] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)


@dataclass
class Rendered:
    """What a stack would apply: every registration and the stack's outputs."""

    stack: str
    registrations: list[Registration] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    """What the program logged (``pulumi.log``), kept rather than printed: the commands say
    what matters once, at the end (its warnings are in ``outputs["warnings"]`` too)."""

    def kubernetes_objects(self) -> list[dict[str, Any]]:
        """Every Kubernetes object (not Helm releases), in registration order."""
        return [
            r.inputs
            for r in self.registrations
            if r.custom and r.type.startswith(_K8S_PREFIX) and r.type != _HELM_RELEASE
        ]

    def helm_releases(self) -> list[dict[str, Any]]:
        """The Helm releases' inputs (chart, version, repository, namespace, values)."""
        return [r.inputs for r in self.registrations if r.type == _HELM_RELEASE]

    def by_name(self, name: str) -> Registration:
        """The registration with that Pulumi resource name. Raises KeyError if absent."""
        for r in self.registrations:
            if r.name == name:
                return r
        raise KeyError(name)


def _is_secret(value: Any) -> bool:
    """True for Pulumi's serialized secret wrapper ``{<sig>: <secret sig>, "value": ...}``."""
    return isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig


def _masked(value: Any) -> Any:
    """A secret's shape with every leaf value replaced by the placeholder.

    Keys stay, so a masked Secret is still a valid object: ``{"HF_TOKEN": "[secret]"}``.
    """
    if _is_secret(value):
        return _masked(value.get("value"))
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return SECRET_PLACEHOLDER


def _clean(value: Any) -> Any:
    """Mask Pulumi's secret values (:func:`_masked`); values unknown at preview become
    :data:`UNKNOWN_PLACEHOLDER`; integral floats back to ints."""
    if _is_secret(value):
        return _masked(value)
    if isinstance(value, Unknown):
        return UNKNOWN_PLACEHOLDER
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """A MockMonitor that also records parents, dependencies and secret-masked inputs."""

    def __init__(self, mocks: pulumi.runtime.Mocks, sink: list[Registration]) -> None:
        super().__init__(mocks)
        self._sink = sink

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            inputs = rpc.deserialize_properties(request.object)
            self._sink.append(
                Registration(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    parent=request.parent,
                    dependencies=list(request.dependencies),
                    inputs=_clean(inputs),
                    custom=bool(request.custom),
                    protect=bool(request.protect),
                    retain_on_delete=bool(request.retainOnDelete),
                    delete_before_replace=bool(request.deleteBeforeReplace),
                    replace_on_changes=list(request.replaceOnChanges),
                    aliases=[a.spec.name or a.urn for a in request.aliases if a.spec.name or a.urn],
                )
            )
        return response


class UnknownStackError(Exception):
    """What the engine answers for a StackReference to a stack that does not exist."""


class InvokeRpcError(grpc.RpcError):
    """A failed invoke as the resource monitor returns it to the program: a gRPC error whose
    details are ``invocation of <token> returned an error: <error>`` (pulumi/pulumi
    ``pkg/resource/deploy/source_eval.go`` L1163-1165, ``resmon.Invoke``)."""

    def __init__(self, token: str, error: str) -> None:
        super().__init__(error)
        self.text = f"invocation of {token} returned an error: {error}"

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNKNOWN

    def details(self) -> str:
        return self.text


class EchoMocks(pulumi.runtime.Mocks):
    """Resources echo their inputs as outputs; the only function is the engine's
    ``pulumi:pulumi:readStackOutputs``.

    Another stack, read by the name :func:`~stackmodel.stack_layout.stack_reference_name` gives
    (through a ``pulumi:pulumi:StackReference`` or that invoke), has the outputs given for its
    name in ``stacks``; a name not given fails the read as the engine does for a stack that does
    not exist: ``unknown stack "<name>"`` (pulumi/pulumi ``pkg/backend/backend.go`` L416-418,
    ``backendClient.GetStackOutputs``), raised from the StackReference's registration, or
    returned as the invoke's gRPC error (:class:`InvokeRpcError`).
    """

    def __init__(self, stacks: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.stacks = dict(stacks or {})

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        if args.typ == "pulumi:pulumi:StackReference":
            name = args.inputs["name"]
            if name not in self.stacks:
                raise UnknownStackError(f'unknown stack "{name}"')
            return f"{args.name}-id", {**args.inputs, "outputs": dict(self.stacks[name])}
        return f"{args.name}-id", dict(args.inputs)

    def call(
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        if args.token != READ_STACK_OUTPUTS:
            return {}, []
        name = args.args["name"]
        if name not in self.stacks:
            raise InvokeRpcError(args.token, f'unknown stack "{name}"')
        # builtins.go L415-419: the outputs and the names of the secret ones.
        return {"name": name, "outputs": dict(self.stacks[name]), "secretOutputNames": []}, []


def run_under_mocks(
    program: Callable[[], None],
    *,
    stack: str,
    config: Mapping[str, str] | None = None,
    secret_keys: Sequence[str] = (),
    preview: bool = True,
    mocks: EchoMocks | None = None,
) -> Rendered:
    """Run any Pulumi program function under mocks; return its registrations and outputs.

    Args:
        program: the program (e.g. ``components.program.main``), called with no arguments.
        stack: stack name the program sees (``pulumi.get_stack()``).
        config: the full config map (``{"dynamo-testbed:<key>": <str or JSON string>}``).
        secret_keys: keys of ``config`` that are secrets.
        preview: run as ``pulumi preview`` (True) or ``pulumi up``.
        mocks: the mocks (default: :class:`EchoMocks` knowing no other stack).

    Raises:
        whatever ``program`` raises (e.g. StackConfigError); nothing is registered then.
    """
    rendered = Rendered(stack=stack)
    # Pulumi's mocks run on the current event loop; asyncio.run (the load generator) leaves none.
    asyncio.set_event_loop(asyncio.new_event_loop())
    pulumi.runtime.reset_options(project=PROJECT, stack=stack, preview=preview)
    pulumi.runtime.set_all_config(dict(config or {}), list(secret_keys))
    mocks = mocks or EchoMocks()
    pulumi.runtime.set_mocks(
        mocks,
        project=PROJECT,
        stack=stack,
        preview=preview,
        monitor=RecordingMonitor(mocks, rendered.registrations),
        logger=_recording_logger(rendered.log),
    )

    @pulumi.runtime.test
    def run() -> pulumi.Output[Any]:
        program()
        root = pulumi.runtime.settings.get_root_resource()
        outputs = dict(root.outputs) if root is not None else {}  # type: ignore[attr-defined]
        # One apply per output: an output unknown at preview (the load step's results) is left
        # out instead of hiding every other output.
        return pulumi.Output.all(
            *(
                pulumi.Output.from_input(value).apply(partial(rendered.outputs.__setitem__, key))
                for key, value in outputs.items()
            )
        )

    run()
    rendered.outputs = _clean(rendered.outputs)
    return rendered


class _ListHandler(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__()
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record.getMessage())


def _recording_logger(sink: list[str]) -> logging.Logger:
    """A logger that appends each message to ``sink`` and prints nothing (Pulumi's mock engine
    logs the program's ``pulumi.log`` calls to the logger ``set_mocks`` is given, else to the
    root logger, which prints them to stderr)."""
    logger = logging.getLogger(f"{__name__}.program")
    logger.handlers = [_ListHandler(sink)]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger


def render_stack(
    stack: str,
    project_dir: Path = REPO,
    *,
    preview: bool = True,
    secrets: Mapping[str, str] | None = None,
    settings: Sequence[Setting] = (),
) -> Rendered:
    """Run the program for ``stack`` under mocks and return what it registered and exported.

    Args:
        stack: stack name (``stacks/Pulumi.<stack>.yaml`` under ``project_dir``).
        project_dir: folder holding ``Pulumi.yaml`` and ``stacks/``.
        preview: run as ``pulumi preview`` (True) or ``pulumi up``.
        secrets: extra config values passed as secrets, keys without the project prefix (e.g.
            ``{"hfToken": token}``), as ``pulumi config set --secret`` would pass them.
        settings: ``--set`` items applied on top of the stack file (a problem under one of
            them names it, not the file).

    The stacks it references exist as they would beside it: its platform stack
    (``platformStack``) with the outputs of rendering that stack's file from ``project_dir``
    (with the ``--set`` items under ``platform.``)
    (a platform stack without a file does not exist), its ``baselineStack`` without outputs
    (offline, no load step has run).

    Raises:
        FileNotFoundError: unknown stack.
        StackConfigError: the stack's config is invalid (nothing is registered).
        KeyPathError: a ``--set`` that cannot be applied.
        PlatformStackError: its platform stack has no file in ``project_dir``, or no outputs.
    """
    config, secret_keys = stack_config(stack, project_dir, settings)
    for key, value in (secrets or {}).items():
        config[f"{PROJECT}:{key}"] = value
        secret_keys.append(f"{PROJECT}:{key}")
    shared = namespace_problems_of(stack, project_values(config), project_dir)
    try:
        rendered = run_under_mocks(
            main,
            stack=stack,
            config=config,
            secret_keys=secret_keys,
            preview=preview,
            mocks=EchoMocks(_referenced_stacks(project_values(config), project_dir, settings)),
        )
    except StackConfigError as exc:
        raise stack_error(stack, [*exc.problems, *shared], settings, project_dir) from None
    if shared:
        raise stack_error(stack, shared, settings, project_dir)
    return rendered


def _referenced_stacks(
    raw: Mapping[str, Any], project_dir: Path, settings: Sequence[Setting] = ()
) -> dict[str, dict[str, Any]]:
    """Outputs of the stacks a stack's config references, by full reference name. The platform
    stack is rendered with the ``--set`` items under ``platform.`` (``--set
    platform.chartVersion=1.7.0`` renders the graph under a 1.7.0 platform, as after upgrading
    the platform stack first)."""
    stacks: dict[str, dict[str, Any]] = {}
    baseline = raw.get("baselineStack")
    if baseline:
        stacks[stack_reference_name(baseline, None, PROJECT)] = {}
    platform = raw.get("platformStack") or DEFAULT_PLATFORM_STACK
    if stack_role(raw) == "graph" and platform in stack_names(project_dir):
        outputs = render_stack(platform, project_dir, settings=platform_settings(settings)).outputs
        stacks[stack_reference_name(platform, None, PROJECT)] = outputs
    return stacks
