"""Tests of stackmodel.platform: config models, chart values, release spec, namespace labels."""

from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from upstream_files import CHART_VALUES, upstream_file

from stackmodel.platform import (
    CHART_REF,
    PlatformConfig,
    admission_scope,
    deep_merge,
    helm_release_spec,
    platform_values,
)
from stackmodel.platform import testbed_namespace_labels as namespace_labels

TESTBED = "dynamo-testbed"
RESTRICTED = {"operatorScope": "namespace", "crdsPreinstalled": True}


def test_defaults_match_documented_values() -> None:
    cfg = PlatformConfig()
    assert cfg.install is True
    assert cfg.chart_version == "1.6.2"
    assert cfg.namespace == "dynamo-system"
    assert cfg.release_name == "dynamo-platform"
    assert cfg.operator_scope == "cluster"
    assert cfg.crds_preinstalled is False
    assert cfg.webhook.failure_policy == "Fail"
    assert cfg.webhook.pod_failure_policy == "Ignore"
    assert cfg.webhook.timeout_seconds == 10
    assert cfg.extra_values == {}


def test_camel_case_stack_config_is_parsed() -> None:
    cfg = PlatformConfig.model_validate(
        {
            "chartVersion": "1.6.1",
            "releaseName": "dyn",
            "webhook": {
                "failurePolicy": "Ignore",
                "timeoutSeconds": 5,
                "namespaceLabelKey": "tb/x",
            },
            "extraValues": {"a": 1},
        }
    )
    assert (cfg.chart_version, cfg.release_name) == ("1.6.1", "dyn")
    assert (cfg.webhook.failure_policy, cfg.webhook.timeout_seconds) == ("Ignore", 5)
    assert cfg.webhook.namespace_label_key == "tb/x"
    assert cfg.extra_values == {"a": 1}


def test_cluster_scope_values_are_exact() -> None:
    assert platform_values(PlatformConfig(), TESTBED) == {
        "global": {
            "etcd": {"install": False},
            "nats": {"install": False},
            "grove": {"install": False, "enabled": False},
            "kai-scheduler": {"install": False, "enabled": False},
        },
        "dynamo-operator": {
            "upgradeCRD": True,
            "namespaceRestriction": {"enabled": False},
            "discoveryBackend": "kubernetes",
            # dynamo-operator.controllerManager.tolerations: the chart's values.yaml at 2a6da14c,
            # L112-114 (tests/upstream_files.py)
            "controllerManager": {
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ]
            },
            "webhook": {
                "failurePolicy": "Fail",
                "podCheckpointRestoreFailurePolicy": "Ignore",
                "timeoutSeconds": 10,
            },
        },
    }


def test_the_chart_has_the_operator_tolerations_key() -> None:
    """The key the program sets ``platform.tolerations`` under is the chart's (default [])."""
    chart = yaml.safe_load(upstream_file(CHART_VALUES).read_text())
    assert chart["dynamo-operator"]["controllerManager"]["tolerations"] == []


def test_operator_tolerations_are_the_users() -> None:
    """The operator pod gets ``platform.tolerations`` (default: the GPU taint, so it does not
    stay Pending on a cluster of tainted GPU nodes); [] removes them."""
    custom = PlatformConfig.model_validate(
        {"tolerations": [{"key": "dedicated", "value": "infra", "effect": "NoExecute"}]}
    )
    values = platform_values(custom, TESTBED)["dynamo-operator"]["controllerManager"]
    assert values == {
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoExecute"}
        ]
    }
    none = platform_values(PlatformConfig.model_validate({"tolerations": []}), TESTBED)
    assert none["dynamo-operator"]["controllerManager"] == {"tolerations": []}


def test_namespace_scope_values_restrict_operator_and_skip_crds() -> None:
    values = platform_values(PlatformConfig.model_validate(RESTRICTED), TESTBED)
    operator = values["dynamo-operator"]
    assert operator["upgradeCRD"] is False
    assert operator["namespaceRestriction"] == {"enabled": True, "targetNamespace": TESTBED}
    assert values["global"] == platform_values(PlatformConfig(), TESTBED)["global"]


