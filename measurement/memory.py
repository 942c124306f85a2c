"""The worker pods' memory over time, as a results folder keeps it (`memory.json`).

The load step samples each worker pod's memory from the Kubernetes metrics API while the grid
runs (`kubeclient.pod_memory`, `loadstep.memory`): the working set the kubelet reports and
metrics-server serves as `PodMetrics` (`metrics.k8s.io/v1beta1`), in bytes, summed over the
pod's containers, with the pod's memory limit (its spec) and its worker group's memory floor
(the stack's sizing, `stackmodel.sizing`). docs/metrics.md, "Pod memory", defines the series.

`MemoryRecord.unavailable` says why there is no series (the cluster does not serve the metrics
API, or it refused the read); the run itself never depends on it.
"""

from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, Field

MEMORY_FILE = "memory.json"

METRICS_SOURCE = "metrics.k8s.io/v1beta1 PodMetrics (metrics-server)"
"""Where the series come from, as `MemoryRecord.source` names it."""


class MemorySample(BaseModel):
    """One reading of a pod's working set: `at` is the `PodMetrics` `timestamp` (UTC, the
    end of the window it was measured in: the kubelet's scrape time); `bytes` the working set
    summed over the pod's containers."""

    at: datetime
    bytes: int = Field(ge=0)


class PodMemory(BaseModel):
    """One worker pod's series.

    `component`: its worker group (the pod's `dynamo-testbed/component` label, else its name);
    `limit_bytes`: the sum of its containers' `resources.limits.memory` (None when a container
    has none: the pod then has no limit of its own); `floor_bytes`: the group's memory floor
    from the sizing (None: unknown); `window`: the `PodMetrics` window as the API spelled it
    (a Go duration, e.g. "15.002s": the interval the CPU rate was taken over; the memory is
    the working set at its end); `samples` in time order, one per distinct `timestamp`.
    """

    pod: str
    component: str
    limit_bytes: int | None = None
    floor_bytes: int | None = None
    window: str | None = None
    samples: list[MemorySample] = Field(default_factory=list)


class MemoryRecord(BaseModel):
    """Every worker pod's series of one load step (`memory.json`): `source` the API read,
    `interval_s` how often it was read (seconds; metrics-server refreshes a pod's reading once
    per its `--metric-resolution`, 15 s by default), `pods` in name order, `unavailable` why
    there is none (None: the API answered)."""

    source: str = METRICS_SOURCE
    interval_s: float
    pods: list[PodMemory] = Field(default_factory=list)
    unavailable: str | None = None


def memory_at(pod: PodMemory, at: datetime) -> int | None:
    """The pod's working set at `at`: its last sample at or before it (bytes); None before the
    first sample."""
    found = [sample.bytes for sample in pod.samples if sample.at <= at]
    return found[-1] if found else None


def pod_series(record: MemoryRecord | None, pod: str) -> PodMemory | None:
    """The series of `pod` in `record`, None without one."""
    if record is None:
        return None
    return next((series for series in record.pods if series.pod == pod), None)


def pods_in(record: MemoryRecord | None) -> Sequence[PodMemory]:
    """The pods of `record` that have samples, in name order."""
    return [] if record is None else [p for p in record.pods if p.samples]
