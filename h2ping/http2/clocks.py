"""An upstream connection's clocks, and how each one ends it.

Its PINGs and the deadline of their ACKs (:mod:`h2ping.http2.liveness`): a dead
peer cuts the connection, failing its streams. Its age limit and its idle closing
(:mod:`h2ping.http2.lifetime`): the pool retires it at its age, and an idle one
closes with a GOAWAY. The clocks run from the peer's first SETTINGS until the
connection ends (the lifetime starts its own as it opens); the age and idle
clocks stop already once it takes no new streams.
The deadline of its blocked writes (:mod:`h2ping.http2.writeblock`): a peer that
reads nothing of what the connection writes for ``-write-timeout`` is
cut, failing its streams.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from .. import errors
from ..config import Config
from ..errors import UpstreamError
from .lifetime import Lifetime
from .liveness import Liveness
from .observer import ConnectionObserver
from .streams import StreamTable
from .writeblock import WriteBlock


class ClockedConnection(Protocol):
    """What the clocks ask of their connection: named here, so that this module
    needs none of the connection's."""

    @property
    def id(self) -> int: ...
    @property
    def table(self) -> StreamTable: ...
    @property
    def observer(self) -> ConnectionObserver: ...
    def ping(self, payload: bytes) -> None: ...
    def close(self, reason: str) -> None: ...
    def cut(self, reason: str, error: UpstreamError) -> None: ...


Conn = TypeVar("Conn", bound=ClockedConnection)


class ConnectionClocks(Generic[Conn]):
    """The PING clock (``liveness``), the age and idle clocks (``lifetime``) and the
    blocked writes' deadline (``writes``) of ``conn``; ``on_age(conn)`` hears of
    its age limit (None: no age limit)."""

    def __init__(
        self,
        conn: Conn,
        config: Config,
        ping_interval: float,
        on_age: Callable[[Conn], None] | None,
    ) -> None:
        self._conn: Conn | None = conn  # None once it ended (close)
        self._on_age = on_age
        self.liveness = Liveness(ping_interval, config.ping_timeout, conn.ping, self._dead)
        loop = asyncio.get_running_loop()
        self.lifetime = Lifetime(
            loop,
            config.max_conn_age,
            config.idle_conn_timeout,
            None if on_age is None else self._reached_age,
            self._idle,
            self._busy,
        )
        self.writes = WriteBlock(loop, conn.id, conn.cut, config.write_timeout, conn.observer)

    def start(self) -> None:
        """The connection is open: its PINGs run (its lifetime started the age
        and idle clocks as it opened)."""
        self.liveness.start()

    def stop(self) -> None:
        """The connection ended."""
        self.liveness.stop()
        self.lifetime.stop()
        self.writes.stop()

    def let_go(self) -> None:
        """The connection ended: every clock stops for good, and nothing here
        refers back to it any more (the cycle would wait for the cyclic collector)."""
        self.liveness.close()
        self.lifetime.close()
        self.writes.let_go()
        self._conn = self._on_age = None

    # Called by the clocks while they run; after close() they call nothing.

    def _busy(self) -> bool:
        return self._conn is not None and self._conn.table.busy

    def _reached_age(self) -> None:
        if self._on_age is not None and self._conn is not None:
            self._on_age(self._conn)

    def _idle(self, seconds: float) -> None:
        if (conn := self._conn) is not None:
            conn.observer.went_idle(seconds)
            conn.close("idle-conn-timeout")

    def _dead(self, silent_for: float, since_ping: float) -> None:
        conn = self._conn
        if conn is None:
            return
        conn.observer.peer_dead(silent_for, since_ping, self.liveness.timeout, conn.table.count())
        why = f"upstream connection {conn.id} dead: no frame for {silent_for:.1f}s after a PING"
        conn.cut("ping timeout", UpstreamError(errors.CONNECTION_TERMINATED, why))
