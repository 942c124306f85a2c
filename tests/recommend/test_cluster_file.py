"""`testbed recommend --cluster-file` on a new user's cluster: three GeForce cards on two nodes
over 10 GbE, host memory stated per node. The file's own workers are not checked as a
deployment, its errors name the file, and host-buffered candidates a node's memory cannot
hold are refused offline. Kept cheap: the disaggregated TP1 candidates of one class."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.cli import main

TINY = "prefixKinds: [2]\nconcurrency: [1]\nrequestsPerRun: 4\nmaxTokens: 8\n"

CLUSTER = {
    "dynamo-testbed:nodeClasses": {
        "box-a": {
            "nodeSelector": {"lab/box": "a"},
            "gpu": "RTX 3090",
            "gpuMemoryGiB": 24,
            "gpusPerNode": 2,
            "hostMemoryGiB": 32,
        },
        "box-b": {
            "nodeSelector": {"lab/box": "b"},
            "gpu": "rtx-3090",
            "gpuMemoryGiB": 24,
            "hostMemoryGiB": 16,
        },
    },
    "dynamo-testbed:links": {"crossNode": "10GbE"},
    "dynamo-testbed:model": {"name": "Qwen/Qwen3-0.6B", "maxModelLen": 8192},
    # Its own workers would not deploy: 9 workers on 2 GPUs, each below its memory floor.
    "dynamo-testbed:topology": {
        "kind": "dynamo",
        "workers": [
            {
                "name": "w",
                "role": "aggregated",
                "replicas": 9,
                "nodeClass": "box-a",
                "memoryLimit": "1Gi",
            }
        ],
    },
}

ONE_CLASS = [
    *("--fix", "kind=disaggregated", "--fix", "nodeClasses=box-a"),
    *("--fix", "prefillTp=1", "--fix", "decodeTp=1"),
]


def _recommend(tmp_path: Path, config: dict[str, object], *args: str) -> int:
    cluster = tmp_path / "Pulumi.home-lab.yaml"
    cluster.write_text(yaml.safe_dump({"config": config}))
    load = tmp_path / "load.yaml"
    load.write_text(TINY)
    out = ["--out", str(tmp_path / "out"), "--jobs", "1", "--emit-stacks", "1"]
    return main(["recommend", "--cluster-file", str(cluster), "--workload", str(load), *out, *args])


def test_the_cluster_files_own_workers_do_not_block_and_host_memory_refuses_host_buffers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _recommend(tmp_path, CLUSTER, "--slo", "ttft_p99_ms=5000", *ONE_CLASS)
    assert code == 0, capsys.readouterr().err
    candidates = json.loads((tmp_path / "out" / "candidates.json").read_text())["candidates"]
    by_transport = {c["label"].rsplit("; ", 1)[-1]: c for c in candidates}
    assert by_transport["GPU buffers over TCP"]["status"] == "ranked"
    host = by_transport["host buffers over TCP"]
    assert host["status"] == "refused"
    # Each host-buffering worker's floor holds a host mirror of its 0.9 x 24 GB KV cache.
    assert (
        "the cluster's nodeClasses.box-a.hostMemoryGiB = 32.0: node 0 of node class 'box-a' "
        "holds 1 x 'prefill-0' (23541Mi), 1 x 'decode-1' (23541Mi): 47082Mi of memory limits, "
        "more than its 32 GiB" in host["reason"]
    )
    (emitted,) = (tmp_path / "out" / "stacks").glob("Pulumi.home-lab-*-rank1.yaml")
    config = yaml.safe_load(emitted.read_text())["config"]
    assert config["dynamo-testbed:nodeClasses"]["box-a"]["hostMemoryGiB"] == 32


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("dynamo-testbed:links", {"crossNode": 10}, "for 10 GbE write 10gbe (1.15 GB/s)"),
        ("dynamo-testbed:nodeClasses", {"box-a": {"nodeSelector": {"a": "b"}}}, "gpuMemoryGiB"),
    ],
)
def test_an_error_in_the_cluster_file_names_the_file(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    key: str,
    value: object,
    said: str,
) -> None:
    code = _recommend(tmp_path, {**CLUSTER, key: value}, "--slo", "ttft_p99_ms=5000")
    err = capsys.readouterr().err
    assert code == 2
    assert f"--cluster-file {tmp_path / 'Pulumi.home-lab.yaml'}: " in err
    assert said in err
    assert "stacks/Pulumi" not in err


def test_a_cluster_file_that_is_not_yaml_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "Pulumi.home-lab.yaml"
    cluster.write_text("config: [unclosed\n")
    code = main(["recommend", "--cluster-file", str(cluster), "--slo", "ttft_p99_ms=5000"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"--cluster-file {cluster}: not YAML" in err


def test_a_model_name_outside_the_catalog_with_its_geometry_is_warned_naming_the_closest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    geometry = {"numLayers": 28, "numKvHeads": 8, "headDim": 128, "numParameters": 6 * 10**8}
    model = {"name": "Qwen/Qwen3-0.6", "maxModelLen": 8192, "geometry": geometry}
    code = _recommend(
        tmp_path,
        {**CLUSTER, "dynamo-testbed:model": model},
        "--slo",
        "ttft_p99_ms=5000",
        *ONE_CLASS,
        "--fix",
        "transport=GPU buffers over TCP",
    )
    err = capsys.readouterr().err
    assert code == 0, err
    (line,) = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert line.startswith(f"warning: --cluster-file {tmp_path / 'Pulumi.home-lab.yaml'}: ")
    assert "'Qwen/Qwen3-0.6' is not a catalog model" in line
    assert "did you mean Qwen/Qwen3-0.6B?" in line


@pytest.mark.parametrize(
    ("file", "base"),
    [
        ("my_lab.yaml", "my-lab"),
        ("Pulumi.HomeLab.yml", "homelab"),
        ("Pulumi.homelab-homelab-homelab-homelab.yaml", "homelab-homelab-homelab-ho"),
        ("2024_lab.yaml", "cluster-2024-lab"),
    ],
)
def test_a_cluster_file_name_that_is_no_dns_label_names_its_stacks_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], file: str, base: str
) -> None:
    """The emitted stacks' topology.name is the file's name with the search's id and rank: a
    name that is not a short DNS label is taken as one (lower-cased, other characters as
    `-`, cut), with a note, and the stacks it names render."""
    from stackmodel.config import TopologyConfig
    from testbed.recommend_command import EMITTED_TAIL, _cluster

    cluster = tmp_path / file
    cluster.write_text(yaml.safe_dump({"config": CLUSTER}))
    name, _, _ = _cluster(None, cluster, None)
    err = capsys.readouterr().err
    assert name == base
    assert err.startswith(f"note: --cluster-file {cluster}: the stacks it emits are named {base}-")
    workers = [{"name": "w", "role": "aggregated", "replicas": 1, "nodeClass": "box-a"}]
    topology = TopologyConfig.model_validate({"name": name + EMITTED_TAIL, "workers": workers})
    assert topology.name == f"{name}-000000-rank99"


def test_the_cluster_files_own_workers_overfilling_a_nodes_host_memory_do_not_block(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """9 workers of 8Gi on box-a (72Gi) overfill its 32 GiB: a problem of the file's own
    workers, which the candidates replace, so the search runs; a hostMemoryGiB the schema
    refuses is still the cluster's."""
    config: Any = copy.deepcopy(CLUSTER)
    config["dynamo-testbed:topology"]["workers"][0]["memoryLimit"] = "8Gi"
    only = ("--fix", "transport=GPU buffers over TCP", "--validate-top", "0")
    code = _recommend(tmp_path, config, "--slo", "ttft_p99_ms=5000", *ONE_CLASS, *only)
    assert code == 0, capsys.readouterr().err
    (ranked,) = json.loads((tmp_path / "out" / "candidates.json").read_text())["candidates"]
    assert ranked["status"] == "ranked"
    config["dynamo-testbed:nodeClasses"]["box-a"]["hostMemoryGiB"] = -1
    code = _recommend(tmp_path, config, "--slo", "ttft_p99_ms=5000")
    assert code == 2
    assert (
        "nodeClasses.box-a.hostMemoryGiB = -1: Input should be greater than 0"
        in capsys.readouterr().err
    )


