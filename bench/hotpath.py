"""The proxy's CPU per streamed event and per request, and the Python calls behind it.

    python bench/hotpath.py --case sse_500 [--loop asyncio] [--profile] [--top 25]
    python bench/hotpath.py --case latency_1 --profile
    python bench/hotpath.py --case download_16m --opcodes 1

Runs h2ping in this process (pinned to core 0, as bench/run.py pins a proxy), the
load on core 1: for ``sse_500`` / ``sse_1000`` the streaming origin (one DATA frame,
one TLS record per 64-byte event) and client of the streaming scenario; for
``latency_1`` / ``small_50`` nginx and h2load (``/tiny``, 1 or 50 connections);
for ``download_16m`` nginx and curl, 16 MiB downloads one after the other
(nginx pinned there too, as bench/run.py pins it).
It reads this process's CPU time over the client's counting window and divides by
the events (or requests) counted there: the figure bench/run.py reports as CPU per
10,000 events or per request, without the other proxies.

With ``--profile`` the same window runs under cProfile, and it prints the Python
calls per event (or request), each function's calls and own time per event, and
the net memory blocks left per event: deterministic counts to hold a change to,
where the microseconds of a shared machine are not. Profiling slows the proxy, so
its CPU figure is not the unprofiled one; run once without for microseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import dis
import enum
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common.procs import Procs, bench_module, free_port, wait_port
from load.generators import LOAD_CPU
from load.origin import start_origin, write_certs

PROXY_CPU = 0
SSE_CASES = {"sse_500": 500, "sse_1000": 1000}
H2LOAD_CASES = {"latency_1": 1, "small_50": 50}
CURL_CASES = {"download_16m": "/16m"}


def _proxy(upstream: str, ca: Path, lag_interval: float) -> Any:
    from h2ping.process.proxy import Proxy

    return Proxy(
        upstream=upstream, listen="127.0.0.1:0", ca_file=str(ca), loop_lag_interval=lag_interval
    )


def _lag_interval(args: argparse.Namespace) -> float:
    """bench/run.py's 10 ms tick; none while counting bytecodes, whose tracing
    slows each request, so that a timer's work per request would grow with it."""
    return 0.0 if args.opcodes else 0.01


class _Go:
    """The Go binary as the proxy, pinned to the proxy's core (its CPU from /proc)."""

    def __init__(self, procs: Procs, upstream: str, ca: Path) -> None:
        from peers import gopeer

        binary = gopeer.cached_binary()
        if binary is None:
            raise SystemExit("the Go peer is not built: python bench/gopeer.py")
        self.port = free_port()
        argv = [str(binary), "-listen", f"127.0.0.1:{self.port}", "-upstream", upstream]
        env = {**os.environ, "SSL_CERT_FILE": str(ca)}
        self.proc = procs.start("go", argv, cpu=PROXY_CPU, env=env)
        wait_port(self.port, self.proc)

    def times(self) -> tuple[float, float]:
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(stat[11]) / tick, int(stat[12]) / tick


