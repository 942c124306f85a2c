"""Dynamo platform install: stack-config models and the Helm release spec, as pure functions.

The `platform` section of the stack config becomes a `PlatformConfig`; `helm_release_spec` turns
it into the keyword arguments of one `pulumi_kubernetes.helm.v3.Release` of NVIDIA's
`dynamo-platform` chart (operator only: Grove, KAI scheduler, etcd and NATS off; Kubernetes
discovery).

Chart keys and the chart's own rules, from ai-dynamo/dynamo at the commits named (the chart
of the 1.5 line, taken to hold for 1.6.x: the "chart values" rule of
:data:`kvpath.versions.UPSTREAM_RULES`; preview warns for a chart version of another line):
- `global.{etcd,nats}.install`, `global.{grove,kai-scheduler}.{install,enabled}`,
  `dynamo-operator.{upgradeCRD,discoveryBackend}`,
  `dynamo-operator.namespaceRestriction.{enabled,targetNamespace}`,
  `dynamo-operator.webhook.{failurePolicy,podCheckpointRestoreFailurePolicy,timeoutSeconds,
  namespaceSelector}`: ai-dynamo/dynamo `deploy/helm/charts/platform/values.yaml` and
  `components/operator/values.yaml` at 2a6da14c83617f5412caba5777dbf0e2399e9c5f (chart 1.5.0;
  the tests check every key the program sets against them: tests/upstream_files.py).
- `webhook.namespaceSelector` must stay empty and `namespaceRestriction.enabled` excludes
  `upgradeCRD`: `components/operator/templates/_validation.tpl` fails the install otherwise
  (at 37a3f91a003506bee2fea970b9766f15e2556222; in every chart from 1.3 on).
- A restricted operator's admission webhooks select `kubernetes.io/metadata.name:
  <targetNamespace>`, and the release needs Helm's `--skip-crds`:
  `deploy/helm/charts/platform/tests/namespace_restriction_webhooks_test.yaml` and
  `templates/NOTES.txt` at 561987bca2eff5f8d9048baeb45d1d5f900170f4.
- The Pod CREATE webhook (`mpodcheckpointrestore.kb.io`) uses
  `webhook.podCheckpointRestoreFailurePolicy`: `components/operator/templates/
  webhook-configuration.yaml` at 2e0ab36b6236116bec5f0863a9b15e33891d2914.
- Chart location `oci://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts/dynamo-platform`, chart
  version == Dynamo release: Dynamo's release-artifacts docs (`helm install dynamo-platform
  oci://... --version 1.1.1`).
"""

from __future__ import annotations

import copy
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from configkeys.config_text import ConfigText
from stackmodel.toleration import GPU_TAINT_TOLERATION, Toleration

CHART_REF = "oci://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts/dynamo-platform"
"""NVIDIA's OCI location of the `dynamo-platform` chart (see the module docstring)."""

OPERATOR_VALUES_KEY = "dynamo-operator"
"""Values key of the operator subchart inside the `dynamo-platform` umbrella chart."""

HELM_TIMEOUT_S = 900
"""Seconds Helm waits for the release's pods and hook jobs (the Release default is 300 s).

A first install pulls the operator image and the chart's hook-job images on a node that has
never seen them; with ``atomic`` a timeout uninstalls the release, so the limit is generous
(15 min) rather than tight: retrying a purged install costs the same pulls again."""

# Kubernetes name syntax: apimachinery `validation.IsDNS1123Label` and `IsQualifiedName`.
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_SEMVER = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")
# Label prefixes reserved for Kubernetes core components (Kubernetes docs, "Labels and Selectors").
_RESERVED_LABEL_SUFFIXES = ("kubernetes.io", "k8s.io")
_HELM_RELEASE_NAME_MAX = 53  # Helm's limit on release names (helm/pkg/chartutil).


def check_dns1123_label(key: str, value: str) -> str:
    """Return `value` if it is a valid namespace/object name (DNS-1123 label, <= 63 chars).

    Raises:
        ValueError: naming `key`, the bad value and the allowed form.
    """
    if len(value) > 63 or not _DNS1123_LABEL.match(value):
        raise ValueError(
            f"{key}={value!r} is not a DNS-1123 label; allowed: 1-63 chars of a-z, 0-9 and '-',"
            " starting and ending with a letter or digit"
        )
    return value


