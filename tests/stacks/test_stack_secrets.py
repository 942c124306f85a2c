"""The Hugging Face token: a Secret the workers read, never in plain text in anything rendered."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stackmodel.stacks import SECRET_PLACEHOLDER
from testbed.render import Rendered, render_stack
from testbed.render_files import write_rendered

SECRET_TYPE = "kubernetes:core/v1:Secret"
ENV_FROM = [{"secretRef": {"name": "hf-token-secret"}}]


def assert_token_nowhere(rendered: Rendered, token: str, out_dir: Path) -> None:
    """The plaintext is in no registration input, no output and no file `testbed render` writes."""
    for registration in rendered.registrations:
        assert token not in json.dumps(registration.inputs), registration.name
    assert token not in json.dumps(rendered.outputs)
    paths = write_rendered(rendered, out_dir)
    assert len(paths) >= 4  # namespace, Service, workload(s), Secret, outputs.json
    for path in paths:
        assert token.encode() not in path.read_bytes(), path.name


def pod_specs(rendered: Rendered) -> dict[str, dict[str, Any]]:
    """Pod specs by component (DGD) or Deployment name."""
    out = {}
    for obj in rendered.kubernetes_objects():
        if obj["kind"] == "DynamoGraphDeployment":
            out.update({c["name"]: c["podTemplate"]["spec"] for c in obj["spec"]["components"]})
        elif obj["kind"] == "Deployment":
            out[obj["metadata"]["name"]] = obj["spec"]["template"]["spec"]
    return out


def the_secret(rendered: Rendered) -> dict[str, Any]:
    (secret,) = [o for o in rendered.kubernetes_objects() if o["kind"] == "Secret"]
    return secret


@pytest.mark.parametrize("stack", ["kv-routing", "vllm-service"])
def test_secret_token_is_masked_everywhere(
    rendered_with_token: dict[str, Rendered], hf_token: str, stack: str, tmp_path: Path
) -> None:
    rendered = rendered_with_token[stack]
    assert_token_nowhere(rendered, hf_token, tmp_path)
    secret = the_secret(rendered)
    assert secret["metadata"] == {
        "name": "hf-token-secret",
        "namespace": f"testbed-{stack}",
        "labels": {"app.kubernetes.io/managed-by": "dynamo-testbed"},
    }
    assert secret["type"] == "Opaque"
    assert secret["stringData"] == {"HF_TOKEN": SECRET_PLACEHOLDER}


def test_workers_read_the_secret_and_the_frontend_does_not(
    rendered_with_token: dict[str, Rendered],
) -> None:
    specs = pod_specs(rendered_with_token["kv-routing"])
    assert sorted(specs) == ["frontend", "worker-24gb", "worker-8gb"]
    for name in ("worker-24gb", "worker-8gb"):
        assert specs[name]["containers"][0]["envFrom"] == ENV_FROM
    assert "envFrom" not in specs["frontend"]["containers"][0]
    deployments = pod_specs(rendered_with_token["vllm-service"])
    assert sorted(deployments) == ["vllm-service-worker-24gb", "vllm-service-worker-8gb"]
    for spec in deployments.values():
        assert spec["containers"][0]["envFrom"] == ENV_FROM


@pytest.mark.parametrize("stack", ["kv-routing", "vllm-service"])
def test_workloads_wait_for_the_secret(
    rendered_with_token: dict[str, Rendered], stack: str
) -> None:
    rendered = rendered_with_token[stack]
    (secret,) = [r for r in rendered.registrations if r.type == SECRET_TYPE]
    workloads = [
        r
        for r in rendered.registrations
        if r.type.endswith((":DynamoGraphDeployment", ":Deployment"))
    ]
    assert len(workloads) == (1 if stack == "kv-routing" else 2)
    for workload in workloads:
        assert secret.urn in workload.dependencies
        assert workload.parent == secret.parent  # both children of the TestbedGraph


def test_plaintext_in_stack_file_is_still_treated_as_secret(
    raw_config: Callable[[str], dict[str, Any]],
    project_with: Callable[[str, dict[str, Any]], Path],
    hf_token: str,
    tmp_path: Path,
) -> None:
    """Even set without --secret, the program reads hfToken as a secret."""
    raw = raw_config("disagg-cross-node")
    raw["hfToken"] = hf_token
    rendered = render_stack("disagg-cross-node", project_with("disagg-cross-node", raw))
    assert_token_nowhere(rendered, hf_token, tmp_path / "out")
    assert the_secret(rendered)["stringData"] == {"HF_TOKEN": SECRET_PLACEHOLDER}


def test_encrypted_stack_value_renders_as_placeholder(
    raw_config: Callable[[str], dict[str, Any]],
    project_with: Callable[[str, dict[str, Any]], Path],
) -> None:
    """A ``secure:`` value (as `pulumi config set --secret` writes it) cannot be decrypted here:
    render passes the placeholder, still as a secret, and the Secret and envFrom are rendered."""
    raw = raw_config("disagg-same-node")
    raw["hfToken"] = {"secure": "v1:QUJDREVGR0g=:c2VjcmV0LWNpcGhlcnRleHQ="}
    rendered = render_stack("disagg-same-node", project_with("disagg-same-node", raw))
    assert the_secret(rendered)["stringData"] == {"HF_TOKEN": SECRET_PLACEHOLDER}
    specs = pod_specs(rendered)
    assert specs["prefill"]["containers"][0]["envFrom"] == ENV_FROM
    assert specs["decode"]["containers"][0]["envFrom"] == ENV_FROM


def test_without_token_there_is_no_secret(rendered: dict[str, Rendered]) -> None:
    for stack in rendered.values():
        assert not [o for o in stack.kubernetes_objects() if o["kind"] == "Secret"]
