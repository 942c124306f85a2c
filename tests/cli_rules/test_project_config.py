"""Project config as the Pulumi CLI checks it, for every shipped stack, then the program.

Sources (pulumi/pulumi at ``pulumi_cli.PULUMI_COMMIT``): ``pkg/workspace/config.go``
(``mergeConfig`` L255-366, ``validateStackConfigValue`` L119-157) and
``sdk/go/common/workspace/project.go`` (``ValidateConfigValue`` L771-831, ``Project.Validate``
L837-889); docs: https://www.pulumi.com/docs/iac/concepts/projects/project-file/#config-options
("default ... If no default is given, the value is required").
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pulumi_cli import (
    MIN_CLI_VERSION,
    CliConfigError,
    StackValue,
    merge_config,
    program_config,
    read_stack,
    stack_values,
)

from components.config import SECRET_KEYS, StackConfig, project_values
from components.errors import PROJECT
from components.program import main
from components.validation import parse_stack_config
from testbed.render import REPO, run_under_mocks, stack_config, stack_names

STACKS = stack_names()
"""Every ``stacks/Pulumi.*.yaml``: stacks added later are checked without editing this file."""

REQUIRED = {"nodeClasses", "model", "topology"}
"""The keys without a default: what every stack must describe (the program has no default)."""

ENCRYPTED = {"secure": "v1:QUJDREVGR0g=:c2VjcmV0LWNpcGhlcnRleHQ="}
"""A ``secure:`` value as ``pulumi config set --secret`` writes it to the stack file."""


def merged(project: dict[str, Any], stack: str) -> dict[str, StackValue]:
    return merge_config(
        project, stack, stack_values(read_stack(REPO / f"stacks/Pulumi.{stack}.yaml"))
    )


def test_there_are_stacks() -> None:
    assert len(STACKS) >= 4
    assert {"kv-routing", "disagg-same-node", "disagg-cross-node", "vllm-service"} <= set(STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_passes_the_cli_then_the_program(project: dict[str, Any], stack: str) -> None:
    """``mergeConfig`` (missing keys, secrets, declared types) passes, and the config it hands
    the program validates; ``testbed render`` passes the program exactly that map."""
    config, secrets = program_config(merged(project, stack))
    assert secrets == []
    cfg = parse_stack_config(stack, project_values(config))
    assert cfg.topology.workers
    assert config == stack_config(stack)[0]


def test_declared_keys_are_the_programs_keys(project: dict[str, Any]) -> None:
    """Every key the program reads is declared (so ``pulumi config`` documents it), except the
    secret ``hfToken`` (see ``test_a_declared_secret_cannot_have_a_default``); the keys
    without a default are exactly the fields the program requires."""
    declared = set(project["config"])
    assert declared == {f.alias or n for n, f in StackConfig.model_fields.items()}
    assert {"hfToken"} == SECRET_KEYS
    assert not SECRET_KEYS & declared
    without_default = {k for k, d in project["config"].items() if d.get("default") is None}
    assert without_default == REQUIRED
    required_fields = {f.alias or n for n, f in StackConfig.model_fields.items() if f.is_required()}
    assert required_fields == REQUIRED


def test_each_default_means_not_set(project: dict[str, Any]) -> None:
    """A stack that sets only the required keys gets every declared default from the CLI
    (``{}``, ``""``, ``dynamo-testbed``) and the program reads each as its own default."""
    stack = "kv-routing"
    only_required = {
        key: value
        for key, value in read_stack(REPO / f"stacks/Pulumi.{stack}.yaml").items()
        if key.partition(":")[2] in REQUIRED
    }
    config, _ = program_config(merge_config(project, stack, stack_values(only_required)))
    assert json.loads(config[f"{PROJECT}:links"]) == {}
    assert config[f"{PROJECT}:baselineStack"] == ""
    # Shape only: without load.nodeAddress the load step's semantic check refuses the stack.
    from_cli = StackConfig.model_validate(project_values(config))
    raw_required = project_values({k: json.dumps(v) for k, v in only_required.items()})
    assert from_cli == StackConfig.model_validate(raw_required)
    assert from_cli.baseline_stack is None


def test_cli_refuses_a_stack_without_a_required_key(project: dict[str, Any]) -> None:
    """``mergeConfig`` L316-324 and L351-355: one error naming every missing key."""
    raw = read_stack(REPO / "stacks/Pulumi.kv-routing.yaml")
    del raw[f"{PROJECT}:topology"], raw[f"{PROJECT}:model"]
    with pytest.raises(CliConfigError) as err:
        merge_config(project, "kv-routing", stack_values(raw))
    assert str(err.value) == (
        "Stack 'kv-routing' is missing configuration values 'model', 'topology'"
    )


def test_cli_refuses_a_value_not_of_the_declared_type(project: dict[str, Any]) -> None:
    """``validateStackConfigValue`` L136-153: an ``object`` key set to a plain string."""
    raw = read_stack(REPO / "stacks/Pulumi.kv-routing.yaml")
    raw[f"{PROJECT}:load"] = "fast"
    with pytest.raises(CliConfigError, match="'load' must be of type 'object'"):
        merge_config(project, "kv-routing", stack_values(raw))


def test_a_declared_secret_cannot_have_a_default(project: dict[str, Any]) -> None:
    """Why ``hfToken`` is not declared in ``Pulumi.yaml``.

    ``Project.Validate`` accepts ``secret: true`` with a ``default`` (L837-889 has no rule
    against it), but ``mergeConfig`` stores the default as a plaintext value (L327-347,
    ``createConfigValue`` L179-193 never makes a secure value) and ``validateStackConfigValue``
    then refuses it (L128-134) in every stack that does not set the key; without a default the
    key is required (L316-324). Undeclared, the key is optional and still passed as a secret
    when set with ``--secret``.
    """
    declared = {
        **project,
        "config": {
            **project["config"],
            "hfToken": {"type": "string", "secret": True, "default": ""},
        },
    }
    with pytest.raises(CliConfigError, match="'hfToken' must be encrypted as it's secret"):
        merged(declared, "kv-routing")
    no_default = {
        **project,
        "config": {**project["config"], "hfToken": {"type": "string", "secret": True}},
    }
    with pytest.raises(CliConfigError, match="missing configuration value 'hfToken'"):
        merged(no_default, "kv-routing")
    raw = read_stack(REPO / "stacks/Pulumi.kv-routing.yaml")
    raw[f"{PROJECT}:hfToken"] = ENCRYPTED
    assert merge_config(declared, "kv-routing", stack_values(raw))[f"{PROJECT}:hfToken"].secure


def secret_refs(rendered_objects: list[dict[str, Any]]) -> list[str]:
    """Names of every object that is a Secret or a workload reading one (envFrom secretRef)."""
    text = json.dumps(rendered_objects)
    return re.findall(r'"secretRef": \{"name": "([^"]+)"', text) + [
        o["metadata"]["name"] for o in rendered_objects if o["kind"] == "Secret"
    ]


@pytest.mark.parametrize("stack", STACKS)
def test_no_token_reaches_the_workers_unless_set(project: dict[str, Any], stack: str) -> None:
    """Without ``hfToken`` the CLI passes no such key: no Secret, no ``HF_TOKEN`` anywhere (a
    placeholder token would make Hugging Face answer 401 even for public models). With
    ``--secret``, the CLI passes the decrypted text and lists the key in
    ``PULUMI_CONFIG_SECRET_KEYS``; the workers then read it from the Secret."""
    config, secrets = program_config(merged(project, stack))
    without = run_under_mocks(main, stack=stack, config=config, secret_keys=secrets)
    assert secret_refs(without.kubernetes_objects()) == []
    assert "HF_TOKEN" not in json.dumps(without.kubernetes_objects())

    raw = read_stack(REPO / f"stacks/Pulumi.{stack}.yaml")
    raw[f"{PROJECT}:hfToken"] = ENCRYPTED
    config, secrets = program_config(merge_config(project, stack, stack_values(raw)))
    assert secrets == [f"{PROJECT}:hfToken"]
    config[f"{PROJECT}:hfToken"] = "hf_decrypted_by_the_cli"
    with_token = run_under_mocks(main, stack=stack, config=config, secret_keys=secrets)
    refs = secret_refs(with_token.kubernetes_objects())
    assert set(refs) == {"hf-token-secret"} and len(refs) >= 2
    assert "hf_decrypted_by_the_cli" not in json.dumps(with_token.kubernetes_objects())


def test_readme_states_the_minimum_cli_version(project: dict[str, Any]) -> None:
    """The project declares ``type: object`` keys, which the CLI accepts from 3.187.0
    (pulumi/pulumi#20132, CHANGELOG "## 3.187.0"): the README says so."""
    assert any(d.get("type") == "object" for d in project["config"].values())
    readme = (REPO / "README.md").read_text()
    assert f"Pulumi CLI {MIN_CLI_VERSION} or newer" in readme
