"""The start barrier of a sharded load: every client of a run starts its measured loop together.

Shard 0 listens on :data:`PORT`; the others connect to it (in the cluster by the stable name an
Indexed Job gives its pods behind a headless Service, ``<job>-0.<service>``: Kubernetes docs,
"Job with Pod-to-Pod Communication", and ``spec.subdomain``). At each meeting every shard sends
the meeting's name and waits; shard 0 answers all of them with one JSON payload once every
shard (itself included) has arrived. A peer that dies closes its connection: the others get
:class:`BarrierBroken` instead of waiting for ever. One client (``clients == 1``) meets nobody.
"""

import asyncio
import contextlib
import time
from types import TracebackType
from typing import Any

import orjson

PORT = 29_500
"""TCP port shard 0 listens on (any free port in the pod; not exposed outside the namespace)."""


class BarrierBroken(RuntimeError):
    """A peer went away (its pod ended) or answered out of turn."""


class Barrier:
    """``async with Barrier(clients, index, host, port, connect_timeout_s) as barrier:``, then
    ``await barrier.meet(name, payload)`` at the same points in every shard.

    Raises:
        TimeoutError: not every shard connected within ``connect_timeout_s``.
        BarrierBroken: from ``meet``, when a peer's connection ended or it sent another name.
    """

    def __init__(
        self, clients: int, index: int, host: str, port: int, connect_timeout_s: float
    ) -> None:
        self.clients, self.index = clients, index
        self.host, self.port, self.timeout_s = host, port, connect_timeout_s
        self._peers: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        self._server: asyncio.Server | None = None
        self._joined = asyncio.Event()
        self.met_ns: int | None = None
        """When the last ``meet`` released this shard (``time.monotonic_ns()``): shard 0 as it
        writes the answers, the others as they read them, so one instant on every clock, the
        others' late by the answer's trip and their wake-up (well under a millisecond on
        nodes that are not overloaded; tens of ms on an overloaded machine)."""

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hello = await reader.readline()
        self._peers[int(hello)] = (reader, writer)
        if len(self._peers) == self.clients - 1:
            self._joined.set()

    async def __aenter__(self) -> "Barrier":
        if self.clients == 1:
            return self
        if self.index == 0:
            self._server = await asyncio.start_server(self._accept, port=self.port)
            await asyncio.wait_for(self._joined.wait(), self.timeout_s)
            return self
        deadline = time.monotonic() + self.timeout_s
        while True:  # the name resolves once the pod of shard 0 runs and the Service lists it
            try:
                reader, writer = await asyncio.open_connection(self.host, self.port)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"shard {self.index}: no barrier at {self.host}:{self.port} after "
                        f"{self.timeout_s:g} s"
                    ) from None
                await asyncio.sleep(0.5)
        writer.write(b"%d\n" % self.index)
        await writer.drain()
        self._peers[0] = (reader, writer)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for _, writer in self._peers.values():
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def meet(self, name: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        """Wait until every shard meets at ``name``; returns shard 0's ``payload`` ({} if
        None) in every shard."""
        if self.clients == 1:
            self.met_ns = time.monotonic_ns()
            return payload or {}
        if self.index != 0:
            reader, writer = self._peers[0]
            try:
                writer.write(name.encode() + b"\n")
                await writer.drain()
                line = await reader.readline()
                self.met_ns = time.monotonic_ns()
            except ConnectionError as exc:
                line = repr(exc).encode()
            if not line.startswith(b"{"):
                raise BarrierBroken(f"shard 0 went away before {name!r} ({line!r})")
            answer: dict[str, Any] = orjson.loads(line)
            return answer
        for number, (reader, _) in sorted(self._peers.items()):
            try:
                line = await reader.readline()
            except ConnectionError as exc:
                line = repr(exc).encode()
            if line.rstrip(b"\n") != name.encode():
                raise BarrierBroken(f"shard {number} went away before {name!r} ({line!r})")
        answer = payload or {}
        for _, writer in self._peers.values():
            writer.write(orjson.dumps(answer) + b"\n")
        self.met_ns = time.monotonic_ns()
        for _, writer in self._peers.values():
            await writer.drain()
        return answer
