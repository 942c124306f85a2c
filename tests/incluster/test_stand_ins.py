"""The stand-ins state what they emulate: the Job controller (local_kubelet) decides rule by
rule as kubernetes ``pkg/controller/job/job_controller.go`` ``syncJob`` does (commit 6ae037f1);
the fake API resolves a request's RBAC attributes as k8s.io/apiserver ``requestinfo.go`` does
and matches rules as ``pkg/apis/rbac/v1/evaluation_helpers.go`` does."""

import json
from pathlib import Path
from typing import Any

import pytest
from fake_kube_api import (
    NAMESPACE,
    FakeHelm,
    FakeKubeApi,
    _matches,
    current_log_file,
    fake_kube_api,
    request_attributes,
    restricted_pod_security,
    rule_allows,
)
from fake_kube_api import (
    pod as fake_pod,
)
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from local_kubelet import MAX_INT32, backoff_limit, job_verdict

from clusterread.read import helm_record
from kubeclient.client import api_client

INDEXED = {"completionMode": "Indexed", "completions": 3}
PER_INDEX = {**INDEXED, "backoffLimitPerIndex": 0}


def test_backoff_limit_defaults_as_the_api_server_does() -> None:
    assert backoff_limit(INDEXED) == 6
    assert backoff_limit(PER_INDEX) == MAX_INT32
    assert backoff_limit({**INDEXED, "backoffLimit": 0}) == 0


@pytest.mark.parametrize(
    ("spec", "ended", "past", "verdict"),
    [
        # backoffLimit 0: the first failure fails the Job, the others still running
        ({**INDEXED, "backoffLimit": 0}, {1: 137}, False, "BackoffLimitExceeded"),
        # per index: one failed index waits for the others
        (PER_INDEX, {1: 137}, False, None),
        (PER_INDEX, {1: 137, 0: 1}, False, None),
        (PER_INDEX, {1: 137, 0: 1, 2: 0}, False, "FailedIndexes"),
        ({**PER_INDEX, "maxFailedIndexes": 0}, {1: 137}, False, "MaxFailedIndexesExceeded"),
        (PER_INDEX, {0: 0, 1: 0, 2: 0}, False, "Complete"),
        # the active deadline, after the backoff limit in syncJob's order
        (PER_INDEX, {}, True, "DeadlineExceeded"),
        ({**INDEXED, "backoffLimit": 0}, {0: 1}, True, "BackoffLimitExceeded"),
    ],
)
def test_the_verdict_follows_sync_job(
    spec: dict[str, Any], ended: dict[int, int], past: bool, verdict: str | None
) -> None:
    got = job_verdict(spec, ended, past)
    assert (None if got is None else got[1] or got[0]) == verdict


NS = "/api/v1/namespaces/testbed"
JOBS = "/apis/batch/v1/namespaces/testbed/jobs"


@pytest.mark.parametrize(
    ("method", "path", "query", "attrs"),
    [
        ("GET", f"{JOBS}/j/status", {}, ("get", "batch", "jobs", "status", "j")),
        ("GET", f"{JOBS}/j", {}, ("get", "batch", "jobs", "", "j")),
        ("GET", JOBS, {}, ("list", "batch", "jobs", "", "")),
        ("POST", JOBS, {}, ("create", "batch", "jobs", "", "")),
        ("DELETE", f"{JOBS}/j", {}, ("delete", "batch", "jobs", "", "j")),
        ("DELETE", JOBS, {}, ("deletecollection", "batch", "jobs", "", "")),
        ("GET", f"{NS}/pods", {"watch": "1"}, ("watch", "", "pods", "", "")),
        ("GET", f"{NS}/pods/p/log", {}, ("get", "", "pods", "log", "p")),
    ],
)
def test_request_attributes_as_the_api_server_resolves_them(
    method: str, path: str, query: dict[str, str], attrs: tuple[str, ...]
) -> None:
    verb, group, resource, sub, name = attrs
    assert request_attributes(method, path, query) == {
        "verb": verb,
        "group": group,
        "resource": resource,
        "subresource": sub,
        "namespace": "testbed",
        "name": name,
    }


