"""What ``pulumi preview`` and ``testbed render`` say about a valid stack without refusing it:
settings upstream deprecated, keys another key overrides, rules not read at the stack's release,
links the sizing takes on an assumption. Each is a :class:`~stackmodel.errors.ConfigWarning`
naming its key and value; :func:`stack_warnings` gives a stack's, in the order preview logs them.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic.alias_generators import to_camel

from configkeys.suggest import closest
from kvpath.profile import LinkSetting, gb_per_s_text
from kvpath.versions import UpstreamRule, line_text, minor_of, rules_not_read_at, shipped_nixl
from stackmodel.config import StackConfig
from stackmodel.errors import PROJECT, ConfigWarning
from stackmodel.models import GATED_MODELS, KNOWN_MODELS
from stackmodel.plan import GroupPlan, LinkKey, StackPlan, staged_through_host
from stackmodel.platform import PlatformConfig
from stackmodel.ucx import UCX_TLS, moves_between_gpus
from steptime.gpus import GPU_CATALOG, datasheet_memory_gb


def _workers_key(i: int, field: str) -> str:
    return f"topology.workers[{i}].{field}"


def sizing_warnings(plan: StackPlan) -> list[ConfigWarning]:
    """Sizing findings an override turned into warnings (``sizing.allowUnsafeMemory``: a memory
    limit below the floor, deployed anyway), each on the group's ``memoryLimit``."""
    out = []
    for finding in plan.sizing.report.findings:
        if finding.severity != "warning":
            continue
        group = plan.group(finding.subject)
        key = _workers_key(group.index, "memoryLimit")
        out.append(ConfigWarning(key, group.group.memory_limit, finding.message))
    return out


def deprecation_warnings(cfg: StackConfig) -> list[ConfigWarning]:
    """Settings that deploy today but that upstream has deprecated, each with its replacement.

    ``kvTransfer.role: kv_both`` with NixlConnector: vLLM deprecates it (RFC
    vllm-project/vllm#43807): ``vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py``
    logs a warning and asks for ``kv_producer`` on prefill and ``kv_consumer`` on decode
    instances.
    """
    replacement = {"prefill": "kv_producer", "decode": "kv_consumer"}
    return [
        ConfigWarning(
            _workers_key(i, "kvTransfer.role"),
            "kv_both",
            f"{PROJECT}:{_workers_key(i, 'kvTransfer.role')} = 'kv_both': deprecated for "
            f"NixlConnector (vLLM RFC #43807); set kv_producer on prefill and kv_consumer on "
            f"decode workers (here: {replacement[w.role]})",
        )
        for i, w in enumerate(cfg.topology.workers)
        if w.kv_transfer is not None
        and w.kv_transfer.role == "kv_both"
        and w.kv_transfer.connector == "NixlConnector"
        and w.role in replacement
    ]


def fp8_warnings(plan: StackPlan) -> list[ConfigWarning]:
    """FP8 weights on a GPU without FP8 tensor cores (``fp8DenseTflops`` unset: the catalog's
    Ampere GPUs): vLLM runs them as weight-only W8A16 through FP8 Marlin, so the weights take
    1 byte but the compute stays BF16 ("Turing/Ampere GPUs are supported for W8A16 (weight-only
    FP8) utilizing Marlin kernels", vLLM's FP8 W8A8 page, docs.vllm.ai features/quantization/
    fp8; vllm-project/vllm PR #5975). The step-time model computes in BF16 there
    (:meth:`steptime.gpus.GpuSpec.compute_flops_per_s`)."""
    if not plan.engine.gpu_workers or plan.geometry.weight_dtype_bytes != 1:
        return []
    out = []
    with_fp8 = ", ".join(name for name, g in GPU_CATALOG.items() if g.fp8_dense_tflops)
    for group in plan.groups:
        gpu, node_class = group.gpu, group.group.node_class
        if gpu.fp8_dense_tflops is None:
            key = _workers_key(group.index, "nodeClass")
            out.append(
                ConfigWarning(
                    key,
                    node_class,
                    f"{PROJECT}:{key} = {node_class!r}: FP8 weights on {gpu.name}, which has no "
                    "FP8 tensor cores: vLLM runs them weight-only (W8A16, FP8 Marlin), so they "
                    "take half the memory but compute at BF16 speed; for W8A8 use a GPU with "
                    f"FP8 tensor cores ({with_fp8})",
                )
            )
    return out


