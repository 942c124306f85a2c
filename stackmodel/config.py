"""The validated model of one stack: the single source of truth for every consumer.

The Pulumi program, the offline ``testbed`` commands and the local simulation all read a
:class:`StackConfig`. Keys are camelCase, exactly as they are written under ``config:`` in
``stacks/Pulumi.<stack>.yaml`` (``dynamo-testbed:<key>``); unknown keys are rejected.

This module holds the model and its key-level (shape) rules only;
:func:`stackmodel.validation.validate_stack` validates a raw config against it and runs the
cross-key checks of :mod:`stackmodel.checks`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import math
import re
from collections.abc import Mapping
from typing import Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from configkeys.config_text import ConfigText
from configkeys.suggest import did_you_mean, same_name
from kvpath.profile import (
    LINK_PROFILES,
    PLAUSIBLE_BYTES_PER_S,
    PROFILE_FILE_SUFFIX,
    LinkProfile,
    ethernet_rate_mistake,
    gb_per_s_text,
)
from stackmodel.engines import EngineKind, EngineProfile, engine_profile
from stackmodel.errors import PROJECT, ConfigProblem
from stackmodel.models import ModelGeometry, catalog_spelling
from stackmodel.platform import PlatformConfig
from stackmodel.quantities import (
    DEFAULT_ACTIVATION_OVERHEAD_BYTES,
    DEFAULT_BASE_MEMORY,
    DEFAULT_SHARED_MEMORY,
    GI,
    TENSOR_PARALLEL_SHARED_MEMORY,
)
from stackmodel.stack_layout import DEFAULT_PLATFORM_STACK, stack_namespace
from stackmodel.toleration import Toleration
from steptime.gpus import GPU_CATALOG, GpuSpec, catalog_gpu
from workload.config import LoadConfig


class CamelModel(BaseModel):
    """Base for config sections: camelCase keys, unknown keys rejected, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


# --- placement -------------------------------------------------------------------------------


class TimeSlicing(CamelModel):
    """NVIDIA device-plugin GPU time-slicing on a node class.

    ``replicasPerGpu`` is the plugin's ``sharing.timeSlicing.resources[].replicas``: how many
    ``nvidia.com/gpu`` units one physical GPU advertises, so at most that many workers share it.
    """

    replicas_per_gpu: int = Field(ge=2, description="nvidia.com/gpu units per physical GPU.")


class NodeClass(CamelModel):
    """A group of identical GPU nodes that workers are placed on.

    Labels and names are examples the user edits; no code assumes them.
    """

    node_selector: dict[str, ConfigText] = Field(
        min_length=1, description="Labels a node must carry (becomes the pod's nodeSelector)."
    )
    tolerations: tuple[Toleration, ...] = Field(
        default=(), description="Taints on these nodes that the workers tolerate."
    )
    gpu_memory_gib: float = Field(gt=0, alias="gpuMemoryGiB", description="Memory of one GPU, GiB.")
    gpus_per_node: int = Field(default=1, ge=1, description="Physical GPUs per node.")
    host_memory_gib: float | None = Field(
        default=None,
        gt=0,
        alias="hostMemoryGiB",
        description="Memory of one node for its pods, GiB (its allocatable memory: kubectl "
        "describe node, Allocatable); when set, the checks refuse workers whose memory limits "
        "on one node add up to more, offline (host-buffered KV's mirrors included); unset: "
        "only preview checks it, from the cluster.",
    )
    nodes: int = Field(
        default=1,
        ge=1,
        description="Nodes in the class; with 1, prefill and decode on it share a host.",
    )
    time_slicing: TimeSlicing | None = Field(
        default=None, description="Set when the GPUs are shared by time-slicing."
    )
    gpu: ConfigText | GpuSpec | None = Field(
        default=None,
        description="The GPU, for step times: a catalog name, any case ("
        + ", ".join(sorted(GPU_CATALOG))
        + ") or {name, bf16DenseTflops, memoryGbPerS} (optional: fp8DenseTflops; interconnect "
        "and interconnectGbPerS, needed for tensor parallelism; memoryGb, deviceName and "
        "aiconfigurator, each unknown when unset, as a catalog entry has them; peerToPeer: "
        "false for GeForce cards, which the catalog's rtx-3090 and rtx-4090 are, so KV in GPU "
        "buffers between two of them goes through host memory); default: "
        "steptime.gpus.DEFAULT_GPU, and the simulation says so.",
    )

    calibration: ConfigText | None = Field(
        default=None,
        description="A calibration profile file (testbed calibrate --out), relative to the "
        "project folder: this GPU's efficiencies and host time per engine step, and the "
        "frontend's fixed cost, fitted from measured runs; default: the seed fit's.",
    )
    calibration_elsewhere: bool = Field(
        default=False,
        description="Apply the calibration profile though it was fitted on another GPU or "
        "model than this class runs (refused otherwise); the simulation then says "
        "'calibrated on <gpu>/<model>, applied to <gpu>/<model>'.",
    )

    @property
    def gpu_name(self) -> str | None:
        """The GPU's name: the catalog key, or the label of one given with its figures; None
        when the class names none."""
        return self.gpu.name if isinstance(self.gpu, GpuSpec) else self.gpu

    @property
    def units_per_gpu(self) -> int:
        """``nvidia.com/gpu`` units one physical GPU advertises: ``replicasPerGpu`` with
        time-slicing, else 1."""
        return self.time_slicing.replicas_per_gpu if self.time_slicing else 1

    @property
    def gpus(self) -> int:
        """Physical GPUs in the class: ``nodes x gpusPerNode``."""
        return self.nodes * self.gpus_per_node

    @property
    def gpu_units_per_node(self) -> int:
        """``nvidia.com/gpu`` units one node advertises: its GPUs x :attr:`units_per_gpu` (each
        vLLM worker takes one unit per GPU it uses)."""
        return self.gpus_per_node * self.units_per_gpu

    @property
    def gpu_units(self) -> int:
        """``nvidia.com/gpu`` units the whole class advertises."""
        return self.nodes * self.gpu_units_per_node

    def gpus_for(self, units: int) -> int:
        """Physical GPUs ``units`` ``nvidia.com/gpu`` units of the class take:
        ``ceil(units / units_per_gpu)`` (time-sliced workers of one GPU count it once)."""
        return math.ceil(units / self.units_per_gpu)

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, gpu: str | GpuSpec | None) -> str | GpuSpec | None:
        if isinstance(gpu, str):
            try:
                return catalog_gpu(gpu).name  # as the catalog spells it: RTX 3090 -> rtx-3090
            except KeyError as error:
                raise ValueError(str(error)) from None
        return gpu


