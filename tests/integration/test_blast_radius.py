"""The blast radius of one request is that request: however it fails, a request
sharing its upstream connection, started before it, completes byte for byte.

The victim is a POST whose echo the scripted upstream (real HTTP/2 over TLS) has
half sent when the other request arrives, and finishes once that other request
has its answer. The other request comes from a raw socket, as a client writes it
(oversized heads, bad chunk sizes, trailers, pipelining, a client that vanishes
or stops reading), and the server answers it as scripted (its echo, RST_STREAM,
REFUSED_STREAM, 431, a GOAWAY with or without an error code, PINGs and SETTINGS
meanwhile). Both share one upstream connection: one is all there is when the
other arrives (the pool takes the oldest with a free slot), which the test
checks on the server's side.

The first tests are one case each; the last draws the other request and the
server's answer from a grammar of shapes (hypothesis), and asserts that the
victim always completes byte for byte and the other request gets the answer the
rules give it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from h2ping import Proxy
from h2ping.testing import ScriptedConnection, ScriptedRequest, ScriptedUpstream

from ..conftest import TLSFiles, assert_nothing_left, wait_until
from ..fuzz.fuzz_harness import LOOP_KINDS, Harness, parse_responses

#: The scripted upstream's SETTINGS_MAX_HEADER_LIST_SIZE (h2's default).
UPSTREAM_LIST_LIMIT = 65536
#: h2ping's own limits on a request head: its bytes, its fields.
OWN_HEAD_BYTES = 64 * 1024
OWN_FIELDS = 256
#: RFC 9113 6.5.2: each field counts 32 bytes besides its name and value.
FIELD_OVERHEAD = 32
VICTIM_BODY = 96 * 1024  # echoed in two halves; the second waits for the other's answer
BIG_RESPONSE = 8 * 1024 * 1024  # what a client that stops reading is sent
#: How long the other request's client waits for its answer.
ANSWER_WITHIN = 10.0
#: How long a response that its client does not read may take to stall.
STALL_WITHIN = 5.0

# What the other request's head is, by its size.
SMALL = "small"
AT_UPSTREAM_LIMIT = "at-upstream-limit"  # exactly SETTINGS_MAX_HEADER_LIST_SIZE
OVER_UPSTREAM_LIMIT = "over-upstream-limit"  # one byte over it, within h2ping's own limits
OVER_OWN_FIELDS = "over-own-fields"
OVER_OWN_BYTES = "over-own-bytes"
HEADS = [SMALL, AT_UPSTREAM_LIMIT, OVER_UPSTREAM_LIMIT, OVER_OWN_FIELDS, OVER_OWN_BYTES]

# How its body is framed.
LENGTH, CHUNKED, BAD_CHUNK, LENGTH_AND_CHUNKED = "length", "chunked", "bad-chunk", "cl+te"
FRAMINGS = [LENGTH, CHUNKED, BAD_CHUNK, LENGTH_AND_CHUNKED]

# Its trailer fields (chunked framing only): none, a few, 200 of 300 bytes (over
# the upstream's header list limit, were they sent as header fields), and more
# than a head may have (with its fields).
NO_TRAILERS, FEW_TRAILERS, LARGE_TRAILERS, MANY_TRAILERS = "none", "few", "large", "many"
TRAILERS = {
    NO_TRAILERS: b"",
    FEW_TRAILERS: b"X-Injected: yes\r\nAuthorization: Bearer stolen\r\nTE: trailers\r\n",
    LARGE_TRAILERS: b"".join(b"X-Trailer-%d: %s\r\n" % (i, b"t" * 300) for i in range(200)),
    MANY_TRAILERS: b"".join(b"X-Trailer-%d: t\r\n" % i for i in range(OWN_FIELDS)),
}

# Where its client goes away, if it does.
STAYS = "stays"
MID_BODY = "mid-body"  # half the body sent, then gone
AFTER_REQUEST = "after-request"  # all sent, gone before the answer
MID_RESPONSE = "mid-response"  # gone after the first bytes of the answer
STOPS_READING = "stops-reading"  # reads nothing until the victim has completed
DISCONNECTS = [STAYS, MID_BODY, AFTER_REQUEST, MID_RESPONSE, STOPS_READING]

# What the server does with it (on its first arrival; a replay is echoed).
ECHO = "echo"
RESET = "reset"  # RST_STREAM INTERNAL_ERROR
REFUSE = "refuse"  # RST_STREAM REFUSED_STREAM: never processed
TOO_LARGE = "431"  # answered 431 at once, its body unread
GOAWAY_BELOW = "goaway-below"  # GOAWAY naming the victim's stream: the other is replayed
GOAWAY_COVERING = "goaway-covering"  # GOAWAY naming the other's stream: both finish here
ANSWERS = [ECHO, RESET, REFUSE, TOO_LARGE, GOAWAY_BELOW, GOAWAY_COVERING]

#: Stands for a response cut by a TCP reset (see run_other).
RESET_BY_PROXY = -1

# A control frame the server sends around its answer.
CONTROLS = ["none", "ping", "settings"]


@dataclass(frozen=True)
class Other:
    """The other request, as its client sends it (raw bytes)."""

    head: str = SMALL
    framing: str = LENGTH
    body: int = 1000
    trailers: str = NO_TRAILERS  # (chunked framing only)
    pipelined: bool = False  # behind a small GET, in the same write
    disconnect: str = STAYS


@dataclass(frozen=True)
class Answer:
    """What the server does with the other request."""

    kind: str = ECHO
    goaway_error: int = ErrorCodes.NO_ERROR
    control: str = "none"


@dataclass
class Outcome:
    """What happened, on both sides."""

    victim_status: int = 0
    victim_body: bytes = b""
    victim_sent: bytes = b""
    victim_connection: int = 0
    other_connections: list[int] = field(default_factory=list)  # where it arrived, in order
    responses: list[tuple[int, bytes]] = field(default_factory=list)  # the other client's
    connections: int = 0  # the upstream connections h2ping opened
    written: Written | None = None


def rfc_size(fields: list[tuple[bytes, bytes]]) -> int:
    return sum(len(name) + len(value) + FIELD_OVERHEAD for name, value in fields)


@dataclass(frozen=True)
class Written:
    """The other request's bytes (a pipelined GET first, if any)."""

    data: bytes
    body: bytes
    head_end: int  # where its head ends in ``data``
    fields: int  # its head's fields and trailer fields, as h2ping counts them
    size: int  # its head's and trailers' bytes, about as h2ping counts them


