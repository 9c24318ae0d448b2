"""Memory: what a real ``python -m h2ping`` loads to serve, what uploads hold, and
that freed memory goes back to the system."""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import os
import platform
import signal
import sys
from collections.abc import Callable

import aiohttp
import pytest

from h2ping.process.heap import CHECK_INTERVAL, HeapTrimmer, anon_resident_bytes
from h2ping.testing import ScriptedRequest

from ..conftest import TLSFiles, free_port, running_proxy, scripted, wait_for_port, wait_until

#: Modules for flags, paths and formats a plain proxy does not use: -admin-listen,
#: -workers, -log-format json, and the http enum of status names.
RARE_PATH_MODULES = {
    *(
        "h2ping.process.admin",
        "h2ping.process.metrics",
        "h2ping.process.siblings",
        "h2ping.process.workers",
        "h2ping.process.accesslog",
    ),
    *("json", "datetime", "http"),
}
MIB = 1024 * 1024


async def answer(request: ScriptedRequest) -> None:
    await request.body()
    await request.respond(200, body=b"ok")


# The loop here only runs the test's client and upstream; the process picks its own.
@pytest.mark.asyncio(loop_factories=["uvloop"])
async def test_serving_loads_no_module_of_a_rare_path(tls: TLSFiles) -> None:
    """Each module costs resident memory for the process's whole life: the serving
    path (start, one request, stop) must not load those only other paths need."""
    port = free_port()
    async with scripted(tls, answer) as up:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-X", "importtime", "-m", "h2ping",
            "-listen", f"127.0.0.1:{port}", "-upstream", up.url, "-ca-file", tls.ca_file,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            stderr = asyncio.create_task(proc.communicate())
            await wait_for_port(port, timeout=10)
            async with aiohttp.ClientSession() as session:
                async with session.post(f"http://127.0.0.1:{port}/x", data=b"body") as resp:
                    assert resp.status == 200 and await resp.read() == b"ok"
            proc.send_signal(signal.SIGINT)
            _, err = await asyncio.wait_for(stderr, 10)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 0
    imported = {
        line.rpartition("|")[2].strip()
        for line in err.decode().splitlines()
        if line.startswith("import time:")
    }
    assert "h2ping.process.proxy" in imported  # the output is what it should be
    assert not imported & RARE_PATH_MODULES, sorted(imported & RARE_PATH_MODULES)


async def settled(value: Callable[[], int], timeout: float = 10.0) -> int:
    """``value()`` once it is above 0 and has not changed for 0.3 s."""
    async with asyncio.timeout(timeout):
        last, same = -1, 0
        while same < 6:
            await asyncio.sleep(0.05)
            now = value()
            same = same + 1 if now == last and now > 0 else 0
            last = now
    return last


