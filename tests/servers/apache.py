"""Apache httpd (Debian's apache2) with mod_http2, proxying to the backend."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
from collections.abc import AsyncIterator

from ..conftest import TLSFiles, free_port
from . import Origin, find_binary, running_process
from .backend import run_backend

MODULES = "/usr/lib/apache2/modules"

CONFIG = """
ServerRoot {dir}
ServerName 127.0.0.1
DefaultRuntimeDir {dir}
PidFile {dir}/httpd.pid
ErrorLog {dir}/error.log
LogLevel warn
Listen 127.0.0.1:{port}
# Debian's httpd refuses to serve as root; the children need no file here.
User www-data
Group www-data
LoadModule mpm_event_module {modules}/mod_mpm_event.so
LoadModule authz_core_module {modules}/mod_authz_core.so
LoadModule ssl_module {modules}/mod_ssl.so
LoadModule http2_module {modules}/mod_http2.so
LoadModule proxy_module {modules}/mod_proxy.so
LoadModule proxy_http_module {modules}/mod_proxy_http.so
Protocols h2
SSLEngine on
SSLCertificateFile {cert}
SSLCertificateKeyFile {key}
# An idle h2 connection is kept this long (the idle case lasts a minute).
KeepAliveTimeout 120
# mod_http2 ends a session with GOAWAY after this many streams.
MaxKeepAliveRequests {max_requests}
ProxyPass / http://127.0.0.1:{backend}/
"""


@contextlib.asynccontextmanager
async def run_apache(
    tls: TLSFiles, workdir: pathlib.Path, max_requests: int | None = None
) -> AsyncIterator[Origin]:
    binary = find_binary("apache2", "apache2", "/usr/sbin/apache2")
    if not os.path.exists(f"{MODULES}/mod_http2.so"):
        find_binary("mod_http2.so", "apache2")  # skips, or fails in CI
    async with run_backend() as (backend, seen):
        port = free_port()
        conf = workdir / "httpd.conf"
        conf.write_text(
            CONFIG.format(
                dir=workdir,
                port=port,
                modules=MODULES,
                cert=tls.cert_file,
                key=tls.key_file,
                max_requests=max_requests or 0,  # 0: no limit
                backend=backend,
            )
        )
        async with running_process(
            [binary, "-f", str(conf), "-DFOREGROUND"], port, workdir
        ) as proc:

            async def reload() -> None:
                os.kill(proc.pid, signal.SIGUSR1)  # what `apachectl -k graceful` sends

            yield Origin("apache", f"https://127.0.0.1:{port}", reload, lambda: seen)