LinkSettingValue = str | float | LinkProfile
"""A link setting (:func:`kvpath.profile.resolve_link`): a profile name from
:data:`kvpath.profile.LINK_PROFILES` (e.g. ``1gbe``), decimal GB/s, a profile file (``*.json``,
relative to the project folder) or the profile's figures."""


_LINK_FORMS = (
    f"A profile name ({', '.join(LINK_PROFILES)}), a plain number in decimal GB/s (10GbE is "
    "~1.15), a profile file (*.json) or the figures, in bytes/s; a rate below "
    f"{gb_per_s_text(PLAUSIBLE_BYTES_PER_S[0])} or above {gb_per_s_text(PLAUSIBLE_BYTES_PER_S[1])}"
    " is refused as a slip of units."
)


class Links(CamelModel):
    """The network paths KV cache takes between a prefill and a decode worker.

    Each value is a profile name, decimal GB/s, a profile file or the figures
    (:data:`LinkSettingValue`).
    """

    same_node: LinkSettingValue = Field(
        default="same-node-tcp",
        description="Prefill and decode on the same host: one node class of one node. "
        + _LINK_FORMS,
    )
    cross_node: LinkSettingValue = Field(
        default="1gbe",
        description="Prefill and decode on different hosts: different node classes. On one "
        "node class of several nodes the scheduler places them, and the slower link is taken. "
        + _LINK_FORMS
        + " A plain number that is a common Ethernet rate in Gb/s (1, 10, 25, 40, 100, 200, 400)"
        " is refused: write the profile (10gbe) or, for that many GB/s, {bytesPerS: ...}.",
    )

    @field_validator("same_node", "cross_node", mode="before")
    @classmethod
    def _profile_spelling(cls, link: object) -> object:
        """A profile name in any case and spacing (``10GbE``) as the profile spells it; a
        number as text (``pulumi config set --path`` stores ``2.5`` as a string) as GB/s."""
        if isinstance(link, str) and not link.endswith(PROFILE_FILE_SUFFIX):
            with contextlib.suppress(ValueError):
                return float(link)
            return same_name(link, LINK_PROFILES) or link
        return link

    @field_validator("cross_node")
    @classmethod
    def _not_a_line_rate(cls, link: LinkSettingValue) -> LinkSettingValue:
        """A plain number between hosts that is an Ethernet line rate in Gb/s is refused
        (:func:`kvpath.profile.ethernet_rate_mistake`): read as GB/s it would make the link 8x
        faster than that Ethernet, and the disaggregation verdict flip without a word."""
        mistake = ethernet_rate_mistake(link) if isinstance(link, float) else None
        if mistake is not None:
            raise ValueError(mistake)
        return link


# --- engine and model ------------------------------------------------------------------------

DEFAULT_DYNAMO_VERSION = "1.6.2"
"""The Dynamo release of the seed (Dynamo 1.6.2, vLLM 0.31.0)."""

_SEMVER_TAG = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+.][0-9A-Za-z.-]+)?$")


def image_tag_version(image: str) -> str | None:
    """The MAJOR.MINOR.PATCH in an image reference's tag, or None if the tag is not a version.

    ``nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.2`` -> ``"1.6.2"``; ``...:latest``, a digest
    reference or no tag -> None (the DGD then needs ``runtimeVersionOverride``).
    """
    if "@" in image:
        return None
    name = image.rsplit("/", 1)[-1]
    if ":" not in name:
        return None
    match = _SEMVER_TAG.match(name.split(":", 1)[1])
    return ".".join(match.groups()) if match else None


