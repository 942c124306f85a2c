"""What the stand-in Job controller (local_kubelet) decides, rule by rule as kubernetes
``pkg/controller/job/job_controller.go`` ``syncJob`` does (commit 6ae037f1), and that it deletes
the still-active pods of a failed Job with their logs."""

from typing import Any

import pytest
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
