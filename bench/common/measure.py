"""The numbers every harness reports the same way: percentiles, this process's
RSS, and the CPU model. Standard library only."""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Sequence


def percentiles(values: Sequence[float], *points: int) -> list[float]:
    """The given percentiles (1-99) of ``values``, interpolated between samples
    (``statistics.quantiles``, inclusive); a single sample is every percentile."""
    if not values:
        raise ValueError("no values")
    if len(values) == 1:
        return [float(values[0])] * len(points)
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return [cuts[point - 1] for point in points]


def rss_mib() -> float:
    """This process's resident set size, in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def cpu_model() -> str:
    """The first CPU's model name, or ``unknown CPU``."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"
