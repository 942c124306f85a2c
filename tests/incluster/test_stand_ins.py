"""The stand-ins state what they emulate: the Job controller (local_kubelet) decides rule by
rule as kubernetes ``pkg/controller/job/job_controller.go`` ``syncJob`` does (commit 6ae037f1);
the fake API resolves a request's RBAC attributes as k8s.io/apiserver ``requestinfo.go`` does
and matches rules as ``pkg/apis/rbac/v1/evaluation_helpers.go`` does."""

from typing import Any

import pytest
from fake_kube_api import Attributes, request_attributes, rule_allows
from local_kubelet import MAX_INT32, backoff_limit, job_verdict

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
    assert request_attributes(method, path, query) == Attributes(
        verb, group, resource, sub, "testbed", name
    )


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
