"""nginx (Debian's) proxying to the backend."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
from collections.abc import AsyncIterator

from ..conftest import TLSFiles, free_port
from ..nginx import nginx_binary
from . import Origin, running_process
from .backend import run_backend

CONFIG = """
daemon off;
worker_processes 1;
user root;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        # An idle h2 connection is kept this long (the idle case lasts a minute).
        keepalive_timeout 120s;
        # GOAWAY after this many streams on a connection.
        keepalive_requests {max_requests};
        client_max_body_size 0;
        location / {{
            proxy_pass http://127.0.0.1:{backend};
            proxy_http_version 1.1;
            proxy_buffering off;
            proxy_request_buffering off;
        }}
    }}
}}
"""


@contextlib.asynccontextmanager
async def run_nginx(
    tls: TLSFiles, workdir: pathlib.Path, max_requests: int | None = None
) -> AsyncIterator[Origin]:
    binary = nginx_binary()
    async with run_backend() as (backend, seen):
        port = free_port()
        conf = workdir / "nginx.conf"
        conf.write_text(
            CONFIG.format(
                dir=workdir,
                port=port,
                cert=tls.cert_file,
                key=tls.key_file,
                max_requests=max_requests or 1_000_000,
                backend=backend,
            )
        )
        argv = [binary, "-p", str(workdir), "-c", str(conf), "-e", str(workdir / "error.log")]
        async with running_process(argv, port, workdir) as proc:

            async def reload() -> None:
                os.kill(proc.pid, signal.SIGHUP)  # what `nginx -s reload` sends

            yield Origin("nginx", f"https://127.0.0.1:{port}", reload, lambda: seen)
