"""Rendered objects against their API schemas: the DGD against the Dynamo CRD (unknown fields are
errors, as the API server would silently prune them), core objects against Kubernetes 1.34."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest
from crd_schema import crd_schema, schema_errors, strict_schema, strict_validator
from jsonschema import Draft7Validator
from upstream_files import DGD_CRD, upstream_file

from manifests.graph import dgd_manifest
from stackmodel.topology import build_topology
from stackmodel.validation import validate_stack
from testbed.render import Rendered

KUBERNETES_VERSION = "1.34"
CORE_KINDS = {
    "Namespace",
    "Service",
    "Deployment",
    "Secret",
}


@pytest.fixture(scope="module")
def dgd_validator() -> Draft7Validator:
    """The upstream DGD CRD's v1beta1 schema, strictly (skips without the CRD: upstream_files)."""
    return strict_validator(upstream_file(DGD_CRD), "v1beta1")


def all_rendered(
    rendered: dict[str, Rendered], rendered_with_token: dict[str, Rendered]
) -> list[tuple[str, dict[str, Any]]]:
    """(label, object) for every Kubernetes object of every render."""
    out: list[tuple[str, dict[str, Any]]] = []
    for label, group in (("", rendered), ("+hfToken", rendered_with_token)):
        for stack, r in group.items():
            out.extend((f"{stack}{label}", obj) for obj in r.kubernetes_objects())
    return out


def the_dgd(r: Rendered) -> dict[str, Any]:
    (dgd,) = [o for o in r.kubernetes_objects() if o["kind"] == "DynamoGraphDeployment"]
    return dgd


# --- the DGD against the CRD, strictly -------------------------------------------------------


def test_every_rendered_dgd_validates_strictly(
    dgd_validator: Draft7Validator,
    rendered: dict[str, Rendered],
    rendered_with_token: dict[str, Rendered],
) -> None:
    dgds = [
        (label, obj)
        for label, obj in all_rendered(rendered, rendered_with_token)
        if obj["kind"] == "DynamoGraphDeployment"
    ]
    assert sorted(label for label, _ in dgds) == [
        "disagg-cross-node",
        "disagg-same-node",
        "kv-routing",
        "kv-routing+hfToken",
    ]
    for label, obj in dgds:
        assert obj["apiVersion"] == "nvidia.com/v1beta1"
        assert schema_errors(dgd_validator, obj) == [], label


def test_mocker_dgd_with_runtime_version_override_validates(
    dgd_validator: Draft7Validator, raw_config: Any
) -> None:
    raw = raw_config("disagg-cross-node")
    raw["engine"] = {
        "kind": "mocker",
        "image": "example.com/dynamo:latest",
        "runtimeVersionOverride": "1.6.2",
    }
    cfg = validate_stack("disagg-cross-node", raw)
    dgd = dgd_manifest(cfg.cfg, build_topology(cfg), with_hf_token=True)
    assert "backendFramework" not in dgd["spec"]
    assert {c["runtimeVersionOverride"] for c in dgd["spec"]["components"]} == {"1.6.2"}
    assert schema_errors(dgd_validator, dgd) == []


@pytest.mark.parametrize(
    ("path", "typo", "unexpected_at"),
    [
        ((), "podTemplat", "$.spec.components[1]"),
        (("podTemplate", "spec"), "nodeSelecter", "$.spec.components[1].podTemplate.spec"),
        (
            ("podTemplate", "spec", "containers", 0),
            "envFrm",
            "$.spec.components[1].podTemplate.spec.containers[0]",
        ),
    ],
)
def test_strict_validator_rejects_misspelled_fields(
    dgd_validator: Draft7Validator,
    rendered: dict[str, Rendered],
    path: tuple[Any, ...],
    typo: str,
    unexpected_at: str,
) -> None:
    dgd = copy.deepcopy(the_dgd(rendered["disagg-cross-node"]))
    node = dgd["spec"]["components"][1]
    for part in path:
        node = node[part]
    original = {"podTemplat": "podTemplate", "nodeSelecter": "nodeSelector", "envFrm": "env"}[typo]
    node[typo] = node.pop(original)
    errors = schema_errors(dgd_validator, dgd)
    assert errors == [
        f"{unexpected_at}: Additional properties are not allowed ('{typo}' was unexpected)"
    ]
    # Plain JSON Schema (what the API server's pruning amounts to) would have accepted it.
    plain = Draft7Validator(crd_schema(upstream_file(DGD_CRD), "v1beta1"))
    assert not list(plain.iter_errors(dgd))


