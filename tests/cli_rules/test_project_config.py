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
    program_validates,
    read_stack,
    stack_values,
)

from stackmodel.config import (
    SECRET_KEYS,
    PlatformStackConfig,
    StackConfig,
    project_values,
    stack_role,
)
from stackmodel.errors import PROJECT, StackConfigError
from stackmodel.stacks import REPO, stack_config, stack_names
from testbed.render import Rendered, render_stack

STACKS = stack_names()
"""Every ``stacks/Pulumi.*.yaml``: stacks added later are checked without editing this file."""

GRAPH_REQUIRED = {"nodeClasses", "model", "topology"}
"""What a graph stack must describe: declared with the default ``{}`` (the platform stack sets
none of them), so the program, not the CLI, says when one is missing."""

ENCRYPTED = {"secure": "v1:QUJDREVGR0g=:c2VjcmV0LWNpcGhlcnRleHQ="}
"""A ``secure:`` value as ``pulumi config set --secret`` writes it to the stack file."""


def merged(project: dict[str, Any], stack: str) -> dict[str, StackValue]:
    return merge_config(
        project, stack, stack_values(read_stack(REPO / f"stacks/Pulumi.{stack}.yaml"))
    )


def test_there_are_stacks() -> None:
    assert len(STACKS) >= 5
    assert {
        "kv-routing",
        "disagg-same-node",
        "disagg-cross-node",
        "vllm-service",
        "platform",
    } <= set(STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_passes_the_cli_then_the_program(project: dict[str, Any], stack: str) -> None:
    """``mergeConfig`` (missing keys, secrets, declared types) passes, and the config it hands
    the program validates; ``testbed render`` passes the program exactly that map."""
    config, secrets = program_config(merged(project, stack))
    assert secrets == []
    cfg = program_validates(stack, config)
    assert isinstance(cfg, PlatformStackConfig) == (stack == "platform")
    assert config == stack_config(stack)[0]


def test_declared_keys_are_the_programs_keys(project: dict[str, Any]) -> None:
    """Every key the program reads is declared (so ``pulumi config`` documents it), except the
    secret ``hfToken`` (see ``test_a_declared_secret_cannot_have_a_default``), and every
    declared key has a default: the CLI then requires none of them."""
    declared = set(project["config"])
    fields = {**StackConfig.model_fields, **PlatformStackConfig.model_fields}
    assert declared == {f.alias or n for n, f in fields.items()}
    assert {"hfToken"} == SECRET_KEYS
    assert not SECRET_KEYS & declared
    assert [k for k, d in project["config"].items() if d.get("default") is None] == []
    assert [project["config"][k]["default"] for k in sorted(GRAPH_REQUIRED)] == [{}, {}, {}]


def test_each_default_means_not_set(project: dict[str, Any]) -> None:
    """A graph stack that sets only what it must gets every declared default from the CLI
    (``{}``, ``""``, ``graph``, ``platform``) and the program reads each as its own default."""
    stack = "kv-routing"
    only_required = {
        key: value
        for key, value in read_stack(REPO / f"stacks/Pulumi.{stack}.yaml").items()
        if key.partition(":")[2] in GRAPH_REQUIRED
    }
    config, _ = program_config(merge_config(project, stack, stack_values(only_required)))
    assert json.loads(config[f"{PROJECT}:links"]) == {}
    assert config[f"{PROJECT}:baselineStack"] == ""
    # Shape only: without load.nodeAddress the load step's semantic check refuses the stack.
    from_cli = StackConfig.model_validate(project_values(config), context={"stack": stack})
    raw_required = project_values({k: json.dumps(v) for k, v in only_required.items()})
    assert from_cli == StackConfig.model_validate(raw_required, context={"stack": stack})
    assert from_cli.baseline_stack is None
    assert from_cli.namespace == "testbed-kv-routing"


def test_the_program_says_what_a_graph_stack_lacks(project: dict[str, Any]) -> None:
    """The CLI passes ``{}`` for an unset section; for a graph stack the program reports the
    required ones as missing, by key, before anything is registered."""
    raw = read_stack(REPO / "stacks/Pulumi.kv-routing.yaml")
    del raw[f"{PROJECT}:topology"], raw[f"{PROJECT}:model"]
    config, _ = program_config(merge_config(project, "kv-routing", stack_values(raw)))
    with pytest.raises(StackConfigError) as err:
        program_validates("kv-routing", config)
    text = str(err.value)
    assert "dynamo-testbed:model = (missing): required key is missing" in text
    assert "dynamo-testbed:topology = (missing): required key is missing" in text


def test_cli_refuses_a_stack_without_a_required_key(project: dict[str, Any]) -> None:
    """The rule the defaults above avoid (``mergeConfig`` L316-324 and L351-355): a declared
    key without a default that the stack does not set stops the CLI, naming every such key."""
    strict = {
        **project,
        "config": {
            **project["config"],
            "model": {"type": "object"},
            "topology": {"type": "object"},
        },
    }
    with pytest.raises(CliConfigError) as err:
        merged(strict, "platform")
    assert str(err.value) == "Stack 'platform' is missing configuration values 'model', 'topology'"


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


def secret_refs(rendered: Rendered) -> list[str]:
    """Names of every Secret and of every Secret a container reads (envFrom secretRef)."""
    objects = rendered.kubernetes_objects()
    return re.findall(r'"secretRef": \{"name": "([^"]+)"', json.dumps(objects)) + [
        o["metadata"]["name"] for o in objects if o["kind"] == "Secret"
    ]


GRAPH_STACKS = [s for s in STACKS if stack_role(project_values(stack_config(s)[0])) != "platform"]


@pytest.mark.parametrize("stack", GRAPH_STACKS)
def test_no_token_reaches_the_workers_unless_set(project: dict[str, Any], stack: str) -> None:
    """Without ``hfToken`` the CLI passes no such key: no Secret, no ``HF_TOKEN`` anywhere (a
    placeholder token would make Hugging Face answer 401 even for public models). With
    ``--secret``, the CLI passes the decrypted text and lists the key in
    ``PULUMI_CONFIG_SECRET_KEYS`` (as ``render_stack(secrets=...)`` does); the workers then
    read it from the Secret and the text appears in no object."""
    assert f"{PROJECT}:hfToken" not in program_config(merged(project, stack))[0]
    without = render_stack(stack)
    assert secret_refs(without) == []
    assert "HF_TOKEN" not in json.dumps(without.kubernetes_objects())

    raw = read_stack(REPO / f"stacks/Pulumi.{stack}.yaml")
    raw[f"{PROJECT}:hfToken"] = ENCRYPTED
    _, secrets = program_config(merge_config(project, stack, stack_values(raw)))
    assert secrets == [f"{PROJECT}:hfToken"]
    with_token = render_stack(stack, secrets={"hfToken": "hf_decrypted_by_the_cli"})
    refs = secret_refs(with_token)
    assert set(refs) == {"hf-token-secret"} and len(refs) >= 2
    assert "hf_decrypted_by_the_cli" not in json.dumps(with_token.kubernetes_objects())


def test_readme_states_the_minimum_cli_version(project: dict[str, Any]) -> None:
    """The project declares ``type: object`` keys, which the CLI accepts from 3.187.0
    (pulumi/pulumi#20132, CHANGELOG "## 3.187.0"): the README says so."""
    assert any(d.get("type") == "object" for d in project["config"].values())
    readme = (REPO / "README.md").read_text()
    assert f"Pulumi CLI {MIN_CLI_VERSION} or newer" in readme
