"""Per-link TCP proxies on 127.0.0.1 that let the chaos harness cut and slow cluster links.

Every directed link ``(src, dst)`` between two cluster nodes gets its own proxy: ``src`` is
configured to dial the proxy's port instead of ``dst``'s real cluster port, and the proxy opens
one upstream connection to ``dst`` per accepted connection and pumps bytes both ways. The harness
then controls the link:

* **block**: every live connection of the link is aborted and new ones are closed as soon as they
  are accepted, so the dialer sees a dead route and keeps retrying until the link is unblocked;
* **delay**: every forwarded chunk is held for ``mean ± jitter`` milliseconds. Each direction of
  a connection is one FIFO (a queue and one sleeping writer), so delay never reorders bytes.

Buffers are bounded: a direction stops reading from its source while more than
``PENDING_BYTES_MAX`` bytes wait in its queue, so a slow or stopped peer back-pressures the
sender instead of growing memory.

Must never: listen on anything but 127.0.0.1, reorder or alter bytes on a link, or know anything
about the protocol it carries.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

HOST = "127.0.0.1"
READ_CHUNK_BYTES = 64 * 1024
# above this many queued bytes in one direction the proxy stops reading that direction's source
PENDING_BYTES_MAX = 8 * 1024 * 1024
UPSTREAM_CONNECT_TIMEOUT_S = 2.0
CLOSE_TIMEOUT_S = 2.0
MS_PER_S = 1000.0

Link = tuple[str, str]


@dataclass(frozen=True)
class Delay:
    """Latency added to every chunk on a link: uniform in ``[mean - jitter, mean + jitter]``,
    never negative."""

    mean_ms: float = 0.0
    jitter_ms: float = 0.0

    def sample_s(self, rng: random.Random) -> float:
        if self.mean_ms <= 0 and self.jitter_ms <= 0:
            return 0.0
        ms = self.mean_ms + rng.uniform(-self.jitter_ms, self.jitter_ms)
        return max(0.0, ms) / MS_PER_S


NO_DELAY = Delay()


class _Pump:
    """One direction of one proxied connection: read chunks, queue them with their due time, and
    write them in order once due."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        proxy: LinkProxy,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._proxy = proxy
        self._queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        self.pending = 0
        self._room = asyncio.Event()
        self._room.set()

    async def read_loop(self) -> None:
        try:
            while True:
                await self._room.wait()
                chunk = await self._reader.read(READ_CHUNK_BYTES)
                if not chunk:
                    break
                due = time.monotonic() + self._proxy.delay.sample_s(self._proxy.rng)
                self.pending += len(chunk)
                if self.pending > PENDING_BYTES_MAX:
                    self._room.clear()
                self._queue.put_nowait((due, chunk))
        except (ConnectionError, OSError):
            pass
        finally:
            self._queue.put_nowait(None)

    async def write_loop(self) -> None:
        try:
            while True:
                item = await self._queue.get()
                if item is None:
                    # the source closed: pass the half-close on once everything before it is out
                    if self._writer.can_write_eof():
                        self._writer.write_eof()
                    return
                due, chunk = item
                wait_s = due - time.monotonic()
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
                self._writer.write(chunk)
                await self._writer.drain()
                self.pending -= len(chunk)
                if self.pending <= PENDING_BYTES_MAX:
                    self._room.set()
        except (ConnectionError, OSError):
            pass


