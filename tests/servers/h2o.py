"""h2o (Debian's h2o 2.2), proxying to the backend."""

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
user: root
pid-file: {dir}/h2o.pid
error-log: {dir}/error.log
# An idle h2 connection is kept this long (the idle case lasts a minute).
http2-idle-timeout: 120
listen:
  host: 127.0.0.1
  port: {port}
  ssl:
    certificate-file: {cert}
    key-file: {key}
    ocsp-update-interval: 0  # no stapling: the test CA has no responder
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://127.0.0.1:{backend}/
"""


@contextlib.asynccontextmanager
async def run_h2o(
    tls: TLSFiles, workdir: pathlib.Path, max_requests: int | None = None
) -> AsyncIterator[Origin]:
    binary = find_binary("h2o", "h2o", "/usr/bin/h2o")
    async with run_backend() as (backend, seen):
        port = free_port()
        conf = workdir / "h2o.conf"
        conf.write_text(
            CONFIG.format(
                dir=workdir, port=port, cert=tls.cert_file, key=tls.key_file, backend=backend
            )
        )
        # Master mode: on SIGHUP, h2o's start_server starts a new h2o on the same
        # listening socket, then sends the old one SIGTERM, upon which it stops
        # accepting and finishes what it has.
        async with running_process(
            [binary, "-m", "master", "-c", str(conf)], port, workdir
        ) as proc:

            async def reload() -> None:
                os.kill(proc.pid, signal.SIGHUP)

            yield Origin("h2o", f"https://127.0.0.1:{port}", reload, lambda: seen)
