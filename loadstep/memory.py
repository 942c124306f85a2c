"""The load step's pod memory series (pure): what :class:`kubeclient.pod_memory.PodMemorySampler`
read, as the results folder's ``memory.json`` (:class:`measurement.memory.MemoryRecord`), and the
memory an OOMKilled pod had at its last reading before the kill.

Quantities are parsed as Kubernetes parses them (:func:`stackmodel.quantities.parse_quantity`:
metrics-server writes the working set in binary SI, ``123456Ki``; limits are the spec's). A pod
belongs to its worker group by the ``dynamo-testbed/component`` label the program sets on
every worker pod (:data:`manifests.graph.COMPONENT_LABEL`; metrics-server copies the pod's
labels into its ``PodMetrics``), and the group's floor is the sizing's
(:attr:`stackmodel.sizing.ComponentMemoryReport.memory_floor_bytes`, passed to the step as
``memoryFloors``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from manifests.graph import COMPONENT_LABEL
from measurement.incidents import Incident
from measurement.memory import MemoryRecord, MemorySample, PodMemory, memory_at, pod_series
from stackmodel.quantities import parse_quantity

if TYPE_CHECKING:  # the sampler's module imports the kubernetes client
    from kubeclient.pod_memory import PodReading


def _limit_bytes(limits: Mapping[str, str | None] | None) -> int | None:
    """The pod's limit: its containers' limits summed; None when one has none (or unknown)."""
    if not limits or any(value is None for value in limits.values()):
        return None
    return sum(parse_quantity(value) for value in limits.values() if value is not None)


def memory_record(
    readings: Sequence[PodReading],
    limits: Mapping[str, Mapping[str, str | None]],
    floors: Mapping[str, int],
    interval_s: float,
    unavailable: str | None = None,
) -> MemoryRecord:
    """Each pod's series from the sampler's ``readings`` (one sample per distinct timestamp,
    the containers' working sets summed, bytes), with its limit (``limits``: per pod, its
    containers' quantities) and its group's floor (``floors``: bytes by worker group)."""
    by_pod: dict[str, list[PodReading]] = {}
    for reading in readings:
        by_pod.setdefault(reading.pod, []).append(reading)
    pods = []
    for name, found in sorted(by_pod.items()):
        component = found[-1].labels.get(COMPONENT_LABEL) or name
        samples = sorted(
            (
                MemorySample(
                    at=datetime.fromisoformat(r.timestamp),
                    bytes=sum(parse_quantity(q) for q in r.memory.values()),
                )
                for r in found
            ),
            key=lambda s: s.at,
        )
        pods.append(
            PodMemory(
                pod=name,
                component=component,
                limit_bytes=_limit_bytes(limits.get(name)),
                floor_bytes=floors.get(component),
                window=found[-1].window,
                samples=samples,
            )
        )
    return MemoryRecord(interval_s=interval_s, pods=pods, unavailable=unavailable)


def with_memory_at_kill(incidents: Sequence[Incident], record: MemoryRecord) -> list[Incident]:
    """``incidents`` with ``memory_bytes`` set on each OOMKilled termination whose pod has a
    reading at or before it (:func:`measurement.memory.memory_at`); the others as they are."""
    out = []
    for incident in incidents:
        series = pod_series(record, incident.instance)
        if incident.reason == "OOMKilled" and incident.memory_bytes is None and series:
            incident = incident.model_copy(update={"memory_bytes": memory_at(series, incident.at)})
        out.append(incident)
    return out