async def _sse(args: argparse.Namespace, tmp: Path, procs: Procs) -> dict[str, Any]:
    streams = SSE_CASES[args.case]
    ca = write_certs(tmp)
    port = free_port()
    argv = [*bench_module("load.sse_origin"), "--port", str(port), "--flush-each"]
    argv += ["--cert", str(tmp / "origin-cert.pem"), "--key", str(tmp / "origin-key.pem")]
    origin = procs.start("sse-origin", argv, cpu=LOAD_CPU)
    await asyncio.to_thread(wait_port, port, origin)
    upstream = f"https://127.0.0.1:{port}"
    go = _Go(procs, upstream, ca) if args.peer == "go" else None
    async with (
        _proxy(upstream, ca, _lag_interval(args))
        if go is None
        else contextlib.nullcontext(go) as proxy
    ):
        argv = [*bench_module("load.sse_client"), "--port", str(proxy.port)]
        argv += ["--streams", str(streams), "--path", "/sse?interval_ms=20&bytes=64"]
        argv += ["--interval-ms", "20", "--warmup", str(args.warmup)]
        argv += ["--seconds", str(args.seconds), "--cpu", f"proxy={os.getpid()}"]  # unused here
        client = procs.start("sse-client", argv, cpu=LOAD_CPU)
        # The client counts from warm-up seconds after its last response head; the
        # proxy has them all out once every request is in flight and a head went by.
        if go is None:
            while proxy.in_flight < streams:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3 + args.warmup)
        else:  # no count to watch: a window that falls inside the client's
            await asyncio.sleep(3.0 + args.warmup)
        seconds = args.seconds if go is None else args.seconds - 2.0
        measured = await _window(args, lambda: asyncio.sleep(seconds), go)
        while client.popen.poll() is None:
            await asyncio.sleep(0.1)
    lines = [x for x in client.log_path.read_text().splitlines() if x[:1] == "{"]
    report = json.loads(lines[-1])
    events = report["events"]
    if not events:
        raise SystemExit("the client counted no events:\n" + client.log_tail())
    if go is not None:  # the events of this window, at the client's rate
        events = round(report["events_per_s"] * measured["wall_s"])
    # The client's window; this process's CPU is read over its own window, the same
    # give or take a loop turn (the client's reading would add the origin's and its own:
    # they are this process's children).
    extra = {"delivered/asked": round(report["events_per_s"] / report["asked_per_s"], 4)}
    extra["delay p50/p99 ms"] = f"{report['delay_p50_ms']:.2f} / {report['delay_p99_ms']:.2f}"
    extra["events per client read"] = round(report["events_per_read"], 2)
    return {**measured, **extra, "units": events, "unit": "event"}


async def _h2load(args: argparse.Namespace, tmp: Path, procs: Procs) -> dict[str, Any]:
    clients = H2LOAD_CASES[args.case]
    origin = start_origin(procs, tmp, cpu=LOAD_CPU)
    async with _proxy(origin.https_url, origin.ca_path, _lag_interval(args)) as proxy:
        url = f"http://127.0.0.1:{proxy.port}/tiny"
        warm = ["taskset", "-c", str(LOAD_CPU), "h2load", "--h1", "-c", "1", "-n", "200", url]
        await (
            await asyncio.create_subprocess_exec(*warm, stdout=asyncio.subprocess.DEVNULL)
        ).wait()
        argv = ["taskset", "-c", str(LOAD_CPU), "h2load", "--h1", "-t", "1", "-c", str(clients)]
        argv += ["-n", str(args.requests), url]
        out: list[bytes] = []

        async def load() -> None:
            proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
            out.append((await proc.communicate())[0])

        measured = await _window(args, load)
    text = out[0].decode()
    done = int(text.split("requests: ", 1)[1].split(" done", 1)[0].rsplit(" ", 1)[1])
    rate = text.split("finished in ", 1)[1].split(",", 2)[1].strip()
    return {**measured, "units": done, "unit": "request", "h2load": rate}


async def _curl(args: argparse.Namespace, tmp: Path, procs: Procs) -> dict[str, Any]:
    origin = start_origin(procs, tmp, cpu=LOAD_CPU)
    go = _Go(procs, origin.https_url, origin.ca_path) if args.peer == "go" else None
    async with (
        _proxy(origin.https_url, origin.ca_path, _lag_interval(args))
        if go is None
        else contextlib.nullcontext(go) as proxy
    ):
        url = f"http://127.0.0.1:{proxy.port}{CURL_CASES[args.case]}"

        async def downloads(count: int) -> None:
            # One process starts every curl: a fork of this process, the proxy's,
            # costs it a copy of its page tables, which Go's process never pays.
            loop = f'for _ in $(seq {count}); do curl -sf -o /dev/null "$1" || exit 1; done'
            argv = ["taskset", "-c", str(LOAD_CPU), "sh", "-c", loop, "sh", url]
            if await (await asyncio.create_subprocess_exec(*argv)).wait():
                raise SystemExit(f"curl failed: {url}")

        await downloads(1)  # warm: the upstream connection, nginx's cache of the file
        measured = await _window(args, lambda: downloads(args.transfers), go)
    return {**measured, "units": args.transfers, "unit": "download"}


