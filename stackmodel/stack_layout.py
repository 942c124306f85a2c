"""How stacks share one cluster: stack roles, a namespace per graph stack, stack references.

Pure: no Pulumi import. The program (:mod:`components.program`) reads a stack's role and
registers accordingly:

- ``platform``: the cluster-scoped Dynamo install (the ``dynamo-platform`` Helm release with the
  CRDs it brings, the operator's webhook scope and RBAC), once per cluster. It exports what graph
  stacks need (:class:`PlatformExports`).
- ``graph`` (the default): a serving graph (DGD or vLLM Deployments), its load step and results,
  in a namespace of its own. A Dynamo graph reads its platform stack (``platformStack``, default
  ``platform``) through a StackReference and registers no release.
- ``standalone``: everything in one ``pulumi up`` (release + graph), for a cluster that runs
  one stack at a time; two standalone stacks would both install the same cluster-wide release.

What a StackReference to the platform stack sees (Pulumi's engine: pulumi/pulumi at commit
1b5949891b3cefcb9974752b24a5ecef0acc86c8, the commit of every pulumi/pulumi file cited in this
module):

- a stack that does not exist: the read fails with ``unknown stack "<name>"``
  (``pkg/backend/backend.go``, ``backendClient.GetStackOutputs``), and with it the whole preview
  or update (a comparison baseline is therefore read another way:
  :func:`components.program.read_stack_outputs`);
- a stack that exists but has no root stack resource (``pulumi stack init`` without ``up``, or
  after ``pulumi destroy``): the read succeeds with outputs ``{}`` (same function, ``res == nil``);
- an existing stack: its outputs, also during ``pulumi preview``
  (``pkg/resource/deploy/builtins.go``, ``readStackReference``).

:func:`read_platform_exports` turns the last two into a :class:`PlatformStackError` naming the
stack to bring up first; the program wraps the first one the same way: the Python SDK sets a
failed read's error on the reference's outputs (pulumi 3.272.0 ``pulumi/runtime/resource.py``,
``do_read``: ``rpc.resolve_outputs_due_to_exception``), so awaiting ``outputs`` raises it, and
the engine also reports the read error on the ``pulumi:pulumi:StackReference`` resource itself.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from kvpath.versions import minor_of, release_to_apply, runtime_skew, upgrade_problem
from stackmodel.errors import ConfigProblem, ConfigWarning, StackConfigError
from stackmodel.platform import PlatformConfig
from stackmodel.rbac import rbac_summary

STACK_ROLES = ("platform", "graph", "standalone")
"""The values of ``stackRole`` (see the module docstring)."""

DEFAULT_PLATFORM_STACK = "platform"
"""The platform stack a graph stack references unless ``platformStack`` says otherwise."""

NAMESPACE_PREFIX = "testbed-"
"""A graph stack's namespace is ``testbed-<stack>`` unless ``namespace`` is set."""

DEFAULT_ORGANIZATION = "organization"
"""The organization a self-managed (DIY) backend reports for every stack, in both of its layouts
(pulumi/pulumi ``pkg/backend/diy/state.go`` L104, ``Organization: "organization"``), and what
``pulumi.get_organization()`` returns under mocks."""


_MAX_NAMESPACE = 63  # DNS-1123 label
_NOT_IN_LABEL = re.compile(r"[^a-z0-9-]+")


def stack_namespace(stack: str) -> str:
    """The namespace a graph stack gets by default: ``testbed-<stack>``, a DNS-1123 label.

    ``kv-routing`` -> ``testbed-kv-routing``. A stack name that is not already a valid label
    (upper case, ``_``, ``.``, too long) is lower-cased, runs of other characters become ``-``,
    and a 6-hex SHA-256 suffix of the original name is added so that two such names stay apart:
    ``Kv_Routing`` -> ``testbed-kv-routing-<hash>``.
    """
    plain = f"{NAMESPACE_PREFIX}{stack}"
    if len(plain) <= _MAX_NAMESPACE and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", plain):
        return plain
    digest = hashlib.sha256(stack.encode()).hexdigest()[:6]
    body = _NOT_IN_LABEL.sub("-", plain.lower()).strip("-")
    body = body[: _MAX_NAMESPACE - len(digest) - 1].rstrip("-")
    return f"{body}-{digest}"