def other_request(other: Other, port: int) -> Written:
    body = os.urandom(other.body)
    path = b"/other"
    fields: list[tuple[bytes, bytes]] = [(b"x-role", b"other")]
    if other.disconnect == STOPS_READING:
        fields.append((b"x-big", b"1"))  # a response larger than any buffer on the way
    if other.framing in (LENGTH, LENGTH_AND_CHUNKED):
        fields.append((b"content-length", b"%d" % len(body)))
    head_fields = list(fields)
    if other.framing in (CHUNKED, BAD_CHUNK, LENGTH_AND_CHUNKED):
        head_fields.append((b"transfer-encoding", b"chunked"))
    head_fields.append((b"connection", b"close"))
    if other.head == OVER_OWN_FIELDS:
        head_fields += [(b"x-f%d" % i, b"v") for i in range(OWN_FIELDS + 1)]
    elif other.head == OVER_OWN_BYTES:
        head_fields += [(b"x-f%d" % i, b"v" * 4000) for i in range(17)]
    elif other.head in (AT_UPSTREAM_LIMIT, OVER_UPSTREAM_LIMIT):
        # What the upstream receives: the pseudo-header fields and the fields
        # that are not the connection's (host, connection, transfer-encoding).
        forwarded = [
            (b":method", b"POST"),
            (b":scheme", b"https"),
            (b":authority", b"127.0.0.1:%d" % port),
            (b":path", path),
            *fields,
        ]
        filler = [(b"x-f%d" % i, b"v" * 1500) for i in range(40)]
        target = UPSTREAM_LIST_LIMIT + (other.head == OVER_UPSTREAM_LIMIT)
        last_name = b"x-last"
        room = target - rfc_size(forwarded + filler) - len(last_name) - FIELD_OVERHEAD
        head_fields += [*filler, (last_name, b"v" * room)]
    head = b"POST %s HTTP/1.1\r\nHost: x\r\n" % path
    head += b"".join(b"%s: %s\r\n" % f for f in head_fields) + b"\r\n"
    trailers = TRAILERS[other.trailers] if other.framing == CHUNKED else b""
    if other.framing == LENGTH:
        data = head + body
    else:
        half = len(body) // 2
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:half], body[half:]) if p)
        if other.framing == BAD_CHUNK:
            chunks = b"%x\r\n%s\r\n" % (half or 1, body[:half] or b"x") + b"zz\r\n"
        data = head + chunks + b"0\r\n" + trailers + b"\r\n"
    first = b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n" if other.pipelined else b""
    return Written(
        data=first + data,
        body=body,
        head_end=len(first) + len(head),
        fields=1 + len(head_fields) + trailers.count(b"\r\n"),
        size=len(head) + len(trailers),
    )


