"""A real nginx (Debian package) over TLS that answers every request itself (200,
its path echoed): an HTTP/2 origin with nothing behind it, for tests. Also how any
nginx of the tests is found and configured (:func:`nginx_binary`, :func:`write_config`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from . import procguard
from .conftest import TLSFiles, free_port, wait_for_port

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
{server}
    }}
}}
"""
#: The server block of :func:`run_nginx`: ``directives``, and a short answer.
_ANSWERING = """        {directives}
        location / {{ return 200 "ok $request_uri\\n"; }}"""


def write_config(workdir: pathlib.Path, port: int, tls: TLSFiles, server: str) -> pathlib.Path:
    """``workdir/nginx.conf``: one TLS HTTP/2 server on ``port``, its block
    ending with ``server`` (nginx directives, indented)."""
    conf = workdir / "nginx.conf"
    conf.write_text(
        CONFIG.format(dir=workdir, port=port, cert=tls.cert_file, key=tls.key_file, server=server)
    )
    return conf


def nginx_binary() -> str:
    path = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None
    )
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("nginx is not installed; .ci/run installs it (apt-get install nginx)")
        pytest.skip("nginx not installed (apt-get install nginx)")
    return path


@asynccontextmanager
async def run_answering_nginx(
    tls: TLSFiles, workdir: pathlib.Path, directives: str = ""
) -> AsyncIterator[str]:
    binary = nginx_binary()
    port = free_port()
    conf = write_config(workdir, port, tls, _ANSWERING.format(directives=directives))
    proc = subprocess.Popen(
        [binary, "-p", str(workdir), "-c", str(conf), "-e", str(workdir / "error.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=procguard.in_own_group,
    )
    procguard.reaper().watch(proc.pid)
    try:
        try:
            await wait_for_port(port)
        except OSError:
            proc.kill()
            raise AssertionError(f"nginx did not start: {proc.communicate()[1].decode()}") from None
        yield f"https://127.0.0.1:{port}"
    finally:
        proc.terminate()
        await asyncio.get_running_loop().run_in_executor(None, proc.wait)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its workers, if the master left them
        procguard.reaper().forget(proc.pid)