def gated_model_warnings(cfg: StackConfig, with_hf_token: bool) -> list[ConfigWarning]:
    """A gated catalog model (:data:`stackmodel.models.GATED_MODELS`) without the ``hfToken``
    secret: every worker's download would fail (nothing is refused: a cluster may have the
    weights cached)."""
    if with_hf_token or cfg.model.name not in GATED_MODELS:
        return []
    return [
        ConfigWarning(
            "model.name",
            cfg.model.name,
            f"{PROJECT}:model.name = {cfg.model.name!r} is gated on Hugging Face and no hfToken "
            "is set, so the workers cannot download it: accept its license on huggingface.co, "
            "then `pulumi config set --secret hfToken hf_...`",
        )
    ]


def placement_warnings(plan: StackPlan) -> list[ConfigWarning]:
    """A prefill group sharing a node class of several nodes with decode groups: the scheduler
    puts them on one node or two (the DGD sets no anti-affinity), so the sizing and the
    simulation take the slower link (:func:`stackmodel.plan.kv_link_key`); said with how to pin
    them apart."""
    cfg = plan.cfg
    out = []
    for group in plan.groups:
        node_class = group.node_class
        if node_class.gpu_units_per_node < 2 and group.engine.gpu_workers:
            continue  # each worker takes a node's only GPU: prefill and decode never share one
        decode = [
            f"'{w.name}'"
            for w in cfg.topology.workers
            if w.role == "decode" and w.node_class == group.group.node_class
        ]
        if group.kv_link is None or node_class.nodes < 2 or not decode:
            continue
        key = _workers_key(group.index, "nodeClass")
        out.append(
            ConfigWarning(
                key,
                group.group.node_class,
                f"{PROJECT}:{key} = {group.group.node_class!r}: prefill '{group.name}' and "
                f"decode {', '.join(decode)} share a node class of {node_class.nodes} nodes, so "
                "the scheduler puts them on the same node or on two; the sizing takes the "
                f"slower of links.sameNode and links.crossNode ({group.kv_link.name}). To put "
                "prefill and decode on different nodes, give each its own node class (a "
                "nodeSelector on a label only its nodes carry)",
            )
        )
    return out


def same_node_link_warnings(plan: StackPlan) -> list[ConfigWarning]:
    """The same-node KV path of a prefill group whose KV is in GPU buffers, where the setting
    and the path differ:

    - ``links.sameNode`` left at the seed's host-memory TCP (``same-node-tcp``, 1 GB/s) while
      UCX's ``cuda_ipc`` copies between GPUs that reach each other directly (NVLink or PCIe
      peer-to-peer): the setting understates it; said with the interconnect's rate to set;
    - a ``links.sameNode`` faster than host-memory TCP while the node's GPUs have no
      peer-to-peer access (GeForce cards) or ``UCX_TLS`` has no ``cuda_ipc``
      (:func:`stackmodel.plan.staged_through_host`): the KV is staged through host memory and
      the plan takes ``same-node-tcp`` (:func:`kvpath.profile.host_staged`); said so."""
    cfg = plan.cfg
    out: list[ConfigWarning] = []
    for group in plan.groups:
        kv = group.group.kv_transfer
        if group.group.role != "prefill" or kv is None or kv.buffer_device != "cuda":
            continue
        if group.kv_link_setting != cfg.links.same_node or group.kv_link is None:
            continue  # its KV crosses nodes: the sizing takes links.crossNode
        if staged_through_host(cfg, group.group, group.gpu):
            if cfg.links.same_node == "same-node-tcp" or group.kv_link.name != "same-node-tcp":
                continue  # the setting is the host path, or a probe or a slower figure of it
            out.append(
                ConfigWarning(
                    "links.sameNode",
                    cfg.links.same_node,
                    f"{PROJECT}:links.sameNode = {cfg.links.same_node!r}: prefill "
                    f"'{group.name}' moves KV in GPU buffers between GPUs that cannot reach "
                    f"each other directly ({_no_direct_path(group)}), so UCX stages it through "
                    "host memory over TCP and the sizing and the simulation take same-node-tcp "
                    f"({gb_per_s_text(group.kv_link.bytes_per_s)}); set links.sameNode: "
                    "same-node-tcp, or probe the path (testbed probe kv-path STACK --in-cluster "
                    "same-node)",
                )
            )
            continue
        if cfg.links.same_node != "same-node-tcp":
            continue
        spec = group.gpu if group.node_class.gpu is not None else None
        if spec is None or spec.interconnect_gb_per_s is None:
            continue
        rate = f"{spec.interconnect_gb_per_s:g}"
        out.append(
            ConfigWarning(
                "links.sameNode",
                cfg.links.same_node,
                f"{PROJECT}:links.sameNode = 'same-node-tcp': prefill '{group.name}' moves KV "
                "in GPU buffers with cuda_ipc in UCX_TLS, so on one node UCX copies it between "
                f"the GPUs over their {spec.interconnect} ({rate} GB/s per direction on "
                f"{spec.name}), not over host-memory TCP at 1 GB/s as the sizing and the "
                f"simulation take it; set links.sameNode: {rate} (GB/s, the interconnect's "
                "rate; less in practice), or probe the path (testbed probe kv-path STACK "
                "--in-cluster same-node)",
            )
        )
    return out


