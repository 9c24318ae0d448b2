"""``python -m h2ping``: flags, logging, readiness, signals and exit codes around a
:class:`Proxy`, as the Go binary ``h2-ping-sidecar`` has them.

``h2ping check ...`` reports on an endpoint instead (:mod:`h2ping.check`).

Exit codes: 0 after a clean stop (or ``-h``/``-version``); 2 for what Go's flag
package rejects (an unknown flag, a value it cannot parse); 1 for a value refused
after parsing, a port that cannot be bound, a ready file that cannot be written, or
a bug of ours (the last log line says which). Installed twice: as ``h2ping`` and as
``h2-ping-sidecar``, the Go binary's name, so launchers configured with that path run
this unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import ssl
import sys
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..config import Config
from ..errors import AccessLogError, AdminListenError, BindError
from ..flags import CommandLine, help_text, parse_proxy_command_line, read_command_line
from ..http2.engine import fast_paths_taken
from ..logs import LIFECYCLE, plural, setup_logging
from ..sockets import raise_nofile_limit
from .descriptors import DescriptorWatch, is_shortage
from .heap import HeapTrimmer, settle_collector
from .proxy import Proxy, bind_listener

if TYPE_CHECKING:
    from .siblings import Links

log = logging.getLogger("h2ping")
#: Start and stop lines, written at every -log-level.
lifecycle = logging.getLogger(LIFECYCLE)

#: Runtime knobs of the Go binary; meaningless here, accepted so old launchers work.
_GO_RUNTIME_ENV = ("GOMEMLIMIT", "GOMAXPROCS")
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: SIGINT or SIGTERM before the listening line: nothing was served, nothing drains.
INTERRUPTED = "interrupted during startup: exiting"


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM before the loop's handlers: stop as Ctrl-C does, not silently."""
    raise KeyboardInterrupt


def _loop_exception_handler(
    descriptors: DescriptorWatch,
) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """asyncio's own report of an error in a callback, through our handler and
    format; a descriptor shortage (asyncio's failed accept) goes to the watch,
    which says it in words instead of a traceback."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        message = str(context.get("message", ""))
        if is_shortage(exc):
            descriptors.shortage("accept" if "accept" in message else message or "a callback")
            return
        if _late_accept_retry(message, exc):
            log.debug("the listener closed before asyncio's retry of accept: nothing to do")
            return
        log.error("unhandled error in the event loop: %s", context.get("message"), exc_info=exc)

    return handle


def _late_accept_retry(message: str, exc: object) -> bool:
    """asyncio's loop answers a failed accept (out of descriptors) by listening
    again a second later, once per failed attempt; a retry that comes after the
    listener closed (at shutdown) fails on the closed socket. Nothing is lost."""
    return (
        isinstance(exc, ValueError)
        and "_start_serving" in message
        and "Invalid file descriptor: -1" in str(exc)
    )


def _reason(exc: OSError) -> str:
    """``address already in use``: the system's words, lowercased as Go prints them
    (from the errno: asyncio wraps its bind errors in a longer text)."""
    code = exc.errno
    if code is not None and code in errno.errorcode:
        text = os.strerror(code)
    else:  # a resolver error: its errno is no errno
        text = exc.strerror or str(exc)
    return text[:1].lower() + text[1:]


def _cannot_bind(exc: BindError) -> str:
    """``cannot bind ADDR: <reason>``, the Go binary's words that launchers key on,
    then what to do about it: the listen address is -listen's to change."""
    hint = {
        errno.EADDRINUSE: "another process has this port: choose another with -listen",
        errno.EACCES: "not allowed to bind this port: choose another with -listen",
        errno.EADDRNOTAVAIL: "no interface of this host has this address: check -listen",
    }.get(exc.errno or 0, "check -listen")
    return f"cannot bind {exc.address}: {_reason(exc)} ({hint})"


