"""The local simulation of a stack, drivable from Python without the `testbed` commands.

A stack's plan (:mod:`stackmodel.plan`, as :func:`stackmodel.stacks.load_stack` gives it) is
simulated in two layers:

- :mod:`simulator.routing`: the routing run, the real Dynamo frontend (KV router) with CPU-only
  mocker workers (:mod:`simulator.localgraph`, :mod:`simulator.model_dir`), which decides
  routing and prefix-cache hits;
- :mod:`simulator.retime`: the same requests timed by a discrete-event model of the stack's
  shared hardware (:mod:`simulator.timing_model` on the resources of :mod:`simulator.sharing`,
  the workers of :mod:`simulator.hardware`, the constants of :mod:`simulator.calibration`).

:mod:`simulator.simulate` runs both for one or more stacks into results folders;
:mod:`simulator.stack_values` records what a result depends on (for ``--resume``);
:mod:`simulator.provenance` says what a result is; :mod:`simulator.calibration_fit` fits the
constants to measured runs; :mod:`simulator.seed` holds the seed's measured figures.
"""
