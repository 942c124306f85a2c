"""One step-time model of a vLLM engine: how long a worker's engine step takes on its GPU.

- :mod:`steptime.gpus`: the GPU catalog (datasheet figures, cited) and how a node class names
  a GPU or gives its figures.
- :mod:`steptime.roofline`: prefill and decode step times as a roofline (compute for prefill,
  memory for weights plus the batch's KV in a decode step) times fitted efficiencies, and the
  sanity bounds no step may cross.
- :mod:`steptime.fit`: the efficiencies ``bench/calibrate.py`` fits on the seed's kv-routing
  rows, and where every other GPU's come from.
- :mod:`steptime.measured`: step times from AIConfigurator's measured vLLM kernel data, which
  the simulation takes over the roofline where it has the GPU and the model.

A stack's workers get theirs from :attr:`stackmodel.plan.GroupPlan.step` (their node
class's GPU, the model's geometry), which sizing's "will disaggregation pay" verdict,
``testbed render`` and ``testbed simulate`` all read.

Pure Python (pydantic; what it needs of a model is a protocol,
:class:`steptime.roofline.ModelFigures`, that the stack model's catalog satisfies); nothing
heavy is imported, so ``pulumi preview`` pays nothing for it.
"""
