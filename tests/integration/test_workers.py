"""--workers N: processes serving one listening socket, each with its own upstream pool."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import stat
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import aiohttp
import pytest

from h2ping.config import Config, parse_listen, parse_upstream
from h2ping.process.proxy import bind_listener
from h2ping.process.siblings import Links
from h2ping.process.workers import RunOne, run_workers
from h2ping.testing import ScriptedUpstream

from ..conftest import (
    assert_not_accepting,
    free_port,
    held_a_second,
    one_request_alone,
    scrape_metrics,
    wait_for_port,
)
from ..launcher import (
    H2PING_SIDECAR,
    StartFailed,
    h2ping_subprocess,
    launch,
    running,
    stop_with_two_signals,
)

# The loop here only runs the test's clients; the process under test picks its own.
ONE_LOOP = pytest.mark.asyncio(loop_factories=["uvloop"])


@contextlib.asynccontextmanager
async def workers_process(
    port: int, upstream: str, workers: int, *, start_new_session: bool = False
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``h2ping -workers N`` with its stderr piped; killed on the way out if still running."""
    async with h2ping_subprocess(
        "-listen", f"127.0.0.1:{port}", "-upstream", upstream, "-workers", str(workers),
        start_new_session=start_new_session,
    ) as proc:  # fmt: skip
        yield proc


async def startup_lines(proc: asyncio.subprocess.Process, workers: int) -> list[bytes]:
    """Each worker's ``listening on`` line; every line before the last of them must be
    one of those or a worker's ``capacity:`` line, which follows its own."""
    assert proc.stderr is not None
    lines: list[bytes] = []
    while len(lines) < workers:
        line = await asyncio.wait_for(proc.stderr.readline(), 10)
        assert b"listening on" in line or b": capacity: " in line, line
        if b"listening on" in line:
            lines.append(line)
    return lines


@ONE_LOOP
async def test_two_workers_share_the_port_and_drain_on_sigterm() -> None:
    async with ScriptedUpstream() as up:
        port = free_port()
        async with workers_process(port, up.url, 2) as proc:
            lines = [line.decode() for line in await startup_lines(proc, 2)]
            assert "/1: listening on" in "".join(lines) and "/2: listening on" in "".join(lines)
            await wait_for_port(port)
            # Separate client connections: the kernel spreads them over the workers.
            for _ in range(40):
                async with aiohttp.ClientSession() as session:
                    async with session.post(f"http://127.0.0.1:{port}/w", data=b"x") as resp:
                        assert resp.status == 200
                        assert await resp.read() == b"x"
                if len(up.connections) >= 2:
                    break
            # Each worker has its own pool, so two workers mean two upstream connections.
            assert len(up.connections) == 2
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 10) == 0


@ONE_LOOP
async def test_workers_exit_1_when_the_port_is_taken() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with workers_process(port, "https://127.0.0.1:1", 3) as proc:
            _, stderr = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 1
    [line] = stderr.decode().splitlines()  # the parent's: no worker was started
    assert f"cannot bind 127.0.0.1:{port}: address already in use (" in line, line
    assert line.endswith("choose another with -listen)"), line


def worker_flags(port: int, upstream: str, ready: Path, workers: int = 2) -> list[str]:
    return [
        "-listen", f"127.0.0.1:{port}", "-upstream", upstream,
        "-workers", str(workers), "-ready-file", str(ready),
    ]  # fmt: skip


@ONE_LOOP
async def test_a_second_instance_cannot_join_the_port(tmp_path: Path) -> None:
    """Only the workers of one instance share a socket: a second ``-workers 2`` on
    the same port fails to bind instead of taking half the connections."""
    async with ScriptedUpstream() as first_up, ScriptedUpstream() as second_up:
        port = free_port()
        async with running(
            [H2PING_SIDECAR, *worker_flags(port, first_up.url, tmp_path / "1.ready")],
            log=tmp_path / "1.log", ready_file=tmp_path / "1.ready",
        ) as first:  # fmt: skip
            with pytest.raises(StartFailed) as failed:
                await launch(
                    [H2PING_SIDECAR, *worker_flags(port, second_up.url, tmp_path / "2.ready")],
                    log=tmp_path / "2.log", ready_file=tmp_path / "2.ready",
                )  # fmt: skip
            assert failed.value.code == 1
            assert f"cannot bind 127.0.0.1:{port}: address already in use" in failed.value.tail
            assert not (tmp_path / "2.ready").exists()
            for _ in range(20):  # separate connections, spread over the first's workers
                async with aiohttp.ClientSession() as session:
                    async with session.post(f"http://127.0.0.1:{port}/w", data=b"x") as resp:
                        assert resp.status == 200
            assert not second_up.connections
            assert await first.terminate() == 0