class _StackSection(BaseModel):
    """Base for stack-config sections: camelCase keys, unknown keys rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class WebhookConfig(_StackSection):
    """Admission-webhook settings of the operator and the label of the testbed namespace."""

    failure_policy: Literal["Fail", "Ignore"] = Field(
        "Fail",
        description="failurePolicy of the operator's validating/mutating webhooks for Dynamo"
        " resources (chart `dynamo-operator.webhook.failurePolicy`). Default Fail: a DGD is"
        " never admitted unvalidated.",
    )
    pod_failure_policy: Literal["Fail", "Ignore"] = Field(
        "Ignore",
        description="failurePolicy of the operator's Pod CREATE webhook (chart"
        " `dynamo-operator.webhook.podCheckpointRestoreFailurePolicy`). Default Ignore: an"
        " operator outage never blocks Pod creation anywhere in the cluster.",
    )
    timeout_seconds: int = Field(
        10,
        ge=1,
        le=30,
        description="Webhook call timeout in s (chart `dynamo-operator.webhook.timeoutSeconds`;"
        " default 10, the chart's; Kubernetes allows 1-30).",
    )
    namespace_label_key: ConfigText = Field(
        "dynamo-testbed/managed",
        description="Label key put on the testbed namespace to mark it as managed by this"
        " program. It does not scope the webhooks: the 1.3+ chart refuses a custom"
        " webhook namespaceSelector (see operatorScope). Default `dynamo-testbed/managed`.",
    )
    namespace_label_value: ConfigText = Field(
        "true", description="Value of that label. Default `true`."
    )

    @field_validator("namespace_label_key")
    @classmethod
    def _check_label_key(cls, key: str) -> str:
        prefix, _, name = key.rpartition("/")
        valid_name = len(name) <= 63 and bool(_LABEL_NAME.match(name))
        valid_prefix = prefix == "" or (
            len(prefix) <= 253 and bool(_DNS1123_SUBDOMAIN.match(prefix))
        )
        if not (valid_name and valid_prefix):
            raise ValueError(
                f"namespaceLabelKey={key!r} is not a Kubernetes label key; allowed: an optional"
                " DNS-subdomain prefix and '/', then 1-63 chars of [A-Za-z0-9-_.]"
            )
        if prefix.endswith(_RESERVED_LABEL_SUFFIXES):
            raise ValueError(
                f"namespaceLabelKey={key!r} uses a prefix reserved for Kubernetes;"
                " allowed: any prefix not ending in kubernetes.io or k8s.io"
            )
        return key

    @field_validator("namespace_label_value")
    @classmethod
    def _check_label_value(cls, value: str) -> str:
        if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
            raise ValueError(
                f"namespaceLabelValue={value!r} is not a Kubernetes label value; allowed: empty"
                " or 1-63 chars of [A-Za-z0-9-_.] starting and ending with a letter or digit"
            )
        return value


class PlatformConfig(_StackSection):
    """The `platform` section of the stack config: how (and whether) Dynamo is installed."""

    install: bool = Field(
        True,
        description="Install the dynamo-platform chart. false: the cluster already runs the"
        " operator; nothing is registered for the chart. Default true.",
    )
    chart_version: ConfigText = Field(
        "1.6.2",
        description="dynamo-platform chart version, == the Dynamo release (default 1.6.2, the"
        " version the measured series used).",
    )
    namespace: ConfigText = Field(
        "dynamo-system",
        description="Namespace of the Helm release with operatorScope=cluster (created if"
        " missing). With operatorScope=namespace the release goes into the testbed namespace,"
        " as upstream installs restricted operators. Default dynamo-system.",
    )
    release_name: ConfigText = Field(
        "dynamo-platform",
        description="Helm release name (<= 53 chars). Default dynamo-platform.",
    )
    operator_scope: Literal["cluster", "namespace"] = Field(
        "cluster",
        description="cluster: the operator reconciles and admits in every namespace and manages"
        " the CRDs. namespace: development/test mode of the chart; the operator reconciles and"
        " admits only the testbed namespace and installs no CRDs (needs crdsPreinstalled)."
        " Default cluster.",
    )
    crds_preinstalled: bool = Field(
        False,
        description="Acknowledges that a cluster-wide Dynamo install already provides the CRDs"
        " (required for install=true with operatorScope=namespace). Default false.",
    )
    webhook: WebhookConfig = Field(
        default_factory=WebhookConfig, description="Admission-webhook settings."
    )
    tolerations: tuple[Toleration, ...] = Field(
        default=(GPU_TAINT_TOLERATION,),
        description="Tolerations of the operator pod (chart value "
        "`dynamo-operator.controllerManager.tolerations`). Default: the nvidia.com/gpu "
        "NoSchedule taint, so the operator schedules on a cluster of tainted GPU nodes (it uses "
        "no GPU); [] for none.",
    )
    protect: bool = Field(
        True,
        description="Pulumi `protect` on the release of a platform stack (stackRole platform):"
        " `pulumi destroy -s platform` is refused while it is set, so the operator and its"
        " webhooks outlive the graph stacks' DGDs (their finalizers need the operator). Set"
        " false, after destroying every graph stack, to destroy the platform"
        " (docs/shared-cluster.md). Default true.",
    )
    extra_values: dict[str, Any] = Field(
        default_factory=dict,
        description="Chart values deep-merged over ours last (dicts merge, other values"
        " replace). Default {}.",
    )

    @field_validator("extra_values")
    @classmethod
    def _check_no_null(cls, values: dict[str, Any]) -> dict[str, Any]:
        nulls = null_paths(values)
        if nulls:
            raise ValueError(
                f"extraValues key '{nulls[0]}' is null: a null set from a Python program never"
                " reaches the Helm release (pulumi-kubernetes #3178, #3811), so the chart's"
                " default would stay; allowed: the value you want there (a null cannot delete"
                " a chart default from this program)"
            )
        return values

    @field_validator("chart_version")
    @classmethod
    def _check_chart_version(cls, version: str) -> str:
        if not _SEMVER.match(version):
            raise ValueError(
                f"chartVersion={version!r} is not a chart version; allowed: MAJOR.MINOR.PATCH"
                " with an optional -prerelease, e.g. '1.6.2'"
            )
        return version

    @field_validator("namespace")
    @classmethod
    def _check_namespace(cls, namespace: str) -> str:
        return check_dns1123_label("namespace", namespace)

    @field_validator("release_name")
    @classmethod
    def _check_release_name(cls, name: str) -> str:
        check_dns1123_label("releaseName", name)
        if len(name) > _HELM_RELEASE_NAME_MAX:
            raise ValueError(f"releaseName={name!r} is longer than Helm's 53 characters")
        return name

    @model_validator(mode="after")
    def _check_restricted_mode(self) -> PlatformConfig:
        if self.install and self.operator_scope == "namespace" and not self.crds_preinstalled:
            raise ValueError(
                "operatorScope='namespace' with install=true needs crdsPreinstalled=true: the"
                " dynamo-platform chart supports a namespace-restricted operator only for"
                " development/test, installed with upgradeCRD=false and --skip-crds, so it relies"
                " on the CRDs (and their conversion webhook) of a cluster-wide Dynamo install."
                " Fix: check `kubectl get crd dynamographdeployments.nvidia.com` and set"
                " crdsPreinstalled: true; or use operatorScope: cluster; or set install: false"
                " to use the operator already running."
            )
        return self


def release_namespace(cfg: PlatformConfig, testbed_namespace: str) -> str:
    """Namespace of the Helm release: `cfg.namespace` (cluster scope) or the testbed namespace."""
    return testbed_namespace if cfg.operator_scope == "namespace" else cfg.namespace


def testbed_namespace_labels(cfg: PlatformConfig) -> dict[str, str]:
    """Labels the testbed Namespace object must carry: `{namespaceLabelKey: namespaceLabelValue}`.

    The chart scopes a restricted operator's webhooks by `kubernetes.io/metadata.name`, which the
    API server sets on every namespace, so no further label is needed for admission.
    """
    return {cfg.webhook.namespace_label_key: cfg.webhook.namespace_label_value}


def null_paths(values: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths (``a.b[0].c``) of every None in `values` (dicts and lists), in order.

    `helm.v3.Release` never receives them from this program: the Python SDK sends a nested
    None, but it does not reach the provider (pulumi-kubernetes 4.34.2, as since 4.30.0,
    CHANGELOG #4293: "Go/C#/Python inline null (#3234, #3178): These SDKs strip null at the SDK
    marshaler layer before it reaches the provider"), so a null meant to delete a chart default
    silently keeps it.
    """
    found: list[str] = []
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        found += _nulls_in(value, path)
    return found


