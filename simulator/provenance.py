"""What a simulated result says it is and what it cannot tell: the text every table, summary and
report of a simulation carries, and its warnings (:func:`provenance`).
"""

from __future__ import annotations

from simulator.hardware import group_step
from stackmodel.config import StackConfig
from stackmodel.plan import StackPlan, kv_link_key
from steptime.calibration_profile import applied_label, mismatch_note
from steptime.fit import SEED_FIT, extrapolation_note
from steptime.measured import AIC_VERSION, MISSING_NOTE, core_installed, has_data
from steptime.roofline import EngineFit


def provenance(
    plan: StackPlan, fit: EngineFit = SEED_FIT, *, measured: bool = True
) -> tuple[str, list[str]]:
    """What a simulated result says it is (``GridResult.simulated``: tables, ``summary.json``,
    the HTML report, recommend's output), and the warnings it carries. Each worker group
    names the source of its step times (:func:`simulator.hardware.group_step` with
    ``measured``): ``AIConfigurator measured`` (:mod:`steptime.measured`), else the
    roofline's efficiencies (the fit's label). Warnings: each node class that names no GPU
    (which default it got), each roofline group outside the seed fit (model or GPU other than
    the fit's, :func:`steptime.fit.extrapolation_note`), each tensor-parallel roofline group
    (its all-reduce constants are assumptions), and once, that aiconfigurator-core is missing
    where a group would have taken its data."""
    cfg = plan.cfg
    groups = []
    warnings = []
    sources = set()
    for planned in plan.groups:
        group = planned.group
        step = group_step(plan, planned, fit, measured)
        default = " (default)" if planned.node_class.gpu is None else ""
        tp = group.tensor_parallel_size
        gpus = f"{tp} x {step.gpu.name}" if tp > 1 else step.gpu.name
        profile = planned.calibration
        label = (
            step.fit.label
            if profile is None
            else applied_label(profile, gpu=step.gpu.name, model=cfg.model.name)
        )
        if step.measured is not None:
            sources.add("measured")
            groups.append(f"{group.name} on {gpus}{default}, {step.measured.label}")
            continue
        sources.add("roofline")
        groups.append(f"{group.name} on {gpus}{default}, {label}")
        note = (
            extrapolation_note(cfg.model.name, step.gpu.name, step.fit)
            if profile is None
            else mismatch_note(
                profile, gpu=step.gpu.name, model=cfg.model.name, engine=plan.engine_label
            )
        )
        if note is not None:
            warnings.append(f"{group.name}: {note}")
        if tp > 1:
            warnings.append(
                f"{group.name}: tensor-parallel over {tp} GPUs: its all-reduces' latency and "
                "bandwidth efficiency are assumptions (steptime.tensor_parallel), not fitted to "
                "a measured tensor-parallel run"
            )
    wanted = measured and any(has_data(g.gpu, cfg.model.name) for g in plan.groups)
    if wanted and not core_installed():
        warnings.append(MISSING_NOTE)
    kv_routed = cfg.topology.kind == "dynamo" and cfg.topology.router_mode == "kv"
    for planned in plan.groups:
        group = planned.group
        given = [a.text for a in planned.engine_args if a.flag in planned.engine.kv_size_flags]
        if given:
            warnings.append(
                f"{group.name}: extraArgs set {', '.join(given)}, which overrides the KV cache "
                f"the program sizes; the simulation keeps sizing's "
                f"{plan.sizing.kv_capacity_tokens(group.name):,} tokens per worker"
            )
        if kv_routed and not group.kv_events and group.role == "aggregated":
            warnings.append(
                f"{group.name}: kvEvents is false, but the routing run's mockers publish KV "
                "events (dynamo.mocker always does for a worker that is not decode): its "
                "prefix-cache hits are a KV-aware router's, not a prefix-blind one's"
            )
    for node_class in dict.fromkeys(w.node_class for w in cfg.topology.workers):
        note = plan.gpu_notes.get(node_class)
        if note is not None:
            warnings.append(note)
    release = release_note(cfg)
    if release is not None:
        warnings.append(release)
    named = {
        "measured": f"AIConfigurator measured: aiconfigurator-core {AIC_VERSION}'s measured vLLM "
        "kernel data (steptime.measured)",
        "roofline": "the others: datasheet roofline x efficiencies (steptime)",
    }
    if sources == {"roofline"}:
        named["roofline"] = "datasheet roofline x efficiencies (steptime)"
    text = (
        "testbed simulate: routing and prefix-cache hits from a real Dynamo frontend with "
        f"mocker workers; engine steps of {cfg.model.name} ({'; '.join(groups)}): "
        f"{'; '.join(named[s] for s in ('measured', 'roofline') if s in sources)}; KV path and "
        f"host memory: simulator.timing_model, {link_text(plan)}"
    )
    return text, warnings


def step_sources(plan: StackPlan, fit: EngineFit = SEED_FIT) -> dict[str, str]:
    """Worker group -> the source of its step times in a simulation
    (:func:`simulator.hardware.group_step`): ``AIConfigurator measured`` or ``roofline x``
    the fit's label (:attr:`steptime.roofline.EngineStep.source_label`)."""
    return {g.name: group_step(plan, g, fit, measured=True).source_label for g in plan.groups}


def link_text(plan: StackPlan) -> str:
    """The KV links a result assumed, each with the setting it comes from and whether that is
    the default: ``KV link of prefill: links.crossNode = 1gbe (0.117 GB/s, the default)``, or
    ``no KV transfer`` for a stack without prefill workers."""
    cfg = plan.cfg
    out = []
    for planned in plan.groups:
        if planned.kv_link is None:
            continue
        key = kv_link_key(cfg, planned.group, plan.links)
        field = "same_node" if key == "sameNode" else "cross_node"
        default = "" if field in cfg.links.model_fields_set else ", the default"
        link = planned.kv_link
        out.append(
            f"KV link of {planned.name}: links.{key} = {link.name} "
            f"({link.bytes_per_s / 1e9:.3g} GB/s{default})"
        )
    return "; ".join(out) or "no KV transfer (no prefill workers)"


def release_note(cfg: StackConfig) -> str | None:
    """A warning when the stack's Dynamo release is of another minor line than the ``ai-dynamo``
    package the routing run starts (this project's lock, ``sim`` group): its frontend and
    mockers are that package's, whatever ``engine.dynamoVersion`` says; None on the same line
    or without the package."""
    from importlib import metadata

    try:
        installed = metadata.version("ai-dynamo")
    except metadata.PackageNotFoundError:
        return None
    release = cfg.engine.release
    if installed.split(".")[:2] == release.split(".")[:2]:
        return None
    return (
        f"engine.dynamoVersion {release}: the routing run uses the installed ai-dynamo "
        f"{installed} frontend and mockers, not Dynamo {release}'s; the timing model and the "
        "checks follow the stack's release"
    )