class _Pipe:
    """One accepted connection and its upstream connection, with a pump each way."""

    def __init__(
        self,
        proxy: LinkProxy,
        down: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        up: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self._down_writer = down[1]
        self._up_writer = up[1]
        forward = _Pump(down[0], up[1], proxy)
        backward = _Pump(up[0], down[1], proxy)
        self.pumps = (forward, backward)
        self._tasks = [
            asyncio.create_task(forward.read_loop()),
            asyncio.create_task(forward.write_loop()),
            asyncio.create_task(backward.read_loop()),
            asyncio.create_task(backward.write_loop()),
        ]

    async def run(self) -> None:
        """Until both directions are done (each closed by its source) or the pipe is aborted."""
        try:
            # cancelled pumps (an abort) come back as results, not as this task's cancellation
            await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            self.abort()

    def abort(self) -> None:
        """Drop both connections at once, discarding anything still queued (a cut link)."""
        for task in self._tasks:
            task.cancel()
        for writer in (self._down_writer, self._up_writer):
            writer.transport.abort()


class LinkProxy:
    """The proxy for one directed link ``src -> dst``: listens on ``port`` (chosen by the OS at
    ``start``) and forwards every connection to ``target_port``."""

    def __init__(
        self,
        src: str,
        dst: str,
        target_port: int,
        *,
        rng: random.Random | None = None,
        host: str = HOST,
    ) -> None:
        self.src = src
        self.dst = dst
        self.target_port = target_port
        self.host = host
        self.rng = rng if rng is not None else random.Random(0)
        self.delay = NO_DELAY
        self.accepted = 0
        self.refused = 0
        self._blocked = False
        self._port: int | None = None
        self._server: asyncio.Server | None = None
        self._pipes: set[_Pipe] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def link(self) -> Link:
        return (self.src, self.dst)

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"proxy {self.src}->{self.dst} is not started")
        return self._port

    @property
    def blocked(self) -> bool:
        return self._blocked

    @property
    def live_connections(self) -> int:
        return len(self._pipes)

    @property
    def pending_bytes(self) -> int:
        """Bytes read from one side and not yet written to the other, over all connections."""
        return sum(pump.pending for pipe in self._pipes for pump in pipe.pumps)

    async def start(self, port: int = 0) -> None:
        """Listen on ``port`` (0: any free port; the chosen one is then ``self.port``)."""
        if self._server is not None:
            raise RuntimeError(f"proxy {self.src}->{self.dst} already started")
        self._server = await asyncio.start_server(self._accept, self.host, port)
        self._port = int(self._server.sockets[0].getsockname()[1])

    def block(self) -> None:
        """Cut the link: abort its live connections, close new ones on arrival."""
        self._blocked = True
        for pipe in list(self._pipes):
            pipe.abort()
        # gone now, not once their handlers have run: callers count live connections right away
        self._pipes.clear()

    def unblock(self) -> None:
        self._blocked = False

    def set_delay(self, delay: Delay) -> None:
        """Applies to chunks read from now on; chunks already queued keep their due time."""
        self.delay = delay

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        if self._server is not None:
            self._server.close()
        for pipe in list(self._pipes):
            pipe.abort()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=CLOSE_TIMEOUT_S)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), CLOSE_TIMEOUT_S)
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        finally:
            if task is not None:
                self._handlers.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._blocked:
            self.refused += 1
            writer.transport.abort()
            return
        try:
            up = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.target_port), UPSTREAM_CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError):
            # the target is down: the dialer sees the route drop and retries, as it would directly
            self.refused += 1
            writer.transport.abort()
            return
        if self._blocked:
            # blocked while the upstream connection was being opened
            self.refused += 1
            writer.transport.abort()
            up[1].transport.abort()
            return
        self.accepted += 1
        pipe = _Pipe(self, (reader, writer), up)
        self._pipes.add(pipe)
        try:
            await pipe.run()
        finally:
            self._pipes.discard(pipe)


class LinkProxies:
    """One ``LinkProxy`` per directed link, built from ``{(src, dst): target port}``."""

    def __init__(
        self, targets: Mapping[Link, int], *, rng: random.Random | None = None, host: str = HOST
    ) -> None:
        shared_rng = rng if rng is not None else random.Random(0)
        self._proxies: dict[Link, LinkProxy] = {
            link: LinkProxy(link[0], link[1], port, rng=shared_rng, host=host)
            for link, port in targets.items()
        }

    @property
    def links(self) -> list[Link]:
        return list(self._proxies)

    @property
    def blocked(self) -> frozenset[Link]:
        return frozenset(link for link, proxy in self._proxies.items() if proxy.blocked)

    def proxy(self, link: Link) -> LinkProxy:
        return self._proxies[link]

    def port(self, link: Link) -> int:
        """The port ``link[0]`` must dial to reach ``link[1]`` through this link's proxy."""
        return self._proxies[link].port

    async def start(self, ports: Iterable[int] | None = None) -> None:
        """Start every proxy, each on a port the OS picks (no race with other processes), or
        on the first free one left of ``ports`` (a port range the run was given)."""
        choices = iter(ports) if ports is not None else None
        try:
            for proxy in self._proxies.values():
                if choices is None:
                    await proxy.start()
                    continue
                while True:
                    port = next(choices, None)
                    if port is None:
                        raise OSError("the port range has no free port left for a link proxy")
                    try:
                        await proxy.start(port)
                        break
                    except OSError:
                        continue
        except BaseException:
            await self.close()
            raise

    def block(self, links: Iterable[Link]) -> None:
        for link in links:
            self._proxies[link].block()

    def unblock(self, links: Iterable[Link]) -> None:
        for link in links:
            self._proxies[link].unblock()

    def unblock_all(self) -> None:
        for proxy in self._proxies.values():
            proxy.unblock()

    def set_delay(
        self, mean_ms: float, jitter_ms: float = 0.0, links: Iterable[Link] | None = None
    ) -> None:
        """Delay chunks on ``links`` (default: every link); ``set_delay(0)`` removes it."""
        if mean_ms < 0 or jitter_ms < 0:
            raise ValueError("delay and jitter must be >= 0")
        delay = Delay(mean_ms, jitter_ms)
        for link in self._proxies if links is None else links:
            self._proxies[link].set_delay(delay)

    def delays(self) -> dict[Link, Delay]:
        return {link: proxy.delay for link, proxy in self._proxies.items()}

    async def close(self) -> None:
        for proxy in self._proxies.values():
            await proxy.close()
