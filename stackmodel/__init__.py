"""The model of a stack: one validated config, resolved once into its plan, and everything pure
computed from it.

Never imports Pulumi or a Kubernetes client (tests/test_import_graph.py checks it), so the
program, the offline ``testbed`` commands, the simulation and the probe all read the same model.

- :mod:`stackmodel.stacks`: loading a stack by name (its file over the project's defaults, with
  ``--set``), the one way every command reads one.
- :mod:`stackmodel.config`: the stack config (pydantic) and its sections;
  :mod:`stackmodel.platform`: the Dynamo platform's section and the chart values it becomes;
  :mod:`stackmodel.toleration`, :mod:`stackmodel.ucx`: small value types of the config.
- :mod:`stackmodel.validation`: parsing a raw config into the model and its plan, with every
  problem named; :mod:`stackmodel.checks`: the cross-key and sizing checks it runs;
  :mod:`stackmodel.stack_warnings`: what preview says without refusing;
  :mod:`stackmodel.errors`: how a problem and a warning are reported.
- :mod:`stackmodel.plan`: the stack resolved once (geometry, per group GPU, calibration, step
  times, KV link; placement; sizing), read by every consumer; :mod:`stackmodel.placement`:
  where the workers land; :mod:`stackmodel.engine_args`: engine arguments as vLLM parses them.
- :mod:`stackmodel.models`: the model catalog (geometry of known models, Hugging Face configs).
- :mod:`stackmodel.quantities`: memory quantities and the defaults sizing starts from;
  :mod:`stackmodel.sizing`: the sizing rules on numbers (memory floor, GPU fit, KV capacity, the
  disaggregation verdict).
- :mod:`stackmodel.topology`: the stack's components and their placement on node classes;
  :mod:`stackmodel.resources`: what a stack asks of the cluster, and two stacks compared;
  :mod:`stackmodel.crossover`: where disaggregation starts to pay;
  :mod:`stackmodel.published`: published comparisons as pairs of stacks.
- :mod:`stackmodel.stack_layout`: how stacks share a cluster (roles, namespaces, platform
  exports); :mod:`stackmodel.rbac`: the platform's RBAC as a summary;
  :mod:`stackmodel.log_budget`: how much of a load pod's log a grid's records take.
"""