@ONE_LOOP
async def test_the_ready_file_waits_for_every_worker(tmp_path: Path) -> None:
    ready = tmp_path / "w.ready"
    async with ScriptedUpstream() as up:
        # Port 0 works too: the parent binds it once, the workers share what it got.
        async with running(
            [H2PING_SIDECAR, *worker_flags(0, up.url, ready, workers=3)],
            log=tmp_path / "w.log", ready_file=ready,
        ) as launched:  # fmt: skip
            assert ready.read_text() == f"{launched.pid}\n"  # the process that was started
            lines = [ln for ln in launched.log_text().splitlines() if "listening on" in ln]
            assert sorted(ln.split(" h2ping ")[1].split(":")[0] for ln in lines) == [
                "127.0.0.1/1", "127.0.0.1/2", "127.0.0.1/3",
            ]  # fmt: skip
            ports = {ln.split("listening on 127.0.0.1:")[1].split(" ")[0] for ln in lines}
            [port] = ports
            await wait_for_port(int(port))
            assert await launched.terminate() == 0
            assert not ready.exists()


@ONE_LOOP
async def test_workers_ready_file_removed_on_a_second_signal(tmp_path: Path) -> None:
    arrived = asyncio.Event()

    async def hang(request: object) -> None:
        arrived.set()
        await asyncio.sleep(30)

    ready = tmp_path / "w.ready"
    port = free_port()
    async with ScriptedUpstream(hang) as up, aiohttp.ClientSession() as session:
        async with running(
            [H2PING_SIDECAR, *worker_flags(port, up.url, ready)],
            log=tmp_path / "w.log", ready_file=ready,
        ) as launched:  # fmt: skip
            request = asyncio.create_task(session.get(f"http://127.0.0.1:{port}/hang"))
            await asyncio.wait_for(arrived.wait(), 10)
            # The worker with the request drains (60 s grace) until the second signal.
            assert await stop_with_two_signals(launched) == 1
            assert not ready.exists()
            request.cancel()


@ONE_LOOP
async def test_workers_stop_when_the_ready_file_cannot_be_written(tmp_path: Path) -> None:
    ready = tmp_path / "missing-dir" / "w.ready"
    port = free_port()
    async with ScriptedUpstream() as up:
        with pytest.raises(StartFailed) as failed:
            await launch(
                [H2PING_SIDECAR, *worker_flags(port, up.url, ready)],
                log=tmp_path / "w.log", ready_file=ready,
            )  # fmt: skip
    assert failed.value.code == 1
    assert f"cannot write -ready-file {ready}: no such file or directory" in failed.value.tail
    await assert_not_accepting(port, "the workers after the failed start")


@ONE_LOOP
async def test_ctrl_c_to_the_process_group_drains_once() -> None:
    """A terminal's Ctrl-C goes to the whole foreground process group: every
    worker must still drain and exit 0, not take it as a second signal."""
    async with ScriptedUpstream() as up:
        port = free_port()
        async with workers_process(port, up.url, 2, start_new_session=True) as proc:
            await startup_lines(proc, 2)
            os.killpg(proc.pid, signal.SIGINT)  # what the terminal does
            _, rest = await asyncio.wait_for(proc.communicate(), 10)
            assert proc.returncode == 0, rest.decode()
            assert rest.count(b"stopped: requests=") == 2, rest.decode()
            assert b"exiting now" not in rest


@ONE_LOOP
async def test_workers_die_with_their_parent() -> None:
    async with ScriptedUpstream() as up:
        port = free_port()
        async with workers_process(port, up.url, 2) as proc:
            await startup_lines(proc, 2)
            proc.kill()  # SIGKILL: the parent cannot forward anything
            await proc.wait()
        for _ in range(50):
            await asyncio.sleep(0.1)
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return  # no worker left listening
            writer.close()
        raise AssertionError("workers kept running after their parent was killed")


def stopped_lines(log: str) -> list[dict[str, int]]:
    """Each worker's shutdown summary (``stopped: requests=3 completed=3 ...``), its counts."""
    out = []
    for line in log.splitlines():
        if "stopped: " in line:
            pairs = (part.split("=", 1) for part in line.split("stopped: ", 1)[1].split())
            out.append({name: int(value) for name, value in pairs if value.isdigit()})
    return out


