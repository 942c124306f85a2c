"""The upstream Dynamo files some tests read (the DGD CRD, the platform chart's values), from one
cache folder.

The folder is ``$DYNAMO_TESTBED_UPSTREAM``, else ``.upstream/`` in the repository, laid out as
``dynamo-crds/<crd>.yaml`` and ``dynamo-chart/<values>.yaml``. ``python
scripts/fetch_upstream.py`` fills it from ai-dynamo/dynamo at the commit pinned in
``scripts/upstream_manifest.json``, each file checked against its sha256 there; CI points the
variable at its own copy (``.ci/run``). A test that needs a file the folder lacks skips, naming
the script and the variable.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stackmodel.stacks import REPO

ENV_VAR = "DYNAMO_TESTBED_UPSTREAM"
DEFAULT_DIR = REPO / ".upstream"
FETCH_COMMAND = "python scripts/fetch_upstream.py"

DGD_CRD = "dynamo-crds/nvidia.com_dynamographdeployments.yaml"
"""The DynamoGraphDeployment CRD (``deploy/operator/config/crd/bases/`` upstream)."""
CHART_VALUES = "dynamo-chart/values.yaml"
"""The dynamo-platform umbrella chart's values (``deploy/helm/charts/platform/values.yaml``)."""
OPERATOR_VALUES = "dynamo-chart/components__operator__values.yaml"
"""The operator subchart's values (``deploy/helm/charts/platform/components/operator/``)."""
NAMES = (DGD_CRD, CHART_VALUES, OPERATOR_VALUES)
"""Every file a test reads: what the manifest lists, no more, no less."""


def upstream_dir() -> Path:
    """The cache folder: ``$DYNAMO_TESTBED_UPSTREAM`` (relative to the working directory), else
    ``.upstream/`` in the repository."""
    chosen = os.environ.get(ENV_VAR)
    return Path(chosen).expanduser().resolve() if chosen else DEFAULT_DIR


def upstream_file(name: str) -> Path:
    """The path of upstream file ``name`` (one of :data:`NAMES`) in the cache folder; skips the
    calling test when the folder lacks it."""
    if name not in NAMES:
        raise ValueError(f"{name!r} is not an upstream file the tests read: {NAMES}")
    path = upstream_dir() / name
    if not path.is_file():
        pytest.skip(
            f"upstream Dynamo file {name} not found in {upstream_dir()}: run "
            f"`{FETCH_COMMAND}` or set {ENV_VAR} to a folder that has it"
        )
    return path
