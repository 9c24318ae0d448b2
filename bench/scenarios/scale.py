"""The scale scenario: N long requests in flight at once, through a relay that cuts
any upstream flow silent for a while, so only PINGs keep them alive.

    python bench/scale.py --n 18000 --peer go --peer h2ping
    python bench/scale.py --n 36000 --workers 2
    python bench/scale.py --n 1600 --nofile 1200
    python bench/scale.py --n 100000 --workers 6

Each client process sends its share from a loopback address of its own (127.0.0.2,
.3, ...: each gets its own ephemeral ports), one connection per request, and waits
for the answers. nginx is the origin (128 streams a connection); the relay sits
between the proxy and nginx. Printed per peer: answered, failures by kind, KiB of
memory per request (the proxy's processes, peak while all were in flight, less
idle), the seconds until every request was written to the proxy, the proxy's
event-loop lag (h2ping), and how the requests were shared among workers. Results
as JSON in bench/results/.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common.procs import (
    BENCH_DIR,
    BenchError,
    Procs,
    bench_module,
    children,
    free_port,
    raise_nofile,
    tree_cpu_seconds,
    tree_rss_kib,
    wait_port,
    write_results,
)
from load.origin import start_origin
from peers import gopeer
from peers.lineup import GO_SHUTDOWN_GRACE, LAG_INTERVAL
from scenarios.suite import _merge_client_reports, merge_summaries, parse_summaries

#: Requests each client process sends (each holds one descriptor per request).
PER_CLIENT = 9000
#: Source addresses per client process (127.0.0.2 on), so that back-to-back runs do
#: not run out of ports while the last run's connections wait in TIME_WAIT.
IPS_PER_CLIENT = 4


def main() -> None:
    args = parse_args()
    raise_nofile(20_000)
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": [sys.executable, *sys.argv],
        "params": vars(args),
        "peers": {},
    }
    with tempfile.TemporaryDirectory(prefix="h2ping-scale-") as tmp_name:
        tmp = Path(tmp_name)
        procs = Procs(tmp)
        try:
            origin = start_origin(procs, tmp, max_streams=128)
            relay_port = free_port()
            relay = procs.start("relay", relay_argv(origin.tls_port, relay_port, args.cut))
            wait_port(relay_port, relay)
            upstream = f"https://localhost:{relay_port}"
            for name in args.peer or ["go", "h2ping"]:
                figures = run_peer(procs, name, upstream, str(origin.ca_path), args)
                results["peers"][name] = figures
                print_figures(name, figures)
        finally:
            procs.close()
    out = (
        args.out or BENCH_DIR / "results" / f"scale-{args.n}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    )
    write_results(results, Path(out))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=18_000, help="requests in flight at once")
    parser.add_argument("--seconds", type=int, default=20, help="how long each request takes")
    parser.add_argument("--cut", type=float, default=8.0, help="the relay's idle cut, seconds")
    parser.add_argument("--peer", action="append", choices=("go", "h2ping"))
    parser.add_argument("--workers", type=int, default=1, help="h2ping's -workers")
    parser.add_argument(
        "--nofile", type=int, default=20_000, help="the proxy's descriptor limit (each process)"
    )
    parser.add_argument(
        "--per-client", type=int, default=PER_CLIENT, help="requests a client process sends"
    )
    parser.add_argument(
        "--nice-clients",
        type=int,
        default=0,
        help="run the client processes at this nice level: with the load generator "
        "behind, the proxy's loop lag shows what its own work costs",
    )
    parser.add_argument("--ping-interval", default="3s", help="below --cut, for both proxies")
    parser.add_argument("--out", help="JSON results (default: bench/results/scale-N-TIME.json)")
    return parser.parse_args()


def relay_argv(target_port: int, port: int, cut: float) -> list[str]:
    return [*bench_module("scenarios.scale"), "--relay", str(target_port), str(port), str(cut)]


def run_peer(
    procs: Procs, name: str, upstream: str, ca: str, args: argparse.Namespace
) -> dict[str, Any]:
    port = free_port()
    limit = ["prlimit", f"--nofile={args.nofile}:{args.nofile}"]
    if name == "h2ping":
        argv = [*limit, sys.executable, "-m", "h2ping", "--listen", f"127.0.0.1:{port}"]
        argv += ["--upstream", upstream, "--ca-file", ca, "--workers", str(args.workers)]
        argv += ["--ping-interval", args.ping_interval, "--loop-lag-interval", LAG_INTERVAL]
        env = None
        stop, group = signal.SIGINT, args.workers == 1
    else:
        binary = gopeer.sidecar_binary()
        if binary is None:
            raise BenchError("the Go sidecar could not be built (see above)")
        argv = [*limit, str(binary), "-listen", f"127.0.0.1:{port}", "-upstream", upstream]
        argv += ["-ping-interval", args.ping_interval, "-shutdown-grace", GO_SHUTDOWN_GRACE]
        env = {"SSL_CERT_FILE": ca, "PATH": "/usr/bin:/bin"}
        stop, group = signal.SIGTERM, True
    proxy = procs.start(name, argv, env=env)
    wait_port(port, proxy)
    idle_kib = tree_rss_kib(proxy.pid)
    cpu_before = tree_cpu_seconds(proxy.pid)
    waited_before = runqueue_wait(proxy.pid)
    clients = start_clients(procs, name, port, args)
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + 3 * args.seconds + 300
    while any(c.popen.poll() is None for c in clients):
        if time.monotonic() > deadline:
            raise BenchError("the clients did not finish")
        samples.append((time.time(), tree_rss_kib(proxy.pid)))
        time.sleep(0.25)
    report = _merge_client_reports([c.log_path.read_text() for c in clients])
    cpu = tree_cpu_seconds(proxy.pid) - cpu_before
    waited = {pid: s - waited_before.get(pid, 0.0) for pid, s in runqueue_wait(proxy.pid).items()}
    procs.stop(proxy, stop, 60, group=group)
    log = proxy.log_path.read_text(errors="replace")
    start, end = report["all_sent_at"] or 0.0, report["first_done_at"] or float("inf")
    window = [rss for at, rss in samples if start <= at <= end] or [rss for _, rss in samples]
    figures: dict[str, Any] = {
        **report,
        "n": args.n,
        "answered": report["ok"],
        "kib_per_request": (max(window) - idle_kib) / args.n,
        "written_s": report["connect_seconds"],
        "proxy_cpu_s": cpu,
        # Seconds the busiest proxy process spent ready to run but waiting for a core:
        # event-loop lag the machine's other processes cause, not the proxy's work.
        "runqueue_wait_s": max(waited.values(), default=0.0),
        "log_tail": log.splitlines()[-8:],
    }
    if name == "h2ping":
        per_worker = parse_summaries(log)
        summary = merge_summaries(per_worker)
        figures["summary"] = summary
        figures["loop_lag_max_ms"] = _ms(summary.get("loop_lag_max"))
        figures["loop_lag_p99_ms"] = _ms(summary.get("loop_lag_p99"))
        figures["requests_per_worker"] = [int(s.get("requests", 0)) for s in per_worker.values()]
        figures["capacity_lines"] = [ln for ln in log.splitlines() if ": capacity: " in ln]
    return figures


def runqueue_wait(pid: int) -> dict[int, float]:
    """Per process of the proxy (the worker processes, or the one), the seconds it
    has spent runnable but waiting for a core (``/proc/PID/schedstat``)."""
    waited = {}
    for each in [pid, *children(pid)]:
        try:
            fields = Path(f"/proc/{each}/schedstat").read_text().split()
        except OSError:
            continue
        waited[each] = int(fields[1]) / 1e9
    return waited


def start_clients(procs: Procs, name: str, port: int, args: argparse.Namespace) -> list[Any]:
    count = math.ceil(args.n / args.per_client)
    clients = []
    for index in range(count):
        share = args.n // count + (index < args.n % count)
        argv = [*bench_module("load.inflight_client"), "--port", str(port)]
        if args.nice_clients:
            argv = ["nice", "-n", str(args.nice_clients), *argv]
        argv += ["--n", str(share), "--path", f"/delay?ms={args.seconds * 1000}"]
        argv += ["--timeout", str(3 * args.seconds + 240)]
        argv += ["--first-ip", str(2 + IPS_PER_CLIENT * index), "--source-ips", str(IPS_PER_CLIENT)]
        clients.append(procs.start(f"client-{name}-{index}", argv))
    return clients


def _ms(value: str | None) -> float | None:
    return float(value.removesuffix("ms")) if value else None


def print_figures(name: str, f: dict[str, Any]) -> None:
    print(
        f"{name}: {f['answered']}/{f['n']} answered; failures {f['failures'] or 'none'}; "
        f"{f['kib_per_request']:.1f} KiB each; "
        + (f"all written in {f['written_s']:.1f} s" if f["written_s"] else "not all written")
        + f"; proxy CPU {f['proxy_cpu_s']:.1f} s",
        flush=True,
    )
    if name == "h2ping":
        print(
            f"  loop lag p99 {f['loop_lag_p99_ms']} ms, max {f['loop_lag_max_ms']} ms; "
            f"waiting for a core {f['runqueue_wait_s']:.1f} s (the most of a process); "
            f"requests per worker {f['requests_per_worker']}",
            flush=True,
        )
        for line in f["capacity_lines"]:
            print("  " + line.split(" h2ping ", 1)[-1], flush=True)


# ---------------------------------------------------------------------- the relay


def relay(target_port: int, port: int, cut: float) -> None:
    """An idle-cutting relay in a process of its own, until killed."""
    from common.procs import serve_until_killed
    from h2ping.testing.relays import Relay

    serve_until_killed(lambda: Relay("127.0.0.1", target_port, idle_cut=cut, port=port))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--relay":
        relay(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    else:
        main()