@ONE_LOOP
async def test_metrics_add_up_every_worker(tmp_path: Path) -> None:
    """/metrics is served by worker 1 and counts what every worker did: a scrape right
    after the traffic counts each request once, whichever worker served it."""
    ready = tmp_path / "w.ready"
    port, admin = free_port(), free_port()
    metrics_url = f"http://127.0.0.1:{admin}/metrics"
    async with ScriptedUpstream() as up, aiohttp.ClientSession() as scraper:
        async with running(
            [H2PING_SIDECAR, *worker_flags(port, up.url, ready),
             "-admin-listen", f"127.0.0.1:{admin}",
             # PINGs while idle, and idle connections closed soon, so that the
             # counts stand still once the traffic has stopped.
             "-ping-interval", "100ms", "-idle-conn-timeout", "700ms",
             # Both workers append to one access log.
             "-access-log", str(tmp_path / "access.log"), "-log-format", "json"],
            log=tmp_path / "w.log", ready_file=ready,
        ) as launched:  # fmt: skip
            sent = 0
            # Each request on a new client connection, so the kernel spreads them; with
            # its own pool, each worker that served opens its own upstream connection.
            while sent < 40 or len(up.connections) < 2:
                assert sent < 400, "every client connection went to one worker"
                async with aiohttp.ClientSession() as session:
                    async with session.post(f"http://127.0.0.1:{port}/w", data=b"x") as resp:
                        assert resp.status == 200
                sent += 1
            right_after = await scrape_metrics(scraper, metrics_url)
            await up.wait_for(lambda: all(conn.closed for conn in up.connections), 10)
            quiet = await scrape_metrics(scraper, metrics_url)
            assert await launched.terminate() == 0
    assert right_after[("h2ping_requests_total", "outcome=ok")] == sent
    assert right_after[("h2ping_responses_total", "status_class=2xx")] == sent
    assert right_after[("h2ping_requests_in_flight", "")] == 0
    # The latency histograms add up bucket by bucket, as the counters do.
    assert right_after[("h2ping_request_duration_seconds_count", "outcome=ok")] == sent
    assert right_after[("h2ping_request_duration_seconds_bucket", "le=+Inf,outcome=ok")] == sent
    assert right_after[("h2ping_upstream_headers_seconds_count", "")] == sent
    assert right_after[("h2ping_access_log_dropped_total", "")] == 0
    assert right_after[("h2ping_workers", "")] == 2
    assert right_after[("h2ping_workers_reporting", "")] == 2
    fast = {labels: v for (name, labels), v in right_after.items() if name == "h2ping_fast_path"}
    assert fast and set(fast.values()) == {1}, fast  # per path the least of the workers'
    [info] = [labels for name, labels in right_after if name == "h2ping_info"]
    assert "instance=127.0.0.1," in info, info  # the instance's name, not worker 1's
    # What each worker says it did when it stops, added up, is what the scrape said.
    workers = stopped_lines(launched.log_text())
    assert len(workers) == 2 and all(w["completed"] > 0 for w in workers), workers
    assert sum(w["completed"] for w in workers) == sent
    opened = quiet[("h2ping_upstream_connections_opened_total", "")]
    assert opened == sum(w["connections_opened"] for w in workers) == len(up.connections)
    assert quiet[("h2ping_upstream_connections", "state=open")] == 0
    pings = quiet[("h2ping_pings_sent_total", "")]
    assert pings == sum(w["pings_sent"] for w in workers) > 0
    acks = quiet[("h2ping_ping_acks_total", "")]
    assert acks == sum(w["ping_acks"] for w in workers) > 0
    assert quiet[("h2ping_ping_rtt_seconds_count", "")] == acks
    assert quiet[("h2ping_ping_rtt_seconds_bucket", "le=+Inf")] == acks
    # Every request has one whole line in the shared access log, from either worker.
    lines = [json.loads(line) for line in (tmp_path / "access.log").read_text().splitlines()]
    assert len(lines) == sent
    assert {line["instance"] for line in lines} == {"127.0.0.1/1", "127.0.0.1/2"}
    assert all(line["path"] == "/w" and line["status"] == 200 for line in lines)


# --- run_workers itself, with stand-in workers forked from the test process -----------


