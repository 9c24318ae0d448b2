"""Socket options, transport writes and process limits shared by both sides of the proxy."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import sys
from collections.abc import Callable

log = logging.getLogger("h2ping")

#: Keepalive probes (idle 60 s, every 10 s, 3 tries): a second line of defence for
#: NATs and firewalls that do count probes. Global Accelerator does not; PINGs do.
KEEPALIVE_IDLE = 60
KEEPALIVE_INTERVAL = 10
KEEPALIVE_PROBES = 3


def set_tcp_keepalive(sock: socket.socket | None) -> None:
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    # Linux names; other systems keep their own defaults.
    for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
        ("TCP_KEEPCNT", KEEPALIVE_PROBES),
    ):
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


def set_nodelay(sock: socket.socket | None) -> None:
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


#: CPython 3.12.0-3.12.8 and 3.13.0-3.13.1: asyncio's socket transport buffers what
#: ``writelines()`` cannot send at once without ever calling ``pause_writing()``
#: (CPython gh-127655), so output to a peer that reads nothing grows without bound.
_WRITELINES_SKIPS_PAUSE = any(
    first <= sys.version_info[:3] < fixed
    for first, fixed in (((3, 12), (3, 12, 9)), ((3, 13), (3, 13, 2)))
)


#: Transports known to pause their protocol from ``writelines`` on every Python.
_PAUSING_WRITELINES = ("uvloop.",)


def batch_writer(transport: asyncio.WriteTransport) -> Callable[[list[bytes]], None]:
    """How to hand ``transport`` a list of buffers with its flow control intact:
    ``writelines`` (no copy), or one joined ``write`` where ``writelines`` may
    never pause the protocol: on the Pythons above, any transport not known to
    pause (asyncio's own, and whatever else is not recognised, at the cost of
    a copy). Chosen once per connection, so the write itself costs no check."""
    module = type(transport).__module__ or ""
    if _WRITELINES_SKIPS_PAUSE and not module.startswith(_PAUSING_WRITELINES):
        write = transport.write
        return lambda parts: write(b"".join(parts))
    return transport.writelines


_SHORT = (errno.EMFILE, errno.ENFILE)


def is_shortage(exc: BaseException | None) -> bool:
    """Whether ``exc`` says that no file descriptor could be had."""
    return isinstance(exc, OSError) and exc.errno in _SHORT


def caused_by_shortage(exc: OSError) -> bool:
    """Whether ``exc`` came from a lack of descriptors, though it may not say so:
    glibc's resolver that cannot open ``/etc/hosts`` or a socket answers "Name or
    service not known". Such an error is checked by opening a descriptor now."""
    if is_shortage(exc):
        return True
    try:
        os.close(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
    except OSError as probe:
        return is_shortage(probe)
    return False


def nofile_limits() -> tuple[int, int]:
    """The soft and hard ``RLIMIT_NOFILE`` (-1 where the platform has none, or unlimited)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on this platform
        return -1, -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinity = resource.RLIM_INFINITY
    return (-1 if soft == infinity else soft), (-1 if hard == infinity else hard)


def raise_nofile_limit() -> int:
    """Raise the open-file soft limit to the hard limit: each in-flight request
    holds one client socket. Returns the limit now in force."""
    try:
        import resource
    except ImportError:  # not on this platform
        return -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit to %d: %s", hard, exc)
    return soft