class _Opcodes:
    """Counts the Python bytecode instructions run (sys.settrace with opcode events),
    and the DATA frames handed to exchanges (calls of ``on_data``) meanwhile."""

    def __init__(self) -> None:
        self.opcodes = 0
        self.frames = 0
        self.by_function: dict[str, int] = {}
        # Loads of an enum's member (``State.OPEN``): about 110 ns each on 3.11,
        # against 15 for a module constant. By code object: the offsets of such loads.
        self.enum_loads: dict[str, int] = {}
        self._enum_offsets: dict[Any, frozenset[int]] = {}

    def _enum_sites(self, frame: Any) -> frozenset[int]:
        code = frame.f_code
        sites = self._enum_offsets.get(code)
        if sites is None:
            found, previous = set(), None
            for ins in dis.get_instructions(code):
                if ins.opname == "LOAD_ATTR" and previous is not None:
                    holder = frame.f_globals.get(previous)
                    if isinstance(holder, enum.EnumType) and ins.argval in holder.__members__:
                        found.add(ins.offset)
                previous = ins.argval if ins.opname == "LOAD_GLOBAL" else None
            sites = self._enum_offsets[code] = frozenset(found)
        return sites

    def _trace(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "call":
            frame.f_trace_opcodes = True
            code = frame.f_code
            if code.co_name == "on_data":
                self.frames += 1
            return self._local
        return None

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "opcode":
            self.opcodes += 1
            code = frame.f_code
            key = f"{Path(code.co_filename).name}:{code.co_firstlineno}({code.co_name})"
            self.by_function[key] = self.by_function.get(key, 0) + 1
            if frame.f_lasti in self._enum_sites(frame):
                self.enum_loads[key] = self.enum_loads.get(key, 0) + 1
        return self._local

    def __enter__(self) -> _Opcodes:
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)


async def _window(args: argparse.Namespace, body: Any, go: _Go | None = None) -> dict[str, Any]:
    if args.opcodes:  # sse: a short window; h2load: every request of the run
        with _Opcodes() as counter:
            await (asyncio.sleep(args.opcodes) if args.case in SSE_CASES else body())
        return {"opcodes": counter, "wall_s": args.opcodes}
    profile = cProfile.Profile() if args.profile else None
    blocks = sys.getallocatedblocks()
    read = go.times if go is not None else lambda: os.times()[:2]
    times, wall = read(), time.monotonic()
    if profile:
        profile.enable()
    await body()
    if profile:
        profile.disable()
    after, wall = read(), time.monotonic() - wall
    user, system = after[0] - times[0], after[1] - times[1]
    result = {"cpu_s": user + system, "user_s": user, "sys_s": system, "wall_s": wall}
    result["net_blocks"] = sys.getallocatedblocks() - blocks
    if profile:
        result["profile"] = profile
    return result


