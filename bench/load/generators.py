"""Load generators, pinned to core 1 (unless a scenario says otherwise): h2load
(throughput, latency) and curl (16 MiB).

Each function returns a plain dict of figures, ready for the JSON report.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import threading
from pathlib import Path
from typing import Any

from common.measure import percentiles
from common.procs import BenchError, tree_cpu_clock

LOAD_CPU = 1
_UNITS_US = {"us": 1.0, "ms": 1000.0, "s": 1_000_000.0}
# What h2load prints (flushed at once) around the window it counts in a timed run; its
# request counts leave the warm-up out, so the proxy's CPU is read at these lines.
MAIN_STARTED = "Main benchmark duration is started"
MAIN_OVER = "Main benchmark duration is over"


def _pinned(argv: list[str], cpu: int | str | None) -> list[str]:
    return argv if cpu is None else ["taskset", "-c", str(cpu), *argv]


def _run(argv: list[str], timeout: float, cpu: int | str | None = LOAD_CPU) -> str:
    try:
        done = subprocess.run(
            _pinned(argv, cpu), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"{argv[0]} did not finish in {timeout:.0f}s") from exc
    if done.returncode != 0:
        raise BenchError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-500:]}")
    return done.stdout


def _run_measuring(
    argv: list[str], timeout: float, cpu: int | str | None, pid: int, timed: bool
) -> tuple[str, float | None]:
    """Run h2load like ``_run`` (stderr into the output), and return with its output the
    CPU seconds process tree ``pid`` used in the window h2load counts: between its
    main-duration lines if ``timed``, else the whole run (None: no such lines)."""
    reads = {MAIN_STARTED: None if timed else tree_cpu_clock(pid), MAIN_OVER: None}
    lines: list[str] = []
    popen = subprocess.Popen(
        _pinned(argv, cpu), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        popen.kill()

    killer = threading.Timer(timeout, expire)
    killer.start()
    try:
        for line in popen.stdout or ():
            for mark in reads:
                if line.startswith(mark):
                    reads[mark] = tree_cpu_clock(pid)
            lines.append(line)
        popen.wait()
        if not timed:
            reads[MAIN_OVER] = tree_cpu_clock(pid)
    finally:
        killer.cancel()
        if popen.poll() is None:  # interrupted
            popen.kill()
            popen.wait()
    output = "".join(lines)
    if expired.is_set():
        raise BenchError(f"{argv[0]} did not finish in {timeout:.0f}s")
    if popen.returncode != 0:
        raise BenchError(f"{' '.join(argv)} exited {popen.returncode}: {output[-500:]}")
    start, end = reads[MAIN_STARTED], reads[MAIN_OVER]
    return output, None if start is None or end is None else end - start


def _to_us(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if not match:
        raise BenchError(f"cannot read h2load duration {text!r}")
    return float(match[1]) * _UNITS_US[match[2]]


def parse_h2load(output: str) -> dict[str, Any]:
    """The summary h2load prints: rate, request counts, status classes, latency."""
    result: dict[str, Any] = {}
    if m := re.search(r"finished in ([\d.]+(?:us|ms|s)), ([\d.]+) req/s", output):
        result["seconds"], result["req_per_s"] = _to_us(m[1]) / 1e6, float(m[2])
    if m := re.search(
        r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
        r"(\d+) failed, (\d+) errored, (\d+) timeout",
        output,
    ):
        keys = ("total", "started", "done", "succeeded", "failed", "errored", "timeout")
        result.update({f"requests_{k}": int(v) for k, v in zip(keys, m.groups(), strict=True)})
    if m := re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", output):
        result.update({f"status_{k}xx": int(v) for k, v in zip("2345", m.groups(), strict=True)})
    if m := re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", output):
        for key, text in zip(("min", "max", "mean", "sd"), m.groups(), strict=True):
            result[f"latency_{key}_us"] = _to_us(text)
    if "req_per_s" not in result:
        raise BenchError("h2load printed no summary:\n" + output[-800:])
    return result


def h2load(
    url: str,
    *,
    h1: bool,
    clients: int,
    requests: int | None = None,
    duration: float | None = None,
    warmup: float = 0.0,
    log_file: Path | None = None,
    cpu: int | str | None = LOAD_CPU,
    cpu_of: int | None = None,
) -> dict[str, Any]:
    """One h2load run (one thread), pinned to ``cpu``; ``cpu=None`` leaves it unpinned.

    ``cpu_of``, a proxy's pid, adds the CPU its process tree used per request h2load
    completed (``cpu_us_per_req``), both over the window h2load counts."""
    argv = ["h2load", "-t", "1", "-c", str(clients)]
    if duration is not None:
        argv += ["-D", f"{duration:g}"]
        if warmup:
            argv += ["--warm-up-time", f"{warmup:g}"]
    else:
        argv += ["-n", str(requests)]
    if h1:
        argv.append("--h1")
    if log_file is not None:
        argv += ["--log-file", str(log_file)]
    timeout = (duration or 0) + warmup + 120
    if cpu_of is None:
        return parse_h2load(_run([*argv, url], timeout, cpu))
    output, cpu_s = _run_measuring([*argv, url], timeout, cpu, cpu_of, duration is not None)
    result = parse_h2load(output)
    done = result.get("requests_done")
    result["proxy_cpu_s"] = cpu_s
    result["cpu_us_per_req"] = cpu_s / done * 1e6 if cpu_s is not None and done else None
    return result


def log_requests(log_file: Path) -> list[tuple[float, int, float]]:
    """h2load's per-request log: (start, epoch seconds; status; duration, us) each."""
    requests = []
    for line in log_file.read_text().splitlines():
        fields = line.split("\t")
        if len(fields) < 3:
            continue
        requests.append((int(fields[0]) / 1e6, int(fields[1]), float(fields[2])))
    return requests


