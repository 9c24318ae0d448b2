"""Node's built-in ``http2`` module (``node_server.js``), answering by itself."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal
from collections.abc import AsyncIterator

from ..conftest import TLSFiles, free_port
from . import STREAM_CHUNKS, STREAM_GAP_MS, Origin, find_binary, ids_from_file, running_process

SCRIPT = pathlib.Path(__file__).with_name("node_server.js")


@contextlib.asynccontextmanager
async def run_node(
    tls: TLSFiles, workdir: pathlib.Path, max_requests: int | None = None
) -> AsyncIterator[Origin]:
    binary = find_binary("node", "nodejs", "/usr/bin/node")
    port = free_port()
    ids = workdir / "ids"
    env = {
        "PORT": str(port),
        "CERT": tls.cert_file,
        "KEY": tls.key_file,
        "IDS": str(ids),
        "MAX_STREAMS": str(max_requests or 0),
        "STREAM_CHUNKS": str(STREAM_CHUNKS),
        "STREAM_GAP_MS": str(STREAM_GAP_MS),
    }
    async with running_process([binary, str(SCRIPT)], port, workdir, env) as proc:

        async def reload() -> None:
            os.kill(proc.pid, signal.SIGHUP)
            await asyncio.sleep(0)

        yield Origin("node", f"https://127.0.0.1:{port}", reload, ids_from_file(ids))
