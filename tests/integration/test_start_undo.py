"""A start that fails half-way undoes what it started: no listening socket, no
lag timer, no access-log writer, no link to worker 1 is left behind, for a
failure at each step after the listener stands."""

from __future__ import annotations

import asyncio
import errno
import socket
import threading
from pathlib import Path

import pytest

from h2ping import Proxy
from h2ping.errors import AccessLogError, AdminListenError
from h2ping.process.siblings import Links

UPSTREAM = "http://127.0.0.1:9"


def refuses(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "h2ping-access-log"]


async def test_an_access_log_that_cannot_open_leaves_no_listener(tmp_path: Path) -> None:
    proxy = Proxy(
        upstream=UPSTREAM,
        listen="127.0.0.1:0",
        access_log=str(tmp_path / "missing" / "access.log"),
        loop_lag_interval=0.01,
    )
    with pytest.raises(AccessLogError):
        await proxy.start()
    assert proxy.port and refuses(proxy.port)
    assert proxy.lag is None and not writer_threads()
    assert proxy.not_serving() == "not listening"


@pytest.fixture
def taken_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


async def test_an_admin_address_in_use_undoes_every_step_before(
    tmp_path: Path, taken_port: socket.socket
) -> None:
    ours, worker_1 = socket.socketpair()
    links = Links(instance="t", workers=2, answer_on=ours)
    proxy = Proxy(
        upstream=UPSTREAM,
        listen="127.0.0.1:0",
        access_log=str(tmp_path / "access.log"),
        loop_lag_interval=0.01,
        admin_listen=f"127.0.0.1:{taken_port.getsockname()[1]}",
    )
    with taken_port, pytest.raises(AdminListenError) as failed:
        await proxy.start(links=links)
    assert failed.value.errno == errno.EADDRINUSE
    assert proxy.port and refuses(proxy.port)
    assert proxy.lag is not None and proxy.lag._timer is None  # stopped
    assert not writer_threads()  # the access log's writer ended, its file closed
    # Worker 1's end hears the link close: nothing answers there any more.
    with worker_1:
        worker_1.setblocking(False)
        await asyncio.sleep(0.05)
        assert worker_1.recv(1) == b""
    assert proxy.admin is None


async def test_a_started_proxy_stops_all_of_it(tmp_path: Path) -> None:
    """The other way round: once started, stop() ends what the undo would have."""
    proxy = Proxy(
        upstream=UPSTREAM,
        listen="127.0.0.1:0",
        access_log=str(tmp_path / "access.log"),
        loop_lag_interval=0.01,
    )
    await proxy.start()
    assert writer_threads() and not refuses(proxy.port)
    await proxy.stop(grace=0)
    assert refuses(proxy.port) and not writer_threads()
