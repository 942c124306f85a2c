"""The load grid and the KV-path probe run as Kubernetes objects inside the cluster.

Pod side (shipped to the pod in a ConfigMap, light imports only: :mod:`incluster.sources`):
:mod:`incluster.pod` (the load pod's entrypoint), :mod:`incluster.barrier` (its start barrier),
:mod:`incluster.wire` (the log lines it writes, and reads them back).
Workstation side: :mod:`incluster.manifests` (pure: Job, ConfigMap, Service, Role, probe pods),
:mod:`incluster.collect` (log lines to loadgen's results folder), :mod:`incluster.runtime`
(create, wait for, collect from and delete them with the official ``kubernetes`` client).
"""