class EngineConfig(CamelModel):
    """Which engine the workers run and with what image and arguments."""

    kind: EngineKind = Field(
        default="vllm",
        description="vllm: real GPU workers; mocker: Dynamo's CPU-only simulated workers.",
    )
    dynamo_version: ConfigText = Field(
        default=DEFAULT_DYNAMO_VERSION,
        pattern=r"^\d+\.\d+\.\d+$",
        description="Dynamo release: the default image's tag and the DGD's runtime version.",
    )
    image: ConfigText | None = Field(
        default=None,
        description="Container image; default vllm-runtime (vllm) or dynamo-planner (mocker) "
        "at dynamoVersion.",
    )
    runtime_version_override: ConfigText | None = Field(
        default=None,
        pattern=r"^\d+\.\d+\.\d+$",
        description="DGD runtimeVersionOverride; required when the image tag is not a version.",
    )
    extra_args: tuple[ConfigText, ...] = Field(
        default=(), description="Engine arguments added to every worker."
    )
    speedup_ratio: float = Field(
        default=1.0, gt=0, description="Mocker only: --speedup-ratio of the simulated compute."
    )

    @property
    def profile(self) -> EngineProfile:
        """The engine's facts (:data:`stackmodel.engines.ENGINES`' entry for :attr:`kind`)."""
        return engine_profile(self.kind)

    @property
    def resolved_image(self) -> str:
        """The image the workers run (explicit, else the engine's default,
        :meth:`~stackmodel.engines.EngineProfile.default_image`)."""
        return self.image or self.profile.default_image(self.dynamo_version)

    @property
    def release(self) -> str:
        """The Dynamo release the workers run: :attr:`runtime_version`, else ``dynamoVersion``."""
        return self.runtime_version or self.dynamo_version

    @property
    def runtime_version(self) -> str | None:
        """The Dynamo release the workers run as far as the image says: ``runtimeVersionOverride``,
        else the image tag's MAJOR.MINOR.PATCH (:func:`image_tag_version`); None when the tag is
        not a version."""
        return self.runtime_version_override or image_tag_version(self.resolved_image)


class ModelConfig(CamelModel):
    """The served model."""

    name: ConfigText = Field(
        min_length=1,
        description="Hugging Face id, e.g. Qwen/Qwen3-0.6B; a catalog model's in any case, "
        "taken as the catalog spells it.",
    )
    geometry: ModelGeometry | None = Field(
        default=None,
        description="Layers, KV heads, head dim, dtype bytes; default from configJson, else "
        "from the known-model table.",
    )
    config_json: ConfigText | None = Field(
        default=None,
        description="Path to the model's Hugging Face config.json (or its folder), relative to "
        "the project folder; the geometry is read from it.",
    )
    max_model_len: int | None = Field(default=None, ge=1, description="vLLM --max-model-len.")
    quantization: Literal["fp8"] | None = Field(
        default=None,
        description="vLLM --quantization: fp8 quantizes a BF16 checkpoint's weights to FP8 at "
        "load (1 byte a weight; W8A8 on GPUs with FP8 tensor cores, weight-only W8A16 on "
        "older ones). An FP8 checkpoint needs no flag: give its configJson.",
    )
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = Field(
        default="auto",
        description="vLLM --kv-cache-dtype: auto keeps the model's dtype (2 bytes an element "
        "for BF16 models); the fp8 kinds store 1, halving KV bytes per token, host mirrors "
        "and transfers.",
    )

    @field_validator("name")
    @classmethod
    def _catalog_spelling(cls, name: str) -> str:
        return catalog_spelling(name)  # as the catalog spells it: qwen/qwen3-0.6b -> Qwen/...


# --- topology --------------------------------------------------------------------------------

WorkerRole = Literal["aggregated", "prefill", "decode"]

RouterMode = Literal["kv", "round-robin", "random"]
"""How the Dynamo frontend picks a worker (``DYN_ROUTER_MODE``)."""


class KvTransfer(CamelModel):
    """vLLM ``--kv-transfer-config`` for a disaggregated worker.

    The seed: ``{"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_buffer_device":"cpu"}``
    on prefill and ``kv_consumer`` on decode (KV through host memory over TCP).
    """

    connector: ConfigText = Field(
        default="NixlConnector", min_length=1, description="vLLM kv_connector (NIXL over UCX)."
    )
    role: Literal["kv_producer", "kv_consumer", "kv_both"] = Field(
        description="vLLM kv_role: kv_producer on prefill, kv_consumer on decode."
    )
    buffer_device: Literal["cpu", "cuda"] = Field(
        default="cpu",
        description="cpu: KV staged in host memory (needed over TCP; costs memory, see sizing).",
    )

    def as_vllm_json(self) -> dict[str, str]:
        """The dict vLLM parses from ``--kv-transfer-config``."""
        return {
            "kv_connector": self.connector,
            "kv_role": self.role,
            "kv_buffer_device": self.buffer_device,
        }


