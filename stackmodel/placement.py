"""Where a stack's workers land on its node classes' nodes and GPUs.

:func:`place_workers` gives each replica of each worker group a node and GPUs of its node class:
one landing the scheduler can make, the one the simulation times and the one the GPU
oversubscription check judges. Per node class:

- without time-slicing, pods go largest first (a worker of ``tensorParallelSize`` GPUs needs them
  on one node: the scheduler binds a pod to one node, and the device plugin allocates its
  ``nvidia.com/gpu`` there), each on the first node with room, pods of one size in config order
  (first fit decreasing, exact when the pod sizes divide one another, as powers of two do);
- with time-slicing each GPU takes ``replicasPerGpu`` workers, filled GPU by GPU in config order.

A pod with no room left is still placed, over the class's GPUs from the first one on, and marked
(:attr:`ReplicaPlacement.fits`): the simulation of a mocker stack times it there; a vLLM stack so
placed is refused (:func:`stackmodel.checks.oversubscription_problems`).

:func:`gpu_sharing_sets` is another question: which workers may end up on one GPU at worst, for
the GPU memory check (the scheduler does not know GPU memory, so any ``replicasPerGpu`` of a
time-sliced class's workers may share one).
"""

from __future__ import annotations

from dataclasses import dataclass

from stackmodel.config import StackConfig
from stackmodel.sizing import GpuAllocation, GpuWorker


def replica_name(group: str, index: int) -> str:
    """The name of one replica of a worker group: ``<group>-<index>``."""
    return f"{group}-{index}"


def group_of(replica: str) -> str:
    """The worker group of a :func:`replica_name` (``prefill-1`` -> ``prefill``)."""
    return replica.rsplit("-", 1)[0]


@dataclass(frozen=True)
class ReplicaPlacement:
    """One replica of a worker group on its node class.

    Attributes:
        group: the worker group.
        index: the replica's index in its group.
        node_class: the group's node class.
        node: the node it is on, numbered from 0 in its class.
        gpu: its first GPU, numbered over the class (``node x gpusPerNode + k``).
        gpus: how many GPUs it takes (its ``tensorParallelSize``), from ``gpu`` on.
        fits: False when no node had room for it (it is placed over the first GPUs again).
    """

    group: str
    index: int
    node_class: str
    node: int
    gpu: int
    gpus: int
    fits: bool

    @property
    def name(self) -> str:
        """The replica's :func:`replica_name`."""
        return replica_name(self.group, self.index)

    @property
    def gpu_label(self) -> str:
        """``<node class>/<gpu>``: the GPU the simulation shares among the workers on it."""
        return f"{self.node_class}/{self.gpu}"

    @property
    def host_label(self) -> str:
        """``<node class>/node-<node>``: the host whose memory and links its workers share."""
        return f"{self.node_class}/node-{self.node}"


def _pods(cfg: StackConfig, node_class: str) -> list[tuple[str, int, int]]:
    """(group, replica index, GPUs) of every pod on ``node_class``, in config order."""
    return [
        (w.name, i, w.tensor_parallel_size)
        for w in cfg.topology.workers
        if w.node_class == node_class
        for i in range(w.replicas)
    ]


def _time_sliced(cfg: StackConfig, name: str) -> list[ReplicaPlacement]:
    """A time-sliced class: each pod takes its GPUs' worth of ``nvidia.com/gpu`` units in config
    order, ``replicasPerGpu`` units a GPU."""
    node_class = cfg.node_classes[name]
    per_gpu = node_class.units_per_gpu
    slot, out = 0, []
    for group, index, size in _pods(cfg, name):
        gpu = (slot // per_gpu) % node_class.gpus
        out.append(
            ReplicaPlacement(
                group=group,
                index=index,
                node_class=name,
                node=gpu // node_class.gpus_per_node,
                gpu=gpu,
                gpus=size,
                fits=slot + size <= node_class.gpu_units,
            )
        )
        slot += size
    return out


def _whole_gpus(cfg: StackConfig, name: str) -> list[ReplicaPlacement]:
    """A class without time-slicing: first fit decreasing on its nodes (the module docstring)."""
    node_class = cfg.node_classes[name]
    per_node = node_class.gpus_per_node
    used = [0] * node_class.nodes
    overflow = 0
    placed: dict[tuple[str, int], ReplicaPlacement] = {}
    pods = _pods(cfg, name)
    for group, index, size in sorted(pods, key=lambda pod: -pod[2]):
        node = next((n for n, taken in enumerate(used) if per_node - taken >= size), None)
        if node is None:
            gpu = overflow % node_class.gpus
            overflow += size
            node, fits = gpu // per_node, False
        else:
            gpu = node * per_node + used[node]
            used[node] += size
            fits = True
        placed[group, index] = ReplicaPlacement(
            group=group, index=index, node_class=name, node=node, gpu=gpu, gpus=size, fits=fits
        )
    return [placed[group, index] for group, index, _ in pods]


def place_workers(cfg: StackConfig) -> tuple[ReplicaPlacement, ...]:
    """Every replica of every worker group, in config order, where it lands (the module
    docstring). Every group's node class must exist (:func:`stackmodel.checks.node_class_problems`
    says so first)."""
    placed = {}
    for name in dict.fromkeys(w.node_class for w in cfg.topology.workers):
        sliced = cfg.node_classes[name].time_slicing is not None
        for replica in _time_sliced(cfg, name) if sliced else _whole_gpus(cfg, name):
            placed[replica.group, replica.index] = replica
    return tuple(placed[w.name, i] for w in cfg.topology.workers for i in range(w.replicas))


def gpu_sharing_sets(cfg: StackConfig) -> list[GpuAllocation]:
    """For each node class, the workers that may end up on one GPU (the worst case).

    Workers are named by :func:`replica_name`. Without time-slicing a worker has a GPU to
    itself, so each group is checked alone (replica 0). With time-slicing, up to
    ``replicasPerGpu`` workers share a GPU, and the scheduler does not know GPU memory: the set
    checked is the ``min(replicasPerGpu, workers on the class)`` workers with the largest
    ``gpuMemoryUtilization``. A tensor-parallel group (never time-sliced:
    :func:`stackmodel.checks.tensor_parallel_problems`) is checked as one GPU of its worker,
    holding its share of the weights.
    """
    out: list[GpuAllocation] = []
    for class_name, node_class in cfg.node_classes.items():
        groups = [w for w in cfg.topology.workers if w.node_class == class_name]
        if not groups:
            continue
        if node_class.time_slicing is None:
            for g in groups:
                out.append(
                    GpuAllocation(
                        node_class=class_name,
                        gpu_memory_gib=node_class.gpu_memory_gib,
                        workers=[
                            GpuWorker(
                                name=replica_name(g.name, 0),
                                gpu_memory_utilization=g.gpu_memory_utilization,
                            )
                        ],
                        tensor_parallel_size=g.tensor_parallel_size,
                    )
                )
            continue
        replicas = [
            GpuWorker(name=replica_name(g.name, i), gpu_memory_utilization=g.gpu_memory_utilization)
            for g in groups
            for i in range(g.replicas)
        ]
        replicas.sort(key=lambda w: -w.gpu_memory_utilization)
        out.append(
            GpuAllocation(
                node_class=class_name,
                gpu_memory_gib=node_class.gpu_memory_gib,
                workers=replicas[: node_class.time_slicing.replicas_per_gpu],
            )
        )
    return out