def test_a_jobs_rule_does_not_cover_jobs_status() -> None:
    """ResourceMatches: a subresource is its own resource, matched exactly or by
    ``*/status``; a rule on ``jobs`` grants none of it."""
    status = request_attributes("GET", f"{JOBS}/j/status", {})
    jobs = {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}
    assert not rule_allows(jobs, status)
    assert rule_allows(jobs, request_attributes("GET", f"{JOBS}/j", {}))
    assert rule_allows({**jobs, "resources": ["jobs/status"]}, status)
    assert rule_allows({**jobs, "resources": ["*/status"]}, status)
    assert not rule_allows({**jobs, "apiGroups": [""]}, status)  # the group must match
    assert not rule_allows({**jobs, "resources": ["jobs/status"], "verbs": ["list"]}, status)
    named = {**jobs, "resources": ["jobs/status"], "resourceNames": ["other"]}
    assert not rule_allows(named, status)


def test_the_log_endpoint_serves_only_the_current_file_after_rotation() -> None:
    lines = [f"{i:03d}\n" for i in range(10)]  # 4 B each
    assert current_log_file("".join(lines), None) == "".join(lines)
    # rotated once the file reached 12 B: after lines 0-2, again after 3-5 and 6-8
    assert current_log_file("".join(lines), 12) == "009\n"
    assert current_log_file("".join(lines[:5]), 12) == "003\n004\n"


def test_the_fake_api_answers_as_the_api_server_does(tmp_path: Path) -> None:
    """A name taken: 409 AlreadyExists; a pod not started: its log 400; a pod gone: 404;
    a dry run: admitted, not stored; a refused pod: 403 with admission's message."""
    with fake_kube_api() as api:
        client_ = api_client(str(api.kubeconfig(tmp_path)), None)
        core = k8s.CoreV1Api(client_)
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}
        core.create_namespaced_config_map(NAMESPACE, cm)
        with pytest.raises(ApiException) as taken:
            core.create_namespaced_config_map(NAMESPACE, cm)
        body = json.loads(taken.value.body)
        assert (taken.value.status, body["reason"]) == (409, "AlreadyExists")
        assert body["message"] == 'configmaps "c" already exists'
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "main", "image": "i"}]},
        }
        core.create_namespaced_pod(NAMESPACE, pod, dry_run="All")
        assert "p" not in api.pods and api.dry_runs == [("Pod", "p")]
        core.create_namespaced_pod(NAMESPACE, pod)
        for name, status in (("p", 400), ("gone", 404)):
            with pytest.raises(ApiException) as log:
                core.read_namespaced_pod_log(name, NAMESPACE)
            assert log.value.status == status
        api.admission = restricted_pod_security
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_pod(NAMESPACE, {**pod, "metadata": {"name": "q"}})
        assert refused.value.status == 403
        message = json.loads(refused.value.body)["message"]
        assert message.startswith('pods "q" is forbidden: violates PodSecurity "restricted:latest"')
        client_.close()


def test_a_missing_label_matches_not_equal() -> None:
    pod = {"metadata": {"labels": {"app.kubernetes.io/name": "graph"}}}
    assert _matches(pod, "app.kubernetes.io/name!=testbed-load")
    assert _matches({"metadata": {}}, "app.kubernetes.io/name!=testbed-load")
    assert not _matches(pod, "app.kubernetes.io/name=testbed-load")
    assert not _matches(pod, "app.kubernetes.io/name=graph,tier=x")  # every term must hold