def expected(other: Other, answer: Answer, written: Written) -> tuple[set[int], bool] | None:
    """The statuses the rules allow the other request's final answer, and
    whether it must be its echo; None where its client left before one."""
    if other.disconnect in (MID_BODY, AFTER_REQUEST, MID_RESPONSE):
        return None
    # A head at fault is answered here, before anything reaches the upstream;
    # which of two faults is found first is not the rules' business.
    faults = set()
    if other.head in (OVER_OWN_FIELDS, OVER_OWN_BYTES, OVER_UPSTREAM_LIMIT):
        faults.add(431)
    if other.framing == LENGTH_AND_CHUNKED:
        faults.add(400)
    if other.head == OVER_UPSTREAM_LIMIT and other.framing == BAD_CHUNK:
        # Refused once it has a connection (whose limit is the one that counts),
        # which may come after its body was parsed.
        faults.add(400)
    if faults:
        return faults, False
    # The whole request is in one write: a fault in its body is found before
    # the server can answer it.
    if other.framing == BAD_CHUNK:
        return {400}, False
    if written.fields > OWN_FIELDS or written.size > OWN_HEAD_BYTES:
        return {431}, False  # trailers count toward the head's limits
    by_answer = {ECHO: 200, RESET: 502, REFUSE: 200, TOO_LARGE: 431}
    status = by_answer.get(answer.kind, 200)  # a GOAWAY: finished there, or replayed
    return {status}, status == 200 and other.disconnect != STOPS_READING