class RdmaDevice(CamelModel):
    """The RDMA NIC a worker's pod asks for: a device plugin's extended resource (NVIDIA's
    k8s-rdma-shared-dev-plugin advertises e.g. ``rdma/rdma_shared_device_a``; SR-IOV setups
    name their own). The pod also gets the ``IPC_LOCK`` capability, which RDMA memory
    registration needs to pin pages (vLLM's GPUDirect RDMA guidance for Kubernetes pods)."""

    resource: ConfigText = Field(
        pattern=r"^[a-z0-9.-]+/[A-Za-z0-9._-]+$",
        description="Extended resource of the RDMA device plugin, e.g. rdma/rdma_shared_device_a.",
    )
    count: int = Field(default=1, ge=1, description="Units of it per pod.")


class WorkerGroup(CamelModel):
    """Identical workers of one role on one node class (one DGD component)."""

    name: ConfigText = Field(
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        max_length=40,
        description="Component name (DNS label).",
    )
    role: WorkerRole = Field(
        description="aggregated (prefill and decode in one worker), or prefill / decode "
        "(disaggregated: a stack has both)."
    )
    replicas: int = Field(ge=1, description="Identical workers in the group.")
    node_class: ConfigText = Field(description="A key of nodeClasses.")
    tensor_parallel_size: int = Field(
        default=1,
        ge=1,
        le=64,
        description="vLLM --tensor-parallel-size: GPUs of one node per worker (the model's "
        "weights and KV cache split over them); more than 1 needs a node class without "
        "time-slicing, that many gpusPerNode and a sharedMemorySize of at least 2Gi.",
    )
    gpu_memory_utilization: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="vLLM --gpu-memory-utilization: fraction of each of the worker's GPUs.",
    )
    memory_limit: ConfigText = Field(
        default="3584Mi", description="Container memory limit (the seed's part-3 value)."
    )
    base_memory: ConfigText = Field(
        default=DEFAULT_BASE_MEMORY,
        description="Memory the worker needs without host-buffered KV and /dev/shm, per GPU "
        "process (a tensor-parallel worker runs one per GPU: the floor counts "
        "tensorParallelSize of them); the sizing floor adds sharedMemorySize and the host "
        "mirror on top (3,328Mi + 256Mi = 3,584Mi: every part-3 run passed with it). Unset: "
        "3,328Mi with the seed's token tables (256 request slots x 8,192 tokens x 5 B) replaced "
        "by the worker's (vLLM's max_num_seqs x max model length x 5 B).",
    )
    shared_memory_size: ConfigText = Field(
        default=DEFAULT_SHARED_MEMORY,
        description="DGD sharedMemorySize: the memory-backed /dev/shm (the operator's default is "
        "8Gi); it counts against memoryLimit, so the floor includes it. Default: 256Mi, and "
        "2Gi for a tensor-parallel worker (tensorParallelSize > 1), what vLLM's Kubernetes "
        "guide mounts for its shared-memory broadcast.",
    )
    cpu: ConfigText | None = Field(default=None, description="CPU request, e.g. '2'.")
    kv_transfer: KvTransfer | None = Field(
        default=None, description="vLLM --kv-transfer-config of a disaggregated worker."
    )
    rdma: RdmaDevice | None = Field(
        default=None,
        description="The RDMA NIC the pod asks for (and IPC_LOCK): needed when its KV link is "
        "the rdma profile.",
    )
    env: dict[str, ConfigText] = Field(
        default_factory=dict, description="Environment variables of each worker, e.g. UCX_TLS."
    )
    extra_args: tuple[ConfigText, ...] = Field(
        default=(), description="Engine arguments added to this group's workers."
    )
    kv_events: bool = Field(
        default=True,
        description="With the KV router: aggregated and prefill workers get vLLM "
        "--kv-events-config (enable_kv_cache_events) and publish their cache; false: no flag, "
        "the router sees no overlap on them (prefix-blind routing, simulated so).",
    )

    @model_validator(mode="before")
    @classmethod
    def _tensor_parallel_shared_memory(cls, data: Any) -> Any:
        """A tensor-parallel group that sets no ``sharedMemorySize`` gets
        :data:`~stackmodel.quantities.TENSOR_PARALLEL_SHARED_MEMORY`, the /dev/shm its GPU
        processes need (:func:`stackmodel.checks.tensor_parallel_problems`), not the
        single-GPU default a check would refuse."""
        if not isinstance(data, dict) or data.get("sharedMemorySize") is not None:
            return data
        if "shared_memory_size" in data:
            return data
        tp = data.get("tensorParallelSize", data.get("tensor_parallel_size", 1))
        if isinstance(tp, int) and not isinstance(tp, bool) and tp > 1:
            return {**data, "sharedMemorySize": TENSOR_PARALLEL_SHARED_MEMORY}
        return data

    @property
    def host_buffers_kv(self) -> bool:
        """The group's KV transfer stages KV in host memory (``kvTransfer.bufferDevice: cpu``):
        each worker then holds a host mirror of its KV cache (:mod:`kvpath.memory`)."""
        return self.kv_transfer is not None and self.kv_transfer.buffer_device == "cpu"