def test_the_inputs_block_says_what_the_cluster_file_gave_and_what_a_default_filled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """box-b writes no gpusPerNode: one GPU, said as a default before the search."""
    one = ["--fix", "kind=aggregated", "--fix", "nodeClasses=box-b", "--validate-top", "0"]
    code = _recommend(tmp_path, CLUSTER, "--slo", "ttft_p99_ms=5000", *one)
    err = capsys.readouterr().err
    assert code in (0, 1), err  # searched: met (0) or not (1)
    assert (
        "cluster home-lab:\n"
        "  node class box-a: rtx-3090, 24 GiB a GPU; gpusPerNode 2 x nodes 1 (default); "
        "time-slicing off; host memory 32 GiB\n"
        "  node class box-b: rtx-3090, 24 GiB a GPU; gpusPerNode 1 (default) x nodes 1 "
        "(default); time-slicing off; host memory 16 GiB\n"
        "  links: sameNode same-node-tcp (default), crossNode 10gbe\n"
        "  not searched: its own topology (each candidate's workers and the workload stand in)\n"
        "model: Qwen/Qwen3-0.6B\n"
        "load: concurrency [1]; each prompt's shared prefix 90% (default)\n"
    ) in err


@pytest.mark.parametrize(("written", "number"), [("64Gi", "64"), ("64 GiB", "64"), ("64G", "59.6")])
def test_host_memory_written_as_a_quantity_names_the_plain_number(
    written: str, number: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    classes = CLUSTER["dynamo-testbed:nodeClasses"]
    assert isinstance(classes, dict)
    box_b = {**classes["box-b"], "hostMemoryGiB": written}
    config = {**CLUSTER, "dynamo-testbed:nodeClasses": {**classes, "box-b": box_b}}
    assert _recommend(tmp_path, config, "--slo", "ttft_p99_ms=500") == 2
    assert f"; write {number} (GiB, a plain number)" in capsys.readouterr().err