def stack_reference_name(stack: str, organization: str | None, project: str) -> str:
    """The name to read stack ``stack`` of this project by (StackReference or
    ``pulumi:pulumi:readStackOutputs``), one that every backend parses as that stack.

    - A self-managed (DIY) backend (``organization`` is :data:`DEFAULT_ORGANIZATION` or None):
      the bare stack name, ``kv-routing``. The old non-project layout parses a reference with
      ``tokens.ParseStackName`` alone, which refuses any ``/``; the project layout reads one
      segment as a stack of the current project in ``organization`` (pulumi/pulumi
      ``pkg/backend/diy/store.go`` L362-368 and L138-199; ``sdk/go/common/tokens/stack_name.go``
      L54-85). ``organization/dynamo-testbed/kv-routing`` only works in the project layout.
    - Pulumi Cloud: ``<organization>/<project>/kv-routing`` with this stack's organization. A
      bare name would get the user's *default* organization, which need not be this stack's
      (``pkg/backend/httpstate/backend.go`` L1086-1150, ``parseStackName`` and
      ``ParseStackReference``).
    - A name with slashes (``acme/other-project/kv``) is used as given.
    """
    if "/" in stack:
        return stack
    if organization is None or organization == DEFAULT_ORGANIZATION:
        return stack
    return f"{organization}/{project}/{stack}"


def short_stack_name(reference: str) -> str:
    """The stack part of a reference name: ``org/project/platform`` -> ``platform``."""
    return reference.rsplit("/", 1)[-1]


class PlatformStackError(RuntimeError):
    """A graph stack's platform stack is missing, not up, or not a platform stack.

    The message names the graph stack, the platform stack and the command to run first.
    """


