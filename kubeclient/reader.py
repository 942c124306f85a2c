"""What the readers of one namespace's pods that run beside the load hold in common (the pod
watch, :mod:`kubeclient.pod_watch`; the memory sampler, :mod:`kubeclient.pod_memory`): the
namespace and the Kubernetes access they read it with, one background thread that leaving
stops, and why they could not read (one line)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypedDict


class ReaderAccess(TypedDict, total=False):
    """How a reader reaches the pods: the stack's ``kubernetes:kubeconfig`` and
    ``kubernetes:context`` (:func:`kubeclient.client.api_client`; None: the defaults) and a
    label selector of the pods (None: all of the namespace's)."""

    kubeconfig: str | None
    context: str | None
    label_selector: str | None


class NamespaceReader:
    """A context manager whose reads run in one daemon thread (:meth:`_start`); leaving sets
    ``_stop`` and joins the thread for at most ``join_s`` seconds. ``_problem`` is why it
    could not read (None: it could); ``_lock`` guards what the thread and the caller share."""

    def __init__(
        self,
        namespace: str | None,
        *,
        join_s: float,
        kubeconfig: str | None = None,
        context: str | None = None,
        label_selector: str | None = None,
    ) -> None:
        self.namespace = namespace
        self.kubeconfig = kubeconfig
        self.context = context
        self.label_selector = label_selector
        self.join_s = join_s
        self._problem: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _start(self, name: str, target: Callable[..., None], *args: Any) -> None:
        """Run ``target(*args)`` in the reader's thread, named ``<name>-<namespace>``."""
        self._thread = threading.Thread(
            target=target, args=args, name=f"{name}-{self.namespace}", daemon=True
        )
        self._thread.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.join_s)
