"""`testbed recommend`: which topology to deploy on a cluster for a workload and an SLO.

The search space comes from a cluster's node classes and links (:mod:`recommend.space`); each
candidate is checked as a stack (its refusal kept as the validator's message), screened with
the crossover and roofline bounds and timed with the simulation's timing model
(:mod:`recommend.search`) at the highest load that meets the SLO (:mod:`recommend.load_search`);
:mod:`recommend.claims` says which differences the model can claim, :mod:`recommend.outputs`
writes what the command leaves. Everything it says is SIMULATED.
"""
