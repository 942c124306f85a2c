"""`testbed recommend`'s cluster file as a user writes one: the plain mapping of the cluster's
keys or a stack file, neither with a topology; a file given to `--cluster`; and each mistake
around it refused in one line whose fix the program then takes. Kept cheap: one aggregated TP1
candidate shape on a tiny workload, no validation run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from stackmodel.config import NODE_CLASSES_EXAMPLE
from stackmodel.stacks import stack_config, stack_names
from stackmodel.validation import validate_stack
from testbed.cli import main

TINY = "prefixKinds: [2]\nconcurrency: [1]\nrequestsPerRun: 4\nmaxTokens: 8\n"

PLAIN = (
    "nodeClasses:\n"
    "  big:\n"
    "    gpu: rtx-4090\n"
    "    gpusPerNode: 2\n"
    "    gpuMemoryGiB: 24\n"
    "    nodeSelector: {a: b}\n"
    "model:\n"
    "  name: Qwen/Qwen3-0.6B\n"
)
"""A new user's cluster: one node of two 24 GB cards and the model, no topology, no load."""

CHEAP = [
    *("--fix", "kind=aggregated", "--fix", "tp=1", "--fix", "router=kv"),
    *("--validate-top", "0", "--jobs", "1", "--slo", "ttft_p99_ms=5000"),
]


def _recommend(tmp_path: Path, *cluster: str) -> int:
    load = tmp_path / "load.yaml"
    load.write_text(TINY)
    out = ["--out", str(tmp_path / "out"), "--emit-stacks", "1", "--workload", str(load)]
    return main(["recommend", *cluster, *out, *CHEAP])


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line the command printed, less ``error: ``."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err.removeprefix("error: ").rstrip("\n")


def test_a_plain_cluster_file_without_a_topology_is_searched_and_emits_a_stack_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once "no `config:` mapping (a stack file)": the cluster's keys alone are a cluster. The
    stack emitted from it is a stack file (its keys namespaced under ``config:``) that
    validates as one."""
    cluster = tmp_path / "lab.yaml"
    cluster.write_text(PLAIN)
    code = _recommend(tmp_path, "--cluster-file", str(cluster))
    err = capsys.readouterr().err
    assert code in (0, 1), err  # searched: met (0) or not (1)
    assert "not searched" not in err  # no deployment of its own to say is set aside
    (emitted,) = (tmp_path / "out" / "stacks").glob("Pulumi.lab-*-rank1.yaml")
    config = yaml.safe_load(emitted.read_text())["config"]
    assert config["dynamo-testbed:nodeClasses"]["big"]["gpuMemoryGiB"] == 24
    raw = {key.removeprefix("dynamo-testbed:"): value for key, value in config.items()}
    plan = validate_stack("lab", raw)
    assert [(w.role, w.node_class) for w in plan.cfg.topology.workers] == [("aggregated", "big")]


def test_a_stack_file_without_a_topology_is_searched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once "topology: Field required", though the search never reads the file's topology."""
    plain = yaml.safe_load(PLAIN)
    cluster = tmp_path / "Pulumi.lab.yaml"
    cluster.write_text(
        yaml.safe_dump({"config": {f"dynamo-testbed:{k}": v for k, v in plain.items()}})
    )
    code = _recommend(tmp_path, "--cluster-file", str(cluster))
    assert code in (0, 1), capsys.readouterr().err


def test_a_file_given_to_cluster_names_cluster_file_which_takes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once "no stacks/Pulumi.cl.yaml.yaml in the project; a new stack: testbed init-stack
    cl.yaml ...", a name init-stack refuses."""
    monkeypatch.chdir(tmp_path)
    Path("cl.yaml").write_text(PLAIN)
    assert _recommend(tmp_path, "--cluster", "cl.yaml") == 2
    assert (
        _error(capsys)
        == "--cluster cl.yaml: a file, not a stack name; give it as --cluster-file cl.yaml"
    )
    code = _recommend(tmp_path, "--cluster-file", "cl.yaml")
    assert code in (0, 1), capsys.readouterr().err


@pytest.mark.parametrize(
    ("given", "named", "new"),
    [
        ("lab.yaml", "", "lab"),
        ("stacks/Pulumi.kv-routin.yaml", "did you mean kv-routing? ", "kv-routin"),
        ("My_Lab", "", "my-cluster"),
    ],
)
def test_a_stack_that_is_not_there_names_a_new_stack_init_stack_takes(
    tmp_path: Path, given: str, named: str, new: str
) -> None:
    from testbed.init_stack import write_new_stack

    with pytest.raises(FileNotFoundError) as missing:
        stack_config(given)
    assert (
        f"; {named}a new stack: testbed init-stack {new} --from kv-routing; known stacks: "
        in str(missing.value)
    )
    project = tmp_path / "project"
    (project / "stacks").mkdir(parents=True)
    root = Path(__file__).parents[2]
    (project / "Pulumi.yaml").write_text((root / "Pulumi.yaml").read_text())
    source = root / "stacks" / "Pulumi.kv-routing.yaml"
    (project / "stacks" / source.name).write_text(source.read_text())
    write_new_stack(new, "kv-routing", project)
    assert new in stack_names(project)


NO_MODEL = (
    "no model: give --model MODEL (a catalog name, e.g. Qwen/Qwen3-0.6B) or write model: "
    "{name: MODEL} in the file"
)
EXAMPLE = f"e.g. nodeClasses: {NODE_CLASSES_EXAMPLE}"