class Stage:
    """The scripted upstream's handler: the victim held half-answered, the other
    request answered as scripted."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.victim: ScriptedRequest | None = None
        self.victim_midway = asyncio.Event()
        self.finish_victim = asyncio.Event()
        self.others: list[ScriptedRequest] = []
        self.other_arrived = asyncio.Event()

    async def __call__(self, request: ScriptedRequest) -> None:
        if request.header("x-role") == "victim":
            await self._victim(request)
        elif request.path == "/first":
            await request.respond(200, [("content-length", "5")], b"first")
        else:
            self.others.append(request)
            self.other_arrived.set()
            await self._other(request, first=len(self.others) == 1)

    async def _victim(self, request: ScriptedRequest) -> None:
        self.victim = request
        body = await request.body()
        half = len(body) // 2
        await request.send_headers(200, [("content-length", str(len(body)))])
        await request.send_data(body[:half])
        self.victim_midway.set()
        await self.finish_victim.wait()
        await request.send_data(body[half:], end_stream=True)

    async def _other(self, request: ScriptedRequest, first: bool) -> None:
        conn = request.connection
        kind = self.answer.kind if first else ECHO
        self._control(conn)
        if kind == TOO_LARGE:
            await request.respond(431, [("content-length", "9")], b"too large")
            return
        if kind == REFUSE:
            request.reset(ErrorCodes.REFUSED_STREAM)
            return
        if kind in (GOAWAY_BELOW, GOAWAY_COVERING):
            assert self.victim is not None
            below = kind == GOAWAY_BELOW
            last = self.victim.stream_id if below else request.stream_id
            conn.goaway(last, self.answer.goaway_error, b"scripted")
            if below:
                return  # never processed: h2ping replays it
        body = await request.body()
        if kind == RESET:
            request.reset(ErrorCodes.INTERNAL_ERROR)
            return
        if request.header("x-big") is not None:
            body = bytes(BIG_RESPONSE)
        await request.send_headers(200, [("content-length", str(len(body)))])
        self._control(conn)
        await request.send_data(body, end_stream=True)

    def _control(self, conn: ScriptedConnection) -> None:
        if self.answer.control == "ping":
            conn.ping(os.urandom(8))
        elif self.answer.control == "settings":
            conn.update_settings({SettingCodes.MAX_HEADER_LIST_SIZE: UPSTREAM_LIST_LIMIT})


async def victim_call(session: aiohttp.ClientSession, url: str, body: bytes) -> tuple[int, bytes]:
    async with session.post(url + "/victim", data=body, headers={"x-role": "victim"}) as resp:
        return resp.status, await resp.read()


async def stalled(stage: Stage) -> None:
    while not (stage.others and stage.others[-1].stream_window == 0):
        await asyncio.sleep(0.01)


async def read_all(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """Everything up to the close, and whether the close was a reset."""
    data = bytearray()
    try:
        while chunk := await reader.read(65536):
            data += chunk
    except ConnectionResetError:
        return bytes(data), True
    return bytes(data), False


async def run_other(
    other: Other,
    stage: Stage,
    written: Written,
    port: int,
    victim: asyncio.Task[tuple[int, bytes]],
    stalls: bool,
) -> list[tuple[int, bytes]]:
    """Send the other request as its client would; return the responses it read
    (a client that left reads none). ``stalls``: a client that stops reading
    gets a response large enough to stall its stream."""
    data = written.data
    sock = socket.socket()
    if other.disconnect == STOPS_READING:
        # A small receive buffer: what the client does not read stays in h2ping.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        if other.disconnect == MID_BODY:
            writer.write(data[: written.head_end + (len(data) - written.head_end) // 2])
            await writer.drain()
            # Gone once the request reached the upstream, or h2ping refused it.
            waits = [stage.other_arrived.wait(), reader.read(1)]
            done, pending = await asyncio.wait(
                [asyncio.ensure_future(w) for w in waits],
                timeout=ANSWER_WITHIN,
                return_when=asyncio.FIRST_COMPLETED,
            )
            for task in pending:
                task.cancel()
            assert done, "neither forwarded nor refused"
            return []
        writer.write(data)
        await writer.drain()
        if other.disconnect == AFTER_REQUEST:
            return []
        if other.disconnect == MID_RESPONSE:
            await asyncio.wait_for(reader.read(1), ANSWER_WITHIN)
            return []
        if other.disconnect == STOPS_READING:
            if stalls:
                # Its response fills what h2ping may buffer, then its stream's
                # window (not the connection's: then the victim could not go on).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stalled(stage), STALL_WITHIN)
            # The victim completes while this client reads nothing.
            stage.finish_victim.set()
            await asyncio.wait_for(asyncio.shield(victim), ANSWER_WITHIN)
        raw, reset = await asyncio.wait_for(read_all(reader), ANSWER_WITHIN)
    finally:
        writer.close()
    if reset:
        # h2ping refused the request while its client was still sending (a
        # 400 or 431 with the body unread): the close then resets the
        # connection, and the kernel may drop what h2ping had written.
        return [(RESET_BY_PROXY, raw)]
    responses, rest = parse_responses(raw, lambda i, status: False, eof=True)
    assert rest == b"", rest[:200]
    return [(r.status, r.body) for r in responses]


async def run_case(tls: TLSFiles, other: Other, answer: Answer) -> Outcome:
    """One victim, one other request, on one upstream connection; what came of them."""
    stage = Stage(answer)
    outcome = Outcome()
    context = tls.server_context()
    async with ScriptedUpstream(stage, ssl_context=context) as up:
        proxy = Proxy(
            upstream=up.url, listen="127.0.0.1:0", ca_file=tls.ca_file, shutdown_grace=2.0
        )
        await proxy.start()
        try:
            async with aiohttp.ClientSession() as session:
                outcome.victim_sent = os.urandom(VICTIM_BODY)
                victim = asyncio.create_task(victim_call(session, proxy.url, outcome.victim_sent))
                await asyncio.wait_for(stage.victim_midway.wait(), ANSWER_WITHIN)
                written = other_request(other, proxy.port)
                outcome.written = written
                rule = expected(other, answer, written)
                stalls = rule is not None and 200 in rule[0]
                outcome.responses = await run_other(
                    other, stage, written, proxy.port, victim, stalls
                )
                # The other request's end is handled (its client gone, say)
                # before the victim goes on: only the victim's exchange is left.
                await wait_until(lambda: len(proxy.exchanges) <= 1, ANSWER_WITHIN)
                stage.finish_victim.set()
                outcome.victim_status, outcome.victim_body = await asyncio.wait_for(
                    victim, ANSWER_WITHIN
                )
        finally:
            await proxy.stop(grace=2.0)
            await assert_nothing_left(proxy)
        assert stage.victim is not None
        outcome.victim_connection = stage.victim.connection.id
        outcome.other_connections = [r.connection.id for r in stage.others]
        outcome.connections = len(up.connections)
    return outcome


def check(outcome: Outcome, other: Other, answer: Answer) -> None:
    """The rules: the victim complete byte for byte on the first connection, the
    other request's answer the one the rules give, nothing reopened in a loop."""
    assert outcome.victim_status == 200
    assert outcome.victim_body == outcome.victim_sent  # byte for byte
    assert outcome.victim_connection == 1
    if outcome.other_connections:  # it shared the victim's connection
        assert outcome.other_connections[0] == 1
    assert outcome.connections <= 2  # at most one more, for a replay
    responses = outcome.responses
    assert outcome.written is not None
    rule = expected(other, answer, outcome.written)
    if responses and responses[0][0] == RESET_BY_PROXY:
        assert rule is not None and rule[0] <= {400, 431}, rule  # only h2ping's own refusals
        assert responses[0][1][:9] in (b"", b"HTTP/1.1 "), responses[0][1][:100]
        return
    if other.pipelined and responses:
        assert responses[0] == (200, b"first")
        responses = responses[1:]
    if rule is None:
        assert responses == []
        return
    statuses, echoed = rule
    assert len(responses) == 1, outcome.responses
    status, body = responses[0]
    assert status in statuses, (status, statuses)
    if echoed:
        assert body == outcome.written.body
    if other.disconnect == STOPS_READING and status == 200:
        assert body == bytes(BIG_RESPONSE)


