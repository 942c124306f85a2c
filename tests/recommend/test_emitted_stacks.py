"""What `testbed recommend` writes reads right and deploys as written: the emitted stack files
(the cluster file edited with its comments kept, its namespace settings, no copied secret, a
name unique to the search, the header naming the command as given and the objective's own
figure), plan.md (through `uv run`, one stack on the GPUs at a time, a gated model's token),
candidates.csv's counts, the nearest candidates when none meets the SLO, the progress lines of a
search whose stderr is not a terminal, and a model given in the cluster file searched as
`--model` is."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import yaml
from search_inputs import SLO, lab_inputs

from recommend.outputs import (
    CANDIDATES_CSV,
    emitted_stack_text,
    plan_text,
    stack_header,
    write_candidates,
    write_stacks,
)
from recommend.search import Figures, Result, check
from recommend.space import Candidate, GroupShape, candidates
from stackmodel.config import project_values
from stackmodel.errors import PROJECT
from stackmodel.stacks import REPO
from stackmodel.validation import validate_stack
from testbed.cli import main
from workload.config import LoadConfig

BOTH_GPUS = "1 x TP1 aggregated on gpu-24gb + 1 x TP1 aggregated on gpu-8gb; router kv"
ONE_GPU = "1 x TP1 aggregated on gpu-24gb; router kv"
GATED = "meta-llama/Llama-3.1-8B-Instruct"


def _figures(concurrency: int = 8, goodput: float = 100.0, tokens: float = 110.0) -> Figures:
    return Figures(concurrency, goodput, tokens, 50.0, 1.0, 0.5, 1.0, {"ttft_p99_ms": 900.0})


def _lab_file(tmp_path: Path) -> Path:
    """kv-routing's stack file as a namespaced-permissions lab's: a namespace it is given (not
    created), its own comment, and an encrypted hfToken."""
    text = (REPO / "stacks" / "Pulumi.kv-routing.yaml").read_text()
    text = text.replace(
        "config:\n",
        "config:\n"
        "  # our lab's namespace: we may not create namespaces\n"
        f"  {PROJECT}:namespace: team-a\n"
        f"  {PROJECT}:createNamespace: false\n"
        f"  {PROJECT}:hfToken:\n"
        "    secure: v1:QUJDREVGR0g=:c2VjcmV0LWNpcGhlcnRleHQ=\n",
        1,
    )
    path = tmp_path / "Pulumi.lab.yaml"
    path.write_text(text)
    return path


def _ranked(path: Path, *labels: str) -> list[Result]:
    """The candidates of ``labels`` on the cluster of ``path``, checked, ranked in that order."""
    base = project_values(yaml.safe_load(path.read_text())["config"])
    cfg = validate_stack("lab", base).cfg
    by_label = {c.label(): c for c in candidates(cfg)}
    results = []
    for rank, label in enumerate(labels, 1):
        plan = check(f"lab-x{rank}", base, by_label[label], LoadConfig())
        assert not isinstance(plan, str), plan
        value = 100.0 / rank
        best = _figures(goodput=value)
        results.append(Result(by_label[label], "ranked", 2, best=best, value=value, plan=plan))
        results[-1].rank = rank
    return results


def test_an_emitted_stack_edits_the_cluster_file_and_renders(tmp_path: Path) -> None:
    """The cluster file's comments and sections stay; its namespace, given to a lab that may
    not create one, stays; its hfToken ciphertext (the cluster stack's) goes; topology and load
    are the candidate's, named for the search; the header names the command as given. The file
    as written renders under the program's mocks."""
    from testbed.render import render_stack

    path = _lab_file(tmp_path)
    (first,) = _ranked(path, BOTH_GPUS)
    inputs = lab_inputs(path)
    text = emitted_stack_text(first, first, inputs)
    assert text.startswith("# SIMULATED")
    assert f"# testbed recommend --cluster-file {path} --slo ttft_p99_ms=1000: rank 1" in text
    assert "# our lab's namespace: we may not create namespaces\n" in text
    assert "      # The seed's main server: one 24 GB-class GPU, shared by time-slicing.\n" in text
    assert "replicasPerGpu: 4 # the device plugin advertises 4 nvidia.com/gpu" in text
    assert 'dynamoVersion: "1.6.2" # vllm-runtime:1.6.2 = vLLM 0.31.0' in text  # quotes kept
    assert "# The seed's grid" not in text  # the comment on the cluster's own load grid
    config = yaml.safe_load(text)["config"]
    assert config[f"{PROJECT}:namespace"] == "team-a"
    assert config[f"{PROJECT}:createNamespace"] is False
    assert f"{PROJECT}:hfToken" not in config
    topology = config[f"{PROJECT}:topology"]
    assert topology["name"] == "lab-5e3a1c-rank1"
    assert [(w["nodeClass"], w["replicas"]) for w in topology["workers"]] == [
        ("gpu-24gb", 1),
        ("gpu-8gb", 1),
    ]
    assert config[f"{PROJECT}:load"]["concurrency"] == [8]
    project = tmp_path / "project"
    (project / "stacks").mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", project / "Pulumi.yaml")
    shutil.copy(REPO / "stacks/Pulumi.platform.yaml", project / "stacks/Pulumi.platform.yaml")
    (project / "stacks/Pulumi.lab-5e3a1c-rank1.yaml").write_text(text)
    rendered = render_stack("lab-5e3a1c-rank1", project)
    assert rendered.outputs["sizing"]["model"] == "Qwen/Qwen3-0.6B"


def test_a_search_s_stack_files_replace_an_earlier_search_s(tmp_path: Path) -> None:
    """Each search names its stacks with its own id; writing them removes the stack files an
    earlier search left in the folder, so plan.md's `cp` copies only this search's."""
    path = _lab_file(tmp_path)
    results = _ranked(path, BOTH_GPUS)
    write_stacks(tmp_path, lab_inputs(path, search_id="000aaa"), results, results[0], 1)
    write_stacks(tmp_path, lab_inputs(path), results, results[0], 1)
    assert [p.name for p in (tmp_path / "stacks").iterdir()] == ["Pulumi.lab-5e3a1c-rank1.yaml"]


def test_a_cluster_that_creates_its_namespace_emits_stacks_in_their_own(tmp_path: Path) -> None:
    """Two stacks creating one namespace are refused: a cluster file that creates its own
    (``createNamespace`` unset) emits stacks whose namespace follows their names."""
    path = tmp_path / "Pulumi.lab.yaml"
    text = (REPO / "stacks" / "Pulumi.kv-routing.yaml").read_text()
    path.write_text(text.replace("config:\n", f"config:\n  {PROJECT}:namespace: lab\n", 1))
    (first,) = _ranked(path, BOTH_GPUS)
    config = yaml.safe_load(emitted_stack_text(first, first, lab_inputs(path)))["config"]
    assert f"{PROJECT}:namespace" not in config


def test_the_header_gives_the_objective_s_own_figure(tmp_path: Path) -> None:
    """Under ``--objective tokens-per-gpu`` the header reports output tok/s (110), not
    goodput (100)."""
    path = _lab_file(tmp_path)
    result = Result(Candidate((GroupShape("aggregated", "gpu-24gb", 1),), key="c0"), "ranked", 2)
    result.best, result.value, result.rank = _figures(), 110.0, 1
    tokens = stack_header(result, result, lab_inputs(path, objective="tokens-per-gpu"))
    assert "# at 8 clients: 110 output tok/s per cluster GPU, 50.0 tok/s per user" in tokens
    goodput = stack_header(result, result, lab_inputs(path))
    assert "# at 8 clients: 100 goodput tok/s per cluster GPU, 50.0 tok/s per user" in goodput


def test_plan_deploys_one_stack_on_the_gpus_at_a_time_through_uv_run(tmp_path: Path) -> None:
    """Rank 2 shares gpu-24gb with rank 1: rank 1 is destroyed before rank 2 is deployed
    (vLLM refuses a worker whose GPU has less free memory than its share); every testbed
    command goes through `uv run`; the stacks' names carry the search's id, which plan.md
    explains; a gated model's token is set on each new stack before `pulumi up`, as is the
    token of a cluster whose file set one (the emitted files drop its ciphertext)."""
    path = _lab_file(tmp_path)
    results = _ranked(path, BOTH_GPUS, ONE_GPU)
    plan = plan_text(lab_inputs(path, model=GATED), results, results[0], tmp_path / "out")
    lines = plan.splitlines()
    assert not [line for line in lines if line.startswith("testbed ")]
    assert "uv run testbed compare out/load/lab-5e3a1c-rank1 out/load/lab-5e3a1c-rank2" in lines
    up = lines.index("pulumi up -s lab-5e3a1c-rank2")
    assert lines[up - 4 : up] == [
        "pulumi destroy -s lab-5e3a1c-rank1",
        f"cp {(tmp_path / 'out').resolve()}/stacks/Pulumi.lab-5e3a1c-rank2.yaml stacks/",
        "pulumi stack init lab-5e3a1c-rank2",
        "pulumi config set --secret -s lab-5e3a1c-rank2 hfToken <your hf_ token>",
    ]
    assert lines[up + 1] == (
        'mkdir -p out/load && cp -r "$(pulumi stack output loadResultsDir -s lab-5e3a1c-rank2)" '
        "out/load/lab-5e3a1c-rank2"
    )
    assert "The stacks' names carry this search's id, `5e3a1c`" in plan
    assert "destroy any other stack holding these GPUs first the same way" in plan
    # An ungated model: the token step only where the cluster's file set one.
    assert "hfToken <your hf_ token>" in plan_text(lab_inputs(path), results, results[0])
    plain = tmp_path / "Pulumi.plain.yaml"
    shutil.copy(REPO / "stacks" / "Pulumi.kv-routing.yaml", plain)
    assert "hfToken" not in plan_text(lab_inputs(plain), results, results[0])


def test_candidates_csv_writes_counts_as_integers(tmp_path: Path) -> None:
    path = _lab_file(tmp_path)
    ranked = _ranked(path, ONE_GPU)
    refused = Result(Candidate((GroupShape("aggregated", "gpu-8gb", 2),), key="c9"), "refused")
    write_candidates(tmp_path, lab_inputs(path), [*ranked, refused], ranked[0])
    with (tmp_path / CANDIDATES_CSV).open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["rank"], r["concurrency"], r["gpus"]) for r in rows] == [
        ("1", "8", "2"),
        ("", "", "0"),
    ]


