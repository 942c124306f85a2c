"""The load step of ``pulumi up``, apart from its Pulumi resource: its inputs, deadline,
fingerprint and outputs (:mod:`loadstep.inputs`), its results folder and stop file
(:mod:`loadstep.folder`) and the comparison with a baseline stack (:mod:`loadstep.comparison`).
The dynamic provider that runs it is :mod:`components.load_provider`."""