def write_ready_file(path: str) -> bool:
    """Write our PID and a newline to ``path`` for a supervisor, all at once (a
    reader never sees an empty file). Logs why not and returns False on failure."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w") as file:
            file.write(f"{os.getpid()}\n")
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        log.error("cannot write -ready-file %s: %s", path, _reason(exc))
        return False
    return True


def remove_ready_file(path: str | None) -> None:
    """Remove the ready file if it is still ours (a successor may have written its own)."""
    if path is None:
        return
    with contextlib.suppress(OSError):
        with open(path) as file:
            if file.read() != f"{os.getpid()}\n":
                return
        os.unlink(path)


async def serve(
    config: Config,
    sock: socket.socket | None = None,
    started: Callable[[], None] | None = None,
    links: Links | None = None,
) -> int:
    """Run until SIGINT/SIGTERM, then drain. Returns the process exit code.

    A worker passes the listening ``sock`` its parent bound, ``started`` to report
    that it serves, and its ``links`` to the others; a single process binds here
    and writes the ready file.
    """
    proxy = Proxy(config)
    descriptors = proxy.descriptors
    asyncio.get_running_loop().set_exception_handler(_loop_exception_handler(descriptors))
    stopping = asyncio.Event()
    # Before binding, so that a signal during startup still means "exit 0", cleanly.
    announced = asyncio.Event()  # the listening line is out
    _handle_signals(config, proxy, stopping, announced)
    if not await _start(config, proxy, sock, links):
        return 1
    # A signal that came while it started, its handler not run yet (start may not
    # have waited at all): one loop turn reads it, the next runs the handler.
    for _ in range(2):
        await asyncio.sleep(0)
    if stopping.is_set():  # a signal came while it started: it never said it listens
        await proxy.stop()
        return 0
    try:
        with _housekeeping(descriptors):
            return await _serve_until_stopped(config, proxy, stopping, started, announced)
    finally:
        remove_ready_file(config.ready_file)


def _handle_signals(
    config: Config, proxy: Proxy, stopping: asyncio.Event, announced: asyncio.Event
) -> None:
    """Install the handlers of the stop signals and of SIGHUP, then let them in."""
    loop = asyncio.get_running_loop()
    for signum in _STOP_SIGNALS:
        loop.add_signal_handler(signum, _on_stop_signal, signum, config, proxy, stopping, announced)
    if config.access_log not in (None, "-"):
        # Log rotation; without an access-log file SIGHUP keeps its default.
        loop.add_signal_handler(signal.SIGHUP, proxy.reopen_logs)
    # A worker starts with these blocked, so that none arrives before the handlers.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (*_STOP_SIGNALS, signal.SIGHUP))


def _on_stop_signal(
    signum: int, config: Config, proxy: Proxy, stopping: asyncio.Event, announced: asyncio.Event
) -> None:
    """A first SIGINT/SIGTERM starts the drain (or, before the listening line, the
    exit); a second one exits at once with 1."""
    if stopping.is_set():
        lifecycle.warning("second %s: exiting now", signal.Signals(signum).name)
        remove_ready_file(config.ready_file)
        logging.shutdown()
        os._exit(1)
    if not announced.is_set():  # before the listening line: no client was told to come
        lifecycle.info(INTERRUPTED)
        stopping.set()
        return
    lifecycle.info(
        "%s: draining %s (up to %gs)",
        signal.Signals(signum).name,
        plural(proxy.in_flight, "in-flight request"),
        config.shutdown_grace,
    )
    stopping.set()


async def _start(
    config: Config, proxy: Proxy, sock: socket.socket | None, links: Links | None
) -> bool:
    """Start the proxy, or log why it cannot (each such reason is exit code 1)."""
    try:
        await proxy.start(sock, links)
    except ssl.SSLError as exc:  # an OSError too, but not the listener's
        log.error("ca-file %s: %s", config.ca_file, exc.reason or exc)
        return False
    except BindError as exc:
        log.error("%s", _cannot_bind(exc))
        return False
    except AccessLogError as exc:
        log.error("cannot open -access-log %s: %s", exc.path, _reason(exc))
        return False
    except AdminListenError as exc:  # not "cannot bind": that is the launcher's -listen hint
        log.error("cannot serve -admin-listen on %s: %s", exc.address, _reason(exc))
        return False
    return True


@contextlib.contextmanager
def _housekeeping(descriptors: DescriptorWatch) -> Iterator[None]:
    """Give freed memory back and watch the descriptors while the proxy serves."""
    # Process-wide, like the open-file limit: here and not in Proxy, which others embed.
    settle_collector()
    trimmer = HeapTrimmer()
    trimmer.start()
    descriptors.start()
    try:
        yield
    finally:
        trimmer.stop()
        descriptors.stop()


async def _serve_until_stopped(
    config: Config,
    proxy: Proxy,
    stopping: asyncio.Event,
    started: Callable[[], None] | None,
    announced: asyncio.Event,
) -> int:
    """Say the proxy is ready, serve until a stop signal, drain, and return the exit code."""
    if config.ready_file is not None and not write_ready_file(config.ready_file):
        await proxy.stop(grace=0)
        return 1
    _warn_about_settings(config, proxy)
    via = config.upstream_proxy
    through = f" through proxy {via.address}" if via is not None else ""
    lifecycle.info(
        "listening on %s -> %s%s", proxy.listen_address, config.upstream.display, through
    )
    announced.set()
    log.info("capacity: %s", _capacity_text(config, proxy))
    if proxy.admin is not None:
        lifecycle.info("admin endpoint on %s: /healthz /readyz /metrics", proxy.admin.address)
    if started is not None:
        started()
    # After the ready line and file, which launchers wait for: a dial never delays them.
    proxy.warm_up()
    await stopping.wait()
    await proxy.stop()
    lifecycle.info("stopped: %s", proxy.summary())
    return 0


def _capacity_text(config: Config, proxy: Proxy) -> str:
    """How many requests can be in flight at once: one client connection each."""
    assert proxy.capacity is not None  # the proxy has started
    text = proxy.capacity.describe()
    if config.workers > 1 and proxy.capacity.limit >= 0:
        total = proxy.capacity() * config.workers
        text = f"{text}; about {total:,} in all {config.workers} workers"
    return f"{text}; more wait in the listen queue"


def _warn_about_settings(config: Config, proxy: Proxy) -> None:
    """Warn of the settings that put the upstream at risk, before the listening line."""
    if not config.listen.is_loopback:
        log.warning(
            "listen address %s is not loopback and h2ping has no authentication: "
            "anyone who can reach it can use your upstream",
            proxy.listen_address,
        )
    admin = proxy.admin
    if config.admin_listen is not None and not config.admin_listen.is_loopback:
        log.warning(
            "admin address %s is not loopback and h2ping has no authentication: "
            "anyone who can reach it can read its metrics",
            admin.address if admin is not None else config.admin_listen,
        )
    if config.insecure_skip_verify:
        log.warning("insecure-skip-verify is on: upstream TLS certificates are NOT checked")


def _serve_worker(
    config: Config, sock: socket.socket, started: Callable[[], None], links: Links | None
) -> int:
    """A forked worker's life: its own log setup, then :func:`serve` on the parent's socket."""
    setup_logging(config)  # the worker's own name in its lines
    return _run(serve(config, sock, started, links))


def _run(coro: Coroutine[Any, Any, int]) -> int:
    """Run ``coro`` on uvloop where it is installed, else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def _run_workers(config: Config) -> int:
    """The parent of ``-workers N``: binds the one socket, forks, writes the ready file."""
    from .workers import run_workers  # not needed by a single process

    fast_paths_taken()  # probed once, here: the workers inherit the outcome
    try:
        sock = bind_listener(config.listen)
    except BindError as exc:
        log.error("%s", _cannot_bind(exc))
        return 1
    # The workers write no ready file of their own: the parent is the process started.
    workers = config.replace(ready_file=None)
    path = config.ready_file
    try:
        return run_workers(
            workers, sock, _serve_worker, lambda: path is None or write_ready_file(path)
        )
    finally:
        remove_ready_file(path)