def test_the_nearest_candidates_are_listed_by_nearness() -> None:
    """When none meets the SLO, the nearest come first: a TTFT p99 10% over the bound, then a
    floor 1.4x it, then one 5.8x it, whatever their keys."""
    from testbed.recommend_command import _nearest

    def shape(key: str) -> Candidate:
        return Candidate((GroupShape("aggregated", "gpu-24gb", 1),), key=key)

    far = Result(shape("c001"), "screened", reason="TTFT p99 is at least 5,830 ms", floor_over=5.83)
    near = Result(shape("c002"), "screened", reason="TTFT p99 is at least 1,400 ms", floor_over=1.4)
    timed = Result(shape("c003"), "slo-not-met", binding="TTFT p99")
    timed.over = Figures(1, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0, {"ttft_p99_ms": 1100.0})
    lines = _nearest([far, near, timed], SLO)
    assert [line.split(" ")[0] for line in lines] == ["c003", "c002", "c001"]


def test_a_search_prints_a_progress_line_per_batch_when_stderr_is_no_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from testbed.recommend_command import _Printer

    printer = _Printer()  # stderr is captured: not a terminal
    printer.on_search("kv-routing")
    for done in range(1, 11):
        printer.on_candidate(done, 10)
    printer.on_search_end()
    assert capsys.readouterr().err.splitlines() == [
        "timing the candidates of kv-routing: 8 of 10",
        "timing the candidates of kv-routing: 10 of 10",
    ]


