"""The KV path of a disaggregated vLLM worker pair, as vLLM 0.31.0 (Dynamo 1.6.x) and 0.33.0
(Dynamo 1.7.0) run it with NIXL (re-read at 0.33.0: :data:`kvpath.versions.UPSTREAM_RULES`):
one cost model read by the preview checks (:mod:`stackmodel.sizing`), ``testbed render``'s
verdict and ``testbed simulate`` (:mod:`simulator.timing_model`), with figures a probe
(:mod:`kvpath.probe`) measures.

- :mod:`kvpath.profile`: the link profile (a transfer's rate, a connection's, a wire's) a stack
  names or gives as figures, and the built-in profiles with their sources.
- :mod:`kvpath.memory`: a host-buffered worker's host mirror, its memory floor, the resident
  pages as blocks are touched, and when a limit below the floor kills it.
- :mod:`kvpath.copies`: vLLM's synchronous device <-> host copies and their contention.
- :mod:`kvpath.transfers`: transfers sharing one connection per prefill/decode pair and one
  wire per node pair.
- :mod:`kvpath.handshake`: the NIXL handshake a decode worker makes with a prefill worker on
  their first request, its seconds from the descriptor count (vLLM 0.31.0).
- :mod:`kvpath.versions`: what each Dynamo release ships, NIXL's ``UCX_TLS`` rule, Dynamo's
  upgrade policy, and the releases each upstream rule of the program was read at.

Pure Python (pydantic): nothing here imports torch, nixl or Pulumi.
"""