def main(argv: Sequence[str] | None = None) -> int:
    """The command: parse the flags, set up logging, serve; returns the exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    prog = os.path.basename(sys.argv[0]) if argv is None else "h2ping"
    if prog in ("__main__.py", "-c"):
        prog = "python -m h2ping"
    # A bare first word ends Go's flags at once: no Go command line starts with one,
    # so there it names a command (the parser refuses one it does not know).
    if args[:1] == ["check"]:
        from ..check import main as check  # only the check needs it

        return check(args[1:], prog)
    command_line = read_command_line(parse_proxy_command_line, args, prog, help_text, prog)
    if isinstance(command_line, int):
        return command_line
    config = command_line.config
    # Until serve() installs its handlers: a SIGTERM then says why the process ends.
    signal.signal(signal.SIGTERM, _interrupt)
    setup_logging(config)
    # Each in-flight request holds a client socket; a process-wide choice, so here
    # and not in Proxy, which other programs embed.
    raise_nofile_limit()
    _log_flag_notes(command_line)
    return _serve_to_exit_code(config)


def _log_flag_notes(command_line: CommandLine) -> None:
    """Log the parser's notes on the flags and the Go runtime variables ignored here."""
    for note in command_line.notes:
        log.warning("%s", note)
    ignored = [name for name in _GO_RUNTIME_ENV if os.environ.get(name)]
    if ignored:
        log.info("ignoring %s: Go runtime settings, meaningless here", " and ".join(ignored))


def _serve_to_exit_code(config: Config) -> int:
    """Serve in one process or as workers and return the exit code, also when something escapes."""
    try:
        if config.workers > 1:
            return _run_workers(config)
        return _run(serve(config))
    except KeyboardInterrupt:  # a signal before serve() installed its handlers
        lifecycle.info(INTERRUPTED)
        return 0
    except Exception as exc:
        # A bug of ours. Launchers show the tail of the log: end it with one clear line.
        log.error("internal error", exc_info=True)
        log.error("exiting after an unexpected error: %s: %s", type(exc).__name__, exc)
        return 1
    finally:
        remove_ready_file(config.ready_file)


if __name__ == "__main__":
    sys.exit(main())
