"""Load generators, pinned to core 1 (unless a scenario says otherwise): h2load
(throughput, latency) and curl (16 MiB).

Each function returns a plain dict of figures, ready for the JSON report.
"""

from __future__ import annotations

import re
import statistics
import subprocess
from pathlib import Path
from typing import Any

from measure import percentiles
from procs import BenchError

LOAD_CPU = 1
_UNITS_US = {"us": 1.0, "ms": 1000.0, "s": 1_000_000.0}


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
) -> dict[str, Any]:
    """One h2load run (one thread), pinned to ``cpu``; ``cpu=None`` leaves it unpinned."""
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
    return parse_h2load(_run([*argv, url], timeout, cpu))


def latency_from_log(log_file: Path) -> dict[str, Any]:
    """Mean and percentiles from h2load's per-request log (3rd column: microseconds)."""
    times, bad = [], 0
    for line in log_file.read_text().splitlines():
        fields = line.split("\t")
        if len(fields) < 3:
            continue
        times.append(float(fields[2]))
        bad += not fields[1].startswith("2")
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


def curl_transfer(url: str, *, upload: Path | None, ca_file: Path | None) -> dict[str, Any]:
    """One 16 MiB transfer on a fresh connection; returns size, seconds and body check."""
    fmt = "%{http_code} %{size_download} %{size_upload} %{time_total}"
    # Downloads are discarded; an upload's small answer is kept to check it.
    argv = ["curl", "-sS", "-o", "-" if upload else "/dev/null", "-w", "\n" + fmt]
    if ca_file is not None:
        argv += ["--http2", "--cacert", str(ca_file)]
    if upload is not None:
        # No Expect: 100-continue: curl would otherwise pause up to 1 s for the 100.
        argv += ["--data-binary", f"@{upload}", "-H", "Expect:"]
        argv += ["-H", "Content-Type: application/octet-stream"]
    out = _run([*argv, url], timeout=300)
    body, _, stats = out.rpartition("\n")
    code, down, up, total = stats.split()
    size = int(up) if upload is not None else int(down)
    return {"status": int(code), "bytes": size, "seconds": float(total), "body": body[:80]}
