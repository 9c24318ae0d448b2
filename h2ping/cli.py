"""``python -m h2ping``: flags, logging, signals and exit codes around a :class:`Proxy`.

Exit codes: 0 after a clean shutdown, 1 on a fatal runtime error (the port is
taken, say), 2 for a bad flag or value.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import sys
from collections.abc import Sequence

from .config import Config
from .flags import FlagError, HelpRequested, help_text, parse_args
from .proxy import Proxy

log = logging.getLogger("h2ping")

#: Runtime knobs of the Go binary; meaningless here, accepted so old launchers work.
_GO_RUNTIME_ENV = ("GOMEMLIMIT", "GOMAXPROCS")


def setup_logging(config: Config) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s %(levelname)s h2ping {config.instance_name}: %(message)s")
    )
    root = logging.getLogger("h2ping")
    root.handlers[:] = [handler]
    root.setLevel(config.log_level.upper())
    root.propagate = False


async def serve(config: Config) -> int:
    """Run until SIGINT/SIGTERM, then drain. Returns the process exit code."""
    proxy = Proxy(config)
    try:
        await proxy.start()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            log.error("listen %s: address already in use", config.listen)
        else:
            log.error("listen %s: %s", config.listen, exc.strerror or exc)
        return 1
    # Launchers wait for this line; the port is bound by now.
    log.info("listening on %s -> %s", proxy.listen_address, config.upstream)
    if not config.listen.is_loopback:
        log.warning(
            "listen address %s is not loopback and h2ping has no authentication: "
            "anyone who can reach it can use your upstream",
            config.listen,
        )
    if config.insecure_skip_verify:
        log.warning("insecure-skip-verify is on: upstream TLS certificates are NOT checked")

    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()

    def on_signal(signum: int) -> None:
        if stopping.is_set():
            log.warning("second %s: exiting now", signal.Signals(signum).name)
            logging.shutdown()
            os._exit(1)
        log.info(
            "%s: draining %d in-flight requests (up to %gs)",
            signal.Signals(signum).name,
            len(proxy.exchanges),
            config.shutdown_grace,
        )
        stopping.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    await stopping.wait()
    await proxy.stop()
    log.info("stopped: %s", proxy.stats.summary())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    prog = os.path.basename(sys.argv[0]) if argv is None else "h2ping"
    if prog in ("__main__.py", "-c"):
        prog = "python -m h2ping"
    try:
        config = parse_args(args)
    except HelpRequested:
        print(help_text(prog))
        return 0
    except FlagError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    setup_logging(config)
    for name in _GO_RUNTIME_ENV:
        if os.environ.get(name):
            log.info("%s is a Go runtime setting and is ignored here", name)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(config))
    return uvloop.run(serve(config))


if __name__ == "__main__":
    sys.exit(main())