class FrontendConfig(CamelModel):
    """The Dynamo frontend (OpenAI-compatible HTTP, router)."""

    replicas: int = Field(default=1, ge=1, description="Frontend pods.")
    node_class: ConfigText | None = Field(
        default=None,
        description="Node class the frontend runs on (its selector and tolerations; it needs "
        "no GPU). Default: any node, with every node class's tolerations, so tainted GPU "
        "nodes do not leave it Pending (stackmodel.topology.anywhere_placement).",
    )
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        default="NodePort",
        description="How the load step reaches the frontend (port-forward adds ~2 ms/request).",
    )
    node_port: int | None = Field(
        default=None,
        ge=30000,
        le=32767,
        description="Fixed NodePort of the frontend Service; default: Kubernetes picks one.",
    )
    shared_memory_size: ConfigText = Field(
        default=DEFAULT_SHARED_MEMORY,
        description="DGD sharedMemorySize of the frontend: its memory-backed /dev/shm (the "
        "operator's default is 8Gi).",
    )


DEFAULT_READY_TIMEOUT_MINUTES = 60
"""Minutes ``pulumi up`` waits by default for each object pulumi-kubernetes awaits (the DGD's
Ready, the vllm-service Deployments' rollout, the frontend Service's first ready endpoint:
:func:`manifests.graph.ready_timeout_annotations`): a first deploy, not a restart.

Every node pulls the vLLM runtime image first (``vllm-runtime:1.6.2``, about 12 GB): 12e9 B x
8 / 100 Mbit/s = 16 min from nvcr.io on a 100 Mbit/s link, plus unpacking; then every worker
downloads the model (Qwen3-0.6B: ~1.5 GB) and vLLM loads it and captures its CUDA graphs (~1-2
min). A 15-minute wait fails a first deploy on any link slower than ~150 Mbit/s and leaves a
half-created stack; an hour covers ~30 Mbit/s. The wait ends as soon as the operator reports
Ready, so a warm redeploy is not slower."""


class TopologyConfig(CamelModel):
    """What is deployed: a Dynamo graph, or the part-1 baseline of plain vLLM replicas."""

    kind: Literal["dynamo", "vllm-service"] = Field(
        default="dynamo",
        description="dynamo: a DynamoGraphDeployment (frontend, router, workers); "
        "vllm-service: plain vLLM Deployments behind one Service (the seed's part 1).",
    )
    name: ConfigText = Field(
        default="testbed",
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        max_length=40,
        description="DGD (or Deployment prefix) name.",
    )
    router_mode: RouterMode = Field(
        default="kv", description="The frontend's --router-mode (kv: KV-cache-aware routing)."
    )
    ready_timeout_minutes: int = Field(
        default=DEFAULT_READY_TIMEOUT_MINUTES,
        ge=1,
        le=240,
        description="How long Pulumi waits for the DGD's Ready, the Deployments' rollout and "
        "the frontend Service's endpoints (see DEFAULT_READY_TIMEOUT_MINUTES for why the "
        "default is an hour).",
    )
    frontend: FrontendConfig = Field(default_factory=FrontendConfig)
    workers: tuple[WorkerGroup, ...] = Field(
        min_length=1, description="The worker groups, one DGD component each."
    )

    @field_validator("workers")
    @classmethod
    def _unique_names(cls, workers: tuple[WorkerGroup, ...]) -> tuple[WorkerGroup, ...]:
        names = [w.name for w in workers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"worker names must be unique; repeated: {', '.join(dupes)}")
        return workers


DOCUMENTATION_NETWORKS = {
    ipaddress.ip_network(net): rfc
    for net, rfc in (
        ("192.0.2.0/24", "RFC 5737"),
        ("198.51.100.0/24", "RFC 5737"),
        ("203.0.113.0/24", "RFC 5737"),
        ("2001:db8::/32", "RFC 3849"),
        ("3fff::/20", "RFC 9637"),
    )
}
"""Address blocks reserved for documentation and examples, never a real node, with the RFC
that reserves each (TEST-NET-1/2/3 and the IPv6 documentation prefixes)."""

DOCUMENTATION_DOMAINS = ("example", "example.com", "example.net", "example.org", "invalid", "test")
"""Names reserved for examples and tests (RFC 2606, RFC 6761): no real node is under them."""


def documentation_address(host: str) -> str | None:
    """Why ``host`` (an IP literal, ``[v6]`` or a DNS name) is an example, or None if it is not.

    ``"192.0.2.10"`` -> ``"192.0.2.10 is in 192.0.2.0/24, reserved for documentation (RFC
    5737)"``; ``"node.example.com"`` -> a message naming RFC 2606; ``"10.0.0.5"`` -> None.
    """
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        name = host.lower().rstrip(".")
        reserved = next(
            (d for d in DOCUMENTATION_DOMAINS if name == d or name.endswith(f".{d}")), None
        )
        return f"{host} is under {reserved}, reserved for examples (RFC 2606)" if reserved else None
    network = next((n for n in DOCUMENTATION_NETWORKS if ip in n), None)
    if network is None:
        return None
    return f"{host} is in {network}, reserved for documentation ({DOCUMENTATION_NETWORKS[network]})"