def report(args: argparse.Namespace, result: dict[str, Any]) -> None:
    counter = result.get("opcodes")
    if counter is not None:
        if args.case in SSE_CASES:
            frames, unit = counter.frames or 1, "DATA frame"
        else:
            frames, unit = result["units"], result["unit"]
        print(f"{args.case}: {counter.opcodes / frames:.0f} bytecodes per {unit}", end="")
        print(f" ({frames:,} {unit}s, traced)")
        top = sorted(counter.by_function.items(), key=lambda kv: -kv[1])[: args.top]
        for name, count in top:
            print(f"  {count / frames:8.1f}  {name}")
        loads = sorted(counter.enum_loads.items(), key=lambda kv: -kv[1])
        print(f"  enum member loads: {sum(counter.enum_loads.values()) / frames:.2f} per {unit}")
        for name, count in loads[: args.top]:
            print(f"  {count / frames:8.2f}  {name}")
        return
    units, unit = result["units"], result["unit"]
    wall = result["wall_s"]
    print(f"{args.peer}, loop {args.loop}, case {args.case}, {units:,} {unit}s in {wall:.1f} s")
    for key in ("delivered/asked", "delay p50/p99 ms", "events per client read", "h2load"):
        if key in result:
            print(f"  {key}: {result[key]}")
    print(
        f"  proxy CPU: {result['cpu_s']:.3f} s, {result['cpu_s'] / units * 1e6:.2f} us/{unit}",
        end="",
    )
    print(f" ({'profiled' if args.profile else 'unprofiled'})")
    user, system = result["user_s"] / units * 1e6, result["sys_s"] / units * 1e6
    print(f"    of which user {user:.2f} us, kernel {system:.2f} us")
    print(f"  net memory blocks left: {result['net_blocks'] / units:+.3f} per {unit}")
    profile = result.get("profile")
    if profile is None:
        return
    stats = pstats.Stats(profile)
    total_calls = sum(v[1] for v in stats.stats.values())  # type: ignore[attr-defined]
    total_time = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    print(f"  Python calls: {total_calls / units:.1f} per {unit} (all functions, C ones too)")
    frames = sum(v[1] for k, v in stats.stats.items() if k[2] == "on_data")  # type: ignore[attr-defined]
    if frames and unit == "event":
        # What the client counted depends on how late it read; DATA frames handed to
        # their exchanges are what the proxy did: a count the load does not move.
        print(f"  Python calls: {total_calls / frames:.1f} per DATA frame ({frames:,} frames)")
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])  # type: ignore[attr-defined]
    print(f"  {'calls/' + unit:>12} {'own us/' + unit:>12} {'share':>6}  function")
    for (path, line, name), (_, ncalls, tottime, _cum, _) in rows[: args.top]:
        where = f"{Path(path).name}:{line}({name})" if line else name
        share = tottime / total_time
        print(f"  {ncalls / units:12.2f} {tottime / units * 1e6:12.2f} {share:6.1%}  {where}")
    if args.dump:
        stats.dump_stats(args.dump)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--case", choices=[*SSE_CASES, *H2LOAD_CASES, *CURL_CASES], default="sse_500"
    )
    parser.add_argument("--peer", choices=("h2ping", "go"), default="h2ping")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--profile", action="store_true", help="under cProfile: calls per event")
    parser.add_argument("--seconds", type=float, default=10.0, help="sse: the counting window")
    parser.add_argument("--warmup", type=float, default=3.0, help="sse: before the window")
    parser.add_argument("--requests", type=int, default=20000, help="h2load cases")
    parser.add_argument("--transfers", type=int, default=20, help="download_16m")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument(
        "--opcodes",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="count bytecodes (slow: traced): sse, per DATA frame over this many "
        "seconds; the others, per request or download of the whole run",
    )
    parser.add_argument("--dump", help="write the pstats here")
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("h2ping").setLevel(logging.INFO)  # as bench/run.py runs it
    os.sched_setaffinity(0, {PROXY_CPU})
    with tempfile.TemporaryDirectory(prefix="h2ping-hotpath-") as name:
        tmp = Path(name)
        procs = Procs(tmp)
        case = _sse if args.case in SSE_CASES else _curl if args.case in CURL_CASES else _h2load
        try:
            if args.loop == "uvloop":
                import uvloop

                result = uvloop.run(case(args, tmp, procs))
            else:
                result = asyncio.run(case(args, tmp, procs))
        finally:
            procs.close()
    report(args, result)


if __name__ == "__main__":
    main()
