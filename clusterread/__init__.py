"""What ``pulumi preview`` reads from the cluster and the checks on it: the nodes, their labels,
taints, allocatable GPUs and memory, an operator already installed, the DGDs left
(:mod:`clusterread.read`, with the ``kubernetes`` client imported where it runs), and what the
stack needs of them (:mod:`clusterread.checks`, pure)."""
