"""Where disaggregation starts to pay for a stack's model, GPUs and link: the verdict of
:func:`stackmodel.sizing.disaggregation_verdict` swept over prompt length and link speed.

At each point the KV path's cost is what :mod:`kvpath` computes for one request (the transfer
at the link's one-transfer rate, plus vLLM's two host copies for host-buffered workers at the
stack's copy rates) and the gain is the prefill time the request would otherwise take on the
decode GPU (:meth:`stackmodel.plan.GroupPlan.prefill_s` of the verdict's group: its GPU, the
model as that group holds it, all-reduces included; measured kernel times where the simulation
takes them). It pays where the cost is below the gain.

The stack's load goes with every point: the share of the prompt its prefix cache is expected
to hold (no prefill, no transfer; the device -> host copy still takes every block) and the
transfers its busy prefill workers run at once (:func:`stackmodel.sizing.disaggregation_verdict`).
Both grow linearly with the prompt in these models (KV bytes, copies and prefill FLOPs are all
per token; there is no per-transfer latency and the roofline has no attention term; measured
prefill times grow a little faster, by their attention), so the crossover is a link rate, the
same at every prompt length under the roofline: disaggregation pays above

    break-even rate = KV bytes moved per uncached token / (prefill seconds per uncached token
    - host-copy seconds per uncached token)

on a link that also carries the KV the busy prefill workers produce
(:attr:`Crossover.needed_bytes_per_s`, the same at every prompt length too), and never, on any
link, when the two host copies alone take longer than the prefill (the seed's case).
:attr:`Crossover.break_even_bytes_per_s` is that rate. Rates are decimal bytes/s, times
seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import TypeAdapter

from kvpath.profile import LINK_PROFILES, LinkProfile
from kvpath.transfers import worker_pair_link
from stackmodel.plan import StackPlan
from stackmodel.sizing import DisaggregationVerdict, disaggregation_verdict, link_capacity

CROSSOVER_FILE = "crossover.json"
"""A simulated stack's :class:`Crossover`, in its results folder beside ``stack.json``
(:func:`crossover_json`), so that ``testbed report`` draws it from the config that ran."""

SWEEP_LINKS = ("1gbe", "10gbe", "25gbe", "100gbe", "rdma")
"""The named links the sweep marks, 1 GbE to RDMA (:data:`kvpath.profile.LINK_PROFILES`)."""

PROMPT_TOKENS = (256, 512, 1_024, 2_048, 4_096, 8_192, 16_384, 32_768)
"""The prompt lengths of the sweep's table (cut at the stack's max model length)."""


@dataclass(frozen=True)
class CrossoverPoint:
    """One (prompt, link) point: ``cost_s`` (transfer + copies), ``gain_s`` (prefill of the
    uncached tokens), ``saturated`` (the link cannot carry the busy prefill workers' KV)."""

    prompt_tokens: int
    link: str
    link_bytes_per_s: float
    cost_s: float
    gain_s: float
    saturated: bool = False

    @property
    def pays(self) -> bool:
        """The verdict's rule: the KV path costs less than the prefill it takes off, on a link
        that carries the KV."""
        return self.cost_s < self.gain_s and not self.saturated


@dataclass(frozen=True)
class Crossover:
    """The sweep of one stack.

    Attributes:
        points: every (prompt length, named link) of :data:`PROMPT_TOKENS` x :data:`SWEEP_LINKS`.
        stack_point: the stack's own prompt length on its own link (the seed's point for the
            seed's stacks).
        break_even_bytes_per_s: the link rate above which it pays (None: it never pays, the
            host copies alone cost more than the prefill).
        host_buffered: the KV goes through host memory (copies counted).
        copies_s_per_token: those copies' seconds per prompt token (0 without host buffers).
        prefill_s_per_token: the prefill's seconds per uncached prompt token at the stack's
            length.
        kv_bytes_per_token: KV bytes one prompt token moves.
        cached_share: the share of a prompt the prefix cache is expected to hold.
        needed_bytes_per_s: the KV the busy prefill workers produce: a link must carry it.
        concurrent_transfers: those busy prefill workers, each on a prefill/decode pair of its
            own (:func:`stackmodel.sizing.link_capacity`).
        lanes: the agent pairs a worker pair moves a request's KV over
            (:attr:`stackmodel.plan.GroupPlan.kv_lanes`): each named link is taken as they
            carry it (:meth:`sweep_link`), and so is the break-even rate.
    """

    points: tuple[CrossoverPoint, ...]
    stack_point: CrossoverPoint
    break_even_bytes_per_s: float | None
    host_buffered: bool
    copies_s_per_token: float
    prefill_s_per_token: float
    kv_bytes_per_token: int
    cached_share: float = 0.0
    needed_bytes_per_s: float = 0.0
    concurrent_transfers: int = 1
    lanes: int = 1

    def sweep_link(self, name: str) -> LinkProfile:
        """The named link of :data:`SWEEP_LINKS` as a worker pair of :attr:`lanes` agent pairs
        carries it (:func:`kvpath.transfers.worker_pair_link`)."""
        return worker_pair_link(LINK_PROFILES[name], self.lanes)

    def summary(self) -> str:
        """One sentence: where it pays, with the numbers."""
        kvb = self.kv_bytes_per_token
        uncached = " uncached" if self.cached_share else ""
        per_token = (
            f"{kvb:,} B of KV per{uncached} prompt token against "
            f"{self.prefill_s_per_token * 1e6:.2f} us of prefill"
        )
        if self.host_buffered:
            per_token += f" and {self.copies_s_per_token * 1e6:.2f} us of host copies"
        if self.break_even_bytes_per_s is None:
            return (
                f"crossover: never on any link: {per_token}, the host copies alone cost more "
                "than the prefill (with GPU buffers, kvTransfer.bufferDevice: cuda over a UCX "
                "transport that moves GPU memory, there are none)"
            )
        faster = [
            name
            for name in SWEEP_LINKS
            if self.sweep_link(name).bytes_per_s > self.break_even_bytes_per_s
            and link_capacity(self.sweep_link(name), self.concurrent_transfers)
            >= self.needed_bytes_per_s
        ]
        cache = (
            f"; {self.cached_share:.0%} of each prompt in the prefix cache, as the stack's load "
            "is expected to hit it"
            if self.cached_share
            else ""
        )
        carries = (
            f" that carry the {self.needed_bytes_per_s / 1e9:.3g} GB/s of KV its busy prefill "
            "workers produce"
            if self.needed_bytes_per_s
            else ""
        )
        pair = f" a worker pair (its {self.lanes} rank pairs together)" if self.lanes > 1 else ""
        return (
            f"crossover: disaggregation pays on links above "
            f"{self.break_even_bytes_per_s / 1e9:.3g} GB/s{pair}{carries} at its "
            f"{self.stack_point.prompt_tokens:,}-token prompts ({per_token}{cache}; both grow "
            "about linearly with the prompt): of 1 GbE to RDMA, "
            + (", ".join(faster) if faster else "none")
            + ". Pays: per request, the KV path costs less than the prefill it takes off the "
            "decode GPU; testbed simulate (TTFT, throughput) and testbed recommend (goodput "
            f"within an SLO) time the same link ({self.stack_point.link}) at a load, where "
            "prefill on GPUs of its own can pay though one request's KV path does not."
        )


def _point(
    prompt: int,
    link: LinkProfile,
    prefill_tokens_per_s: float,
    host: bool,
    kvb: int,
    load: tuple[float, int],
) -> CrossoverPoint:
    """The verdict at ``prompt`` on ``link`` with the stack's ``load``: the share of a prompt
    cached and the transfers at once."""
    share, concurrent = load
    verdict = disaggregation_verdict(
        kvb * prompt,
        prompt,
        link,
        prefill_tokens_per_s,
        "",
        host_buffered=host,
        cached_tokens=min(prompt, round(prompt * share)),
        concurrent_transfers=concurrent,
    )
    return _as_point(prompt, verdict)


def _as_point(prompt: int, verdict: DisaggregationVerdict) -> CrossoverPoint:
    return CrossoverPoint(
        prompt_tokens=prompt,
        link=verdict.link,
        link_bytes_per_s=verdict.link_bytes_per_s,
        cost_s=verdict.transfer_seconds + verdict.copy_seconds,
        gain_s=verdict.prefill_seconds,
        saturated=verdict.needed_bytes_per_s > verdict.link_capacity_bytes_per_s,
    )


def crossover(plan: StackPlan) -> Crossover:
    """The sweep of a stack's plan (see the module docstring)."""
    sizing = plan.sizing
    group = plan.verdict_group
    verdict = sizing.report.disaggregation
    own = group.kv_link
    host = any(c.host_buffers_kv for c in sizing.report.components)
    limit = plan.max_model_len or math.inf
    prompts = [p for p in PROMPT_TOKENS if p <= limit]
    prompt = sizing.report.prompt_tokens
    load = (verdict.cached_tokens / prompt if prompt else 0.0, verdict.concurrent_transfers)
    points = []
    for name in SWEEP_LINKS:
        # The stack's copy rates (a probed profile's) go with every link of the sweep.
        link = worker_pair_link(LINK_PROFILES[name], group.kv_lanes)
        if own is not None and own.host_copies is not None:
            link = link.model_copy(update={"host_copies": own.host_copies})
        for length in prompts:
            rate = length / group.prefill_s(length)
            points.append(_point(length, link, rate, host, sizing.kv_bytes_per_token, load))
    stack_point = _as_point(prompt, verdict)
    kvb = sizing.kv_bytes_per_token
    tokens = max(prompt - verdict.cached_tokens, 1)
    copies = verdict.copy_seconds / tokens
    prefill = verdict.prefill_seconds / tokens
    margin = prefill - copies
    return Crossover(
        points=tuple(points),
        stack_point=stack_point,
        break_even_bytes_per_s=kvb / margin if margin > 0 else None,
        host_buffered=host,
        copies_s_per_token=copies,
        prefill_s_per_token=prefill,
        kv_bytes_per_token=kvb,
        cached_share=load[0],
        needed_bytes_per_s=verdict.needed_bytes_per_s,
        concurrent_transfers=verdict.concurrent_transfers,
        lanes=group.kv_lanes,
    )


_ADAPTER: TypeAdapter[Crossover] = TypeAdapter(Crossover)


def crossover_json(result: Crossover) -> str:
    """``result`` as the text of :data:`CROSSOVER_FILE` (indented JSON)."""
    return _ADAPTER.dump_json(result, indent=2).decode() + "\n"


def read_crossover(text: str) -> Crossover:
    """The :class:`Crossover` :func:`crossover_json` wrote.

    Raises:
        pydantic.ValidationError (a ValueError): not such a file.
    """
    return _ADAPTER.validate_json(text)
