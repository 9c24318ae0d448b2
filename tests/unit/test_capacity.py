"""How many clients a process takes at once, and errors that blame descriptors only
when descriptors are to blame."""

from __future__ import annotations

import errno
import socket

import pytest

from h2ping import errors, sockets
from h2ping.config import parse_upstream
from h2ping.http2.dial import describe_connect_error
from h2ping.process.descriptors import ASSUMED_STREAMS, ClientCapacity

UPSTREAM = parse_upstream("https://api.example.com")


def test_clients_leave_room_for_the_upstream_connections_they_need() -> None:
    capacity = ClientCapacity(1200, 20, lambda: None)
    clients = capacity()
    # Before any connection tells its limit, 100 streams a connection.
    upstream_conns = 2 * -(-clients // ASSUMED_STREAMS)  # twice: rotation overlaps
    assert clients + upstream_conns + capacity.baseline + capacity.spare <= 1200
    assert clients > 1200 * 0.9


def test_a_low_stream_limit_leaves_fewer_clients() -> None:
    streams = {"limit": 128}
    capacity = ClientCapacity(20_000, 30, lambda: streams["limit"])
    many = capacity()
    streams["limit"] = 1  # each request needs an upstream connection (and its successor)
    few = capacity()
    assert few + 2 * few + 30 + capacity.spare <= 20_000
    assert few < many / 2


def test_the_spare_grows_with_the_limit_within_bounds() -> None:
    assert ClientCapacity(40, 10, lambda: None).spare == 4
    assert ClientCapacity(800, 10, lambda: None).spare == 50
    assert ClientCapacity(20_000, 10, lambda: None).spare == 64


def test_no_limit_and_a_limit_too_low() -> None:
    assert ClientCapacity(-1, 10, lambda: None)() > 10**9
    assert "without a descriptor limit" in ClientCapacity(-1, 10, lambda: None).describe()
    assert ClientCapacity(12, 10, lambda: None)() == 1  # never none at all: that would hang


def test_describe_says_the_limit_and_what_else_needs_descriptors() -> None:
    text = ClientCapacity(1200, 20, lambda: 128).describe()
    assert text.startswith(f"{ClientCapacity(1200, 20, lambda: 128)():,} client connections")
    assert "descriptor limit 1200" in text and "128 streams each" in text


def test_a_dial_without_a_descriptor_names_the_limit() -> None:
    error = describe_connect_error(OSError(errno.EMFILE, "Too many open files"), UPSTREAM, 10)
    assert error.error == errors.CONNECTION_LIMIT_REACHED
    assert "no file descriptor free" in error.detail and "limit" in error.detail


def test_a_resolver_error_during_a_shortage_is_no_dns_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """glibc's resolver says "Name or service not known" when it cannot open its
    files: the shortage is checked, not taken from the resolver's words."""
    lookup = socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    def no_descriptor(*_: object) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(sockets.os, "open", no_descriptor)
    error = describe_connect_error(lookup, UPSTREAM, 10)
    assert error.error == errors.CONNECTION_LIMIT_REACHED
    monkeypatch.undo()
    error = describe_connect_error(lookup, UPSTREAM, 10)
    assert error.error == errors.DNS_ERROR
    assert error.detail == "api.example.com: Name or service not known"


def test_a_refused_connection_is_never_taken_for_a_shortage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_descriptor(*_: object) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(sockets.os, "open", no_descriptor)
    error = describe_connect_error(ConnectionRefusedError(errno.ECONNREFUSED, "x"), UPSTREAM, 10)
    assert error.error == errors.CONNECTION_REFUSED