class StackLoadConfig(LoadConfig):
    """The stack's ``load:`` section: the loadgen grid plus the post-deploy load step's settings.

    The grid fields are :class:`~workload.config.LoadConfig`'s (``prefixKinds``, ...); the rest
    drive :mod:`loadstep.inputs`. Unknown keys are rejected, as everywhere.
    """

    enabled: bool = Field(
        default=True,
        description="Run the grid after deploy; false: no grid runs (a step that has run keeps"
        " its results).",
    )
    url: ConfigText | None = Field(
        default=None,
        pattern=r"^https?://[^/\s]+$",
        description="The frontend's base URL as this machine reaches it (e.g. "
        "http://10.0.0.5:30080); default: nodeAddress + the Service's NodePort, or the "
        "LoadBalancer's ingress.",
    )
    node_address: ConfigText | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9.:\[\]-]+$",
        description="Address of any cluster node (a NodePort is open on every node).",
    )
    run_id: ConfigText | None = Field(
        default=None, description="Change it to re-run the grid on an unchanged topology."
    )
    fail_on_errors: bool = Field(
        default=False,
        description="Fail `pulumi up` when the step is not ok (errors, deadline, no model).",
    )
    deadline_minutes: float | None = Field(
        default=None,
        gt=0,
        description="Overall limit of the step (model wait + grid); points not finished by "
        "then are left out and the status says so (the engine ignores custom timeouts). "
        "Default: sized from the grid (loadstep.inputs.default_deadline_minutes).",
    )
    model_wait_minutes: float = Field(
        default=10.0,
        gt=0,
        description="How long to wait for /v1/models to list the model before timing, and "
        "again for the readiness gate (readyCheck).",
    )
    ready_check: bool = Field(
        default=True,
        description="Before the grid, wait until readySuccesses streamed completions in a row "
        "succeed (a listed model may still answer 500/404 for seconds; loadgen.readiness).",
    )
    ready_successes: int = Field(
        default=3, gt=0, description="Completions in a row the readiness gate needs."
    )
    tokenizer: ConfigText | None = Field(
        default=None,
        description="tokenizer.json (or its folder) on this machine for exact prompt lengths; "
        "default: the local Hugging Face cache, else calibrated against the server.",
    )
    runner: Literal["cluster", "local"] = Field(
        default="cluster",
        description="Where the grid runs: cluster (a Kubernetes Job in the stack's namespace, "
        "against the frontend's in-cluster address: incluster) or local (this machine, "
        "through the NodePort or LoadBalancer).",
    )
    clients: int = Field(
        default=1,
        ge=1,
        description="With runner cluster: client pods that split every run (closed loop: its "
        "concurrency; open loop: its rate), at most the grid's smallest concurrency.",
    )
    results_dir: ConfigText = Field(
        default="results",
        min_length=1,
        description="Local folder (relative to the project) the step writes its results under.",
    )

    @field_validator("node_address")
    @classmethod
    def _not_a_documentation_address(cls, address: str | None) -> str | None:
        if address is not None:
            problem = documentation_address(address)
            if problem:
                raise ValueError(f"{problem}: set the address of one of your cluster's nodes")
        return address

    @field_validator("url")
    @classmethod
    def _not_a_documentation_host(cls, url: str | None) -> str | None:
        host = urlsplit(url).hostname if url is not None else None
        problem = documentation_address(host) if host else None
        if problem:
            raise ValueError(f"{problem}: set the URL your frontend answers on")
        return url

    @model_validator(mode="after")
    def _clients_fit(self) -> Self:
        if self.clients > 1 and self.runner == "local":
            raise ValueError("load.clients > 1 needs load.runner: cluster (one local process)")
        if self.clients > min(self.concurrency):
            raise ValueError(
                f"load.clients ({self.clients}) is more than the smallest load.concurrency "
                f"({min(self.concurrency)}): every client needs a stream; lower clients"
            )
        return self

    def grid(self) -> LoadConfig:
        """The loadgen part alone (what :func:`loadgen.runner.run_grid` takes)."""
        return LoadConfig.model_validate(self.model_dump(include=set(LoadConfig.model_fields)))


class SizingConfig(CamelModel):
    """Knobs of the sizing checks (:mod:`stackmodel.sizing`); defaults documented there."""

    allow_unsafe_memory: bool = Field(
        default=False,
        description="Deploy below the memory floor with a warning (reproduces the seed's OOM).",
    )
    prefill_tokens_per_s: float | None = Field(
        default=None,
        gt=0,
        description="Prefill throughput (tokens/s) for the 'will disaggregation pay?' estimate "
        "and the simulation; default: the step-time model's (steptime: the node class's GPU "
        "roofline x its efficiencies: the class's calibration profile's, else AIConfigurator's "
        "for the GPU, else the seed fit's).",
    )
    cluster_check: Literal["error", "warn", "off"] = Field(
        default="error",
        description="What a missing cluster precondition does at preview (nodes with the node"
        " classes' labels, tolerated taints, allocatable GPUs and memory:"
        " clusterread.checks): error stops before anything is deployed, warn deploys"
        " anyway, off reads nothing. Without API access it is one warning.",
    )
    activation_overhead_gib: float = Field(
        default=DEFAULT_ACTIVATION_OVERHEAD_BYTES / GI,
        alias="activationOverheadGiB",
        ge=0,
        description="Per-worker GPU memory outside weights and KV cache, GiB.",
    )


