"""model.configJson: the geometry read from a Hugging Face config.json named in stack config."""

import json
import os
from pathlib import Path

import pytest
from model_configs import SMALL_QWEN3

from stackmodel.config import project_values
from stackmodel.errors import StackConfigError
from stackmodel.plan import PROJECT_DIR
from stackmodel.stacks import stack_config
from stackmodel.validation import validate_stack


def _raw(model: dict[str, object]) -> dict[str, object]:
    raw = project_values(stack_config("disagg-same-node")[0])
    raw["model"] = model
    return raw


def test_geometry_comes_from_the_named_config_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL_QWEN3))
    # Relative to the project folder, as a stack would name it; an absolute path works as well.
    for given in (str(path), os.path.relpath(path, PROJECT_DIR)):
        cfg = validate_stack("s", _raw({"name": "Qwen/Qwen3-0.6B", "configJson": given}))
        sizing = cfg.sizing
        assert sizing.kv_bytes_per_token == 57_344
        assert sizing.report.kv_bytes_per_request == 57_344 * 2371


def test_a_missing_config_json_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(StackConfigError) as err:
        validate_stack("s", _raw({"name": "my/model", "configJson": str(tmp_path / "x")}))
    assert "dynamo-testbed:model.configJson = " in str(err.value)
    assert "cannot read the model geometry" in str(err.value)