def latency_from_log(log_file: Path) -> dict[str, Any]:
    """Mean and percentiles from h2load's per-request log (3rd column: microseconds)."""
    requests = log_requests(log_file)
    times = [duration for _, _, duration in requests]
    bad = sum(not 200 <= status < 300 for _, status, _ in requests)
    if not times:
        raise BenchError(f"empty h2load log {log_file}")
    p50, p90, p99 = percentiles(times, 50, 90, 99)
    return {
        "requests": len(times),
        "non_2xx": bad,
        "mean_us": statistics.fmean(times),
        "p50_us": p50,
        "p90_us": p90,
        "p99_us": p99,
        "max_us": times[-1],
    }


def curl_transfer(
    url: str, *, upload: Path | None, ca_file: Path | None, nice: int = 0
) -> dict[str, Any]:
    """One large transfer on a fresh connection; returns size, seconds (and to the
    first byte) and the start of the body, to check it. ``nice`` lowers curl's priority
    (``nice -n``) where it shares its core with a client whose latency is measured."""
    fmt = "%{http_code} %{size_download} %{size_upload} %{time_total} %{time_starttransfer}"
    # Downloads are discarded; an upload's small answer is kept to check it.
    argv = ["nice", "-n", str(nice)] if nice else []
    argv += ["curl", "-sS", "-o", "-" if upload else "/dev/null", "-w", "\n" + fmt]
    if ca_file is not None:
        argv += ["--http2", "--cacert", str(ca_file)]
    if upload is not None:
        # No Expect: 100-continue: curl would otherwise pause up to 1 s for the 100.
        argv += ["--data-binary", f"@{upload}", "-H", "Expect:"]
        argv += ["-H", "Content-Type: application/octet-stream"]
    out = _run([*argv, url], timeout=300)
    body, _, stats = out.rpartition("\n")
    code, down, up, total, first_byte = stats.split()
    size = int(up) if upload is not None else int(down)
    return {
        "status": int(code),
        "bytes": size,
        "seconds": float(total),
        "first_byte_s": float(first_byte),
        "body": body[:80],
    }
