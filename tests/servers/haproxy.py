"""HAProxy (Debian's 2.6) as an HTTP/2 front end to the backend."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
from collections.abc import AsyncIterator

from ..conftest import TLSFiles, free_port
from . import Origin, find_binary, running_process
from .backend import run_backend

CONFIG = """
global
    pidfile {dir}/haproxy.pid
defaults
    mode http
    timeout connect 5s
    # An idle h2 connection is kept this long (the idle case lasts a minute).
    timeout client 120s
    timeout server 120s
frontend fe
    bind 127.0.0.1:{port} ssl crt {pem} alpn h2
    default_backend be
backend be
    server origin 127.0.0.1:{backend}
"""


@contextlib.asynccontextmanager
async def run_haproxy(
    tls: TLSFiles, workdir: pathlib.Path, max_requests: int | None = None
) -> AsyncIterator[Origin]:
    binary = find_binary("haproxy", "haproxy", "/usr/sbin/haproxy")
    async with run_backend() as (backend, seen):
        port = free_port()
        pem = workdir / "haproxy.pem"  # HAProxy takes the certificate and key in one file
        pem.write_text(
            pathlib.Path(tls.cert_file).read_text() + pathlib.Path(tls.key_file).read_text()
        )
        conf = workdir / "haproxy.cfg"
        conf.write_text(CONFIG.format(dir=workdir, port=port, pem=pem, backend=backend))
        # Master-worker (-W): on SIGUSR2 the master starts a new worker; the old one
        # stops accepting, sends GOAWAY and finishes the streams it has.
        async with running_process([binary, "-W", "-db", "-f", str(conf)], port, workdir) as proc:

            async def reload() -> None:
                os.kill(proc.pid, signal.SIGUSR2)

            yield Origin("haproxy", f"https://127.0.0.1:{port}", reload, lambda: seen)