def _stack_file(links: str) -> str:
    """PLAIN as a stack file, its links under the key ``links`` (namespace and all)."""
    plain = yaml.safe_load(PLAIN)
    config = {links: {"crossNode": "10gbe"}, **{f"dynamo-testbed:{k}": v for k, v in plain.items()}}
    return yaml.safe_dump({"config": config})


@pytest.mark.parametrize(
    ("text", "said", "fixed", "options"),
    [
        (
            PLAIN.replace("rtx-4090", "rtx-409"),
            "nodeClasses.big.gpu = 'rtx-409': unknown GPU 'rtx-409'; did you mean rtx-4090? ",
            PLAIN,
            [],
        ),
        (
            PLAIN.replace("gpuMemoryGiB: 24", "gpuMemoryGiB: 24Gi"),
            "nodeClasses.big.gpuMemoryGiB = '24Gi': Input should be a valid number, unable to "
            "parse string as a number; write 24 (GiB, a plain number) (gpuMemoryGiB: Memory of "
            "one GPU, GiB)",
            PLAIN,
            [],
        ),
        (
            PLAIN.replace("    nodeSelector: {a: b}\n", ""),
            "nodeClasses.big.nodeSelector = (missing): required key is missing (nodeSelector: "
            "Labels a node must carry (becomes the pod's nodeSelector))",
            PLAIN,
            [],
        ),
        (
            PLAIN.replace("nodeClasses:", "nodeClass:"),
            "nodeClass = {'big': {'gpu': 'rtx-4090', 'gpusPerNode': 2, 'gpuMemoryGiB': 24, "
            "'nodeSelect...: unknown key; did you mean nodeClasses? allowed here: baselineStack, ",
            PLAIN,
            [],
        ),
        (
            "model:\n  name: Qwen/Qwen3-0.6B\n",
            "nodeClasses = (missing): required key is missing (nodeClasses: The cluster's "
            "groups of identical GPU nodes, each by a name you choose, "
            f"e.g. {NODE_CLASSES_EXAMPLE})",
            f"nodeClasses: {NODE_CLASSES_EXAMPLE}\nmodel:\n  name: Qwen/Qwen3-0.6B\n",
            [],
        ),
        (
            PLAIN.split("model:")[0],
            NO_MODEL,
            PLAIN.split("model:")[0],
            ["--model", "Qwen/Qwen3-0.6B"],
        ),
        (
            "",
            f"empty; a cluster file holds its nodeClasses ({EXAMPLE})",
            f"nodeClasses: {NODE_CLASSES_EXAMPLE}\n",
            ["--model", "Qwen/Qwen3-0.6B"],
        ),
        (
            "- big\n- small\n",
            f"not a mapping of the cluster's keys ({EXAMPLE})",
            PLAIN,
            [],
        ),
        (
            PLAIN.replace("    gpusPerNode: 2\n", "   gpusPerNode: 2\n"),
            "not YAML: while parsing a block mapping",
            PLAIN,
            [],
        ),
        (
            _stack_file("dynamo-tesbed:links"),
            "dynamo-tesbed:links = {'crossNode': '10gbe'}: no part of this program or its "
            "providers reads the namespace 'dynamo-tesbed', so the key would be ignored; did you "
            "mean dynamo-testbed:links? ",
            _stack_file("dynamo-testbed:links"),
            [],
        ),
    ],
    ids=[
        "gpu-typo",
        "gib-quantity",
        "no-node-selector",
        "key-typo",
        "no-node-classes",
        "no-model",
        "empty",
        "a-list",
        "yaml-syntax",
        "namespace-typo",
    ],
)
def test_a_cluster_file_mistake_is_one_line_whose_fix_is_taken(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    said: str,
    fixed: str,
    options: list[str],
) -> None:
    cluster = tmp_path / "lab.yaml"
    cluster.write_text(text)
    assert _recommend(tmp_path, "--cluster-file", str(cluster)) == 2
    assert _error(capsys).startswith(f"--cluster-file {cluster}: {said}")
    cluster.write_text(fixed)
    code = _recommend(tmp_path, "--cluster-file", str(cluster), *options)
    assert code in (0, 1), capsys.readouterr().err


def test_a_directory_or_a_missing_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _recommend(tmp_path, "--cluster-file", str(tmp_path)) == 2
    assert _error(capsys) == (
        f"--cluster-file {tmp_path}: a directory; give the cluster's YAML file in it "
        "(docs/recommend.md)"
    )
    missing = tmp_path / "nope.yaml"
    assert _recommend(tmp_path, "--cluster-file", str(missing)) == 2
    assert _error(capsys) == (
        f"--cluster-file {missing}: no such file; give the cluster's YAML file, or --cluster STACK"
    )


def test_a_node_class_without_gpus_per_node_is_searched_with_one_gpu_said_as_the_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "lab.yaml"
    cluster.write_text(PLAIN.replace("    gpusPerNode: 2\n", ""))
    code = _recommend(tmp_path, "--cluster-file", str(cluster))
    err = capsys.readouterr().err
    assert code in (0, 1), err
    assert "  node class big: rtx-4090, 24 GiB a GPU; gpusPerNode 1 (default) x nodes 1" in err


def test_the_smallest_cluster_file_docs_recommend_shows_is_searched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import textwrap

    from stackmodel.stacks import REPO

    doc = (REPO / "docs" / "recommend.md").read_text()
    block = doc.split("the smallest one:\n\n", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    cluster = tmp_path / "box.yaml"
    cluster.write_text(textwrap.dedent(block))
    code = _recommend(tmp_path, "--cluster-file", str(cluster))
    err = capsys.readouterr().err
    assert code in (0, 1), err
    assert "  node class box: rtx-4090, 24 GiB a GPU; gpusPerNode 2 x nodes 1 (default)" in err