def _nulls_in(value: Any, path: str) -> list[str]:
    if value is None:
        return [path]
    if isinstance(value, dict):
        return null_paths(value, path)
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _nulls_in(item, f"{path}[{i}]")]
    return []


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Return `override` merged into `base`: nested dicts merge, anything else replaces.

    Neither input is modified.
    """
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


_REMOVED_TOGGLES = ("nats", "etcd", "grove", "kai-scheduler")
"""Umbrella-chart keys whose `<key>.enabled` the chart refuses (moved to `global.<key>.*`)."""
_LEADER_ID = "dynamo.nvidia.com"
"""The one leader-election ID the chart accepts for a cluster-wide operator (its default)."""


def _check_chart_contract(
    values: dict[str, Any], cfg: PlatformConfig, testbed_namespace: str
) -> None:
    """Reject merged values the chart's validation templates would refuse (restated one by one
    in tests/platform/test_chart_rules.py, with their upstream lines), or that contradict
    `operatorScope`."""
    operator = values.get(OPERATOR_VALUES_KEY, {})
    selector = operator.get("webhook", {}).get("namespaceSelector")
    if selector:
        raise ValueError(
            f"extraValues key '{OPERATOR_VALUES_KEY}.webhook.namespaceSelector'={selector!r} is"
            " refused by the dynamo-platform chart (1.3+ fails the install); allowed: {}. The"
            " admission scope follows operatorScope: cluster = every namespace, namespace = the"
            " testbed namespace only"
        )
    for toggle in _REMOVED_TOGGLES:
        if isinstance(values.get(toggle), dict) and "enabled" in values[toggle]:
            raise ValueError(
                f"extraValues key '{toggle}.enabled' is refused by the dynamo-platform chart"
                f" (removed; the install fails); allowed: 'global.{toggle}.install'"
            )
    backend = operator.get("discoveryBackend")
    if backend not in ("kubernetes", "etcd"):
        raise ValueError(
            f"extraValues key '{OPERATOR_VALUES_KEY}.discoveryBackend'={backend!r} is refused by"
            " the dynamo-platform chart; allowed: 'kubernetes' (ours: no etcd is installed)"
        )
    election = operator.get("controllerManager", {}).get("leaderElection", {})
    if cfg.operator_scope == "cluster" and election.get("id") not in (None, "", _LEADER_ID):
        raise ValueError(
            f"extraValues key '{OPERATOR_VALUES_KEY}.controllerManager.leaderElection.id'="
            f"{election['id']!r} is refused by the dynamo-platform chart for a cluster-wide"
            f" operator; allowed: '' or {_LEADER_ID!r}"
        )
    if cfg.operator_scope == "cluster" and election.get("namespace") == cfg.namespace:
        raise ValueError(
            f"extraValues key '{OPERATOR_VALUES_KEY}.controllerManager.leaderElection.namespace'="
            f"{cfg.namespace!r} (the release namespace) is refused by the dynamo-platform chart"
            " for a cluster-wide operator; allowed: another namespace (e.g. 'kube-system') or ''"
        )
    restricted = cfg.operator_scope == "namespace"
    expected = {
        "namespaceRestriction.enabled": restricted,
        "upgradeCRD": not restricted,
        "namespaceRestriction.targetNamespace": testbed_namespace if restricted else None,
    }
    actual = {
        "namespaceRestriction.enabled": operator.get("namespaceRestriction", {}).get("enabled"),
        "upgradeCRD": operator.get("upgradeCRD"),
        "namespaceRestriction.targetNamespace": operator.get("namespaceRestriction", {}).get(
            "targetNamespace"
        ),
    }
    for key, want in expected.items():
        if actual[key] != want:
            raise ValueError(
                f"extraValues key '{OPERATOR_VALUES_KEY}.{key}'={actual[key]!r} contradicts"
                f" operatorScope={cfg.operator_scope!r}; allowed: {want!r} (set operatorScope"
                " instead)"
            )


def platform_values(cfg: PlatformConfig, testbed_namespace: str) -> dict[str, Any]:
    """Chart values for `cfg`: operator only, Kubernetes discovery, scope and webhook settings.

    Returns the nested values dict (`global`, `dynamo-operator`), `cfg.extra_values` merged last.

    Raises:
        ValueError: `testbed_namespace` is not a DNS-1123 label, or the merged values set a
            webhook namespaceSelector or contradict `operatorScope` (the error names the key).
    """
    check_dns1123_label("testbed namespace", testbed_namespace)
    restricted = cfg.operator_scope == "namespace"
    restriction: dict[str, Any] = {"enabled": restricted}
    if restricted:
        restriction["targetNamespace"] = testbed_namespace
    base: dict[str, Any] = {
        "global": {
            "etcd": {"install": False},
            "nats": {"install": False},
            "grove": {"install": False, "enabled": False},
            "kai-scheduler": {"install": False, "enabled": False},
        },
        OPERATOR_VALUES_KEY: {
            "upgradeCRD": not restricted,
            "namespaceRestriction": restriction,
            "discoveryBackend": "kubernetes",
            "controllerManager": {"tolerations": [t.manifest() for t in cfg.tolerations]},
            "webhook": {
                "failurePolicy": cfg.webhook.failure_policy,
                "podCheckpointRestoreFailurePolicy": cfg.webhook.pod_failure_policy,
                "timeoutSeconds": cfg.webhook.timeout_seconds,
            },
        },
    }
    values = deep_merge(base, cfg.extra_values)
    _check_chart_contract(values, cfg, testbed_namespace)
    return values


def helm_release_spec(cfg: PlatformConfig, testbed_namespace: str) -> dict[str, Any]:
    """Keyword arguments for `pulumi_kubernetes.helm.v3.Release` installing the platform.

    Returns `{"name", "chart", "version", "namespace", "create_namespace", "skip_crds",
    "atomic", "cleanup_on_fail", "timeout", "values"}`: the OCI chart pinned to
    `cfg.chart_version`; with operatorScope namespace the release goes into the testbed
    namespace (which the caller creates first) with `skip_crds=True`; `timeout` in s.

    `atomic=True`: a failed or timed-out install is uninstalled instead of left half-applied,
    e.g. fail-closed admission webhooks with no operator pod behind them, which would then
    refuse every DGD (pulumi/pulumi-kubernetes#1697: "If helm release times-out and helm's
    atomic mode is not turned on, the release leaves some orphaned resources"); an
    interrupted install otherwise stays `pending-install` and blocks the next `pulumi up` with
    "another operation (install/upgrade/rollback) is in progress" (pulumi-kubernetes#2054).
    `cleanup_on_fail=True`: resources a failed upgrade created are deleted. Both are the
    `helm.v3.Release` arguments of pulumi-kubernetes 4.34.2 (`atomic`, `cleanupOnFail`).

    Raises:
        ValueError: `cfg.install` is false (nothing to install), or as `platform_values`.
    """
    if not cfg.install:
        raise ValueError("platform.install=false: the stack installs no dynamo-platform release")
    restricted = cfg.operator_scope == "namespace"
    return {
        "name": cfg.release_name,
        "chart": CHART_REF,
        "version": cfg.chart_version,
        "namespace": release_namespace(cfg, testbed_namespace),
        "create_namespace": not restricted,
        "skip_crds": restricted,
        "atomic": True,
        "cleanup_on_fail": True,
        "timeout": HELM_TIMEOUT_S,
        "values": platform_values(cfg, testbed_namespace),
    }


def admission_scope(cfg: PlatformConfig, testbed_namespace: str) -> dict[str, Any]:
    """What the operator's admission webhooks see, as the chart renders them for `cfg`.

    Returns `{"namespaces": "all" | <testbed namespace>, "namespaceSelector": dict,
    "failurePolicy", "podCreateFailurePolicy", "timeoutSeconds", "managedByStack": bool}`.
    With install=false the values describe what this config expects of the running operator.
    """
    if cfg.operator_scope == "namespace":
        namespaces = testbed_namespace
        selector: dict[str, Any] = {
            "matchLabels": {"kubernetes.io/metadata.name": testbed_namespace}
        }
    else:
        namespaces, selector = "all", {}
    return {
        "namespaces": namespaces,
        "namespaceSelector": selector,
        "failurePolicy": cfg.webhook.failure_policy,
        "podCreateFailurePolicy": cfg.webhook.pod_failure_policy,
        "timeoutSeconds": cfg.webhook.timeout_seconds,
        "managedByStack": cfg.install,
    }