class VersionGateError(RuntimeError):
    """The version gate refused a release, found once the platform's version was read (a
    graph's runtime against its operator, or a platform upgrade against what it runs).

    Worded as :class:`~stackmodel.errors.StackConfigError` (the stack, the key, the fix), but a
    ``RuntimeError``: raised inside an Output the program awaits, where Pulumi's SDK rewraps a
    ``ValueError`` as "While processing resource ..." for every resource waiting on it
    (pulumi 3.272.0 ``pulumi/runtime/resource.py``, ``pulumi/output.py``).

    Attributes:
        problems: the problems, as :class:`~stackmodel.errors.ConfigProblem`.
    """

    def __init__(self, stack: str, problems: list[ConfigProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__(str(StackConfigError(stack, problems)))


class PlatformExports(BaseModel):
    """What a platform stack exports for its graph stacks (camelCase output names).

    Attributes:
        stack_role: always ``platform`` (how a graph stack recognises one).
        operator_namespace: namespace of the Helm release / operator, e.g. ``dynamo-system``.
        operator_scope: ``cluster`` (a platform stack serves every namespace).
        release_name: Helm release name, e.g. ``dynamo-platform``; None when not installed.
        chart_version: the chart (== Dynamo) version, e.g. ``1.6.2``.
        installed: whether the platform stack manages the release (``platform.install``).
        operator_rbac: the operator's entry of the ``rbac`` summary
            (:func:`stackmodel.rbac.rbac_summary`).
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    stack_role: Literal["platform"]
    operator_namespace: str
    operator_scope: Literal["cluster"]
    release_name: str | None
    chart_version: str
    installed: bool
    operator_rbac: dict[str, Any]

    def outputs(self) -> dict[str, Any]:
        """The stack outputs, by output name."""
        return self.model_dump(by_alias=True)


def platform_exports(cfg: PlatformConfig) -> PlatformExports:
    """What a platform stack with this ``platform`` section exports.

    Raises:
        pydantic.ValidationError: ``operatorScope`` is not ``cluster`` (refused earlier by
            :func:`stackmodel.validation.validate_platform_stack`).
    """
    (operator,) = rbac_summary(cfg, cfg.namespace)
    return PlatformExports.model_validate(
        {
            "stack_role": "platform",
            "operator_namespace": cfg.namespace,
            "operator_scope": cfg.operator_scope,
            "release_name": cfg.release_name if cfg.install else None,
            "chart_version": cfg.chart_version,
            "installed": cfg.install,
            "operator_rbac": operator,
        }
    )


def read_platform_exports(
    graph_stack: str, platform_stack: str, outputs: Mapping[str, Any] | None
) -> PlatformExports:
    """Validate a platform stack's outputs as read through a StackReference.

    Args:
        graph_stack: the stack reading them (named in messages).
        platform_stack: the reference name (``org/project/stack``).
        outputs: the referenced stack's outputs (``{}`` when it has never been up).

    Raises:
        PlatformStackError: no outputs (bring the platform stack up first), or outputs that are
            not a platform stack's (wrong ``platformStack``); the message has the command.
    """
    up = f"`pulumi up -s {short_stack_name(platform_stack)}`"
    if not outputs:
        raise PlatformStackError(
            f"stack '{graph_stack}': its platform stack '{platform_stack}' has no outputs (it "
            f"was created but never brought up, or it was destroyed). Bring it up first: "
            f"{up}, then run this stack again; or set dynamo-testbed:platformStack to the "
            "stack that runs the platform, or stackRole: standalone."
        )
    try:
        return PlatformExports.model_validate(dict(outputs))
    except ValidationError as exc:
        missing = sorted({str(e["loc"][0]) for e in exc.errors()})
        raise PlatformStackError(
            f"stack '{graph_stack}': stack '{platform_stack}' is not an up-to-date platform "
            f"stack (outputs {', '.join(missing)} missing or invalid; a platform stack has "
            f"dynamo-testbed:stackRole: platform). Run {up} with this project's program, or "
            "set dynamo-testbed:platformStack to the stack that runs the platform."
        ) from None


class VersionVerdict(NamedTuple):
    """What the version gate says of a graph's runtime under its operator.

    Attributes:
        refused: beyond what Dynamo supports: preview fails with ``message``.
        message: one line naming the stack, both releases, where the operator's was read, and
            the fix.
    """

    refused: bool
    message: str

    def warning(self, runtime_version: str | None) -> ConfigWarning:
        """The verdict as a warning on ``engine.dynamoVersion`` (one Dynamo tolerates)."""
        return ConfigWarning("engine.dynamoVersion", runtime_version, self.message)

    def problem(self, stack: str, runtime_version: str | None) -> ConfigProblem:
        """The verdict as a config problem on ``engine.dynamoVersion``, without the leading
        ``stack '<stack>': `` (the error listing it names the stack)."""
        message = self.message.removeprefix(f"stack '{stack}': ")
        return ConfigProblem("engine.dynamoVersion", runtime_version, message)


def version_gate(
    graph_stack: str, runtime_version: str | None, operator: str, chart_version: str
) -> VersionVerdict | None:
    """The version gate: the workers' Dynamo release against their operator's
    (:func:`kvpath.versions.runtime_skew`); None when they match or the runtime is unknown.

    Args:
        runtime_version: MAJOR.MINOR.PATCH of the workers' runtime (``runtimeVersionOverride``,
            else the image tag's version); None when unknown (no check).
        operator: where ``chart_version`` was read, e.g. ``platform stack 'platform'`` or
            ``Helm release dynamo-system/dynamo-platform in the cluster``.
        chart_version: the ``dynamo-platform`` chart version, which is the Dynamo release of its
            operator (Dynamo's release artifacts: chart version == release).

    A runtime newer than its operator, or more than one minor older, is refused (Dynamo's
    supported path upgrades the platform one minor at a time, then its graphs; the platform
    release it names is the runtime's own where that is the next minor, 1.7.0 workers under a
    1.6.2 platform -> chart 1.7.0, else the next line's latest); another patch
    of the same minor, or one minor older (the state between the platform's upgrade and the
    graph's), is a warning.
    """
    if runtime_version is None:
        return None
    try:
        skew = runtime_skew(runtime_version, chart_version)
    except ValueError:
        return None  # not MAJOR.MINOR.PATCH: refused by the config checks
    if skew == "same":
        return None
    head = (
        f"stack '{graph_stack}': its workers run Dynamo {runtime_version} under the operator of "
        f"dynamo-platform chart {chart_version} ({operator})"
    )
    here = f"set engine.dynamoVersion: {chart_version} (or an image tagged {chart_version}) here"
    if skew == "patch":
        return VersionVerdict(
            False,
            f"{head}: two patches of one minor, which Dynamo supports; the operator and the "
            "runtime are released together, so use one release in both: engine.dynamoVersion "
            "(or the image tag) here, platform.chartVersion in the platform stack",
        )
    if skew == "older-minor":
        return VersionVerdict(
            False,
            f"{head}: one minor older than its operator, the step between upgrading the platform "
            "and this stack that Dynamo's upgrade path allows (a runtime older than its platform "
            "can still fail to register its model: Dynamo's GPU-sharing example reports a 1.3.0 "
            f"runtime under a 1.4.2 platform listing no model); upgrade this stack next: {here}",
        )
    ran, ops = minor_of(runtime_version), minor_of(chart_version)
    if ran > ops:
        next_line = (ops[0], ops[1] + 1) if ran[0] == ops[0] else ran
        # the workers' own release where it is the next step, so both end on one release
        step = runtime_version if next_line == ran else release_to_apply(next_line)
        why = "newer than its operator, which Dynamo's upgrade path (the platform first) never runs"
        fix = (
            f"{here}, or upgrade the platform first (platform.chartVersion: {step} in the "
            "platform stack and `pulumi up` there, one minor at a time)"
        )
    else:
        why = "more than one minor older than its operator, beyond what Dynamo supports"
        fix = here
    return VersionVerdict(
        True,
        f"{head}: {why} (Dynamo supports upgrades within a minor or to the adjacent minor "
        f"only). Fix: {fix}",
    )


def platform_upgrade_problem(previous: str | None, target: str, where: str) -> ConfigProblem | None:
    """A platform moving from chart ``previous`` (what it runs, read from ``where``: its stack's
    outputs or its Helm release in the cluster) to ``target`` outside Dynamo's supported path
    (:func:`kvpath.versions.upgrade_problem`), keyed ``platform.chartVersion`` with the release
    to apply first; None when nothing runs yet or the move is supported.

    ``("1.5.1", "1.7.0", "...")`` -> "the platform runs chart 1.5.1 (...); 1.5.1 -> 1.7.0 skips
    1.6.x; ... upgrade to 1.6.2 first ...".
    """
    if previous is None:
        return None
    try:
        problem = upgrade_problem(previous, target)
    except ValueError:
        return None  # a previous version that is not MAJOR.MINOR.PATCH: nothing to compare
    if problem is None:
        return None
    return ConfigProblem(
        "platform.chartVersion",
        target,
        f"the platform runs chart {previous} ({where}); {problem}: set platform.chartVersion "
        "to that release, `pulumi up`, then to this one",
    )


def missing_platform_message(graph_stack: str, platform_stack: str, error: str) -> str:
    """The message for a StackReference read that failed (the stack does not exist)."""
    short = short_stack_name(platform_stack)
    return (
        f"stack '{graph_stack}': cannot read its platform stack '{platform_stack}' ({error}). "
        f"Create and bring it up first: `pulumi stack init {short}` and `pulumi up -s {short}` "
        "(config in stacks/Pulumi.platform.yaml); or set dynamo-testbed:platformStack to the "
        "stack that runs the platform, or stackRole: standalone."
    )
