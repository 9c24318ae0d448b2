"""At the end: the resources then against the start's, the invariants that must
hold, and the printed report."""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import os
from dataclasses import dataclass

from common.measure import percentiles, rss_mib
from h2ping import Proxy
from scenarios.soak.client import LoopErrors, ProxyLog, Tally
from scenarios.soak.faults import FaultCounts, WatchedIdleCutRelay
from scenarios.soak.settings import (
    RSS_TOLERANCE_MIB,
)
from scenarios.soak.upstream import SoakServer


@dataclass
class Snapshot:
    fds: int
    sockets: int
    tasks: int
    rss_mib: float

    @staticmethod
    def take() -> Snapshot:
        gc.collect()
        fds = sockets = 0
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/self/fd/{name}")
                fds += 1
                sockets += target.startswith("socket:")
        return Snapshot(fds, sockets, len(asyncio.all_tasks()), rss_mib())


def twice(server: SoakServer) -> list[int]:
    return [rid for rid, n in enumerate(server.processed) if n > 1]


def rss_limit(warm: float) -> float:
    return warm + max(RSS_TOLERANCE_MIB, 0.25 * warm)


def check_invariants(
    tally: Tally,
    server: SoakServer,
    proxy_log: ProxyLog,
    loop_errors: LoopErrors,
    start: Snapshot,
    end: Snapshot,
    rss_warm: float | None,
    leftovers: dict[str, int],
    live_cuts: int,
) -> list[str]:
    failed = []
    if live_cuts:
        failed.append(f"{live_cuts} live flows cut by the idle relay despite PINGs")
    if tally.hung:
        failed.append(f"{tally.hung} hung")
    if twice(server):
        failed.append(f"{len(twice(server))} processed twice")
    if tally.corrupted:
        failed.append(f"{tally.corrupted} corrupted")
    if loop_errors.proxy:
        failed.append(f"{len(loop_errors.proxy)} exceptions reached the loop")
    if proxy_log.errors:
        failed.append(f"{len(proxy_log.errors)} ERROR log lines")
    failed += [f"{name}: {n}" for name, n in leftovers.items() if n]
    for name in ("fds", "sockets", "tasks"):
        if getattr(end, name) != getattr(start, name):
            failed.append(f"{name} {getattr(start, name)} -> {getattr(end, name)}")
    if rss_warm is not None and end.rss_mib > rss_limit(rss_warm):
        failed.append(f"RSS grew {rss_warm:.0f} -> {end.rss_mib:.0f} MiB")
    return failed


def print_report(
    args: argparse.Namespace,
    tally: Tally,
    server: SoakServer,
    faults: FaultCounts,
    proxy: Proxy,
    idle_cut: WatchedIdleCutRelay,
    proxy_log: ProxyLog,
    loop_errors: LoopErrors,
    start: Snapshot,
    end: Snapshot,
    rss_warm: float | None,
    rss_peak: float,
    lags: list[float],
    leftovers: dict[str, int],
    pooled: int,
    duration: float,
) -> None:
    stats = proxy.stats
    seen_again = sum(1 for n in server.arrivals if n > 1)
    rate = tally.sent / duration
    print(f"\nrequests sent        {tally.sent:8d}  ({rate:.0f}/s over {duration:.0f}s)")
    print("  by kind            " + ", ".join(f"{k} {n}" for k, n in sorted(tally.by_kind.items())))
    print(f"  succeeded          {tally.succeeded:8d}")
    print(f"  aborted by client  {tally.aborted:8d}  (deliberate)")
    print(
        f"  replayed           {stats.replays:8d}  (h2ping replays; the upstream saw {seen_again} "
        f"request ids more than once, each processed at most once)"
    )
    print(f"  failed             {tally.failed:8d}")
    for cause, n in tally.failures.most_common():
        shown = tally.examples[cause] if args.list_failures else tally.examples[cause][:3]
        print(f"    {n:6d}  {cause}\n            e.g. {', '.join(shown)}")
    print(f"  hung               {tally.hung:8d}  (must be 0) {' '.join(tally.hung_ids[:10])}")
    dup = twice(server)
    print(f"  processed twice    {len(dup):8d}  (must be 0) {' '.join(map(str, dup[:10]))}")
    print(f"  corrupted          {tally.corrupted:8d}  (must be 0)")
    print(
        f"faults: GOAWAY {faults.goaways} ({faults.two_step_goaways} two-step; "
        f"{server.not_processed_after_goaway} streams left unprocessed above one), "
        f"REFUSED_STREAM {server.refused}, abrupt closes {faults.abrupt_closes}, "
        f"vanished flows {faults.blackholed}, max-conn-age retirements {stats.retired}, "
        f"idle cuts of live flows {len(idle_cut.live_cuts)} "
        f"(and {idle_cut.flows_cut - len(idle_cut.live_cuts)} of flows h2ping had left)"
    )
    for cut in idle_cut.live_cuts[:10]:
        print(f"  live flow cut: {cut}")
    print(f"h2ping: {proxy.summary()}")
    print(f"  responses by class: {dict(sorted(stats.responses.items()))}")
    levels = collections.Counter()
    for (name, level), n in proxy_log.counts.items():
        levels[f"{name} {level}"] += n
    print("log records: " + ", ".join(f"{k} {n}" for k, n in sorted(levels.items())))
    for line in proxy_log.errors[:20]:
        print(f"  ERROR {line}")
    for message in loop_errors.proxy[:20]:
        print(f"  loop exception handler: {message}")
    if loop_errors.upstream_tool:
        print(
            f"  the scripted upstream (test tool) crashed {len(loop_errors.upstream_tool)} times, "
            "dropping its connection:"
        )
    for message in loop_errors.upstream_tool[:5]:
        print(f"    {message}")
    (p99,) = percentiles(lags, 99) if lags else (0.0,)
    print(f"event loop lag: p99 {p99 * 1000:.0f} ms, max {max(lags, default=0) * 1000:.0f} ms")
    print(f"after traffic stopped ({pooled} pooled upstream connections still open):")
    for name, n in leftovers.items():
        print(f"  {name:26s} {n}")
    print("resources (proxy, relays and upstream running, no connections):")
    print(f"  {'':14s} {'start':>8s} {'end':>8s}")
    for name in ("fds", "sockets", "tasks"):
        print(f"  {name:14s} {getattr(start, name):8d} {getattr(end, name):8d}")
    warm = f"{rss_warm:.0f}" if rss_warm is not None else "-"
    limit = f"{rss_limit(rss_warm):.0f}" if rss_warm is not None else "-"
    print(
        f"  RSS MiB: start {start.rss_mib:.0f}, after warm-up {warm}, peak {rss_peak:.0f}, "
        f"end {end.rss_mib:.0f} (limit {limit})"
    )
