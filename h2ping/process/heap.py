"""Giving memory back to the system after large transfers (glibc only).

glibc's malloc keeps what is freed for reuse. The buffers of large transfers
(client reads, DATA frames, TLS records: 16-256 KiB each) are freed into its heap,
where a few small blocks still in use keep most pages resident: after ten
concurrent 20 MiB uploads 2-3 MB more stayed resident for good. glibc also
raises its mmap threshold when a large mapped block is freed, so later large
buffers come from that heap too. Returning every large block at once instead (a
fixed ``M_MMAP_THRESHOLD`` of 128 KiB) cost 40 % more CPU per uploaded byte: an
mmap, page faults and a munmap per read. Left to itself, though, glibc gives the
top of its heap back whenever a free leaves more than twice that raised threshold
there, and takes it back on the next read: a 16 MiB upload (128 KiB reads, each
read's TLS records as large) paid a ``brk`` and a page fault per 4 KiB for every
buffer, a quarter of its CPU. So the thresholds are fixed where the trimmer
starts: blocks up to :data:`MMAP_THRESHOLD` come from the heap, and a free gives
the heap's top back only past :data:`TRIM_THRESHOLD`; the timer below is what
gives memory back.

So a timer looks once a second, off the request path, at the process's anonymous
resident memory and at the bytes malloc holds free. When either has grown by
:data:`TRIM_STEP` since the lowest point seen after the last trim, and malloc
holds at least that much free, it calls ``malloc_trim(0)``, which hands the free
pages back (0.1-0.5 ms). While transfers go on, they take that memory again
after the trim: one working set faulted in again per second, where glibc's own
trimming did so after every transfer. Other systems and C libraries are left alone.

The cyclic garbage collector is set here too (:func:`settle_collector`): its full
passes walk every live object, and with thousands of clients connected each took
50-160 ms, the event loop stalled meanwhile.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

from .descriptors import is_shortage

log = logging.getLogger("h2ping")

CHECK_INTERVAL = 1.0  # seconds
#: Collections of the middle generation between two full passes (CPython: 10, and
#: then only once the objects that survived since the last full pass number a
#: quarter of those it found). While thousands of new clients arrive, nearly
#: everything survives, and a full pass came every few thousand of them. Client
#: connections undo their own reference cycles as they end, so little garbage
#: waits for a full pass.
GC_FULL_THRESHOLD = 1000
TRIM_STEP = 1024 * 1024  # bytes
#: Blocks up to this size come from malloc's heap (a transfer's buffers are 16-256 KiB).
MMAP_THRESHOLD = 1024 * 1024
#: A free gives the heap's top back by itself only when this much is free there:
#: past any transfer's buffers (a replayable body is kept whole, up to 16 MiB by
#: default), so that the timer is what gives memory back.
TRIM_THRESHOLD = 256 * 1024 * 1024
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
_STATM = "/proc/self/statm"


def settle_collector() -> None:
    """Once serving: what start-up made lives as long as the process, so no pass
    walks it again (``gc.freeze``), and full passes come less often."""
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, GC_FULL_THRESHOLD)


def anon_resident_bytes() -> int:
    """Resident memory not backed by a file (heap, arenas, stacks), from /proc."""
    with open(_STATM, "rb") as f:
        fields = f.read().split()
    return (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")


class _Glibc(NamedTuple):
    trim: Callable[[int], int]  # malloc_trim
    free_bytes: Callable[[], int]  # what malloc holds free
    mallopt: Callable[[int, int], int]


def _glibc_functions() -> _Glibc | None:
    """What the trimmer calls, on glibc."""
    try:
        if not (
            sys.platform.startswith("linux")
            and (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
            and os.path.exists(_STATM)
        ):
            return None
    except (ValueError, OSError):
        return None
    import ctypes

    libc = ctypes.CDLL(None)
    # mallinfo2 (glibc 2.33+) counts in size_t; the older mallinfo in int.
    info = getattr(libc, "mallinfo2", None)
    field: type[ctypes.c_size_t | ctypes.c_uint] = ctypes.c_size_t
    if info is None:
        info, field = libc.mallinfo, ctypes.c_uint

    class MallInfo(ctypes.Structure):
        _fields_ = [
            (name, field)
            for name in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
            )
        ]  # fmt: skip

    info.restype = MallInfo
    info.argtypes = []
    trim = libc.malloc_trim
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return _Glibc(trim, lambda: int(info().fordblks), mallopt)


class HeapTrimmer:
    """Calls ``malloc_trim(0)`` once memory has grown and malloc holds it free."""

    def __init__(self) -> None:
        self.trims = 0
        self._timer: asyncio.TimerHandle | None = None
        self._trim: Callable[[int], int] = lambda pad: 0
        self._free_bytes: Callable[[], int] = lambda: 0
        self._anon_mark = 0
        self._free_mark = 0

    def start(self) -> bool:
        """Look once a second from now on; False (and nothing) off glibc."""
        glibc = _glibc_functions()
        if glibc is None:
            return False
        self._trim, self._free_bytes = glibc.trim, glibc.free_bytes
        # The heap is kept between transfers, and this timer gives it back.
        glibc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        glibc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        # From here on, what malloc holds free is not resident (what startup freed
        # goes too), so memory that is touched again shows as anonymous RSS.
        self._trim(0)
        self._anon_mark, self._free_mark = anon_resident_bytes(), self._free_bytes()
        self._schedule()
        return True

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(CHECK_INTERVAL, self._check)

    def _check(self) -> None:
        self._schedule()
        try:
            anon, free = anon_resident_bytes(), self._free_bytes()
        except OSError as exc:
            if not is_shortage(exc):
                raise
            log.debug("heap check skipped: no file descriptor free to read %s", _STATM)
            return
        grown = anon - self._anon_mark >= TRIM_STEP or free - self._free_mark >= TRIM_STEP
        if not grown or free < TRIM_STEP:
            # The marks follow memory down: growth counts from the lowest point.
            self._anon_mark = min(self._anon_mark, anon)
            self._free_mark = min(self._free_mark, free)
            return
        started = time.perf_counter()
        self._trim(0)
        self.trims += 1
        self._anon_mark, self._free_mark = anon_resident_bytes(), self._free_bytes()
        log.debug(
            "gave free heap memory back: anonymous RSS %.1f -> %.1f MB in %.1f ms",
            anon / 1e6,
            self._anon_mark / 1e6,
            (time.perf_counter() - started) * 1000,
        )
