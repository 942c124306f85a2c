"""The Kubernetes API as the program reads it: one client factory configured as the stack's
Kubernetes provider is, with a timeout on every call (:mod:`kubeclient.client`), and the watch of
a namespace's pods during a load grid (:mod:`kubeclient.pod_watch`)."""
