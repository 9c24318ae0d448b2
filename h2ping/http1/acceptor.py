"""Accepting client connections, only while the process has a descriptor to spare.

The event loop's own server accepts whenever the listening socket is readable,
until the descriptors run out; then asyncio's pauses a second and uvloop's
(libuv) accepts and at once closes what it has no room for, and the upstream
dials that would have served the clients already taken fail too. The
:class:`Acceptor` accepts only while fewer clients are connected than the
``capacity`` it is given (the descriptors left once upstream connections, dials
and files have theirs), and at most ACCEPTS_PER_TURN per wake-up. At capacity it
stops reading the socket: new clients wait in the kernel's listen queue, their
requests already written, and are taken as others leave.

The per-turn bound keeps a burst from holding the loop (PINGs and responses wait
for the turn to end) and lets the workers that share one listening socket each
take a share: every worker is woken, and each takes a few.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .listener import ClientConnection

log = logging.getLogger("h2ping.listener")

#: Connections taken per wake-up of the listening socket.
ACCEPTS_PER_TURN = 16
#: After an accept failed (for want of a descriptor or of kernel memory, say), the
#: next try, in seconds: a level-triggered reader would otherwise call again at once.
RETRY_AFTER_SHORTAGE = 0.5
_SHORTAGES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class ClientSet:
    """The client connections a listener holds; tells the acceptor when one leaves."""

    __slots__ = ("_members", "on_leave")

    def __init__(self) -> None:
        self._members: set[ClientConnection] = set()
        self.on_leave: Callable[[], None] | None = None

    def tell_on_leave(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` each time a client leaves (None: tell nobody)."""
        self.on_leave = callback

    def add(self, client: ClientConnection) -> None:
        self._members.add(client)

    def discard(self, client: ClientConnection) -> None:
        if client in self._members:
            self._members.remove(client)
            if self.on_leave is not None:
                self.on_leave()

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[ClientConnection]:
        return iter(self._members)

    def __contains__(self, client: object) -> bool:
        return client in self._members

    def __repr__(self) -> str:
        return f"ClientSet({len(self._members)} connections)"


class Acceptor:
    """Takes connections from one listening socket into ``clients`` (see the module)."""

    def __init__(
        self,
        sock: socket.socket,
        protocol_factory: Callable[[], ClientConnection],
        clients: ClientSet,
        capacity: Callable[[], int],
        on_shortage: Callable[[str], None],
        on_full: Callable[[], None],
    ) -> None:
        """``capacity()`` is how many clients may be connected now; ``on_shortage``
        hears of an accept that found no descriptor, ``on_full`` of a stop at capacity."""
        self._loop = asyncio.get_running_loop()
        sock.setblocking(False)
        self.sock = sock
        self._fd = sock.fileno()
        self._factory = protocol_factory
        self._clients = clients
        self._capacity = capacity
        self._on_shortage = on_shortage
        self._on_full = on_full
        self._reading = False
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        #: Accepted sockets whose transport is being made: they hold a descriptor too.
        self._starting: set[asyncio.Task[None]] = set()
        clients.tell_on_leave(self._client_left)

    @property
    def serving(self) -> bool:
        """Listening (accepting now, or as soon as a client leaves)."""
        return not self._closed

    @property
    def at_capacity(self) -> bool:
        """Not reading the socket now: every client the process may hold is connected
        (or a shortage is being waited out)."""
        return not self._closed and not self._reading

    def start(self) -> None:
        self._read_if_room()

    def close(self) -> None:
        """Stop accepting and close the listening socket; queued clients are refused."""
        if self._closed:
            return
        self._closed = True
        self._stop_reading()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self._clients.tell_on_leave(None)
        self.sock.close()

    def accept_queue(self) -> int | None:
        """Clients waiting in the kernel's listen queue (Linux), else None."""
        if self._closed:
            return None
        return listen_queue_length(self.sock)

    # ----------------------------------------------------------------- internals

    def _room(self) -> int:
        return self._capacity() - len(self._clients) - len(self._starting)

    def _read_if_room(self) -> None:
        if self._closed or self._reading or self._retry is not None or self._room() <= 0:
            return
        self._reading = True
        self._loop.add_reader(self._fd, self._on_readable)

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def _client_left(self) -> None:
        if not self._reading:
            self._read_if_room()

    def _on_readable(self) -> None:
        for _ in range(min(self._room(), ACCEPTS_PER_TURN)):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # the queue is empty
            except ConnectionAbortedError:
                continue  # the client left while queued
            except OSError as exc:
                if exc.errno in _SHORTAGES:
                    self._on_shortage("accept")
                else:  # not the client's doing: say so, and do not spin on it
                    log.error("accept failed: %s; trying again shortly", exc)
                self._pause_a_while()
                return
            task = self._loop.create_task(self._start_client(conn))
            self._starting.add(task)
            task.add_done_callback(self._started)
        if self._room() <= 0:
            self._stop_reading()  # a leaving client starts it again
            self._tell_if_full()

    def _tell_if_full(self) -> None:
        """Tell ``on_full`` once the clients themselves fill the capacity, not
        accepted sockets still on their way to becoming clients."""
        if not self._starting and self.at_capacity and self._retry is None and self._room() <= 0:
            self._on_full()

    def _pause_a_while(self) -> None:
        self._stop_reading()
        self._retry = self._loop.call_later(RETRY_AFTER_SHORTAGE, self._retry_now)

    def _retry_now(self) -> None:
        self._retry = None
        self._read_if_room()

    async def _start_client(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn)
        except OSError as exc:  # the client reset before its transport was made
            log.debug("accepted connection lost at once: %s", exc)
            if conn.fileno() >= 0:  # the loop detaches a socket it closed itself
                conn.close()

    def _started(self, task: asyncio.Task[None]) -> None:
        self._starting.discard(task)
        if not self._reading:
            self._read_if_room()
            self._tell_if_full()


_TCP_INFO_QUEUE = struct.Struct("=8x16xII")  # tcpi_unacked, tcpi_sacked after 8 u8, 4 u32


def listen_queue_length(sock: socket.socket) -> int | None:
    """Connections waiting to be accepted on a listening TCP socket: Linux reports
    the queue's length in ``tcp_info.tcpi_unacked`` for a socket that listens.
    None where the system does not say."""
    option = getattr(socket, "TCP_INFO", None)
    if option is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, option, _TCP_INFO_QUEUE.size)
    except OSError:
        return None
    if len(info) < _TCP_INFO_QUEUE.size:
        return None
    queued, _ = _TCP_INFO_QUEUE.unpack_from(info)
    return int(queued)
