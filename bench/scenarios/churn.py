"""GOAWAY churn under load: does any response get lost when the upstream ends a connection?

    python bench/churn.py [--runs 10] [--requests 3000] [--peers h2ping,h2ping-asyncio,go]

nginx (HTTP/2 over TLS) ends every connection after 50 requests
(``keepalive_requests 50``): it sends GOAWAY, finishes the streams it took, and
closes, the last responses, GOAWAY and close arriving together. h2load sends
``--requests`` POSTs of 2,000 random bytes, 50 connections at a time, as HTTP/1.1
into each proxy, which forwards them to nginx, where they are echoed; ``--runs``
times per peer. ``h2ping`` runs on uvloop (what ``python -m h2ping`` uses),
``h2ping-asyncio`` on asyncio's own loop, ``go`` is the Go sidecar (peers/gopeer.py).

For each peer: requests that did not get a 2xx by h2load's count (h2load counts
every request left on a client connection that was cut as failed, so one lost
response shows as several), and h2ping's own count of failed and aborted
requests from its ``stopped:`` line. Everything is on 127.0.0.1; the proxy is
pinned to core 0, nginx and h2load to core 1.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common.procs import (
    BENCH_DIR,
    BenchError,
    Procs,
    find_tool,
    free_port,
    wait_port,
    write_results,
)
from load.origin import ECHO_MODULE, missing_echo_origin, write_certs
from peers import gopeer

PEERS = ("h2ping", "h2ping-asyncio", "go")
BODY_SIZE = 2000
CONNECTIONS = 50

NGINX_CONF = """\
user root;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
load_module {echo_module};
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/nginx-body;
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {tmp}/origin-cert.pem;
        ssl_certificate_key {tmp}/origin-key.pem;
        keepalive_requests 50;
        http2_max_concurrent_streams 128;
        client_body_buffer_size 64k;
        location = /echo {{
            echo_read_request_body;
            echo_request_body;
        }}
    }}
}}
"""

#: h2ping on asyncio's own loop: the command line's, with uvloop hidden.
ASYNCIO_H2PING = (
    "import sys; sys.modules['uvloop'] = None; "
    "from h2ping.process.cli import main; sys.exit(main(sys.argv[1:]))"
)


def proxy_argv(peer: str, port: int, upstream: str, ca: Path) -> tuple[list[str], dict[str, str]]:
    listen = f"127.0.0.1:{port}"
    if peer == "go":
        binary = gopeer.sidecar_binary()
        if binary is None:
            raise BenchError("the Go sidecar is not available")
        argv = [str(binary), "-listen", listen, "-upstream", upstream, "-shutdown-grace", "5s"]
        return argv, {**os.environ, "SSL_CERT_FILE": str(ca)}
    start = [sys.executable, "-m", "h2ping"]
    if peer == "h2ping-asyncio":
        start = [sys.executable, "-c", ASYNCIO_H2PING]
    argv = [*start, "-listen", listen, "-upstream", upstream, "-ca-file", str(ca)]
    return argv, dict(os.environ)


H2LOAD_LINE = re.compile(r"requests: (\d+) total, .*? (\d+) succeeded, (\d+) failed, (\d+) errored")
STATUS_LINE = re.compile(r"status codes: (\d+) 2xx")
STOPPED = re.compile(r"stopped: .*?failed=(\d+) aborted=(\d+)")
#: A connection h2ping ended for a protocol error of the upstream's.
PROTOCOL_ERROR = "HTTP/2 protocol error from upstream"


def h2load(port: int, body: Path, requests: int) -> dict[str, int]:
    argv = ["taskset", "-c", "1", find_tool("h2load") or "h2load", "--h1", "-n", str(requests)]
    argv += ["-c", str(CONNECTIONS), "-t", "1", "-d", str(body), f"http://127.0.0.1:{port}/echo"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600).stdout
    counts = H2LOAD_LINE.search(out)
    statuses = STATUS_LINE.search(out)
    if counts is None or statuses is None:
        raise BenchError(f"h2load printed no summary:\n{out[-2000:]}")
    return {"requests": requests, "ok_2xx": int(statuses.group(1))}


def run_peer(
    peer: str, procs: Procs, tmp: Path, upstream: str, runs: int, requests: int
) -> dict[str, Any]:
    port = free_port()
    argv, env = proxy_argv(peer, port, upstream, tmp / "ca.pem")
    proc = procs.start(peer, argv, cpu=0, env=env)
    wait_port(port, proc)
    body = tmp / "body"
    per_run = []
    for _ in range(runs):
        body.write_bytes(os.urandom(BODY_SIZE))
        per_run.append(h2load(port, body, requests))
    procs.stop(proc, signal.SIGTERM, 30.0)
    result: dict[str, Any] = {
        "runs": runs,
        "requests": sum(r["requests"] for r in per_run),
        "not_2xx": sum(r["requests"] - r["ok_2xx"] for r in per_run),
        "not_2xx_per_run": [r["requests"] - r["ok_2xx"] for r in per_run],
    }
    text = proc.log_path.read_text(errors="replace")
    stopped = STOPPED.search(text)
    if stopped is not None:
        result["h2ping_failed"], result["h2ping_aborted"] = map(int, stopped.groups())
        errors = [line for line in text.splitlines() if PROTOCOL_ERROR in line]
        result["protocol_errors"] = len(errors)
        result["protocol_error_lines"] = errors[:20]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "churn.json")
    parser.add_argument(
        "--keep-tmp", action="store_true", help="keep the temp dir (configs, every log)"
    )
    args = parser.parse_args(argv)
    peers = args.peers.split(",")
    if missing := missing_echo_origin():
        print(missing)
        return 2
    results: dict[str, Any] = {}
    name = tempfile.mkdtemp(prefix="h2ping-churn-")
    tmp = Path(name)
    if args.keep_tmp:
        print(f"logs and configs kept in {tmp}", flush=True)
    try:
        write_certs(tmp)
        procs = Procs(tmp)
        try:
            port = free_port()
            conf = tmp / "nginx.conf"
            conf.write_text(NGINX_CONF.format(tmp=tmp, echo_module=ECHO_MODULE, port=port))
            nginx = procs.start(
                "nginx",
                [
                    find_tool("nginx") or "nginx",
                    "-p",
                    str(tmp),
                    "-c",
                    str(conf),
                    "-g",
                    "daemon off;",
                ],
                cpu=1,
            )
            wait_port(port, nginx)
            for peer in peers:
                results[peer] = run_peer(
                    peer, procs, tmp, f"https://127.0.0.1:{port}", args.runs, args.requests
                )
                print(peer, results[peer], flush=True)
        finally:
            procs.close()
    finally:
        if not args.keep_tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    write_results(
        {"scenario": "churn", "args": vars(args) | {"out": str(args.out)}, "peers": results},
        args.out,
    )
    print(
        f"\n{'peer':<16} {'runs':>4} {'requests':>9} {'not 2xx':>8} {'h2ping failed/aborted':>22}"
        f" {'protocol errors':>16}"
    )
    for peer, r in results.items():
        own = f"{r['h2ping_failed']}/{r['h2ping_aborted']}" if "h2ping_failed" in r else "-"
        errors = str(r.get("protocol_errors", "-"))
        print(
            f"{peer:<16} {r['runs']:>4} {r['requests']:>9} {r['not_2xx']:>8} {own:>22} {errors:>16}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