# --- the stack -------------------------------------------------------------------------------


_STACK_NAME = r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+/[A-Za-z0-9._-]+)?$"
"""A stack of this project (``kv-routing``) or a full ``org/project/stack`` name."""


NODE_CLASSES_EXAMPLE = (
    "{gpus: {nodeSelector: {nvidia.com/gpu.present: 'true'}, gpu: h100-sxm, gpuMemoryGiB: 80, "
    "gpusPerNode: 8}}"
)
"""The smallest ``nodeClasses`` worth writing, as a message or description shows one: one class
of eight 80 GB H100 GPUs a node (``testbed recommend``'s tests search it as a whole cluster)."""


class StackConfig(CamelModel):
    """Everything one graph (or standalone) stack deploys and measures.

    The Pulumi config keys are this model's fields (``dynamo-testbed:nodeClasses`` etc.), plus
    the secret ``dynamo-testbed:hfToken`` which is read separately and never enters this model.
    A ``platform`` stack is a :class:`PlatformStackConfig` instead.

    Validate with ``context={"stack": <stack name>}`` (as
    :func:`stackmodel.validation.validate_stack` does): an empty or absent ``namespace``
    becomes :func:`~stackmodel.stack_layout.stack_namespace` of the stack, so two graph stacks
    never share a namespace.
    """

    stack_role: Literal["graph", "standalone"] = Field(
        default="graph",
        description="graph: the serving graph only, reading the platform stack; standalone: "
        "the dynamo-platform release too, everything in one `pulumi up`.",
    )
    platform_stack: ConfigText = Field(
        default=DEFAULT_PLATFORM_STACK,
        pattern=_STACK_NAME,
        description="The platform stack a graph stack reads the operator from (StackReference).",
    )
    namespace: ConfigText = Field(
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        max_length=63,
        description="Namespace the graph and load step run in; default testbed-<stack>.",
    )
    create_namespace: bool = Field(
        default=True,
        description="true: the stack creates its namespace (as Helm's --create-namespace) and "
        "`pulumi destroy` deletes it; false: it deploys into an existing namespace, which "
        "preview checks exists, so a user bound to that namespace by a Role can deploy.",
    )
    parked: bool = Field(
        default=False,
        description="Remove the GPU workloads (DGD or Deployments), keep the stack, its "
        "Service and its load results; the load step does not run while parked.",
    )
    other_namespaces: tuple[ConfigText, ...] = Field(
        default=(),
        description="Config namespaces of other programs that this stack's file also holds "
        "(e.g. aws): their keys are left alone. A key of any namespace that is neither one of "
        "these nor dynamo-testbed, kubernetes or pulumi is refused (a misspelt dynamo-tesbed: "
        "would leave its section at the defaults).",
    )
    node_classes: dict[str, NodeClass] = Field(
        min_length=1,
        description="The cluster's groups of identical GPU nodes, each by a name you choose, "
        f"e.g. {NODE_CLASSES_EXAMPLE}.",
    )
    links: Links = Field(default_factory=Links)
    platform: PlatformConfig = Field(default_factory=PlatformConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    model: ModelConfig
    topology: TopologyConfig
    load: StackLoadConfig = Field(default_factory=StackLoadConfig)
    sizing: SizingConfig = Field(default_factory=SizingConfig)
    baseline_stack: ConfigText | None = Field(
        default=None,
        pattern=_STACK_NAME,
        description="Stack whose `results` output this stack's are compared with: a stack "
        "name in this project and organization, or a full `org/project/stack` name.",
    )

    @field_validator("baseline_stack", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """``""`` means no baseline: it is the default ``Pulumi.yaml`` declares, since the CLI
        requires a declared key without a default (see ``tests/cli_rules``)."""
        return None if value == "" else value

    @model_validator(mode="before")
    @classmethod
    def _namespace_from_stack(cls, data: Any, info: ValidationInfo) -> Any:
        """Fill an empty or absent ``namespace`` from the stack name in the context."""
        stack = (info.context or {}).get("stack")
        if isinstance(data, dict) and not data.get("namespace") and stack:
            return {**data, "namespace": stack_namespace(stack)}
        return data

    @property
    def gpu_units(self) -> dict[str, int]:
        """Node class -> ``nvidia.com/gpu`` units the workers there request: replicas x
        ``tensorParallelSize`` for an engine whose workers hold GPUs (one unit per GPU a worker
        uses; ``EngineProfile.gpu_workers``), 0 for the mocker; classes without workers are left
        out."""
        out: dict[str, int] = {}
        for w in self.topology.workers:
            units = w.replicas * w.tensor_parallel_size if self.engine.profile.gpu_workers else 0
            out[w.node_class] = out.get(w.node_class, 0) + units
        return out


class PlatformStackConfig(CamelModel):
    """A ``stackRole: platform`` stack: the Dynamo platform once per cluster, no graph.

    Only ``stackRole`` and ``platform`` apply; ``platform.operatorScope`` must be ``cluster``
    (one operator serving every graph stack's namespace). Graph keys must stay unset.
    """

    stack_role: Literal["platform"] = Field(description="platform: this stack is the platform.")
    platform: PlatformConfig = Field(default_factory=PlatformConfig)
    other_namespaces: tuple[ConfigText, ...] = Field(
        default=(), description="As a graph stack's otherNamespaces."
    )


SECRET_KEYS = frozenset({"hfToken"})
"""Keys read as Pulumi secrets outside :class:`StackConfig`."""

KNOWN_KEYS = frozenset(
    {field.alias or name for name, field in StackConfig.model_fields.items()} | SECRET_KEYS
)

PLATFORM_KEYS = frozenset({"stackRole", "platform", "otherNamespaces"})
"""The keys a platform stack uses; every other key of :data:`KNOWN_KEYS` is a graph key."""


def stack_role(raw: Mapping[str, Any]) -> str:
    """The ``stackRole`` of a raw config (``graph`` when unset or empty); unchecked."""
    return raw.get("stackRole") or "graph"


def unset_key(key: str, value: Any) -> bool:
    """True if a graph key holds nothing: empty, or its field's default once validated (the
    CLI passes ``false`` as a string; ``{}`` is a section of defaults)."""
    if value in (None, "", {}, []):
        return True
    field = next(f for n, f in StackConfig.model_fields.items() if (f.alias or n) == key)
    if field.is_required():
        return False
    try:
        parsed: Any = TypeAdapter(field.annotation).validate_python(value)
    except ValidationError:
        return False
    return bool(parsed == field.get_default(call_default_factory=True))


CONFIG_NAMESPACES = (PROJECT, "kubernetes", "pulumi")
"""The config namespaces the program reads or hands on: its own, the Kubernetes provider's
(pulumi-kubernetes reads ``kubernetes:context``, ``kubernetes:namespace``, ...) and the
engine's own (``pulumi:disable-default-providers``, ``pulumi:tags``)."""


def namespace_problems(config_map: Mapping[str, Any]) -> list[ConfigProblem]:
    """Config keys whose namespace is none of :data:`CONFIG_NAMESPACES` nor one the stack's
    ``otherNamespaces`` names: nothing reads them, so a misspelt ``dynamo-tesbed:links`` would
    leave the default link in place. Each is refused, naming the close namespace and the
    opt-out.

    ``{"dynamo-tesbed:links": ...}`` -> one problem, its key ``dynamo-tesbed:links``.
    """
    allowed = config_map.get(f"{PROJECT}:otherNamespaces") or []
    if isinstance(allowed, str):
        with contextlib.suppress(json.JSONDecodeError):
            allowed = json.loads(allowed)
    allowed = allowed if isinstance(allowed, list) else []
    out = []
    for full_key in config_map:
        namespace, colon, key = full_key.partition(":")
        if not colon or namespace in CONFIG_NAMESPACES or namespace in allowed:
            continue
        hint = did_you_mean(namespace, CONFIG_NAMESPACES, suffix=f":{key}")
        out.append(
            ConfigProblem(
                full_key,
                config_map[full_key],
                f"no part of this program or its providers reads the namespace {namespace!r}, "
                f"so the key would be ignored; {hint}this project's keys are {PROJECT}:<key>. "
                f"If another program reads it, say so: {PROJECT}:otherNamespaces: [{namespace}]",
            )
        )
    return out


def config_key(key: str) -> str:
    """A stack file's ``config:`` key as the config map holds it: a key without a namespace is
    the project's (``nodeClasses`` -> ``dynamo-testbed:nodeClasses``); a namespaced key stays
    as it is. Every reader of a stack file's keys (:func:`stackmodel.stacks.stack_config`,
    ``testbed recommend``'s cluster file) names them through it."""
    return key if ":" in key else f"{PROJECT}:{key}"


def project_values(config_map: Mapping[str, Any]) -> dict[str, Any]:
    """This project's values from a Pulumi config map, keys without the ``dynamo-testbed:``.

    ``{"dynamo-testbed:topology": '{"kind": ...}', "kubernetes:context": "x"}`` ->
    ``{"topology": {"kind": ...}}``: other namespaces are dropped; structured values arrive as
    JSON strings (as the CLI passes them) and are parsed; plain strings stay strings.
    """
    out: dict[str, Any] = {}
    for full_key, value in config_map.items():
        project, _, key = full_key.partition(":")
        if project != PROJECT or not key:
            continue
        if isinstance(value, str) and value[:1] in "{[":
            # A string that only looks like JSON stays a string (e.g. render's "[secret]").
            with contextlib.suppress(json.JSONDecodeError):
                value = json.loads(value)
        out[key] = value
    return out
