"""nginx (Debian's) proxying to the backend."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
from collections.abc import AsyncIterator

from ..conftest import TLSFiles, free_port
from ..nginx_answering import nginx_binary, write_config
from . import Origin, running_process
from .backend import run_backend

#: The server block: how long and how many streams a connection lasts, and the
#: backend behind it.
SERVER = """        # An idle h2 connection is kept this long (the idle case lasts a minute).
        keepalive_timeout 120s;
        # GOAWAY after this many streams on a connection.
        keepalive_requests {max_requests};
        client_max_body_size 0;
        location / {{
            proxy_pass http://127.0.0.1:{backend};
            proxy_http_version 1.1;
            proxy_buffering off;
            proxy_request_buffering off;
        }}"""


@contextlib.asynccontextmanager
async def run_nginx(
    tls: TLSFiles, workdir: pathlib.Path, max_requests: int | None = None
) -> AsyncIterator[Origin]:
    binary = nginx_binary()
    async with run_backend() as (backend, seen):
        port = free_port()
        server = SERVER.format(max_requests=max_requests or 1_000_000, backend=backend)
        conf = write_config(workdir, port, tls, server)
        argv = [binary, "-p", str(workdir), "-c", str(conf), "-e", str(workdir / "error.log")]
        async with running_process(argv, port, workdir) as proc:

            async def reload() -> None:
                os.kill(proc.pid, signal.SIGHUP)  # what `nginx -s reload` sends

            yield Origin("nginx", f"https://127.0.0.1:{port}", reload, lambda: seen)