def test_webhook_failure_policies_and_timeout_reach_values() -> None:
    cfg = PlatformConfig.model_validate(
        {"webhook": {"failurePolicy": "Ignore", "podFailurePolicy": "Fail", "timeoutSeconds": 30}}
    )
    assert platform_values(cfg, TESTBED)["dynamo-operator"]["webhook"] == {
        "failurePolicy": "Ignore",
        "podCheckpointRestoreFailurePolicy": "Fail",
        "timeoutSeconds": 30,
    }


def test_cluster_release_spec_is_exact() -> None:
    cfg = PlatformConfig()
    assert helm_release_spec(cfg, TESTBED) == {
        "name": "dynamo-platform",
        "chart": "oci://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts/dynamo-platform",
        "version": "1.6.2",
        "namespace": "dynamo-system",
        "create_namespace": True,
        "skip_crds": False,
        "atomic": True,
        "cleanup_on_fail": True,
        "timeout": 900,
        "values": platform_values(cfg, TESTBED),
    }


def test_namespace_release_goes_into_testbed_namespace_with_skip_crds() -> None:
    spec = helm_release_spec(PlatformConfig.model_validate(RESTRICTED), TESTBED)
    assert spec["chart"] == CHART_REF
    assert spec["namespace"] == TESTBED
    assert spec["create_namespace"] is False
    assert spec["skip_crds"] is True


def test_skip_install_has_no_release_spec() -> None:
    cfg = PlatformConfig.model_validate({"install": False, "operatorScope": "namespace"})
    with pytest.raises(ValueError, match=r"install=false"):
        helm_release_spec(cfg, TESTBED)


def test_restricted_install_without_crd_acknowledgement_explains_the_fix() -> None:
    with pytest.raises(ValidationError) as err:
        PlatformConfig.model_validate({"operatorScope": "namespace"})
    text = str(err.value)
    assert "crdsPreinstalled=true" in text
    assert "--skip-crds" in text
    assert "kubectl get crd dynamographdeployments.nvidia.com" in text


@pytest.mark.parametrize(
    ("config", "key", "bad", "allowed"),
    [
        ({"operatorScope": "global"}, "operatorScope", "'global'", "'cluster' or 'namespace'"),
        (
            {"webhook": {"failurePolicy": "Maybe"}},
            "webhook.failurePolicy",
            "'Maybe'",
            "'Fail' or 'Ignore'",
        ),
        (
            {"webhook": {"timeoutSeconds": 31}},
            "webhook.timeoutSeconds",
            "31",
            "less than or equal to 30",
        ),
        ({"chartVersion": "latest"}, "chartVersion", "'latest'", "MAJOR.MINOR.PATCH"),
        ({"namespace": "Dynamo_System"}, "namespace", "'Dynamo_System'", "DNS-1123 label"),
        ({"releaseName": "r" * 54}, "releaseName", "r" * 54, "53 characters"),
        (
            {"webhook": {"namespaceLabelKey": "kubernetes.io/testbed"}},
            "namespaceLabelKey",
            "kubernetes.io/testbed",
            "not ending in kubernetes.io",
        ),
        (
            {"webhook": {"namespaceLabelKey": "bad key"}},
            "namespaceLabelKey",
            "'bad key'",
            "1-63 chars",
        ),
        (
            {"webhook": {"namespaceLabelValue": "v" * 64}},
            "namespaceLabelValue",
            "v" * 64,
            "1-63 chars",
        ),
        (
            {"operatorscope": "cluster"},
            "operatorscope",
            "'cluster'",
            "Extra inputs are not permitted",
        ),
    ],
)
def test_config_errors_name_key_value_and_allowed_values(
    config: dict[str, Any], key: str, bad: str, allowed: str
) -> None:
    with pytest.raises(ValidationError) as err:
        PlatformConfig.model_validate(config)
    text = str(err.value)
    assert key in text
    assert bad in text
    assert allowed in text


def test_extra_values_deep_merge_last() -> None:
    cfg = PlatformConfig.model_validate(
        {
            "extraValues": {
                "dynamo-operator": {
                    "controllerManager": {"tolerations": [{"key": "gpu", "operator": "Exists"}]},
                    "webhook": {"timeoutSeconds": 20},
                },
                "global": {"nats": {"install": True}},
            }
        }
    )
    values = platform_values(cfg, TESTBED)
    operator = values["dynamo-operator"]
    assert operator["controllerManager"] == {"tolerations": [{"key": "gpu", "operator": "Exists"}]}
    assert operator["webhook"]["timeoutSeconds"] == 20
    assert operator["webhook"]["failurePolicy"] == "Fail"
    assert values["global"]["nats"] == {"install": True}
    assert values["global"]["etcd"] == {"install": False}