async def test_an_upload_held_back_upstream_keeps_about_one_read_in_memory(tls: TLSFiles) -> None:
    """While the peer's stream window holds a body back, the proxy stops reading the
    client with little of it queued (the send mark and one read: 192 KiB); the rest
    waits in the kernel's socket buffers, where it costs the process nothing."""
    reading = asyncio.Event()

    async def handler(request: ScriptedRequest) -> None:
        await reading.wait()
        digest = hashlib.sha256()
        while chunk := await request.read():
            digest.update(chunk)
        await request.respond(200, body=digest.hexdigest().encode())

    body = os.urandom(MIB) * 16
    async with (
        scripted(tls, handler) as up,  # stream windows of 65,535 bytes
        running_proxy(up.url, tls, retry_body_limit=0) as proxy,
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(
            b"POST /up HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
            % len(body)
        )

        async def send() -> None:
            for start in range(0, len(body), MIB):
                writer.write(body[start : start + MIB])
                await writer.drain()

        sending = asyncio.create_task(send())
        assert proxy.pool is not None
        pool = proxy.pool

        def queued() -> int:
            return sum(s.pending_bytes for c in pool.connections for s in c.table.streams.values())

        held = await settled(queued)
        assert not sending.done(), "the whole body went in: nothing held it back"
        assert held <= 256 * 1024, f"{held} bytes of one upload queued in the proxy"
        reading.set()
        await asyncio.wait_for(sending, 30)
        response = await asyncio.wait_for(reader.read(), 30)
        writer.close()
    assert response.startswith(b"HTTP/1.1 200 ")
    assert hashlib.sha256(body).hexdigest().encode() in response


def anon_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon line")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
@pytest.mark.asyncio(loop_factories=["uvloop"])
async def test_uploads_with_open_windows_take_little_and_give_it_back(tls: TLSFiles) -> None:
    """Ten concurrent uploads, too large to keep for replay, to an upstream whose
    1 MiB stream windows let them all send: a real process holds a few MB while
    they stream, not their windows' worth, and a few seconds after they end it
    is back near where it started."""

    async def handler(request: ScriptedRequest) -> None:
        digest = hashlib.sha256()
        while chunk := await request.read():
            digest.update(chunk)
        await request.respond(200, body=digest.hexdigest().encode())

    body = os.urandom(MIB) * 8
    port = free_port()
    async with scripted(tls, handler, initial_window_size=MIB) as up:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "h2ping",
            "-listen", f"127.0.0.1:{port}", "-upstream", up.url, "-ca-file", tls.ca_file,
            "-retry-body-limit", str(MIB),
        )  # fmt: skip
        try:
            await wait_for_port(port, timeout=10)
            url = f"http://127.0.0.1:{port}/up"
            async with aiohttp.ClientSession() as session:
                async with session.post(url, data=b"warm") as resp:
                    assert resp.status == 200
                await asyncio.sleep(1.5)  # startup settles
                idle = anon_rss(proc.pid)
                peak = idle
                done = False

                async def sample() -> None:
                    nonlocal peak
                    while not done:
                        peak = max(peak, anon_rss(proc.pid))
                        await asyncio.sleep(0.02)

                async def upload() -> bytes:
                    async with session.post(url, data=body) as resp:
                        return await resp.read()

                sampler = asyncio.create_task(sample())
                digests = await asyncio.gather(*(upload() for _ in range(10)))
                done = True
                await sampler
            assert set(digests) == {hashlib.sha256(body).hexdigest().encode()}
            # Up to 5 s for the memory to go back (the heap trimmer looks now and then).
            after = anon_rss(proc.pid)
            for _ in range(50):
                if after - idle < 3 * MIB:
                    break
                await asyncio.sleep(0.1)
                after = min(after, anon_rss(proc.pid))
        finally:
            proc.send_signal(signal.SIGINT)
            await asyncio.wait_for(proc.wait(), 10)
    figures = f"anonymous RSS idle {idle}, peak {peak}, up to 5 s after {after}"
    assert peak - idle < 8 * MIB, figures
    assert after - idle < 3 * MIB, figures


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="gives memory back on glibc only")
async def test_free_heap_memory_goes_back_to_the_system() -> None:
    """Large blocks freed between blocks still in use: glibc keeps their pages
    resident until the trimmer, at its next look, hands them back."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size = 256 * 1024
    trimmer = HeapTrimmer()
    assert trimmer.start()
    # Freeing a large mapped block raises glibc's mmap threshold past it, so the
    # blocks below come from the heap, as a proxy's buffers do.
    libc.free(libc.malloc(4 * MIB))
    blocks = [libc.malloc(size) for _ in range(40)]
    try:
        for block in blocks:
            ctypes.memset(block, 1, size)
        touched = anon_resident_bytes()
        for block in blocks[::2]:  # each between two still in use: nothing to coalesce
            libc.free(block)
        held = anon_resident_bytes()
        assert held > touched - MIB, "glibc gave the pages back by itself"
        # Within one look of the trimmer's (and half an interval's slack).
        await wait_until(lambda: anon_resident_bytes() < held - 3 * MIB, CHECK_INTERVAL * 1.5)
    finally:
        trimmer.stop()
        for block in blocks[1::2]:
            libc.free(block)


#: A transfer's pattern, three times over: a replayable body kept whole (128 KiB
#: reads, 16 MiB in all) while a TLS record buffer of each read comes and goes,
#: then the body let go. The minor page faults of the last two rounds are printed.
_TRANSFERS = """
import asyncio, resource, sys
from h2ping.process.heap import HeapTrimmer

async def main():
    trimmer = HeapTrimmer()
    assert trimmer.start()
    faults = []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        kept = []
        for _ in range(128):
            kept.append(b"b" * 131072)
            record = b"r" * 131342
            del record
        del kept
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    trimmer.stop()
    print(sum(faults[1:]))

asyncio.run(main())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="sets glibc's heap only")
async def test_transfers_reuse_the_heap_between_the_trimmer_looks() -> None:
    """Left to itself, glibc gave a finished transfer's 16 MiB back at once and the
    next transfer faulted all of it in again (4,096 page faults); the trimmer's
    thresholds keep it until the trimmer's own look."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _TRANSFERS, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    faults = int(out)
    assert faults < 256, f"{faults} page faults for two transfers through a kept heap"