# ----------------------------------------------------------------- one case each

CASES = {
    "oversized-head": (Other(head=OVER_UPSTREAM_LIMIT), Answer()),
    "head-at-the-upstream-limit": (Other(head=AT_UPSTREAM_LIMIT), Answer()),
    "bad-chunk-size": (Other(framing=BAD_CHUNK, body=20_000), Answer()),
    "pipelined-trailers": (
        Other(framing=CHUNKED, trailers=LARGE_TRAILERS, pipelined=True, body=5000),
        Answer(),
    ),
    "trailers-over-the-field-limit": (
        Other(framing=CHUNKED, trailers=MANY_TRAILERS, pipelined=True, body=5000),
        Answer(),
    ),
    "client-vanishes-mid-body": (Other(body=200_000, disconnect=MID_BODY), Answer()),
    "client-stops-reading": (Other(disconnect=STOPS_READING), Answer()),
    "upstream-resets-it": (Other(), Answer(RESET)),
    # Answered before its body is sent (it waits on the windows the server never reopens).
    "upstream-refuses-it-431": (Other(body=300_000), Answer(TOO_LARGE)),
    "upstream-refuses-it-unprocessed": (Other(), Answer(REFUSE)),
    "goaway-naming-the-victim": (Other(), Answer(GOAWAY_BELOW)),
    "goaway-with-an-error-naming-the-victim": (
        Other(),
        Answer(GOAWAY_BELOW, ErrorCodes.ENHANCE_YOUR_CALM),
    ),
}


CASE_PARAMS = [pytest.param(other, answer, id=name) for name, (other, answer) in CASES.items()]


@pytest.mark.parametrize(("other", "answer"), CASE_PARAMS)
async def test_one_failing_request_leaves_the_other_whole(
    tls: TLSFiles, other: Other, answer: Answer
) -> None:
    outcome = await run_case(tls, other, answer)
    check(outcome, other, answer)


# ----------------------------------------------------------------- the property

others = st.builds(
    Other,
    head=st.sampled_from(HEADS),
    framing=st.sampled_from(FRAMINGS),
    body=st.sampled_from([0, 1, 16384, 65535, 65536, 150_000]),
    trailers=st.sampled_from(list(TRAILERS)),
    pipelined=st.booleans(),
    disconnect=st.sampled_from(DISCONNECTS),
)
answers = st.builds(
    Answer,
    kind=st.sampled_from(ANSWERS),
    goaway_error=st.sampled_from([ErrorCodes.NO_ERROR, ErrorCodes.ENHANCE_YOUR_CALM]),
    control=st.sampled_from(CONTROLS),
)


@pytest.fixture(scope="module", params=LOOP_KINDS)
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    kept = Harness(request.param)
    yield kept
    kept.close()


#: A longer run explores at random: BLAST_EXAMPLES=1000 (docs/testing.md).
LONG_RUN = int(os.environ.get("BLAST_EXAMPLES", "0"))


@settings(
    max_examples=LONG_RUN or 40,
    deadline=None,
    derandomize=not LONG_RUN,
    database=None,
    # No shrinking: each step would run a whole case again, and a failing
    # example, printed as it is, names every choice already.
    phases=[Phase.explicit, Phase.generate],
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(other=others, answer=answers)
# The shapes that broke a neighbour once, always among the examples.
@example(Other(head=OVER_UPSTREAM_LIMIT, body=100_000), Answer(control="settings"))
@example(Other(framing=CHUNKED, trailers=LARGE_TRAILERS, pipelined=True), Answer())
@example(
    Other(framing=CHUNKED, trailers=MANY_TRAILERS, pipelined=True, disconnect=STOPS_READING),
    Answer(GOAWAY_COVERING, control="ping"),
)
def test_whatever_the_other_request_does_the_victim_completes(
    harness: Harness, tls: TLSFiles, other: Other, answer: Answer
) -> None:
    outcome = harness.run(run_case(tls, other, answer), timeout=60)
    check(outcome, other, answer)
    harness.check_quiet()
