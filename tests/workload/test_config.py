"""LoadConfig as the stack's `load:` section: aliases, seed defaults, clear errors."""

import pytest
import yaml
from pydantic import ValidationError

from configkeys.key_paths import show_path
from workload.config import Api, Arrival, LoadConfig


def test_defaults_are_the_seed_grid() -> None:
    c = LoadConfig()
    assert (c.prefix_kinds, c.concurrency, c.repetitions) == ([2, 7, 12, 24], [4, 8], 3)
    assert c.prompt_tokens == 2371
    assert (c.prefix_tokens, c.suffix_tokens) == (2134, 237)
    assert c.pool_size(8) == 8


def test_camel_case_stack_yaml() -> None:
    text = """
    prefixKinds: [2, 7, 12, 24]
    concurrency: [4, 8]
    repetitions: 3
    requestsPerRun: 50
    promptTokens: 2371
    maxTokens: 32
    api: completions
    arrival: poisson
    requestRate: 12.5
    """
    c = LoadConfig.model_validate(yaml.safe_load(text))
    assert (c.requests_per_run, c.max_tokens, c.api, c.arrival) == (
        50,
        32,
        Api.COMPLETIONS,
        Arrival.POISSON,
    )
    assert c.request_rate == 12.5
    assert LoadConfig(prefix_kinds=[3]).prefix_kinds == [3]  # field names work too


def test_errors_name_the_field_and_allowed_values() -> None:
    with pytest.raises(ValidationError) as info:
        LoadConfig.model_validate({"prefixKinds": [2, 0], "api": "grpc", "prefixShare": 1.5})
    errors = {show_path(e["loc"]): e["msg"] for e in info.value.errors()}
    assert errors["prefixKinds[1]"] == "Input should be greater than 0"
    assert errors["api"] == "Input should be 'chat' or 'completions'"
    assert errors["prefixShare"] == "Input should be less than or equal to 1"


def test_unknown_keys_are_rejected() -> None:
    with pytest.raises(ValidationError, match="requestPerRun"):
        LoadConfig.model_validate({"requestPerRun": 10})


def test_combinations() -> None:
    with pytest.raises(ValidationError, match="needs requestRate"):
        LoadConfig(arrival=Arrival.POISSON)
    with pytest.raises(ValidationError, match=r"below concurrency \[8\]"):
        LoadConfig(concurrency=[4, 8], max_connections=6)


def test_workers_split_only_the_closed_loop() -> None:
    assert LoadConfig.model_validate({"workers": 3}).workers == 3
    assert LoadConfig(arrival=Arrival.POISSON, request_rate=5, workers=1).workers == 1
    with pytest.raises(ValidationError, match="workers > 1 splits the closed loop only"):
        LoadConfig(arrival=Arrival.POISSON, request_rate=5, workers=2)
