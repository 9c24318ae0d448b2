"""The acceptor: clients up to a capacity, the rest left in the listen queue until
one leaves; a few per wake-up; a shortage waited out, not retried in a loop. Real
loopback sockets, on both event loops."""

from __future__ import annotations

import asyncio
import errno
import socket
from typing import Any

import pytest

from h2ping.http1 import acceptor as acceptor_module
from h2ping.http1.acceptor import ACCEPTS_PER_TURN, Acceptor, ClientSet, listen_queue_length

from ..conftest import wait_until


class Held(asyncio.Protocol):
    """A client connection that stays until the test closes it."""

    def __init__(self, clients: ClientSet) -> None:
        self.clients = clients
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.clients.add(self)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        self.clients.discard(self)  # type: ignore[arg-type]


class Events:
    def __init__(self) -> None:
        self.full = 0
        self.shortages: list[str] = []

    def on_full(self) -> None:
        self.full += 1


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(256)
    return sock


def start(capacity: int, events: Events) -> tuple[Acceptor, ClientSet, int]:
    clients = ClientSet()
    sock = listening()
    acceptor = Acceptor(
        sock,
        lambda: Held(clients),  # type: ignore[arg-type, return-value]
        clients,
        lambda: capacity,
        events.shortages.append,
        events.on_full,
    )
    acceptor.start()
    return acceptor, clients, sock.getsockname()[1]


def connect(port: int, n: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]


async def test_stops_at_capacity_and_takes_the_queued_as_clients_leave() -> None:
    events = Events()
    acceptor, clients, port = start(5, events)
    socks = connect(port, 8)
    try:
        await wait_until(lambda: len(clients) == 5)
        await asyncio.sleep(0.05)  # time for more, were any taken
        assert len(clients) == 5 and acceptor.at_capacity and events.full >= 1
        assert acceptor.accept_queue() == 3
        for held in list(clients)[:2]:
            held.transport.close()  # type: ignore[attr-defined]
        await wait_until(lambda: acceptor.accept_queue() == 1 and len(clients) == 5)
        for held in list(clients)[:3]:
            held.transport.close()  # type: ignore[attr-defined]
        await wait_until(lambda: acceptor.accept_queue() == 0 and len(clients) == 3)
        assert not acceptor.at_capacity
    finally:
        acceptor.close()
        for sock in socks:
            sock.close()
    assert not acceptor.serving and acceptor.accept_queue() is None


async def test_a_few_per_wake_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst is taken over several turns of the loop, so none grows long and
    every worker sharing the socket gets a share."""
    events = Events()
    acceptor, clients, port = start(1000, events)
    turns: list[int] = []
    real = acceptor._on_readable

    def counted() -> None:
        before = len(clients) + len(acceptor._starting)
        real()
        turns.append(len(clients) + len(acceptor._starting) - before)

    monkeypatch.setattr(acceptor, "_on_readable", counted)
    acceptor._stop_reading()
    socks = connect(port, 3 * ACCEPTS_PER_TURN)
    acceptor._read_if_room()  # reads with the counting callback
    try:
        await wait_until(lambda: len(clients) == len(socks))
        assert max(turns) == ACCEPTS_PER_TURN and len([t for t in turns if t]) >= 3
    finally:
        acceptor.close()
        for sock in socks:
            sock.close()


async def test_a_shortage_is_waited_out_not_retried_in_a_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(acceptor_module, "RETRY_AFTER_SHORTAGE", 0.2)
    events = Events()
    acceptor, clients, port = start(100, events)
    real_accept = acceptor.sock.accept
    failures = {"left": 1, "tries": 0}

    def accept() -> tuple[socket.socket, Any]:
        failures["tries"] += 1
        if failures["left"]:
            failures["left"] -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return real_accept()

    monkeypatch.setattr(acceptor, "sock", _Wrapped(acceptor.sock, accept))
    socks = connect(port, 2)
    try:
        await wait_until(lambda: events.shortages == ["accept"])
        assert acceptor.at_capacity and failures["tries"] == 1  # waiting, not spinning
        await wait_until(lambda: len(clients) == 2)
    finally:
        acceptor.close()
        for sock in socks:
            sock.close()


class _Wrapped:
    """A listening socket whose accept the test scripts."""

    def __init__(self, sock: socket.socket, accept: Any) -> None:
        self._sock = sock
        self.accept = accept

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def test_listen_queue_length() -> None:
    with listening() as sock:
        port = sock.getsockname()[1]
        assert listen_queue_length(sock) == 0
        socks = connect(port, 3)
        assert listen_queue_length(sock) == 3
        for client in socks:
            client.close()
    with socket.socket(socket.AF_UNIX) as unix:
        assert listen_queue_length(unix) is None


async def test_another_accept_error_is_logged_once_not_spun_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(acceptor_module, "RETRY_AFTER_SHORTAGE", 0.2)
    events = Events()
    acceptor, clients, port = start(100, events)
    real_accept = acceptor.sock.accept
    calls = {"n": 0}

    def accept() -> tuple[socket.socket, Any]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(errno.EPROTO, "Protocol error")
        return real_accept()

    monkeypatch.setattr(acceptor, "sock", _Wrapped(acceptor.sock, accept))
    socks = connect(port, 1)
    try:
        await wait_until(lambda: calls["n"] >= 1)
        await asyncio.sleep(0.05)
        assert calls["n"] == 1 and not events.shortages  # paused: no spin, no shortage
        await wait_until(lambda: len(clients) == 1)
    finally:
        acceptor.close()
        for sock in socks:
            sock.close()
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == ["accept failed: [Errno 71] Protocol error; trying again shortly"]
