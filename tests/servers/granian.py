"""Granian (Rust, from PyPI) serving ``granian_app.py`` over ASGI."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import sys
from collections.abc import AsyncIterator

from ..conftest import TLSFiles, free_port
from . import STREAM_CHUNKS, STREAM_GAP_MS, Origin, find_binary, ids_from_file, running_process


@contextlib.asynccontextmanager
async def run_granian(
    tls: TLSFiles, workdir: pathlib.Path, max_requests: int | None = None
) -> AsyncIterator[Origin]:
    # The test extra installs it beside the interpreter running the tests.
    find_binary(str(pathlib.Path(sys.executable).with_name("granian")), "granian (PyPI)")
    port = free_port()
    ids = workdir / "ids"
    argv = [
        sys.executable, "-m", "granian",
        "--interface", "asgi",
        "--http", "2",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--ssl-certificate", tls.cert_file,
        "--ssl-keyfile", tls.key_file,
        "--no-ws",
        "--log-level", "warning",
        # On SIGHUP, Granian starts a new worker, waits this long, then stops the
        # old one gracefully. Its default is 3.5 s; a new worker takes about 0.5 s
        # to listen here, and the old one must not stop before.
        "--respawn-interval", "1.5",
        "tests.servers.granian_app:app",
    ]  # fmt: skip
    env = {
        "IDS": str(ids),
        "STREAM_CHUNKS": str(STREAM_CHUNKS),
        "STREAM_GAP_MS": str(STREAM_GAP_MS),
        "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2]),
    }
    async with running_process(argv, port, workdir, env) as proc:

        async def reload() -> None:
            os.kill(proc.pid, signal.SIGHUP)

        yield Origin("granian", f"https://127.0.0.1:{port}", reload, ids_from_file(ids))
