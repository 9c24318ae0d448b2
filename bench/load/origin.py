"""The origin: nginx over TLS with HTTP/2, plus a cleartext HTTP/1.1 listener.

Locations:
  /tiny          a small fixed body
  /16m           a 16 MiB static file
  /200m          a 200 MiB static file (zeros)
  /echo          echoes a small request body
  /upload        reads the whole body (any size, kept in memory) and answers
                 ``ok <request_length>``, so the client can check it all arrived
  /delay?ms=N    answers after N milliseconds (echo module's ``echo_sleep``)
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import trustme

from common.procs import BenchError, Procs, children, find_tool, free_port, wait_port

ECHO_MODULE = Path("/usr/lib/nginx/modules/ngx_http_echo_module.so")


def missing_echo_origin() -> str | None:
    """What the echoing nginx origin with h2load as the load lacks, as the line
    to print (the Debian packages to install), or None when all is here."""
    for tool in ("nginx", "h2load", "taskset"):
        if find_tool(tool) is None:
            return f"missing {tool}: apt-get install -y nginx nghttp2-client util-linux"
    if not ECHO_MODULE.exists():
        return "missing nginx's echo module: apt-get install -y libnginx-mod-http-echo"
    return None


TINY_BODY = "hello from the origin\n"
BIG_SIZE = 16 * 1024 * 1024
HUGE_SIZE = 200 * 1024 * 1024

NGINX_CONF = """\
user root;
worker_processes 1;
worker_rlimit_nofile {nofile};
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
load_module {echo_module};

events {{
    worker_connections {connections};
    multi_accept on;
}}

http {{
    log_format ids '$uri $http_x_request_id $status $body_bytes_sent';
    access_log {access_log};
    default_type text/plain;
    sendfile on;
    tcp_nodelay on;
    client_body_temp_path {tmp}/nginx-body;
    proxy_temp_path {tmp}/nginx-proxy;
    fastcgi_temp_path {tmp}/nginx-fastcgi;
    uwsgi_temp_path {tmp}/nginx-uwsgi;
    scgi_temp_path {tmp}/nginx-scgi;

    # One upstream connection must carry a whole run, and sit idle between runs.
    keepalive_requests 1000000;
    keepalive_timeout 3600s;
    http2_max_concurrent_streams {max_streams};

    # ms -> seconds for echo_sleep, which takes (fractional) seconds.
    map $arg_ms $delay_s {{
        ~^(\\d+)(\\d\\d\\d)$ $1.$2;
        ~^(\\d\\d\\d)$ 0.$1;
        ~^(\\d\\d)$ 0.0$1;
        ~^(\\d)$ 0.00$1;
        default 0;
    }}

    server {{
        listen 127.0.0.1:{tls_port} ssl http2 backlog=65535;
        listen 127.0.0.1:{h1_port} backlog=65535;
        ssl_certificate {tmp}/origin-cert.pem;
        ssl_certificate_key {tmp}/origin-key.pem;
        root {tmp}/www;

        location = /tiny {{ return 200 "{tiny}"; }}
        location = /16m {{ }}
        location = /200m {{ }}
        location = /echo {{
            echo_read_request_body;
            echo_request_body;
        }}
        location = /upload {{
            client_max_body_size 0;
            client_body_buffer_size 32m;
            echo_read_request_body;
            echo "ok $request_length";
        }}
        location = /delay {{
            echo_sleep $delay_s;
            echo "slept $arg_ms ms";
        }}
    }}
}}
"""


@dataclass
class Origin:
    tls_port: int  # HTTP/2 over TLS: what every proxy forwards to
    h1_port: int  # cleartext HTTP/1.1: h2load --h1 straight to nginx
    ca_path: Path
    pid: int

    @property
    def https_url(self) -> str:
        return f"https://127.0.0.1:{self.tls_port}"

    def pin(self, cpus: Iterable[int] | None) -> None:
        """Move nginx's processes (master and workers) to ``cpus``; None: every
        core this process may use (they float)."""
        cores = set(os.sched_getaffinity(0) if cpus is None else cpus)
        for pid in (self.pid, *children(self.pid)):
            with contextlib.suppress(ProcessLookupError):  # a worker gone meanwhile
                os.sched_setaffinity(pid, cores)


def write_certs(tmp: Path) -> Path:
    """A throwaway CA and a server certificate for 127.0.0.1/localhost."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_path = tmp / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    cert.private_key_pem.write_to_path(str(tmp / "origin-key.pem"))
    chain = tmp / "origin-cert.pem"
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    return ca_path


def start_origin(
    procs: Procs,
    tmp: Path,
    max_streams: int = 1024,
    access_log: Path | None = None,
    cpu: int | None = None,
) -> Origin:
    """Start nginx; ``access_log`` logs each request's path, X-Request-Id, status and
    body size there (one line each), else nothing is logged; ``cpu``: the core its
    processes are pinned to (None: they float)."""
    ca_path = write_certs(tmp)
    www = tmp / "www"
    www.mkdir()
    for name, size in (("16m", BIG_SIZE), ("200m", HUGE_SIZE)):
        with (www / name).open("wb") as big:
            big.truncate(size)  # sparse zeros: nginx sends them like any file
    tls_port, h1_port = free_port(), free_port()
    _, nofile = resource.getrlimit(resource.RLIMIT_NOFILE)  # as raised by run.py
    conf = tmp / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(
            tmp=tmp,
            echo_module=ECHO_MODULE,
            tls_port=tls_port,
            h1_port=h1_port,
            max_streams=max_streams,
            nofile=nofile,
            connections=nofile - 100,
            tiny=TINY_BODY.replace("\n", "\\n"),
            access_log=f"{access_log} ids" if access_log else "off",
        )
    )
    nginx = find_tool("nginx")
    if nginx is None:
        raise BenchError("nginx not found (Debian package nginx)")
    argv = [nginx, "-p", str(tmp), "-c", str(conf), "-e", str(tmp / "nginx-error.log")]
    proc = procs.start("nginx", [*argv, "-g", "daemon off;"], cpu=cpu)
    wait_port(tls_port, proc)
    wait_port(h1_port, proc)
    return Origin(tls_port, h1_port, ca_path, proc.pid)
