"""The load step of ``pulumi up``, apart from its Pulumi resource: its inputs, deadline,
fingerprint and outputs (:mod:`loadstep.inputs`), its results folder and stop file
(:mod:`loadstep.folder`), the comparison with a baseline stack (:mod:`loadstep.comparison`), and
its run (:mod:`loadstep.runtime`). The dynamic provider that calls it is
:mod:`components.load_provider`."""
