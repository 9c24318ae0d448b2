"""The printed table and the ratios h2ping/peer, all from one run's figures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Getter = Callable[[dict[str, Any]], Any]

# h2ping's event-loop lag (--loop-lag-interval 10ms) from its shutdown summary, over
# the proxy's whole life in the scenario; n/a for the other peers.
LAG_COLUMNS: list[tuple[str, Getter, str]] = [
    ("lag p99 ms", lambda f: f.get("loop_lag_p99_ms"), "{:.1f}"),
    ("lag max ms", lambda f: f.get("loop_lag_max_ms"), "{:.1f}"),
]

# The proxy's CPU (user + system, its process tree) per request h2load completed, over
# h2load's counted window; n/a for direct peers, which have no proxy.
CPU_COLUMN: tuple[str, Getter, str] = ("CPU us/req", lambda f: f.get("cpu_us_per_req"), "{:.0f}")

# Per scenario: title, (column header, value getter, format), metrics to take ratios of.
COLUMNS: dict[str, tuple[str, list[tuple[str, Getter, str]], list[str]]] = {
    "small_50": (
        "1. small requests, 50 connections (h2load --h1 /tiny)  "
        "[req/s ratio > 1: h2ping faster; CPU ratio > 1: h2ping uses more]",
        [
            ("req/s", lambda f: f["req_per_s"], "{:,.0f}"),
            ("mean ms", lambda f: f.get("latency_mean_us", 0) / 1000, "{:.2f}"),
            ("failed", lambda f: f.get("requests_failed", 0) + f.get("requests_errored", 0), "{}"),
            CPU_COLUMN,
            *LAG_COLUMNS,
        ],
        ["req_per_s", "cpu_us_per_req"],
    ),
    "latency_1": (
        "2. small requests, 1 connection, latency in us  "
        "[ratio > 1: h2ping slower / uses more CPU]",
        [
            ("mean", lambda f: f["mean_us"], "{:.0f}"),
            ("p50", lambda f: f["p50_us"], "{:.0f}"),
            ("p99", lambda f: f["p99_us"], "{:.0f}"),
            ("+mean/direct", lambda f: f.get("added_mean_us_over_direct"), "{:+.0f}"),
            ("+p99/direct", lambda f: f.get("added_p99_us_over_direct"), "{:+.0f}"),
            ("+mean/direct-h1", lambda f: f.get("added_mean_us_over_direct-h1"), "{:+.0f}"),
            CPU_COLUMN,
        ],
        ["mean_us", "p99_us", "cpu_us_per_req"],
    ),
    "transfer_16m": (
        "3. 16 MiB transfers, curl, median MB/s  [ratio > 1: h2ping faster]",
        [
            ("download", lambda f: f["download_mb_per_s"], "{:,.0f}"),
            ("upload", lambda f: f["upload_mb_per_s"], "{:,.0f}"),
        ],
        ["download_mb_per_s", "upload_mb_per_s"],
    ),
    "workers": (
        "6. h2ping --workers 1 vs 2: small requests, 50 connections (h2load --h1 /tiny)  "
        "[scaling: req/s over 1 worker's (its goal: see the goals table); x go: req/s over Go's; "
        "CPU x go: CPU us/req over Go's]\n"
        "   pinning: {pinning}",
        [
            ("req/s", lambda f: f["req_per_s"], "{:,.0f}"),
            ("mean ms", lambda f: f.get("latency_mean_us", 0) / 1000, "{:.2f}"),
            ("failed", lambda f: f.get("requests_failed", 0) + f.get("requests_errored", 0), "{}"),
            ("scaling", lambda f: f.get("scaling_vs_1_worker"), "{:.2f}x"),
            ("x go", lambda f: f.get("vs_go"), "{:.2f}"),
            CPU_COLUMN,
            ("CPU x go", lambda f: f.get("cpu_vs_go"), "{:.2f}"),
            *LAG_COLUMNS,
        ],
        [],  # the scaling column is the comparison; no h2ping/peer ratio
    ),
}
COLUMNS["small_during_download"] = (
    "8. small requests (h2load --h1 -c 1 /tiny), idle, then while 200 MiB downloads (curl) "
    "run back to back through the same proxy, latency in ms  "
    "[loaded/idle: median while loaded over idle median; ratio > 1: h2ping slower]",
    [
        ("idle p50", lambda f: f["idle_p50_ms"], "{:.2f}"),
        ("loaded p50", lambda f: f["loaded_p50_ms"], "{:.2f}"),
        ("loaded/idle", lambda f: f["loaded_over_idle"], "{:.2f}x"),
        ("idle p99", lambda f: f["idle_p99_ms"], "{:.2f}"),
        ("loaded p99", lambda f: f["loaded_p99_ms"], "{:.2f}"),
        ("requests", lambda f: f"{f['idle_requests']}/{f['loaded_requests']}", "{}"),
        ("failed", lambda f: f["failed"], "{}"),
        ("downloads", lambda f: f["downloads"], "{}"),
        ("MB/s", lambda f: f["download_mb_per_s"], "{:,.0f}"),
        ("proxy core", lambda f: f["proxy_cpu_share"], "{:.0%}"),
        ("upstream conns", lambda f: f["upstream_connections"], "{}"),
        ("opened", lambda f: f.get("connections_opened"), "{}"),  # h2ping's summary
        *LAG_COLUMNS,
    ],
    ["loaded_p50_ms"],
)
COLUMNS["sse"] = (
    "7. streamed responses: {streams:,} SSE streams, {bytes} B every {interval_ms} ms "
    "(asks {asked_per_s:,} events/s), {seconds:g} s window, origin writes {origin_writes}  "
    "[ratio > 1: h2ping uses more CPU / is later / delivers more]",
    [
        ("open", lambda f: f"{f['heads']}/{f['streams']}", "{}"),
        ("events/s", lambda f: f["events_per_s"], "{:,.0f}"),
        ("full rate", lambda f: "yes" if f["full_rate"] else "NO", "{}"),
        ("p50 ms", lambda f: f["delay_p50_ms"], "{:.1f}"),
        ("p99 ms", lambda f: f["delay_p99_ms"], "{:.1f}"),
        ("max ms", lambda f: f["delay_max_ms"], "{:.1f}"),
        ("gaps", lambda f: f["gaps"], "{}"),
        ("CPU s/10k ev", lambda f: f["cpu_per_10k_events"], "{:.3f}"),
        ("proxy core", lambda f: f["proxy_cpu_share"], "{:.0%}"),
        ("load core", lambda f: f["load_core_share"], "{:.0%}"),
        # Events per origin write (whole run) and per client read (window): how batched
        # they reach the proxy and leave it.
        ("ev/write", lambda f: f["origin"]["events_per_write"], "{:.1f}"),
        ("ev/read", lambda f: f["events_per_read"], "{:.2f}"),
        # Mean bytes waiting unread in the window: at the client (the load generator
        # is behind) and in the proxy's upstream socket (the proxy is).
        ("unread KiB client", lambda f: f.get("unread_by_client_kib_mean"), "{:,.0f}"),
        ("unread KiB proxy", lambda f: f.get("unread_by_proxy_kib_mean"), "{:,.0f}"),
        # Seconds of the window with 256 KiB or more unread by the proxy (with
        # --sse-stall, the stop included).
        ("behind s", lambda f: f.get("proxy_behind_s"), "{:.2f}"),
        *LAG_COLUMNS,
    ],
    ["cpu_per_10k_events", "delay_p99_ms", "events_per_s"],
)
INFLIGHT_COLUMNS: list[tuple[str, Getter, str]] = [
    ("ok", lambda f: f"{f['ok']}", "{}"),
    ("failures", lambda f: sum(f["failures"].values()), "{}"),
    ("connect s", lambda f: f.get("connect_seconds"), "{:.1f}"),
    ("idle MiB", lambda f: f["rss_idle_kib"] / 1024, "{:.1f}"),
    ("peak MiB", lambda f: f["rss_peak_kib"] / 1024, "{:.1f}"),
    ("KiB/req", lambda f: f["rss_per_request_kib"], "{:.1f}"),
    ("pings/s", lambda f: f.get("pings_per_s"), "{:.1f}"),
    *LAG_COLUMNS,
]
INFLIGHT_RATIOS = ["rss_per_request_kib"]


def add_ratios(name: str, result: dict[str, Any]) -> None:
    """result["ratios"][metric][peer] = h2ping's figure / the peer's, same run."""
    metrics = INFLIGHT_RATIOS if name.startswith("inflight") else COLUMNS[_kind(name)][2]
    mine = result["peers"].get("h2ping")
    ratios: dict[str, dict[str, float]] = {}
    for metric in metrics:
        for peer, figures in result["peers"].items():
            if mine is None or peer == "h2ping" or not figures.get(metric):
                continue
            if mine.get(metric) is None:  # e.g. no event delivered: no delay, no CPU/event
                continue
            ratios.setdefault(metric, {})[peer] = mine[metric] / figures[metric]
    result["ratios"] = ratios
    # The floor (peers/floor_relay.py) against Go: how far any pure-Python proxy is.
    floor, go = result["peers"].get("floor"), result["peers"].get("go")
    if floor is not None and go is not None:
        result["floor_vs_go"] = {
            metric: floor[metric] / go[metric]
            for metric in metrics
            if floor.get(metric) is not None and go.get(metric)
        }


def render(name: str, result: dict[str, Any]) -> str:
    if name.startswith("inflight"):
        p = result["params"]
        number = "4" if name == "inflight" else "5"
        title = (
            f"{number}. {p['n']} requests in flight for {p['seconds']} s, proxy RSS  "
            "[ratio > 1: h2ping uses more]"
        )
        columns, metrics = INFLIGHT_COLUMNS, INFLIGHT_RATIOS
    else:
        title, columns, metrics = COLUMNS[_kind(name)]
        title = title.format(**result["params"]) if "{" in title else title
    headers = ["peer"] + [c[0] for c in columns] + [f"h2ping/peer {m}" for m in metrics]
    rows = []
    for peer, figures in result["peers"].items():
        cells = [peer] + [_cell(getter, fmt, figures) for _, getter, fmt in columns]
        for metric in metrics:
            ratio = result.get("ratios", {}).get(metric, {}).get(peer)
            cells.append("-" if ratio is None else f"{ratio:.2f}")
        rows.append(cells)
    lines = [title, table(headers, rows)]
    lines += _round_lines(result["peers"])
    if result.get("floor_vs_go"):
        pairs = "; ".join(f"{m} {r:.2f}" for m, r in result["floor_vs_go"].items())
        lines.append(f"  floor/go: {pairs}")
    lines += [f"  {peer}: ERROR {msg.splitlines()[0]}" for peer, msg in result["errors"].items()]
    lines += [f"  {note}" for note in result.get("notes", [])]
    return "\n".join(lines)


def _round_lines(peers: dict[str, Any]) -> list[str]:
    """Each figure the median was taken of, round by round, for the peers measured
    in several rounds: how much the machine moved under them."""
    lines = []
    for peer, figures in peers.items():
        rounds = figures.get("rounds")
        if not rounds:
            continue
        spread = "; ".join(
            f"{key} " + " ".join(_round_value(r[key]) for r in rounds) for key in rounds[0]
        )
        lines.append(f"  {peer}, {len(rounds)} rounds (medians above): {spread}")
    return lines


def _round_value(value: Any) -> str:
    if value is None:
        return "?"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _kind(name: str) -> str:
    """The COLUMNS entry of a scenario: ``sse_500`` -> ``sse``."""
    return "sse" if name.startswith("sse_") else name


def _cell(getter: Getter, fmt: str, figures: dict[str, Any]) -> str:
    try:
        value = getter(figures)
    except (KeyError, TypeError):
        return "?"
    return "n/a" if value is None else fmt.format(value)


def table(headers: list[str], rows: list[list[str]], left: frozenset[int] = frozenset()) -> str:
    """Columns padded to one width; the first and those in ``left`` flush left, the
    rest (figures) flush right."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        padded = [
            cell.ljust(width) if i == 0 or i in left else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  " + "  ".join(padded).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])
