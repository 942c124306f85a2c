"""Validate custom resources against their CRD's ``openAPIV3Schema``, unknown fields as errors.

The API server prunes fields a structural CRD schema does not declare, silently: a misspelled
``podTemplat`` in a DynamoGraphDeployment is dropped and the graph deploys without it. JSON
Schema's default allows unknown properties, so :func:`strict_schema` closes every object schema
the API server would prune (it declares ``properties`` and neither ``additionalProperties`` nor
``x-kubernetes-preserve-unknown-fields: true``) and gives ``x-kubernetes-int-or-string`` nodes
the type Kubernetes allows them (integer or string). Only the structural skeleton
(``properties``, ``items``, ``additionalProperties``) is walked: per the Kubernetes "structural
schema" rules, ``anyOf``/``allOf``/``oneOf``/``not`` cannot declare fields.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft7Validator


def crd_schema(crd_path: Path, version: str) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of one version of the CRD in ``crd_path`` (a YAML file).

    Raises:
        FileNotFoundError: no such file.
        KeyError: the CRD has no such version (the message lists the versions it has).
    """
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the DGD CRD is ~1 MB of YAML
    crd = yaml.load(crd_path.read_text(), Loader=loader)
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    if version not in versions:
        raise KeyError(
            f"{crd_path.name}: no version {version!r}; versions: {', '.join(sorted(versions))}"
        )
    schema: dict[str, Any] = versions[version]["schema"]["openAPIV3Schema"]
    return schema


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of a CRD schema in which every field the API server would prune is an error.

    Sets ``additionalProperties: false`` on every object schema with ``properties``, no
    ``additionalProperties`` and no ``x-kubernetes-preserve-unknown-fields: true``; sets
    ``type: [integer, string]`` on ``x-kubernetes-int-or-string`` nodes without a type. The input
    is not modified.
    """
    out = copy.deepcopy(schema)
    _close(out)
    return out


def _close(node: dict[str, Any]) -> None:
    if node.get("x-kubernetes-int-or-string") and "type" not in node:
        node["type"] = ["integer", "string"]
    properties = node.get("properties")
    if (
        properties is not None
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        node["additionalProperties"] = False
    for child in (properties or {}).values():
        _close(child)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            _close(node[key])


def strict_validator(crd_path: Path, version: str) -> Draft7Validator:
    """A JSON Schema validator for ``version`` of the CRD in ``crd_path``, unknown fields errors.

    Raises:
        FileNotFoundError, KeyError: as :func:`crd_schema`.
    """
    return Draft7Validator(strict_schema(crd_schema(crd_path, version)))


def schema_errors(validator: Draft7Validator, obj: dict[str, Any]) -> list[str]:
    """Every violation of ``obj``, as ``<JSON path>: <message>`` lines, sorted; empty if valid."""
    return sorted(f"{e.json_path}: {e.message}" for e in validator.iter_errors(obj))