def test_deep_merge_replaces_non_dicts_and_copies() -> None:
    base = {"a": {"b": [1], "c": 1}, "d": 1}
    override = {"a": {"b": [2]}, "d": {"e": 1}}
    merged = deep_merge(base, override)
    assert merged == {"a": {"b": [2], "c": 1}, "d": {"e": 1}}
    merged["a"]["b"].append(3)
    assert base == {"a": {"b": [1], "c": 1}, "d": 1}
    assert override == {"a": {"b": [2]}, "d": {"e": 1}}


def test_extra_values_webhook_selector_is_refused_before_helm() -> None:
    cfg = PlatformConfig.model_validate(
        {
            "extraValues": {
                "dynamo-operator": {"webhook": {"namespaceSelector": {"matchLabels": {"x": "y"}}}}
            }
        }
    )
    with pytest.raises(
        ValueError, match=r"dynamo-operator\.webhook\.namespaceSelector.*allowed: \{\}"
    ):
        platform_values(cfg, TESTBED)


@pytest.mark.parametrize(
    ("config", "key"),
    [
        (
            {"extraValues": {"dynamo-operator": {"namespaceRestriction": {"enabled": True}}}},
            "namespaceRestriction.enabled",
        ),
        ({"extraValues": {"dynamo-operator": {"upgradeCRD": False}}}, "upgradeCRD"),
        ({**RESTRICTED, "extraValues": {"dynamo-operator": {"upgradeCRD": True}}}, "upgradeCRD"),
        (
            {
                **RESTRICTED,
                "extraValues": {
                    "dynamo-operator": {"namespaceRestriction": {"targetNamespace": "other"}}
                },
            },
            "namespaceRestriction.targetNamespace",
        ),
    ],
)
def test_extra_values_cannot_contradict_operator_scope(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=rf"'dynamo-operator\.{key}'.*contradicts operatorScope"):
        platform_values(PlatformConfig.model_validate(config), TESTBED)


def test_bad_testbed_namespace_is_refused() -> None:
    with pytest.raises(ValueError, match=r"testbed namespace='Bad_NS' is not a DNS-1123 label"):
        helm_release_spec(PlatformConfig(), "Bad_NS")


def test_testbed_namespace_labels() -> None:
    assert namespace_labels(PlatformConfig()) == {"dynamo-testbed/managed": "true"}
    cfg = PlatformConfig.model_validate(
        {"webhook": {"namespaceLabelKey": "example.com/testbed", "namespaceLabelValue": "run-1"}}
    )
    assert namespace_labels(cfg) == {"example.com/testbed": "run-1"}


def test_admission_scope_follows_operator_scope() -> None:
    assert admission_scope(PlatformConfig(), TESTBED) == {
        "namespaces": "all",
        "namespaceSelector": {},
        "failurePolicy": "Fail",
        "podCreateFailurePolicy": "Ignore",
        "timeoutSeconds": 10,
        "managedByStack": True,
    }
    restricted = admission_scope(PlatformConfig.model_validate(RESTRICTED), TESTBED)
    assert restricted["namespaces"] == TESTBED
    assert restricted["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": TESTBED}
    }


def _leaf_paths(tree: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            paths.extend(_leaf_paths(value, (*prefix, key)))
        else:
            paths.append((*prefix, key))
    return paths


@pytest.mark.parametrize("config", [{}, RESTRICTED])
def test_every_value_we_set_is_a_key_of_the_chart(config: dict[str, Any]) -> None:
    chart_values = yaml.safe_load(upstream_file(CHART_VALUES).read_text())
    for path in _leaf_paths(platform_values(PlatformConfig.model_validate(config), TESTBED)):
        node = chart_values
        for key in path[:-1]:
            node = node[key]
        assert path[-1] in node, f"{'.'.join(path)} is not in the chart's values.yaml"
