"""``python -m h2ping``: flags, logging, signals and exit codes around a :class:`Proxy`.

Exit codes: 0 after a clean shutdown, 1 on a fatal runtime error (the port is
taken, say, or a bug of ours; the last log line says which), 2 for a bad flag or
value. Installed twice: as ``h2ping`` and as ``h2-ping-sidecar``, the Go binary's
name, so launchers configured with that path run this unchanged.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import ssl
import sys
from collections.abc import Coroutine, Sequence
from typing import Any

from .admin import AdminListenError
from .config import Config
from .flags import FlagError, HelpRequested, help_text, parse_args
from .logs import setup_logging
from .proxy import Proxy
from .workers import run_workers

log = logging.getLogger("h2ping")

#: Runtime knobs of the Go binary; meaningless here, accepted so old launchers work.
_GO_RUNTIME_ENV = ("GOMEMLIMIT", "GOMAXPROCS")


def _log_loop_exception(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio's own report of an error in a callback, through our handler and format."""
    exc = context.get("exception")
    log.error("unhandled error in the event loop: %s", context.get("message"), exc_info=exc)


async def serve(config: Config) -> int:
    """Run until SIGINT/SIGTERM, then drain. Returns the process exit code."""
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_log_loop_exception)
    proxy = Proxy(config)
    stopping = asyncio.Event()

    def on_signal(signum: int) -> None:
        if stopping.is_set():
            log.warning("second %s: exiting now", signal.Signals(signum).name)
            logging.shutdown()
            os._exit(1)
        log.info(
            "%s: draining %d in-flight requests (up to %gs)",
            signal.Signals(signum).name,
            proxy.in_flight,
            config.shutdown_grace,
        )
        stopping.set()

    # Before binding, so that a signal during startup still means "drain and exit 0".
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        await proxy.start()
    except ssl.SSLError as exc:  # an OSError too, but not the listener's
        log.error("ca-file %s: %s", config.ca_file, exc.reason or exc)
        return 1
    except OSError as exc:
        where = f"admin-listen {exc.address}" if isinstance(exc, AdminListenError) else None
        where = where or f"listen {config.listen}"
        if exc.errno == errno.EADDRINUSE:
            log.error("%s: address already in use", where)
        else:
            log.error("%s: %s", where, exc.strerror or exc)
        return 1
    # Launchers wait for this line; the port is bound by now.
    log.info("listening on %s -> %s", proxy.listen_address, config.upstream)
    if proxy.admin is not None:
        log.info("admin endpoint on %s: /healthz /readyz /metrics", proxy.admin.address)
    if not config.listen.is_loopback:
        log.warning(
            "listen address %s is not loopback and h2ping has no authentication: "
            "anyone who can reach it can use your upstream",
            config.listen,
        )
    if config.insecure_skip_verify:
        log.warning("insecure-skip-verify is on: upstream TLS certificates are NOT checked")

    await stopping.wait()
    await proxy.stop()
    log.info("stopped: %s", proxy.summary())
    return 0


def _serve_worker(config: Config) -> int:
    setup_logging(config)  # the worker's own name in its lines
    return _run(serve(config))


def _run(coro: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    prog = os.path.basename(sys.argv[0]) if argv is None else "h2ping"
    if prog in ("__main__.py", "-c"):
        prog = "python -m h2ping"
    try:
        config = parse_args(args)
    except HelpRequested:
        print(help_text(prog), end="")
        return 0
    except FlagError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    setup_logging(config)
    ignored = [name for name in _GO_RUNTIME_ENV if os.environ.get(name)]
    if ignored:
        log.info("ignoring %s: Go runtime settings, meaningless here", " and ".join(ignored))
    try:
        if config.workers > 1:
            return run_workers(config, _serve_worker)
        return _run(serve(config))
    except KeyboardInterrupt:  # SIGINT before serve() installed its handler: nothing to drain
        log.info("interrupted during startup: exiting")
        return 0
    except Exception as exc:
        # A bug of ours. Launchers show the tail of the log: end it with one clear line.
        log.error("internal error", exc_info=True)
        log.error("exiting after an unexpected error: %s: %s", type(exc).__name__, exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