TINY = "prefixKinds: [2]\nconcurrency: [1]\nrequestsPerRun: 4\nmaxTokens: 8\n"
ONE_CLASS = [
    *("--fix", "kind=aggregated", "--fix", "nodeClasses=gpu-24gb"),
    *("--fix", "router=kv", "--fix", "kvEvents=true"),
]


def test_a_model_given_in_the_cluster_file_is_searched_as_with_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kv-routing's workers (0.22 of the 24 GB GPU) cannot hold Qwen3-8B: named in the
    cluster file it is searched, as `--model` is (each candidate checked with it), not refused
    up front; the outputs name the command as given and the stacks carry the search's id."""
    text = (REPO / "stacks" / "Pulumi.kv-routing.yaml").read_text()
    cluster = tmp_path / "Pulumi.lab.yaml"
    cluster.write_text(text.replace("name: Qwen/Qwen3-0.6B", "name: Qwen/Qwen3-8B", 1))
    workload = tmp_path / "load.yaml"
    workload.write_text(TINY)
    out = tmp_path / "out"
    args = ["--cluster-file", str(cluster), "--workload", str(workload), "--out", str(out)]
    args += ["--slo", "ttft_p99_ms=5000", "--jobs", "1", "--emit-stacks", "1", *ONE_CLASS]
    code = main(["recommend", *args])
    assert code == 0, capsys.readouterr().err
    document = json.loads((out / "candidates.json").read_text())
    ranked = [c["label"] for c in document["candidates"] if c["status"] == "ranked"]
    assert ranked == [ONE_GPU]
    (stack,) = (out / "stacks").iterdir()
    assert stack.name.startswith("Pulumi.lab-") and stack.name.endswith("-rank1.yaml")
    assert len(stack.name.removeprefix("Pulumi.lab-").removesuffix("-rank1.yaml")) == 6
    text = stack.read_text()
    given = f"--cluster-file {cluster} --workload {workload} --slo ttft_p99_ms=5000 --fix"
    assert f"# testbed recommend {given} kind=aggregated --fix nodeClasses=gpu-24gb" in text
    assert yaml.safe_load(text)["config"][f"{PROJECT}:model"]["name"] == "Qwen/Qwen3-8B"
