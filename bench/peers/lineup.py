"""The things h2ping is measured against, each reachable at one base URL.

``direct`` and ``direct-h1`` are nginx itself (no proxy): the floor. The proxies
all take cleartext HTTP/1.1 and forward over TLS + HTTP/2 to the same nginx, and
each runs pinned to core 0 (the load generator gets core 1), unless the scenario
asks for ``cpu=None`` (unpinned). ``go`` is the real Go ``h2-ping-sidecar``, the
binary h2ping replaces (see peers/gopeer.py). h2ping always measures its event-loop lag.
``floor`` (peers/floor_relay.py) is the least a pure-Python proxy on h2ping's libraries
must do per request and per byte; it runs only when ``--peers`` names it.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass

from common.procs import BenchError, Proc, Procs, bench_module, find_tool, free_port, wait_port
from load.origin import Origin
from peers import gopeer

PROXY_CPU = 0
LAG_INTERVAL = "10ms"  # h2ping --loop-lag-interval: lag p99/max in the shutdown summary
DIRECT_PEERS = ("direct", "direct-h1")
PROXY_PEERS = ("go", "nghttpx", "baseline", "h2ping", "floor")
OPT_IN_PEERS = frozenset({"floor"})  # left out of a run unless named
GO_SHUTDOWN_GRACE = "5s"  # its default (15m) would make every stop wait for SIGKILL
ALL_PEERS = DIRECT_PEERS + PROXY_PEERS


@dataclass
class Peer:
    name: str
    url: str  # base URL, no trailing slash
    h1: bool  # clients speak HTTP/1.1 to it (else h2 over TLS)
    proc: Proc | None = None
    stop_signal: int = signal.SIGTERM
    # False: signal only the leader. h2ping --workers N forwards SIGINT to its workers;
    # signalling the whole group as well would give each worker a second SIGINT, which
    # means "exit now" (no drain, no summary line).
    signal_group: bool = True

    @property
    def is_proxy(self) -> bool:
        return self.proc is not None


def available_peers(
    has_nghttpx: bool, has_baseline: bool, has_go: bool, wanted: list[str] | None = None
) -> list[str]:
    skip = {"nghttpx"} if not has_nghttpx else set()
    skip |= OPT_IN_PEERS - set(wanted or ())
    if not has_baseline:
        skip.add("baseline")
    if not has_go:
        skip.add("go")
    return [name for name in ALL_PEERS if name not in skip]


def start_peer(
    name: str,
    procs: Procs,
    origin: Origin,
    *,
    ping_interval: str | None = None,
    workers: int = 1,
    cpu: int | str | None = PROXY_CPU,
    label: str | None = None,
) -> Peer:
    """Start peer ``name`` (``workers`` only applies to h2ping); ``label`` names it in
    the results and logs when one scenario runs the same peer in several set-ups.
    ``cpu`` is a taskset list (``0``, ``"0-2"``) or None for unpinned."""
    label = label or name
    if name == "direct":
        return Peer(label, origin.https_url, h1=False)
    if name == "direct-h1":
        return Peer(label, f"http://127.0.0.1:{origin.h1_port}", h1=True)
    port = free_port()
    argv, stop_signal = _proxy_argv(name, port, origin, ping_interval, workers)
    env = None
    if name == "go":
        # It has no -ca-file; Go reads the roots from SSL_CERT_FILE.
        env = {**os.environ, "SSL_CERT_FILE": str(origin.ca_path)}
    proc = procs.start(label, argv, cpu=cpu, env=env)
    wait_port(port, proc)
    url = f"http://127.0.0.1:{port}"
    return Peer(label, url, True, proc, stop_signal, signal_group=workers == 1)


def _proxy_argv(
    name: str, port: int, origin: Origin, ping_interval: str | None, workers: int = 1
) -> tuple[list[str], int]:
    listen = f"127.0.0.1:{port}"
    ca = str(origin.ca_path)
    if name == "h2ping":
        argv = [sys.executable, "-m", "h2ping", "--listen", listen]
        argv += ["--upstream", origin.https_url, "--ca-file", ca]
        # info, not warning: the shutdown summary (pings_sent=...) is an info line.
        argv += ["--log-level", "info", "--loop-lag-interval", LAG_INTERVAL]
        argv += ["--workers", str(workers)]
        if ping_interval:
            argv += ["--ping-interval", ping_interval]
        return argv, signal.SIGINT
    if workers != 1:
        raise ValueError(f"--workers is an h2ping flag, not {name!r}'s")
    if name == "go":
        binary = gopeer.cached_binary()
        if binary is None:
            raise BenchError("the Go sidecar is not available (see the note at start-up)")
        argv = [str(binary), "-listen", listen, "-upstream", origin.https_url]
        argv += ["-shutdown-grace", GO_SHUTDOWN_GRACE]
        if ping_interval:
            argv += ["-ping-interval", ping_interval]
        return argv, signal.SIGTERM
    if name == "baseline":
        argv = bench_module("peers.baseline_proxy")
        argv += ["--listen", listen, "--upstream", origin.https_url]
        return [*argv, "--ca-file", ca], signal.SIGTERM
    if name == "floor":
        argv = bench_module("peers.floor_relay")
        argv += ["--listen", listen, "--upstream", origin.https_url]
        return [*argv, "--ca-file", ca], signal.SIGTERM
    if name == "nghttpx":
        return [
            find_tool("nghttpx") or "nghttpx",
            "--conf=/dev/null",  # ignore /etc/nghttpx/nghttpx.conf
            f"--frontend=127.0.0.1,{port};no-tls",
            f"--backend=127.0.0.1,{origin.tls_port};;tls;proto=h2;sni=localhost",
            f"--cacert={ca}",
            "--workers=1",
            "--no-ocsp",
            # Defaults of 1m would cut the 60 s in-flight scenario.
            "--backend-read-timeout=1h",
            "--frontend-read-timeout=1h",
            "--frontend-keep-alive-timeout=1h",
        ], signal.SIGTERM
    raise ValueError(f"unknown peer {name!r}")


def stop_peer(procs: Procs, peer: Peer, timeout: float = 30.0) -> int | None:
    if peer.proc is None:
        return None
    return procs.stop(peer.proc, peer.stop_signal, timeout, group=peer.signal_group)