def _no_direct_path(group: GroupPlan) -> str:
    """Why a group's GPU-buffer KV has no direct path between its node's GPUs, in a few words."""
    if not moves_between_gpus(group.group.env.get(UCX_TLS)):
        return f"UCX_TLS {group.group.env.get(UCX_TLS)!r} has no cuda_ipc"
    return f"{group.gpu.name} has no peer-to-peer access"


def platform_release_warnings(platform: PlatformConfig) -> list[ConfigWarning]:
    """The platform's chart version, where the program's chart rules (its values, the CRD
    fields the graph stacks write) were not read at its minor line
    (:func:`kvpath.versions.rules_not_read_at`)."""
    if not platform.install:
        return []
    try:
        unread = [r for r in rules_not_read_at(platform.chart_version) if r.dynamo_only]
    except ValueError:
        return []  # not MAJOR.MINOR.PATCH: the chart version's own check says so
    if not unread:
        return []
    return [
        _unread_rules_warning(
            "platform.chartVersion",
            platform.chart_version,
            unread,
            [r.name for r in unread],
            "before installing it",
        )
    ]


def _unread_rules_warning(
    key: str, version: str, read: Sequence[UpstreamRule], names: Sequence[str], tail: str
) -> ConfigWarning:
    """The warning that rules ``names`` were read only at the lines of ``read``, not at
    ``version`` (the release ``key`` sets); ``tail`` ends it (what to do before what)."""
    lines = sorted({line for r in read for line in r.lines})
    return ConfigWarning(
        key,
        version,
        f"{PROJECT}:{key} = {version!r}: these rules of the program were read at Dynamo "
        f"{', '.join(line_text(line) for line in lines)} only, not at this release: "
        f"{', '.join(names)} (docs/upgrading.md); check them against its release notes {tail}",
    )


def _same_minor(a: str, b: str) -> bool:
    """Whether two MAJOR.MINOR.PATCH versions share a minor; a version of another form never
    does (``"1.5.1"``, ``"1.5.0"`` -> True; ``"1.5"``, ``"1.5.0"`` -> False)."""
    try:
        return minor_of(a) == minor_of(b)
    except ValueError:
        return False


def release_warnings(plan: StackPlan) -> list[ConfigWarning]:
    """What the stack's Dynamo release leaves unconfirmed:

    - the program's rules that encode upstream behaviour and were not read at this release's
      minor line (:func:`kvpath.versions.rules_not_read_at`);
    - a link profile a disaggregated stack uses that a probe measured with another NIXL minor
      than the release ships (:func:`kvpath.versions.shipped_nixl`): its rates were taken
      with another UCX backend.
    """
    cfg = plan.cfg
    version = cfg.engine.release
    try:
        unread = rules_not_read_at(version)
    except ValueError:
        return []  # not MAJOR.MINOR.PATCH: the image's own problem
    out = []
    dynamo = cfg.topology.kind == "dynamo"
    names = [r.name for r in unread if dynamo or not r.dynamo_only]
    if names:
        out.append(
            _unread_rules_warning(
                "engine.dynamoVersion", version, unread, names, "before relying on the stack"
            )
        )
    nixl = shipped_nixl(version)
    if nixl is None or not any(w.kv_transfer is not None for w in cfg.topology.workers):
        return out
    settings: tuple[tuple[LinkKey, LinkSetting], ...] = (
        ("sameNode", cfg.links.same_node),
        ("crossNode", cfg.links.cross_node),
    )
    for field, link in settings:
        profile = plan.links[field]
        measured = profile.nixl_version
        if measured is None or _same_minor(measured, nixl):
            continue
        out.append(
            ConfigWarning(
                f"links.{field}",
                link,
                f"{PROJECT}:links.{field} = {link!r}: profile '{profile.name}' was measured "
                f"with NIXL {measured} (UCX {profile.ucx_version or 'unknown'}), but Dynamo "
                f"{version} ships NIXL {nixl}: another UCX backend moves this stack's KV; probe "
                "again with `testbed probe kv-path` in that release's image before trusting "
                "the link's rates",
            )
        )
    return out


