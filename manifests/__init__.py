"""Kubernetes objects of a graph stack as plain dicts, built from the stack model by pure
functions (no Pulumi import): the DGD, the vLLM Deployments, the frontend Service, the
namespace and the Hugging Face token Secret (:mod:`manifests.graph`). The Pulumi components
(:mod:`components`) register them; the load step and the cluster reads name their kinds."""