def test_the_metrics_api_answers_as_metrics_server_and_the_aggregator_do(tmp_path: Path) -> None:
    """Listed: the selected pods that have a reading, sorted by name, each with its pod's labels;
    one pod without a reading, or unknown: 404 NotFound. Without the APIService: the API
    server's 404 Status; registered but down: the aggregator's plain-text 503."""
    with fake_kube_api() as api:
        client_ = api_client(str(api.kubeconfig(tmp_path)), None)
        metrics = k8s.CustomObjectsApi(client_)
        group = ("metrics.k8s.io", "v1beta1", NAMESPACE, "pods")
        for name in ("b-0", "a-0", "c-0"):
            api.put(fake_pod(name, labels={"tier": "x" if name != "c-0" else "y"}))
        api.usage = {
            "a-0": ("1024Ki", "2026-11-30T12:00:00Z"),
            "c-0": ("2Mi", "2026-11-30T12:00:00Z"),
        }
        api.usage["b-0"] = ("2048Ki", "2026-11-30T12:00:15Z")
        listed = metrics.list_namespaced_custom_object(*group, label_selector="tier=x")
        assert listed["kind"] == "PodMetricsList"
        assert [
            (i["metadata"]["name"], i["containers"][0]["usage"]["memory"]) for i in listed["items"]
        ] == [
            ("a-0", "1024Ki"),
            ("b-0", "2048Ki"),
        ]
        assert listed["items"][0]["metadata"]["labels"]["tier"] == "x"
        assert (listed["items"][1]["timestamp"], listed["items"][1]["window"]) == (
            "2026-11-30T12:00:15Z",
            "15.002s",
        )
        del api.usage["a-0"]  # no reading (yet): left out of a list, 404 to a get
        assert len(metrics.list_namespaced_custom_object(*group)["items"]) == 2
        for name in ("a-0", "gone"):
            with pytest.raises(ApiException) as missing:
                metrics.get_namespaced_custom_object(*group, name)
            assert missing.value.status == 404
        api.metrics_api = "unregistered"
        with pytest.raises(ApiException) as unregistered:
            metrics.list_namespaced_custom_object(*group)
        body = json.loads(unregistered.value.body)
        assert (unregistered.value.status, body["reason"]) == (404, "NotFound")
        assert body["message"] == "the server could not find the requested resource"
        api.metrics_api = "unavailable"
        with pytest.raises(ApiException) as unavailable:
            metrics.list_namespaced_custom_object(*group)
        assert (unavailable.value.status, unavailable.value.body) == (503, "service unavailable\n")
        client_.close()


def test_a_pod_whose_usage_metrics_server_skipped_is_served_empty(tmp_path: Path) -> None:
    """metrics-server keeps the pod with no container and a zero time (``pkg/storage/pod.go``
    ``GetMetrics``): listed and got with ``"timestamp": null`` and ``"containers": []``."""
    with fake_kube_api() as api:
        metrics = k8s.CustomObjectsApi(api_client(str(api.kubeconfig(tmp_path)), None))
        group = ("metrics.k8s.io", "v1beta1", NAMESPACE, "pods")
        api.put(fake_pod("a-0"))
        api.skipped.add("a-0")
        (item,) = metrics.list_namespaced_custom_object(*group)["items"]
        assert (item["timestamp"], item["containers"]) == (None, [])
        assert metrics.get_namespaced_custom_object(*group, "a-0")["timestamp"] is None


def test_helm_writes_a_failed_atomic_upgrade_and_its_rollback_as_secrets() -> None:
    """Each revision a Secret labelled as helm's Secrets driver labels it; the failed upgrade
    ``failed``, the rollback ``deployed`` with the chart it went back to."""
    api = FakeKubeApi()
    helm = FakeHelm(api)
    helm.install("1.6.2", "mine")
    helm.upgrade("1.7.0", "mine", error="boom")
    secrets = api.secrets["dynamo-system"]
    assert [s["metadata"]["name"] for s in secrets] == [
        f"sh.helm.release.v1.dynamo-platform.v{n}" for n in (1, 2, 3)
    ]
    assert [s["metadata"]["labels"]["status"] for s in secrets] == [
        "superseded",
        "failed",
        "deployed",
    ]
    records = [helm_record(s) for s in secrets]
    assert records[1]["info"]["description"] == 'Upgrade "dynamo-platform" failed: boom'
    assert records[2]["info"]["description"] == "Rollback to 1"
    assert records[2]["chart"]["metadata"]["version"] == "1.6.2"
