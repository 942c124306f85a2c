"""Each worker's own ``/metrics`` URL when the load step runs: the pods of every worker
component (:attr:`loadstep.inputs.LoadStepInputs.worker_metrics`: a label selector and a port
each) listed through the Kubernetes API, one URL per running pod, ``http://<pod IP>:<port>``.

A pod's IP is reached from inside the cluster (the in-cluster runner's pods); from the
workstation (the local runner) only where the cluster's pod network is routed to it, which
:func:`reachable` checks once before the grid, so that an unreachable address costs one short
try, not a scrape timeout every run.

Aggregated workers are scraped with the prefill workers (where prefixes are looked up:
:class:`loadgen.server_metrics.ServerMetrics`). Imported where the step runs: it loads the
Kubernetes client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from ipaddress import ip_address

from kubeclient.client import KubeAccessError
from kubeclient.pod_addresses import running_pod_ips
from loadstep.inputs import LoadStepInputs

REACH_TIMEOUT_S = 3.0
"""How long :func:`reachable` waits for the first worker's ``/metrics`` (connect and read)."""


@dataclass
class WorkerUrls:
    """The workers' ``/metrics`` base URLs by where they are scraped: ``prefill`` (prefill and
    aggregated workers: their prefix-cache counters too) and ``decode``; ``notes``: what kept a
    worker from being listed (one line each)."""

    prefill: list[str] = field(default_factory=list)
    decode: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def all(self) -> list[str]:
        """Every URL, prefill first."""
        return [*self.prefill, *self.decode]


def pod_url(ip: str, port: int) -> str:
    """``http://<ip>:<port>``, an IPv6 address in brackets (RFC 3986 section 3.2.2)."""
    host = f"[{ip}]" if ip_address(ip).version == 6 else ip
    return f"http://{host}:{port}"


def worker_urls(inputs: LoadStepInputs) -> WorkerUrls:
    """The running pods of every ``inputs.worker_metrics`` target in ``inputs.namespace``, each
    as its role's URL (:func:`kubeclient.pod_addresses.running_pod_ips`: pods in name order,
    those not running or without an IP yet left out); no namespace or no targets: none. Never
    raises: a failed list is a note."""
    if inputs.namespace is None or not inputs.worker_metrics:
        return WorkerUrls()
    try:
        ips = running_pod_ips(
            inputs.namespace,
            [t.selector for t in inputs.worker_metrics],
            kubeconfig=inputs.kubeconfig,
            context=inputs.kube_context,
        )
    except KubeAccessError as exc:
        return WorkerUrls(
            notes=[
                f"the workers' own /metrics are not scraped: listing their pods in namespace "
                f"{inputs.namespace} failed ({exc}); the runs keep the frontend's figures"
            ]
        )
    found = WorkerUrls()
    for target, addresses in zip(inputs.worker_metrics, ips, strict=True):
        urls = [pod_url(ip, target.port) for ip in addresses]
        (found.decode if target.role == "decode" else found.prefill).extend(urls)
    return found


async def reachable(url: str, timeout_s: float = REACH_TIMEOUT_S) -> bool:
    """Whether ``url``'s ``/metrics`` answers at all (any HTTP status) within ``timeout_s``."""
    import aiohttp

    try:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"{url}/metrics") as response,
        ):
            await response.read()
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False
    return True


async def reached(workers: WorkerUrls, notes: list[str]) -> WorkerUrls:
    """``workers`` where this machine reaches the first of them (:func:`reachable`), else none
    and a line in ``notes`` (the local runner on a workstation outside the pod network)."""
    everyone = workers.all()
    if not everyone or await reachable(everyone[0]):
        return workers
    notes.append(
        f"the workers' own /metrics ({everyone[0]} and {len(everyone) - 1} more) are not "
        "reachable from this machine (pod addresses): runs keep the frontend's figures; "
        "load.runner: cluster scrapes them from inside the cluster"
    )
    return WorkerUrls()