def test_strict_validator_checks_values_too(
    dgd_validator: Draft7Validator, rendered: dict[str, Rendered]
) -> None:
    dgd = copy.deepcopy(the_dgd(rendered["disagg-cross-node"]))
    dgd["spec"]["components"][1]["type"] = "Prefill"
    limits = dgd["spec"]["components"][2]["podTemplate"]["spec"]["containers"][0]["resources"]
    limits["limits"]["nvidia.com/gpu"] = 1  # int-or-string: an int is allowed
    errors = schema_errors(dgd_validator, dgd)
    assert len(errors) == 1
    assert errors[0].startswith("$.spec.components[1].type: 'Prefill' is not one of")
    limits["limits"]["nvidia.com/gpu"] = [1]  # neither int nor string
    gpu_errors = [
        e
        for e in schema_errors(dgd_validator, dgd)
        if e.startswith("$.spec.components[2].podTemplate.spec.containers[0].resources.limits")
    ]
    assert gpu_errors
    assert all("['nvidia.com/gpu']: [1] is not" in e for e in gpu_errors)


def test_strict_schema_closes_only_what_the_api_server_prunes() -> None:
    schema = {
        "type": "object",
        "properties": {
            "known": {"type": "object", "properties": {"a": {"type": "string"}}},
            "free": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"a": {"type": "string"}},
            },
            "map": {"type": "object", "additionalProperties": {"type": "string"}},
            "list": {"type": "array", "items": {"type": "object", "properties": {"n": {}}}},
            "port": {"x-kubernetes-int-or-string": True},
        },
    }
    before = copy.deepcopy(schema)
    validator = Draft7Validator(strict_schema(schema))
    assert schema == before  # not modified in place

    def errors(obj: dict[str, Any]) -> list[str]:
        return schema_errors(validator, obj)

    assert errors({"known": {"a": "x"}, "free": {"b": 1}, "map": {"k": "v"}, "port": 80}) == []
    assert errors({"port": "http"}) == []
    assert errors({"list": [{"n": 1}]}) == []
    assert errors({"known": {"b": 1}}) == [
        "$.known: Additional properties are not allowed ('b' was unexpected)"
    ]
    assert errors({"list": [{"m": 1}]}) == [
        "$.list[0]: Additional properties are not allowed ('m' was unexpected)"
    ]
    assert errors({"extra": 1}) == [
        "$: Additional properties are not allowed ('extra' was unexpected)"
    ]
    assert errors({"port": 1.5}) == ["$.port: 1.5 is not of type 'integer', 'string'"]


def test_crd_schema_names_missing_version() -> None:
    crd = upstream_file(DGD_CRD)
    with pytest.raises(KeyError, match=r"no version 'v2'; versions: v1alpha1, v1beta1"):
        crd_schema(crd, "v2")


# --- core objects against Kubernetes 1.34 ------------------------------------------------------


def test_every_core_object_validates_against_kubernetes(
    rendered: dict[str, Rendered], rendered_with_token: dict[str, Rendered]
) -> None:
    core = [
        (label, o)
        for label, o in all_rendered(rendered, rendered_with_token)
        if o["kind"] in CORE_KINDS
    ]
    assert {o["kind"] for _, o in core} == CORE_KINDS
    for label, obj in core:
        # Raises kubernetes_validate.ValidationError on any unknown field or bad value.
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        assert obj["metadata"]["name"], label
    others = {o["kind"] for _, o in all_rendered(rendered, rendered_with_token)} - CORE_KINDS
    assert others == {"DynamoGraphDeployment"}


@pytest.mark.parametrize(
    ("kind", "mutate", "message"),
    [
        (
            "Deployment",
            lambda o: o["spec"].__setitem__("replica", o["spec"].pop("replicas")),
            "('replica' was unexpected)",
        ),
        (
            "Service",
            lambda o: o["spec"]["ports"][0].__setitem__("port", "eight-thousand"),
            "'eight-thousand' is not of type 'integer'",
        ),
        (
            "Namespace",
            lambda o: o["metadata"].__setitem__("label", {}),
            "('label' was unexpected)",
        ),
    ],
)
def test_kubernetes_validation_rejects_bad_core_objects(
    rendered: dict[str, Rendered], kind: str, mutate: Any, message: str
) -> None:
    obj = copy.deepcopy(
        next(o for o in rendered["vllm-service"].kubernetes_objects() if o["kind"] == kind)
    )
    mutate(obj)
    with pytest.raises(kubernetes_validate.ValidationError) as info:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    assert message in info.value.message
