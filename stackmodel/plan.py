"""A stack resolved once: everything the checks, the Kubernetes objects, the program and the
simulation derive from a validated config, computed in one place.

A stack's plan reads the files the stack names once (the model's ``configJson``, each node
class's calibration profile, the link profiles) and holds: the model's geometry as the workers
hold it; per worker group its GPU, calibration, step times, step budget, KV link and parsed
engine arguments (:class:`GroupPlan`); where every replica lands (:mod:`stackmodel.placement`);
and the sizing (:class:`~stackmodel.sizing.StackSizing`: its report's ``disaggregation`` is the
verdict ``testbed render`` prints). Validation builds it, and every command reads the one it
built: a stack by name, :func:`stackmodel.stacks.load_stack`; a raw config,
:func:`stackmodel.validation.validate_stack`; a config built or changed in code,
:func:`stackmodel.validation.validate_config`.

Building is two steps, so that validation can check what the files hold before the sizing uses
it: :func:`resolve_inputs` reads and resolves (each failure a
:class:`~stackmodel.errors.ConfigProblem` naming its key), :func:`build_plan` computes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

from kvpath.profile import LinkProfile, LinkSetting, host_staged, resolve_link
from kvpath.transfers import agent_lanes, worker_pair_link
from stackmodel.config import NodeClass, RouterMode, StackConfig, WorkerGroup
from stackmodel.engine_args import EngineArg, parse_engine_args
from stackmodel.engines import EngineProfile
from stackmodel.errors import ConfigProblem
from stackmodel.models import (
    FP8_BYTES,
    ModelGeometry,
    UnknownModelError,
    geometry_from_hf_config,
    known_model,
)
from stackmodel.placement import ReplicaPlacement, gpu_sharing_sets, place_workers
from stackmodel.quantities import GI, parse_quantity
from stackmodel.sizing import (
    MAX_NUM_SEQS_FLAG,
    ComponentMemory,
    GpuAllocation,
    GpuWorker,
    SizingReport,
    StackSizing,
    build_sizing_report,
    default_max_num_seqs,
    model_base_memory,
    model_base_memory_note,
    tensor_parallel,
)
from stackmodel.ucx import UCX_TLS, moves_between_gpus
from steptime.calibration_profile import CalibrationProfile, load_calibration_file
from steptime.fit import SEED_FIT, fit_for
from steptime.gpus import GpuSpec, resolve_gpu
from steptime.measured import AIC_VERSION, measured_for
from steptime.prefill_table import PrefillTable, prefill_table
from steptime.roofline import EngineFit, EngineStep

PROJECT_DIR = Path(__file__).resolve().parent.parent
"""The project folder (holds ``Pulumi.yaml``): ``model.configJson``, calibration profiles and
link profile files are relative to it."""

LinkKey = Literal["sameNode", "crossNode"]


@dataclass(frozen=True)
class StackInputs:
    """What a stack's settings resolve to, files read (:func:`resolve_inputs`).

    Attributes:
        geometry: the model's geometry as the workers hold it (:func:`model_geometry`); None
            when it could not be read (a problem says why).
        gpus: node class -> its GPU (:func:`steptime.gpus.resolve_gpu`).
        gpu_notes: node class -> the sentence saying which default GPU it got (absent: named).
        calibrations: node class -> its calibration profile (None: none named); absent when it
            could not be read.
        links: ``sameNode`` / ``crossNode`` -> the link profile of that setting; absent when it
            does not resolve.
        replicas: where every replica lands (:func:`~stackmodel.placement.place_workers`).
        problems: what could not be resolved, each naming its key, in the order the sizing
            checks report them: quantities, links, calibration profiles, the model.
    """

    geometry: ModelGeometry | None
    gpus: dict[str, GpuSpec]
    gpu_notes: dict[str, str]
    calibrations: dict[str, CalibrationProfile | None]
    links: dict[LinkKey, LinkProfile]
    replicas: tuple[ReplicaPlacement, ...]
    problems: tuple[ConfigProblem, ...]


def model_geometry(cfg: StackConfig, project_dir: Path = PROJECT_DIR) -> ModelGeometry:
    """The model's geometry as the workers hold it: ``model.geometry``, else
    ``model.configJson`` (read from ``project_dir``), else the catalog; then
    ``model.quantization: fp8`` makes every weight 1 byte and an fp8 ``model.kvCacheDtype`` every
    KV element (:data:`~stackmodel.models.FP8_BYTES`), so weight bytes, KV bytes per token and
    all that follows from them (GPU fit, KV capacity, host mirrors, transfers, step times) are
    FP8's.

    Raises:
        UnknownModelError: none is available (the message lists known models).
        FileNotFoundError, ValueError, KeyError: ``model.configJson`` cannot be read
            (:func:`stackmodel.models.geometry_from_hf_config`).
    """
    if cfg.model.geometry is not None:
        geometry = cfg.model.geometry
    elif cfg.model.config_json is not None:
        geometry = geometry_from_hf_config(project_dir / cfg.model.config_json)
    else:
        geometry = known_model(cfg.model.name)
    update: dict[str, int] = {}
    if cfg.model.quantization == "fp8":
        update["weight_dtype_bytes"] = FP8_BYTES
    if cfg.model.kv_cache_dtype != "auto":
        update["kv_cache_dtype_bytes"] = FP8_BYTES
    return geometry.model_copy(update=update) if update else geometry


def max_model_len(cfg: StackConfig, geometry: ModelGeometry) -> int | None:
    """vLLM's max model length (tokens): ``model.maxModelLen``, else the model's context length
    ``max_position_embeddings``, vLLM's default ``--max-model-len`` (vLLM v0.31.0
    ``vllm/config/model.py`` ``_get_and_verify_max_len``, lines 2596-2621); None when neither is
    known."""
    return cfg.model.max_model_len or geometry.max_position_embeddings


def _workers_key(i: int, field: str) -> str:
    return f"topology.workers[{i}].{field}"


def _quantity_problems(cfg: StackConfig) -> list[ConfigProblem]:
    """Every memory quantity of the stack that does not parse."""
    out = []
    for i, w in enumerate(cfg.topology.workers):
        quantities = (
            ("memoryLimit", w.memory_limit),
            ("baseMemory", w.base_memory),
            ("sharedMemorySize", w.shared_memory_size),
        )
        for field, quantity in quantities:
            try:
                parse_quantity(quantity)
            except ValueError as exc:
                out.append(ConfigProblem(_workers_key(i, field), quantity, str(exc)))
    frontend = cfg.topology.frontend.shared_memory_size
    try:
        parse_quantity(frontend)
    except ValueError as exc:
        out.append(ConfigProblem("topology.frontend.sharedMemorySize", frontend, str(exc)))
    return out


def resolve_inputs(cfg: StackConfig, project_dir: Path = PROJECT_DIR) -> StackInputs:
    """Read and resolve what ``cfg``'s settings name, each file once; what fails is a problem
    naming its key (:attr:`StackInputs.problems`), never an exception. Every worker group's
    node class must exist (:func:`stackmodel.checks.node_class_problems` says so first)."""
    problems = _quantity_problems(cfg)
    links: dict[LinkKey, LinkProfile] = {}
    settings: tuple[tuple[LinkKey, LinkSetting], ...] = (
        ("sameNode", cfg.links.same_node),
        ("crossNode", cfg.links.cross_node),
    )
    for key, setting in settings:
        try:
            links[key] = resolve_link(setting, project_dir)
        except ValueError as exc:
            problems.append(ConfigProblem(f"links.{key}", setting, str(exc)))
    calibrations: dict[str, CalibrationProfile | None] = {}
    for name, node_class in cfg.node_classes.items():
        path = node_class.calibration
        try:
            calibrations[name] = None if path is None else load_calibration_file(project_dir / path)
        except ValueError as exc:
            problems.append(ConfigProblem(f"nodeClasses.{name}.calibration", path, str(exc)))
    geometry: ModelGeometry | None = None
    try:
        geometry = model_geometry(cfg, project_dir)
    except UnknownModelError as exc:
        problems.append(ConfigProblem("model.geometry", None, str(exc)))
    except (OSError, ValueError, KeyError) as exc:
        problems.append(
            ConfigProblem(
                "model.configJson",
                cfg.model.config_json,
                f"cannot read the model geometry from it: {exc!s}",
            )
        )
    gpus, notes = {}, {}
    for name, node_class in cfg.node_classes.items():
        gpus[name], note = resolve_gpu(node_class.gpu)
        if note is not None:
            notes[name] = f"node class {name!r} {note}"
        problem = calibration_elsewhere(name, node_class, calibrations.get(name), gpus[name], cfg)
        if problem is not None:
            problems.append(problem)
    return StackInputs(
        geometry=geometry,
        gpus=gpus,
        gpu_notes=notes,
        calibrations=calibrations,
        links=links,
        replicas=place_workers(cfg),
        problems=tuple(problems),
    )


def calibration_elsewhere(
    name: str,
    node_class: NodeClass,
    profile: CalibrationProfile | None,
    gpu: GpuSpec,
    cfg: StackConfig,
) -> ConfigProblem | None:
    """A calibration profile fitted on another GPU or model than node class ``name`` runs is
    refused (its efficiencies are that GPU's and model's), unless the class sets
    ``calibrationElsewhere: true``; the simulation then says where it was calibrated
    (:func:`steptime.calibration_profile.applied_label`)."""
    if profile is None or node_class.calibration_elsewhere:
        return None
    if (profile.gpu, profile.model) == (gpu.name, cfg.model.name):
        return None
    return ConfigProblem(
        f"nodeClasses.{name}.calibration",
        node_class.calibration,
        f"calibrated on {profile.gpu}/{profile.model}, node class {name!r} runs "
        f"{gpu.name}/{cfg.model.name}: calibrate on runs of this GPU and model, or set "
        f"nodeClasses.{name}.calibrationElsewhere=true to apply it anyway",
    )


@dataclass(frozen=True)
class GroupPlan:
    """One worker group, resolved.

    Attributes:
        index: the group's position in ``topology.workers`` (its key path's index).
        group: the group's config.
        node_class: its node class's config.
        gpu: its node class's GPU.
        calibration: its node class's calibration profile (None: none named).
        engine: the engine its workers run (``engine.kind``'s profile).
        engine_args: its engine arguments, parsed: engine ``extraArgs``, then the group's.
        step: one worker's step times (:meth:`step_with` the seed fit), its per-step token
            budget included (:func:`max_batched_tokens`).
        kv_link: the link its KV crosses to decode (prefill groups; None for the others).
        kv_link_setting: the setting ``kv_link`` stands for (``links.sameNode`` or
            ``links.crossNode``; None for the others).
        kv_lanes: the NIXL agent pairs that carry one of its requests' KV at once, against
            the decode group of the least tensor parallelism
            (:func:`kvpath.transfers.agent_lanes`; 1 for groups without a KV link).
        prefill_table: the cold-prefill times of the measured source the simulation times the
            group by (:func:`steptime.measured.measured_for`), as the package ships them
            (:mod:`steptime.prefill_table`; None: the roofline's ``step`` times it).
    """

    index: int
    group: WorkerGroup
    node_class: NodeClass
    gpu: GpuSpec
    calibration: CalibrationProfile | None
    engine: EngineProfile
    engine_args: tuple[EngineArg, ...]
    step: EngineStep
    kv_link: LinkProfile | None
    kv_link_setting: LinkSetting | None
    prefill_table: PrefillTable | None
    kv_lanes: int = 1

    @property
    def name(self) -> str:
        """The group's name."""
        return self.group.name

    @property
    def kv_path(self) -> LinkProfile | None:
        """:attr:`kv_link` as a worker pair's :attr:`kv_lanes` agent pairs carry it
        (:func:`kvpath.transfers.worker_pair_link`): the rates every cost of its KV reads."""
        return None if self.kv_link is None else worker_pair_link(self.kv_link, self.kv_lanes)

    @property
    def max_batched_tokens(self) -> int:
        """One worker's per-step token budget (:func:`max_batched_tokens`)."""
        budget = self.step.max_batched_tokens
        assert budget is not None  # a group's step always has its budget
        return budget

    def prefill_s(self, tokens: int) -> float:
        """GPU seconds of one worker's cold prefill of ``tokens`` prompt tokens, from the
        source the simulation times the group by: the measured source's shipped table
        (:attr:`prefill_table`), else the roofline's ``step``."""
        if self.prefill_table is not None:
            return self.prefill_table.prefill_s(tokens)
        return self.step.prefill_s(tokens)

    def step_with(self, fit: EngineFit) -> EngineStep:
        """One worker's step times with the efficiencies ``fit`` where the group's GPU takes
        them (:func:`group_fit`)."""
        fitted = group_fit(self.gpu, self.node_class, self.calibration, fit)
        return dataclasses.replace(self.step, fit=fitted)


def group_fit(
    gpu: GpuSpec, node_class: NodeClass, calibration: CalibrationProfile | None, fit: EngineFit
) -> EngineFit:
    """The efficiencies a worker on ``gpu`` takes given ``fit``: its node class's calibration
    profile's (``calibration``, read from ``node_class.calibration``) win over ``fit``, and
    AIConfigurator's for a GPU it has over an uncalibrated ``fit``
    (:func:`steptime.fit.fit_for`)."""
    if calibration is not None:
        fit = calibration.engine_fit(str(node_class.calibration))
    return fit_for(gpu, fit)


def max_batched_tokens(
    engine: EngineProfile, args: Sequence[EngineArg], gpu: GpuSpec, gpu_memory_gib: float
) -> int:
    """The per-step token budget of an ``engine`` worker with engine arguments ``args``: the
    last of its step-budget flag (vLLM's ``--max-num-batched-tokens``) with a whole number of
    tokens (argparse's last wins; one without is refused,
    :func:`stackmodel.checks.overlap_problems`), else the engine's default
    (:attr:`~stackmodel.engines.EngineProfile.default_step_budget`)."""
    flag = engine.step_budget_flag
    given = [int(a.value) for a in args if a.flag == flag and a.value.isdigit()]
    return given[-1] if given else engine.default_step_budget(gpu, gpu_memory_gib)


@dataclass(frozen=True)
class StackPlan:
    """A validated stack resolved once (the module docstring).

    Attributes:
        cfg: the validated config.
        geometry: the model's geometry as the workers hold it (:func:`model_geometry`).
        groups: the worker groups, in config order.
        replicas: where every replica lands, in config order (:func:`~stackmodel.placement.
            place_workers`).
        sharing_sets: the workers that may share one GPU at worst, per node class
            (:func:`~stackmodel.placement.gpu_sharing_sets`).
        links: ``sameNode`` / ``crossNode`` -> the link profile the stack's KV takes there
            (:func:`kv_links`: chosen once, read by the sizing, ``render``'s verdict and
            crossover, the simulation and ``testbed recommend``).
        gpu_notes: node class -> which default GPU it got (absent: the class names one).
        sizing: the sizing numbers and findings.
    """

    cfg: StackConfig
    geometry: ModelGeometry
    groups: tuple[GroupPlan, ...]
    replicas: tuple[ReplicaPlacement, ...]
    sharing_sets: tuple[GpuAllocation, ...]
    links: dict[LinkKey, LinkProfile]
    gpu_notes: dict[str, str]
    sizing: StackSizing

    @property
    def engine(self) -> EngineProfile:
        """The engine the stack's workers run (``engine.kind``'s profile)."""
        return self.cfg.engine.profile

    def group(self, name: str) -> GroupPlan:
        """The worker group ``name``.

        Raises:
            KeyError: no worker group of that name.
        """
        for group in self.groups:
            if group.name == name:
                return group
        raise KeyError(name)

    @property
    def verdict_group(self) -> GroupPlan:
        """The worker group whose prefill the disaggregation verdict counts
        (:func:`verdict_group`)."""
        return verdict_group(self.groups)

    @property
    def max_model_len(self) -> int | None:
        """vLLM's max model length in tokens (:func:`max_model_len`)."""
        return max_model_len(self.cfg, self.geometry)

    @property
    def gpus(self) -> int:
        """Physical GPUs the stack's workers request, over its node classes
        (:attr:`~stackmodel.config.StackConfig.gpu_units`, :meth:`~stackmodel.config.NodeClass.
        gpus_for`)."""
        classes = self.cfg.node_classes
        return sum(classes[name].gpus_for(units) for name, units in self.cfg.gpu_units.items())

    @property
    def disaggregated(self) -> bool:
        """The stack has prefill (and so decode) workers."""
        return any(g.group.role == "prefill" for g in self.groups)

    @property
    def router(self) -> RouterMode:
        """What picks a worker for each request: the Dynamo frontend's ``routerMode`` (a
        ``dynamo`` topology), else ``round-robin`` (a Kubernetes Service in front of plain vLLM
        replicas)."""
        dynamo = self.cfg.topology.kind == "dynamo"
        return self.cfg.topology.router_mode if dynamo else "round-robin"

    @property
    def engine_label(self) -> str:
        """The engine a calibration profile records: ``vllm on dynamo 1.6.2`` (the engine kind
        and :attr:`~stackmodel.config.EngineConfig.release`)."""
        return f"{self.cfg.engine.kind} on dynamo {self.cfg.engine.release}"

    @property
    def run_labels(self) -> dict[str, object]:
        """What a results folder of this stack records it ran on (``stack.json``'s
        ``labels``): ``gpu`` (the worker groups' GPU names, comma-separated), ``model``,
        ``engine`` (:attr:`engine_label`), ``versions`` (Dynamo, and the vLLM its release line
        ships where :data:`kvpath.versions.RELEASE_LINES` knows it:
        :attr:`~stackmodel.engines.EngineProfile.shipped_versions`) and ``servedBy`` (the
        workers: ``vllm`` on GPUs, or Dynamo's ``mocker``)."""
        release = self.cfg.engine.release
        versions = {"dynamo": release, **self.engine.shipped_versions(release)}
        return {
            "gpu": ", ".join(sorted({g.gpu.name for g in self.groups})),
            "model": self.cfg.model.name,
            "engine": self.engine_label,
            "versions": versions,
            "servedBy": f"{self.cfg.engine.kind} workers",
        }


def base_memory(
    cfg: StackConfig, group: WorkerGroup, gpu: GpuSpec, geometry: ModelGeometry | None
) -> str | int:
    """A worker group's base memory (quantity or bytes): its ``baseMemory`` where the stack sets
    it, else :func:`stackmodel.sizing.model_base_memory` for its ``max_num_seqs`` (the last
    ``--max-num-seqs`` of the engine's then the group's ``extraArgs``, else vLLM's default for
    its GPU, ``gpu``) and its max model length (:func:`max_model_len`; ``model.maxModelLen``
    alone without the model's ``geometry``)."""
    if "base_memory" in group.model_fields_set:
        return group.base_memory
    return model_base_memory(*_token_table_shape(cfg, group, gpu, geometry))


def base_memory_note(
    cfg: StackConfig, group: WorkerGroup, gpu: GpuSpec, geometry: ModelGeometry | None
) -> str:
    """Where :func:`base_memory` comes from, in words, with its parts
    (:func:`stackmodel.sizing.model_base_memory_note`), for the memory-floor message."""
    if "base_memory" in group.model_fields_set:
        return f"baseMemory {group.base_memory} as set"
    return model_base_memory_note(*_token_table_shape(cfg, group, gpu, geometry))


def _token_table_shape(
    cfg: StackConfig, group: WorkerGroup, gpu: GpuSpec, geometry: ModelGeometry | None
) -> tuple[int, int | None]:
    """(max_num_seqs, max model length) of a worker group's token tables, as
    :func:`base_memory` reads them."""
    args = parse_engine_args([*cfg.engine.extra_args, *group.extra_args])
    given = [int(a.value) for a in args if a.flag == MAX_NUM_SEQS_FLAG and a.value.isdigit()]
    gpu_memory_gib = cfg.node_classes[group.node_class].gpu_memory_gib
    seqs = given[-1] if given else default_max_num_seqs(gpu, gpu_memory_gib)
    context = cfg.model.max_model_len if geometry is None else max_model_len(cfg, geometry)
    return seqs, context


def verdict_group(groups: Sequence[GroupPlan]) -> GroupPlan:
    """The worker group whose prefill the disaggregation verdict counts: the first prefill
    group, else (an aggregated stack) the first worker group."""
    prefill = [g for g in groups if g.group.role == "prefill"]
    return (prefill or list(groups))[0]


def same_host(cfg: StackConfig, a: str, b: str) -> bool:
    """True when pods on node classes ``a`` and ``b`` are certain to share a host: both are the
    same class and that class has a single node."""
    return a == b and cfg.node_classes[a].nodes == 1


def kv_link_key(
    cfg: StackConfig, prefill: WorkerGroup, links: dict[LinkKey, LinkProfile]
) -> LinkKey:
    """Which link a prefill group's KV crosses to decode.

    ``sameNode`` when every decode group is certainly on the prefill group's host, ``crossNode``
    when every one is on another node class, else the slower of the two: a decode group shares
    the prefill group's node class of several nodes, and the scheduler places them (the DGD sets
    no anti-affinity), or decode groups are spread. On a node class whose node has one GPU unit
    (one GPU, no time-slicing) a prefill and a decode worker that hold GPUs
    (:attr:`~stackmodel.engines.EngineProfile.gpu_workers`) never share a node, so
    ``crossNode``.
    """
    decode_classes = {w.node_class for w in cfg.topology.workers if w.role == "decode"}
    return link_key_between(cfg, prefill.node_class, decode_classes, links)


def link_key_between(
    cfg: StackConfig,
    prefill_class: str,
    decode_classes: Collection[str],
    links: Mapping[LinkKey, LinkProfile],
) -> LinkKey:
    """:func:`kv_link_key` for a prefill group on ``prefill_class`` and decode groups on
    ``decode_classes`` (node classes of ``cfg``): what a topology not yet a config (a search
    candidate) would cross."""
    if all(same_host(cfg, prefill_class, c) for c in decode_classes):
        return "sameNode"
    node_class = cfg.node_classes[prefill_class]
    gpu_workers = cfg.engine.profile.gpu_workers
    alone = gpu_workers and node_class.gpu_units_per_node < 2
    if prefill_class not in decode_classes or alone:
        return "crossNode"
    slower = links["crossNode"].bytes_per_s < links["sameNode"].bytes_per_s
    return "crossNode" if slower else "sameNode"


def staged_through_host(cfg: StackConfig, group: WorkerGroup, gpu: GpuSpec) -> bool:
    """True when a prefill group's KV, in GPU buffers, goes between two GPUs of its node
    through host memory (:data:`kvpath.profile.HOST_STAGED`): its ``UCX_TLS`` has no
    ``cuda_ipc`` (:func:`stackmodel.ucx.moves_between_gpus`), or its node's GPUs have no
    peer-to-peer access (:attr:`steptime.gpus.GpuSpec.peer_to_peer`) and more than one of them
    may hold the pair. False for host buffers (vLLM's own copies, :mod:`kvpath.copies`)."""
    kv = group.kv_transfer
    if group.role != "prefill" or kv is None or kv.buffer_device != "cuda":
        return False
    two_gpus = cfg.node_classes[group.node_class].gpus_per_node > 1
    return not moves_between_gpus(group.env.get(UCX_TLS)) or (two_gpus and not gpu.peer_to_peer)


def kv_links(cfg: StackConfig, inputs: StackInputs) -> dict[LinkKey, LinkProfile]:
    """The links as the stack's KV takes them, chosen once for every consumer: the settings'
    profiles (:attr:`StackInputs.links`), ``sameNode`` host-staged
    (:func:`kvpath.profile.host_staged`) when a prefill group's GPU-buffer KV has no direct
    path between its node's GPUs (:func:`staged_through_host`), and vLLM's host-copy rates a
    probed profile carries (``sameNode``'s first) on both, as the simulation times every
    host-buffered worker with them."""
    links = dict(inputs.links)
    same = links.get("sameNode")
    staged = any(
        staged_through_host(cfg, w, inputs.gpus[w.node_class]) for w in cfg.topology.workers
    )
    if same is not None and staged and cfg.engine.profile.moves_kv:
        links["sameNode"] = host_staged(same)
    probed = [p.host_copies for p in links.values() if p.host_copies is not None]
    if probed:
        links = {k: p.model_copy(update={"host_copies": probed[0]}) for k, p in links.items()}
    return links


def _group_plan(
    cfg: StackConfig,
    index: int,
    inputs: StackInputs,
    geometry: ModelGeometry,
    links: dict[LinkKey, LinkProfile],
) -> GroupPlan:
    """One worker group of ``cfg`` (:class:`GroupPlan`), from resolved inputs."""
    group = cfg.topology.workers[index]
    node_class = cfg.node_classes[group.node_class]
    gpu = inputs.gpus[group.node_class]
    engine = cfg.engine.profile
    args = parse_engine_args([*cfg.engine.extra_args, *group.extra_args])
    profile = inputs.calibrations[group.node_class]
    tp = group.tensor_parallel_size
    step = EngineStep(
        gpu=gpu,
        geometry=geometry.per_gpu(tp),
        fit=group_fit(gpu, node_class, profile, SEED_FIT),
        prefill_tokens_per_s_override=cfg.sizing.prefill_tokens_per_s,
        tensor_parallel=tensor_parallel(geometry, gpu, tp),
        fp8_weights=geometry.weight_dtype_bytes == FP8_BYTES,
        max_batched_tokens=max_batched_tokens(engine, args, gpu, node_class.gpu_memory_gib),
    )
    key = kv_link_key(cfg, group, links) if group.role == "prefill" else None
    decode_tps = [g.tensor_parallel_size for g in cfg.topology.workers if g.role == "decode"]
    lanes = agent_lanes(tp, min(decode_tps)) if key is not None and decode_tps else 1
    settings = {"sameNode": cfg.links.same_node, "crossNode": cfg.links.cross_node}
    return GroupPlan(
        index=index,
        group=group,
        node_class=node_class,
        gpu=gpu,
        calibration=profile,
        engine=engine,
        engine_args=args,
        step=step,
        kv_link=None if key is None else links[key],
        kv_link_setting=None if key is None else settings[key],
        prefill_table=prefill_table(
            measured_for(step, cfg.model.name, tp, geometry.kv_cache_dtype_bytes == FP8_BYTES)
        ),
        kv_lanes=lanes,
    )


def prefill_source(
    group: str, step: EngineStep, gpu_named: bool, table: PrefillTable | None = None
) -> str:
    """Where the verdict's prefill rate comes from, in a few words: worker group ``group``'s
    measured source's shipped prefill times (``table``), else its roofline ``step``, on a GPU
    its node class names (``gpu_named``) or the default."""
    if step.prefill_tokens_per_s_override is not None:
        return "sizing.prefillTokensPerS"
    default = "" if gpu_named else ", the default"
    if table is not None:
        steps = table.steps
        return (
            f"{group} on {step.gpu.name}{default}: {steps.label} (aiconfigurator-core "
            f"{AIC_VERSION}, TP{steps.tensor_parallel}, steptime.prefill_table)"
        )
    return (
        f"{group} on {step.gpu.name}{default}: dense "
        f"{step.gpu.compute_dtype(step.fp8_weights)} roofline x "
        f"{step.fit.prefill_efficiency:.2f} ({step.fit.label})"
    )


def _kv_worker_sets(cfg: StackConfig) -> list[GpuAllocation]:
    """One entry per worker group, named as the group, on its node class's GPU: a worker's
    KV-cache budget depends only on its own ``gpuMemoryUtilization`` and GPU size
    (:func:`stackmodel.sizing.kv_cache_budget_bytes`), so every replica of a group gets the
    same number, whichever workers share its GPU; a tensor-parallel worker's is one GPU's."""
    return [
        GpuAllocation(
            node_class=g.node_class,
            gpu_memory_gib=cfg.node_classes[g.node_class].gpu_memory_gib,
            workers=[GpuWorker(name=g.name, gpu_memory_utilization=g.gpu_memory_utilization)],
            tensor_parallel_size=g.tensor_parallel_size,
        )
        for g in cfg.topology.workers
    ]


def _sizing(
    cfg: StackConfig,
    geometry: ModelGeometry,
    groups: Sequence[GroupPlan],
    sharing: Sequence[GpuAllocation],
    links: dict[LinkKey, LinkProfile],
) -> StackSizing:
    """The sizing rules run for a stack.

    The concurrency is the load grid's highest; the prompt length is the load's
    ``promptTokens``; the link for the "will disaggregation pay?" verdict is the slowest
    prefill link (``links.crossNode`` for an aggregated stack); the verdict counts the load's
    prefix-cache hits (:func:`expected_cached_tokens`) and the transfers the prefill workers
    run at once (``min(prefill replicas, highest concurrency)``).
    """
    prefill_links = {g.name: g.kv_path for g in groups if g.kv_path is not None}
    verdict_link = (
        min(prefill_links.values(), key=lambda p: p.bytes_per_s)
        if prefill_links
        else links["crossNode"]
    )
    components = [
        ComponentMemory(
            name=g.name,
            memory_limit=g.group.memory_limit,
            host_buffers_kv=g.group.host_buffers_kv,
            base_memory=base_memory(cfg, g.group, g.gpu, geometry),
            shared_memory_size=g.group.shared_memory_size,
            tensor_parallel_size=g.group.tensor_parallel_size,
            base_note=base_memory_note(cfg, g.group, g.gpu, geometry),
        )
        for g in groups
    ]
    verdict = verdict_group(groups)
    step = verdict.step
    prompt = cfg.load.prompt_tokens
    prefill_workers = sum(g.group.replicas for g in groups if g.group.role == "prefill")
    report = partial(
        build_sizing_report,
        concurrent_transfers=min(max(prefill_workers, 1), max(cfg.load.concurrency)),
        model=cfg.model.name,
        geometry=geometry,
        prompt_tokens=prompt,
        concurrency=max(cfg.load.concurrency),
        link=verdict_link,
        # The prompt's GPU seconds, all-reduces included, as a rate.
        prefill_tokens_per_s=prompt / verdict.prefill_s(prompt)
        if prompt
        else step.prefill_tokens_per_s(),
        prefill_source=prefill_source(
            verdict.name, step, verdict.node_class.gpu is not None, verdict.prefill_table
        ),
        components=components,
        gpus=sharing,
        kv_workers=_kv_worker_sets(cfg),
        block_size_tokens=verdict.engine.block_size_tokens,
        activation_overhead_bytes=math.floor(cfg.sizing.activation_overhead_gib * GI),
        allow_unsafe_memory=cfg.sizing.allow_unsafe_memory,
        transfer_tensor_parallel_size=verdict.group.tensor_parallel_size,
    )
    # The KV capacities the cache estimate reads come out of the sizing itself.
    cached = expected_cached_tokens(cfg, groups, verdict, report())
    return StackSizing(
        geometry=geometry,
        report=report(cached_tokens=cached),
        links=prefill_links,
        kv_tensor_parallel_size=verdict.group.tensor_parallel_size,
    )


def expected_cached_tokens(
    cfg: StackConfig, groups: Sequence[GroupPlan], verdict: GroupPlan, report: SizingReport
) -> int:
    """Prompt tokens of a request the prefill workers' prefix cache is expected to hold, for
    the verdict: the load's shared prefix (``promptTokens x prefixShare``, in whole KV blocks of
    the engine's :attr:`~stackmodel.engines.EngineProfile.block_size_tokens`: the prefix cache
    keeps whole blocks) times the share of the grid's prefixes that fit the KV caches
    (``report``'s rows) of the workers that prefill (the prefill groups, else the verdict's
    group), averaged over the grid's ``prefixKinds`` (a KV-aware router keeps each prefix on
    the workers holding it). 0 without a shared prefix."""
    grid = cfg.load.grid()
    block = verdict.engine.block_size_tokens
    prefix = min(grid.prefix_tokens, cfg.load.prompt_tokens) // block * block
    if not prefix:
        return 0
    rows = {w.name: w for w in report.workers}
    prefilling = [g for g in groups if g.group.role == "prefill"] or [verdict]
    capacity = sum(g.group.replicas * rows[g.name].kv_capacity_tokens for g in prefilling)
    fits = [min(1.0, capacity / (kinds * prefix)) for kinds in grid.prefix_kinds]
    return round(prefix * sum(fits) / len(fits))


def build_plan(cfg: StackConfig, inputs: StackInputs) -> StackPlan:
    """The plan of ``cfg`` from its resolved inputs.

    Raises:
        ValueError: ``inputs`` has problems (resolve them first).
    """
    if inputs.problems or inputs.geometry is None:
        raise ValueError(
            "the stack's inputs do not resolve: " + "; ".join(p.render() for p in inputs.problems)
        )
    geometry = inputs.geometry
    links = kv_links(cfg, inputs)
    groups = tuple(
        _group_plan(cfg, i, inputs, geometry, links) for i in range(len(cfg.topology.workers))
    )
    sharing = tuple(gpu_sharing_sets(cfg))
    return StackPlan(
        cfg=cfg,
        geometry=geometry,
        groups=groups,
        replicas=inputs.replicas,
        sharing_sets=sharing,
        links=links,
        gpu_notes=dict(inputs.gpu_notes),
        sizing=_sizing(cfg, geometry, groups, sharing, links),
    )
