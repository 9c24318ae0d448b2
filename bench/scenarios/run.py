"""Benchmark h2ping against its peers in one run; prints a table, writes JSON and,
with matplotlib installed, a chart of the goals table beside it (bench/charts.py).

    python bench/run.py [--quick] [--scenarios small_50,latency_1] [--out FILE] [--png]

See bench/README.md for what each scenario measures.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

# Standard library only, unlike the other bench modules (imported where they are used).
from common.measure import cpu_model
from common.procs import BENCH_DIR, find_tool, write_results
from report import goals

SSE_SCENARIOS = ("sse_500", "sse_1000", "sse_2000")
DEFAULT_SCENARIOS = (
    "small_50",
    "latency_1",
    "transfer_16m",
    "small_during_download",
    "inflight",
    *SSE_SCENARIOS,
    "workers",
)
ALL_SCENARIOS = (*DEFAULT_SCENARIOS, "inflight50k")
# Aliases accepted by --scenarios, each standing for one or more scenarios.
ALIASES = {
    "small": ("small_50",),
    "latency": ("latency_1",),
    "transfer": ("transfer_16m",),
    "during": ("small_during_download",),
    "sse": SSE_SCENARIOS,
    "streaming": SSE_SCENARIOS,
}

# (what is needed, how we look for it, Debian package providing it)
ECHO_MODULE = "/usr/lib/nginx/modules/ngx_http_echo_module.so"
REQUIRED_TOOLS = [
    ("nginx", "nginx", "nginx"),
    ("nginx echo module", ECHO_MODULE, "libnginx-mod-http-echo"),
    ("h2load", "h2load", "nghttp2-client"),
    ("curl", "curl", "curl"),
    ("taskset", "taskset", "util-linux"),
]
OPTIONAL_TOOLS = [("nghttpx", "nghttpx", "nghttp2-proxy")]


def _have(probe: str) -> bool:
    return Path(probe).exists() if probe.startswith("/") else find_tool(probe) is not None


def check_tools() -> tuple[list[str], list[str]]:
    """Print what is missing; return (fatal problems, optional peers missing)."""
    fatal = [
        f"{what} (Debian package {pkg})" for what, probe, pkg in REQUIRED_TOOLS if not _have(probe)
    ]
    fatal_pkgs = [pkg for _, probe, pkg in REQUIRED_TOOLS if not _have(probe)]
    optional = [pkg for _, probe, pkg in OPTIONAL_TOOLS if not _have(probe)]
    modules = [m for m in ("trustme", "h2ping") if importlib.util.find_spec(m) is None]
    if fatal_pkgs:
        print("missing: " + ", ".join(fatal), file=sys.stderr)
        print(
            f"  install with: apt-get install -y {' '.join(fatal_pkgs + optional)}", file=sys.stderr
        )
    if modules:
        fatal.append(f"python modules {modules}")
        print(
            f"missing python modules {modules}: run with the project's venv, "
            "and pip install -e '.[bench]'",
            file=sys.stderr,
        )
    if optional and not fatal:
        print(
            f"note: nghttpx not found, peer skipped (apt-get install -y {' '.join(optional)})",
            file=sys.stderr,
        )
    return fatal, optional


def baseline_available() -> bool:
    missing = [m for m in ("httpx", "h2", "aiohttp") if importlib.util.find_spec(m) is None]
    if missing:
        print(
            f"note: baseline peer skipped, missing {missing} (pip install -e '.[bench]')",
            file=sys.stderr,
        )
    return not missing


def go_available(wanted: list[str] | None) -> bool:
    """Build (or find) the Go sidecar unless --peers leaves it out; a note says why not."""
    if wanted is not None and "go" not in wanted:
        return False
    from peers import gopeer

    return gopeer.cached_binary() is not None


def _first_line(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return "not installed"
    lines = (done.stdout or done.stderr).strip().splitlines()  # nginx -v prints on stderr
    return lines[0] if lines else "?"


def _git_commit() -> str | None:
    """The checkout's commit, ``+`` when files differ from it; None outside git."""
    try:
        head = subprocess.run(
            ["git", "-C", str(BENCH_DIR), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(BENCH_DIR), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+" if dirty else "")


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def environment(peers: list[str]) -> dict[str, Any]:
    cpu = cpu_model()
    versions = {"python": platform.python_version()}
    for dist in ("h2ping", "h2", "httptools", "uvloop", "httpx", "aiohttp"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    for tool, flag in (
        ("nginx", "-v"),
        ("nghttpx", "--version"),
        ("h2load", "--version"),
        ("curl", "--version"),
    ):
        versions[tool] = _first_line([find_tool(tool) or tool, flag])
    if "go" in peers:
        from peers import gopeer

        binary = gopeer.cached_binary()
        versions["go_sidecar"] = f"{binary} ({gopeer.go_version(binary)})" if binary else "?"
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": [sys.executable, *sys.argv],
        "commit": _git_commit(),
        "nproc": os.cpu_count(),
        "cpu_model": cpu,
        "kernel": platform.release(),
        # Other work on the machine skews everything; this at least shows it.
        "loadavg_start": _loadavg(),
        "versions": versions,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="h2ping vs peers, in one run")
    parser.add_argument("--quick", action="store_true", help="shorter runs, 1000 in flight x 10 s")
    parser.add_argument(
        "--scenarios",
        default=",".join(DEFAULT_SCENARIOS),
        help=f"comma list of {', '.join(ALL_SCENARIOS)}",
    )
    parser.add_argument("--peers", help="comma list (default: every installed one)")
    parser.add_argument(
        "--rounds",
        type=int,
        help="measure Go and h2ping this many times in turn and take medians, in the "
        "rate, latency, transfer, workers and streaming scenarios (default: 3; 1 with --quick)",
    )
    parser.add_argument("--inflight-n", type=int, help="override N of the in-flight scenario")
    parser.add_argument("--inflight-seconds", type=int, help="override T of the same")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "latest.json")
    parser.add_argument("--keep-tmp", action="store_true", help="keep configs and process logs")
    parser.add_argument(
        "--png", action="store_true", help="a PNG chart beside the SVG (both next to --out)"
    )
    parser.add_argument(
        "--sse-batched",
        action="store_true",
        help="the streaming origin writes once per loop iteration, not once per event",
    )
    parser.add_argument(
        "--sse-stall",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="stop each proxy this long (SIGSTOP) 1 s into the streaming window; "
        "'behind s' then shows how long it took to catch up",
    )
    args = parser.parse_args(argv)
    names = [
        name
        for given in args.scenarios.split(",")
        if given.strip()
        for name in ALIASES.get(given.strip(), (given.strip(),))
    ]
    unknown = [s for s in names if s not in ALL_SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; choose from {', '.join(ALL_SCENARIOS)}")
    args.scenarios = names
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    elif args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def run_scenarios(
    args: argparse.Namespace, peers: list[str], tmp: Path, results: dict[str, Any]
) -> dict[str, Any]:
    # Imported here so that a missing module is reported by check_tools, not a traceback.
    from common.procs import Procs
    from load.generators import LOAD_CPU
    from load.origin import start_origin
    from report import tables
    from scenarios import streaming, suite

    procs = Procs(tmp)
    try:
        # On the load's core: left to float, nginx ran on the proxy's core beside
        # it (the kernel wakes a loopback receiver where its sender runs).
        origin = start_origin(procs, tmp, cpu=LOAD_CPU)
        bench = suite.Bench(procs, origin, tmp, args.quick, peers, args.rounds)
        n = args.inflight_n or (1000 if args.quick else 10_000)
        seconds = args.inflight_seconds or (10 if args.quick else 60)
        for name in args.scenarios:
            print(f"== {name}", flush=True)
            started = time.monotonic()
            if name == "inflight":
                result = suite.inflight(bench, n, seconds)
            elif name == "inflight50k":
                result = suite.inflight(bench, 50_000, seconds)
            elif name in streaming.CASES:
                result = streaming.sse(
                    bench, name, flush_each=not args.sse_batched, stall=args.sse_stall
                )
            else:
                result = getattr(suite, name)(bench)
            result["wall_seconds"] = round(time.monotonic() - started, 1)
            tables.add_ratios(name, result)
            results[name] = result
            print(tables.render(name, result) + "\n", flush=True)
        return bench.summaries
    finally:
        procs.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    fatal, optional = check_tools()
    if fatal:
        return 2
    from common.procs import raise_nofile
    from peers.lineup import available_peers

    wanted = args.peers.split(",") if args.peers else None
    peers = available_peers(not optional, baseline_available(), go_available(wanted), wanted)
    if wanted:
        peers = [p for p in peers if p in wanted]
    nofile = raise_nofile()
    # SIGTERM takes the same clean-up path as Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)
    doc: dict[str, Any] = {
        **environment(peers),
        "quick": args.quick,
        "rounds": args.rounds,
        "peers": peers,
        "rlimit_nofile": nofile,
        "scenarios": {},
    }
    tmp = Path(tempfile.mkdtemp(prefix="h2ping-bench-"))
    started = time.monotonic()
    code = 0
    try:
        doc["proxy_logs"] = run_scenarios(args, peers, tmp, doc["scenarios"])
    except KeyboardInterrupt:
        print("interrupted: writing what was measured", file=sys.stderr)
        doc["interrupted"], code = True, 130
    except Exception as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        doc["error"], code = str(exc), 1
    finally:
        if args.keep_tmp:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    doc["wall_seconds"] = round(time.monotonic() - started, 1)
    doc["loadavg_end"] = _loadavg()
    doc["goals"] = goals.evaluate(doc["scenarios"])
    print_summary(doc)
    write_results(doc, args.out)
    write_chart(doc, args.out, args.png)
    return code


def write_chart(doc: dict[str, Any], out: Path, png: bool = False) -> None:
    """The goals table as a chart, beside the JSON (``latest.svg``); one line instead
    when matplotlib is missing. A failure here leaves the run's figures written."""
    from report import charts

    if not charts.have_matplotlib():
        print(f"chart skipped: matplotlib is not installed ({charts.INSTALL_HINT})")
        return
    try:
        written = charts.write_run_chart(doc, out.with_suffix(".svg"), png)
    except Exception:
        traceback.print_exc()
        print("chart failed (the results above are written)", file=sys.stderr)
        return
    if not written:
        print("chart skipped: no goal row's scenario was run")
    for path in written:
        print(f"wrote {path}")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def print_summary(doc: dict[str, Any]) -> None:
    from report import tables

    print(
        f"\n==== h2ping bench, {doc['date']}, {doc['nproc']} x {doc['cpu_model']}, "
        f"{'quick' if doc['quick'] else 'full'} run, {doc.get('rounds', 1)} round(s), "
        f"{doc['wall_seconds']} s, "
        f"loadavg {doc['loadavg_start']} -> {doc['loadavg_end']}"
    )
    for name, result in doc["scenarios"].items():
        print(tables.render(name, result) + "\n")
    # h2ping's own complaints in full (first few per scenario); other peers' only counted.
    for peer, records in doc.get("proxy_logs", {}).items():
        for record in records:
            if record["summary"]:
                pairs = " ".join(f"{k}={v}" for k, v in record["summary"].items())
                print(f"{peer} summary ({record['scenario']}): {pairs}")
            shown = record["log_problems"][:10] if peer.startswith("h2ping") else []
            for line in shown:
                print(f"{peer} log ({record['scenario']}): {line}")
            if record["log_problem_count"] > len(shown):
                more = record["log_problem_count"] - len(shown)
                print(f"{peer} log ({record['scenario']}): {more} more warning/error lines")
    # Last, so that it is what a run leaves on the screen.
    print("\n" + goals.render(doc["goals"]))


if __name__ == "__main__":
    sys.exit(main())