@pytest.fixture
def parent_signals() -> Iterator[None]:
    """run_workers installs the parent's signal forwarding: put the handlers back."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def stand_in(tmp_path: Path, code: int = 0) -> RunOne:
    """A worker that takes longer to start the higher its index, and says when it has."""

    def run_one(
        config: Config, sock: socket.socket, started: Callable[[], None], links: Links | None
    ) -> int:
        index = int(config.name.rsplit("/", 1)[1])
        time.sleep(0.2 * index)
        (tmp_path / f"started-{index}").touch()
        started()
        time.sleep(0.3)
        return code if index == 2 else 0

    return run_one


def three_workers() -> tuple[Config, socket.socket]:
    config = Config(upstream=parse_upstream("https://h"), listen=parse_listen("127.0.0.1:0"))
    return config.replace(workers=3), bind_listener(config.listen)


def test_ready_only_once_every_worker_has_started(tmp_path: Path, parent_signals: None) -> None:
    seen: list[list[str]] = []

    def on_ready() -> bool:
        seen.append(sorted(path.name for path in tmp_path.glob("started-*")))
        return True

    config, sock = three_workers()
    assert run_workers(config, sock, stand_in(tmp_path), on_ready) == 0
    assert seen == [["started-1", "started-2", "started-3"]]


def test_a_failed_on_ready_or_worker_is_the_exit_code(tmp_path: Path, parent_signals: None) -> None:
    config, sock = three_workers()
    assert run_workers(config, sock, stand_in(tmp_path), lambda: False) == 1
    config, sock = three_workers()
    assert run_workers(config, sock, stand_in(tmp_path, code=3), lambda: True) == 3


def socket_inodes() -> set[int]:
    """The sockets this process holds, by inode."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            st = os.stat(f"/proc/self/fd/{fd}")
            if stat.S_ISSOCK(st.st_mode):
                inodes.add(st.st_ino)
    return inodes


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_each_link_end_is_held_by_its_worker_alone(tmp_path: Path, parent_signals: None) -> None:
    """With -admin-listen, worker 1 holds one socketpair end per other worker, and that
    worker the other end. A copy held anywhere else (the parent, a third worker) would
    hide from worker 1 that the worker has exited."""

    def run_one(
        config: Config, sock: socket.socket, started: Callable[[], None], links: Links | None
    ) -> int:
        index = int(config.name.rsplit("/", 1)[1])
        assert links is not None and links.workers == 3 and links.instance == "h"
        ours = [links.answer_on] if links.answer_on is not None else list(links.ask.values())
        (tmp_path / f"worker-{index}").write_text(
            json.dumps([[os.fstat(end.fileno()).st_ino for end in ours], sorted(socket_inodes())])
        )
        started()
        if index == 2:
            return 0  # gone at once
        if index == 3:
            time.sleep(3)  # still running while worker 1 waits for worker 2's EOF
            return 0
        assert links.answer_on is None and sorted(links.ask) == [2, 3]
        links.ask[2].settimeout(2)
        try:
            eof = links.ask[2].recv(1) == b""
        except TimeoutError:
            eof = False
        return 0 if eof else 7

    config, sock = three_workers()
    config = config.replace(admin_listen=parse_listen("127.0.0.1:0"))
    assert run_workers(config, sock, run_one, lambda: True) == 0
    seen = {index: json.loads((tmp_path / f"worker-{index}").read_text()) for index in (1, 2, 3)}
    assert [len(seen[index][0]) for index in (1, 2, 3)] == [2, 1, 1]
    for index, (_, held) in seen.items():
        others = {inode for other, (own, _) in seen.items() if other != index for inode in own}
        assert not others & set(held), f"worker {index} holds another worker's end"
    every_end = {inode for own, _ in seen.values() for inode in own}
    assert not every_end & socket_inodes(), "the parent kept a link end"


#: Each worker's descriptor limit in the burst test: room for about 170 clients each.
BURST_LIMIT = 200
BURST_CLIENTS = 300  # more than one worker holds, fewer than two


@ONE_LOOP
async def test_a_burst_is_shared_so_no_worker_runs_out(tmp_path: Path) -> None:
    """Clients arriving all at once, each on its own connection, while every response
    is held a second: more than one worker can hold, so both take a share, none runs
    out of descriptors, and every request is answered."""
    import resource

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (BURST_LIMIT, BURST_LIMIT))

    ready = tmp_path / "w.ready"
    port = free_port()
    async with ScriptedUpstream(held_a_second) as up:
        async with running(
            [H2PING_SIDECAR, *worker_flags(port, up.url, ready)],
            log=tmp_path / "w.log", ready_file=ready, preexec_fn=low_limit,
        ) as launched:  # fmt: skip
            url = f"http://127.0.0.1:{port}/burst"
            answers = await asyncio.gather(*(one_request_alone(url) for _ in range(BURST_CLIENTS)))
            assert await launched.terminate() == 0
            text = launched.log_text()
    assert answers == [(200, "ok")] * BURST_CLIENTS, text[-3000:]
    assert "out of file descriptors" not in text and "Traceback" not in text, text
    capacities = [int(line.split(": capacity: ")[1].split()[0]) for line in text.splitlines()
                  if ": capacity: " in line]  # fmt: skip
    served = [int(line.split(" requests=")[1].split()[0]) for line in text.splitlines()
              if ": stopped: " in line]  # fmt: skip
    assert len(capacities) == 2 and sum(capacities) >= BURST_CLIENTS > max(capacities)
    assert sum(served) == BURST_CLIENTS and min(served) > 0, (served, capacities)