LOW_GPU_MEMORY_SHARE = 0.9
"""Below this share of its GPU's datasheet memory a node class's ``gpuMemoryGiB`` is warned
about: a driver reports a little under the datasheet (24,564 MiB on a 24 GB card, 0.9996),
a MIG slice is a GPU of its own name, so less is a slip (24 written for a 48 GB L40S)."""


def overlap_warnings(cfg: StackConfig) -> list[ConfigWarning]:
    """Keys that another key or the catalog also determines, where the stack still runs: each
    says which wins.

    - ``gpuMemoryGiB`` well under the catalog ``gpu``'s memory: the sizing uses
      ``gpuMemoryGiB``, so the rest of the GPU stays unused;
    - ``model.geometry`` beside ``model.configJson``: the geometry wins
      (:func:`stackmodel.plan.model_geometry`);
    - ``model.geometry`` of a catalog model that differs from the catalog's: the geometry wins.
    """
    out = []
    for name, node_class in cfg.node_classes.items():
        datasheet = datasheet_memory_gb(node_class.gpu)
        memory = node_class.gpu_memory_gib
        if datasheet is not None and memory < LOW_GPU_MEMORY_SHARE * datasheet:
            key = f"nodeClasses.{name}.gpuMemoryGiB"
            out.append(
                ConfigWarning(
                    key,
                    memory,
                    f"{PROJECT}:{key} = {memory:g} but its gpu, {node_class.gpu_name}, has "
                    f"{datasheet:g} GB: gpuMemoryGiB wins, so the sizing and the workers' KV "
                    f"caches use {memory:g} GiB and leave the rest unused; set gpuMemoryGiB: "
                    f"{datasheet:g} to use the whole GPU",
                )
            )
    geometry = cfg.model.geometry
    if geometry is not None and cfg.model.config_json is not None:
        out.append(
            ConfigWarning(
                "model.geometry",
                geometry.model_dump(by_alias=True),
                f"{PROJECT}:model.geometry and model.configJson are both set: model.geometry "
                f"wins and {cfg.model.config_json!r} is not read; remove one",
            )
        )
    catalog = KNOWN_MODELS.get(cfg.model.name)
    if geometry is not None and catalog is not None and geometry.model_type is None:
        # a geometry written by hand names no model_type: not a difference
        geometry = geometry.model_copy(update={"model_type": catalog.model_type})
    if geometry is not None and catalog is not None and geometry != catalog:
        differs = [
            f"{to_camel(field)} {getattr(geometry, field)} (catalog {getattr(catalog, field)})"
            for field in type(geometry).model_fields
            if getattr(geometry, field) != getattr(catalog, field)
        ]
        out.append(
            ConfigWarning(
                "model.geometry",
                geometry.model_dump(by_alias=True),
                f"{PROJECT}:model.geometry differs from the catalog's {cfg.model.name}: "
                f"{', '.join(differs)}; model.geometry wins. Remove it to use the catalog's",
            )
        )
    return out


def model_name_warnings(cfg: StackConfig) -> list[ConfigWarning]:
    """A model name outside the catalog (:data:`stackmodel.models.KNOWN_MODELS`) whose geometry
    the stack gives (``model.geometry`` or ``model.configJson``): nothing checks the name, which
    the workers download, so a typo of a catalog model would pass; said with the closest catalog
    model when one is close (:func:`configkeys.suggest.closest`)."""
    name = cfg.model.name
    given = cfg.model.geometry is not None or cfg.model.config_json is not None
    if not given or name in KNOWN_MODELS:
        return []
    close = closest(name, KNOWN_MODELS)
    hint = (
        f"did you mean {close}? (a catalog model: drop model.geometry to take its geometry)"
        if close is not None
        else "check that Hugging Face has it by this name"
    )
    return [
        ConfigWarning(
            "model.name",
            name,
            f"{PROJECT}:model.name = {name!r} is not a catalog model: the geometry given is used "
            f"and the workers download {name!r} as written; {hint}",
        )
    ]


def stack_warnings(plan: StackPlan, *, with_hf_token: bool) -> list[ConfigWarning]:
    """Every warning of a graph stack's own config, in the order preview logs them: the sizing's,
    deprecations, FP8 on a GPU without FP8, a gated model without a token, a model name outside
    the catalog, placement, the
    same-node link, the release, overlapping keys."""
    cfg = plan.cfg
    return [
        *sizing_warnings(plan),
        *deprecation_warnings(cfg),
        *fp8_warnings(plan),
        *gated_model_warnings(cfg, with_hf_token=with_hf_token),
        *model_name_warnings(cfg),
        *placement_warnings(plan),
        *same_node_link_warnings(plan),
        *release_warnings(plan),
        *overlap_warnings(cfg),
    ]
