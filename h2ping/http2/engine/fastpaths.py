"""Which of h2ping's fast paths this process takes: each only where its names
are all there and its probe passed.

h2ping's speed comes partly from names h2 and hpack do not document, which any
release may rename or change (:mod:`.manifest` lists each, with the paths that
rely on it). Before a fast path is first used, two checks run. Every name the
path relies on must still be in the installed library. And its probe
(:mod:`.probes`) runs a tiny known exchange through a connection taking that
path and checks the outcome against plain h2, or against what the path promises.
A path that fails either is off for the life of the process: h2 and hpack then
do that work themselves, one warning line says which path, what differed and the
library versions, and ``/metrics`` shows ``h2ping_fast_path{path="..."} 0``.
The probes cover fixed exchanges only; the engine's differential tests, run on
every supported version, cover generated ones.

The checks run once per process, at the first call of :func:`enabled` (a proxy's
start, or its first upstream connection); ``-workers`` runs them in the parent
before forking, so the workers inherit the outcome and the line is logged once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from . import manifest, probes
from .manifest import (
    DATA,
    HPACK,
    RECEIVE,
    REQUEST_DATA,
    REQUEST_HEADERS,
    RESPONSE_HEADERS,
    STREAM_FAULTS,
)

log = logging.getLogger("h2ping")

#: The libraries whose internals the fast paths touch, named in the warning.
LIBRARIES = ("h2", "hpack", "hyperframe")

#: Path name -> its probe: None when the path behaves, else what differed.
PROBES: dict[str, Callable[[], str | None]] = {
    RECEIVE: probes.receive,
    DATA: probes.data,
    STREAM_FAULTS: probes.stream_faults,
    HPACK: probes.hpack,
    REQUEST_HEADERS: probes.request_headers,
    REQUEST_DATA: probes.request_data,
    RESPONSE_HEADERS: probes.response_headers,
}

_verdict: frozenset[str] | None = None


def check() -> dict[str, str]:
    """Path name -> why it is off, for each path that fails a check now."""
    failures: dict[str, str] = {}
    for reach in manifest.missing():
        for path in reach.paths:
            failures.setdefault(path, f"{reach.qualname} is missing")
    for name, probe in PROBES.items():
        if name in failures:
            continue
        try:
            why = probe()
        except Exception as exc:  # whatever a changed library raises
            why = f"{type(exc).__name__}: {exc}"
        if why is not None:
            failures[name] = why
    return failures


def enabled() -> frozenset[str]:
    """The fast paths this process takes; the checks run on the first call."""
    global _verdict
    if _verdict is None:
        failures = check()
        _verdict = frozenset(PROBES) - failures.keys()
        if failures:
            log.warning(
                "fast paths off, plain h2/hpack instead (slower): %s; with %s",
                "; ".join(f"{name}: {why}" for name, why in failures.items()),
                versions(),
            )
    return _verdict


def states() -> dict[str, int]:
    """Each fast path, 1 when taken, 0 when its checks failed (for /metrics)."""
    on = enabled()
    return {name: int(name in on) for name in PROBES}


def versions() -> str:
    """``h2 4.4.1, hpack 4.2.0, hyperframe 6.1.0``: the installed versions."""
    from importlib import metadata  # only when told: it imports much (email, datetime)

    found = []
    for name in LIBRARIES:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (version unknown)")
    return ", ".join(found)


def forget() -> None:
    """Check again at the next :func:`enabled` (for tests that change a library)."""
    global _verdict
    _verdict = None
