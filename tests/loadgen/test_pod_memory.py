"""The worker pods' memory (kubeclient.pod_memory, loadstep.memory) against the fake Kubernetes
API serving metrics.k8s.io as metrics-server does: a pod's memory rising, read under exactly the
load step's Role, with its limit and its group's floor; an OOMKill gets the memory it had; a
cluster without the metrics API is said once, and the sampler stops asking."""

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fake_kube_api import NAMESPACE, FakeKubeApi, fake_kube_api, pod

from incluster.manifests import LOAD_STEP_RULES
from kubeclient.pod_memory import PodMemorySampler, PodReading
from loadstep.memory import memory_record, with_memory_at_kill
from manifests.graph import COMPONENT_LABEL, GRAPH_LABEL
from measurement.incidents import Incident
from measurement.memory import memory_at

SELECTOR = f"{GRAPH_LABEL}=g,{COMPONENT_LABEL}!=frontend"  # loadstep.inputs.worker_selector
LABELS = {GRAPH_LABEL: "g"}
T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
KI, GI = 2**10, 2**30


def wait_for(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def stamp(seconds: int) -> str:
    """A PodMetrics timestamp, as metrics-server writes it (RFC 3339, UTC, whole seconds)."""
    return f"{T0 + timedelta(seconds=seconds):%Y-%m-%dT%H:%M:%SZ}"


def sampler(api: FakeKubeApi, tmp_path: Path) -> PodMemorySampler:
    return PodMemorySampler(
        NAMESPACE,
        label_selector=SELECTOR,
        kubeconfig=str(api.kubeconfig(tmp_path)),
        interval_s=0.02,
    )


def test_a_rising_pod_is_one_sample_per_reading_with_its_limit_and_floor(tmp_path: Path) -> None:
    """prefill-0's working set rises over three metrics-server readings (each read several
    times by the sampler: kept once); the frontend's pod and another graph's are not read."""
    with fake_kube_api() as api:
        api.enforce = True
        api.grants = [(NAMESPACE, dict(rule)) for rule in LOAD_STEP_RULES]  # exactly the Role
        labels = {**LABELS, COMPONENT_LABEL: "prefill"}
        api.put(pod("prefill-0", labels=labels, memory_limit="4Gi"))
        frontend = {**LABELS, COMPONENT_LABEL: "frontend"}
        api.put(pod("frontend-0", component="frontend", labels=frontend, memory_limit="1Gi"))
        api.put(pod("other-0", labels={GRAPH_LABEL: "other"}))
        for name in ("frontend-0", "other-0"):
            api.usage[name] = ("1000Ki", stamp(0))
        with sampler(api, tmp_path) as memory:
            for second, used in ((0, "1048576Ki"), (15, "2097152Ki"), (30, "3670016Ki")):
                api.usage["prefill-0"] = (used, stamp(second))
                reads = api.metrics_reads
                wait_for(lambda r=reads: api.metrics_reads >= r + 3)  # the same reading again
            readings, limits = memory.readings(), memory.limits()
        assert memory.warnings() == [] and api.refused == []
    record = memory_record(readings, limits, {"prefill": 3 * GI}, memory.interval_s)
    (series,) = record.pods
    assert (series.pod, series.component) == ("prefill-0", "prefill")
    assert [(s.at, s.bytes) for s in series.samples] == [
        (T0, 1 * GI),
        (T0 + timedelta(seconds=15), 2 * GI),
        (T0 + timedelta(seconds=30), 3_670_016 * KI),
    ]
    assert (series.limit_bytes, series.floor_bytes, series.window) == (4 * GI, 3 * GI, "15.002s")
    assert memory.reads > len(series.samples)  # read every interval, kept once per reading


def test_an_oom_kill_gets_the_memory_of_the_last_reading_before_it() -> None:
    readings_at = {0: "1048576Ki", 15: "3670016Ki", 30: "1024Ki"}  # the restarted container
    readings = [
        PodReading("prefill-0", {COMPONENT_LABEL: "prefill"}, stamp(s), "15s", {"main": used})
        for s, used in readings_at.items()
    ]
    record = memory_record(readings, {"prefill-0": {"main": "4Gi"}}, {}, 1.0)

    def incident(name: str, reason: str | None, at_s: int) -> Incident:
        kind = "terminated" if reason else "ready_lost"
        at = T0 + timedelta(seconds=at_s)
        return Incident(
            source="kubernetes", component="prefill", instance=name, kind=kind, reason=reason, at=at
        )

    oom, lost, other = with_memory_at_kill(
        [
            incident("prefill-0", "OOMKilled", 20),
            incident("prefill-0", None, 20),
            incident("decode-0", "OOMKilled", 20),
        ],
        record,
    )
    assert oom.memory_bytes == 3_670_016 * KI  # the reading at 15 s, not the restart's at 30 s
    assert (lost.memory_bytes, other.memory_bytes) == (None, None)  # no kill; no series
    assert memory_at(record.pods[0], T0 - timedelta(seconds=1)) is None
    assert record.pods[0].floor_bytes is None  # no floor known for the group


@pytest.mark.parametrize(
    ("served", "said"),
    [("unregistered", "not served (HTTP 404"), ("unavailable", "unavailable (HTTP 503")],
)
def test_a_cluster_without_the_metrics_api_is_said_once(
    tmp_path: Path, served: str, said: str
) -> None:
    with fake_kube_api() as api:
        api.metrics_api = served
        api.put(pod("prefill-0", labels={**LABELS, COMPONENT_LABEL: "prefill"}))
        with sampler(api, tmp_path) as memory:
            wait_for(lambda: memory.problem is not None)
            time.sleep(0.1)  # five intervals: no read after the first answer
        assert api.metrics_reads == 1
    (warning,) = memory.warnings()
    assert warning.startswith("no pod memory series: the cluster's metrics API (metrics.k8s.io")
    assert said in warning and "install metrics-server" in warning
    record = memory_record(memory.readings(), memory.limits(), {}, 0.02, memory.problem)
    assert record.pods == [] and record.unavailable == memory.problem


def test_a_role_without_the_metrics_rule_is_said_once_with_the_fix(tmp_path: Path) -> None:
    without = [r for r in LOAD_STEP_RULES if r["apiGroups"] != ["metrics.k8s.io"]]
    with fake_kube_api() as api:
        api.enforce = True
        api.grants = [(NAMESPACE, dict(rule)) for rule in without]
        with sampler(api, tmp_path) as memory:
            wait_for(lambda: memory.problem is not None)
        assert api.refused == ["list pods"]
    (warning,) = memory.warnings()
    assert "may not list pods.metrics.k8s.io in namespace testbed (HTTP 403" in warning
    assert "the load step's Role grants it" in warning


def test_no_namespace_samples_nothing() -> None:
    with PodMemorySampler(None) as memory:
        pass
    assert (memory.readings(), memory.warnings(), memory.reads) == ([], [], 0)
