"""One request carried from its client to an upstream stream and back: where the
HTTP/1.1 side and the HTTP/2 side meet.

An :class:`Exchange` is the listener's request handler and the upstream stream's
sink. A task exists only while it waits for a stream slot; body bytes flow
through callbacks in both directions, so there is no task or copy per chunk.
Whether a failed attempt is sent again is its :class:`~.replay.Replay`'s to
decide, the request body's bytes are its :class:`~.body.RequestBody`'s to hold,
and what the request leaves in the counters and the access log is its
:class:`~.accounting.Accounting`'s. However it ends, it ends in one method.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from .. import errors
from ..config import Upstream
from ..errors import UpstreamError
from ..fields import Header, header_list_size
from ..http1.messages import MAX_INFORMATIONAL, Request, ResponseWriter
from ..http2.streams import SlotLost, StreamSlot, UpstreamStream, send_backlog_full
from ..stats import Stats
from .accounting import Accounting, RequestLog
from .body import BUDGET_REACHED
from .failure import tell_failure
from .headerlog import HeaderLog
from .headers import (
    MalformedResponse,
    goes_early,
    head_refusal,
    request_headers,
    response_head,
)
from .pool import Pool
from .replay import Replay, ReplayPolicy

log = logging.getLogger("h2ping.exchange")

#: The lines a request can leave in the log (besides an internal error's and a
#: failure's, :mod:`.failure`), each after the request (and where it went,
#: ``Exchange._where``).
_REPLAYING = "%s: replaying (%s), attempt %d"
_UNKEPT = (
    "%s: replay unavailable: kept request bodies reached max-buffered-bytes (%d bytes); "
    "this body streams through unkept"
)


@dataclasses.dataclass(frozen=True, slots=True)
class ExchangeContext:
    """What the exchanges of one proxy share; the proxy builds it once it has a pool."""

    pool: Pool
    upstream: Upstream  # becomes :scheme and :authority
    replay: ReplayPolicy
    stats: Stats
    live: set[Exchange]  # not yet finished (a pipelined one waiting its turn included)
    access_log: RequestLog | None = None  # -access-log
    header_log: HeaderLog | None = None  # -log-headers


class Exchange:
    """Carries one request from its client to an upstream stream, and the response back."""

    __slots__ = (
        "_account",
        "_body",
        "_body_ended",
        "_ctx",
        "_fields",
        "_finished",
        "_replay",
        "_request",
        "_size",
        "_stream",
        "_task",
        "_writer",
        "conn_id",
        "stream_id",
    )

    def __init__(self, ctx: ExchangeContext, request: Request, writer: ResponseWriter) -> None:
        self._ctx = ctx
        ctx.live.add(self)
        self._request = request
        self._writer = writer
        self._task: asyncio.Task[None] | None = None
        self._stream: UpstreamStream | None = None
        self._fields: list[Header] = []
        self._size = 0  # of the mapped head, as the upstream's header list limit counts it
        self._body_ended = not request.has_body
        self._replay = Replay(ctx.replay, request.content_length)
        self._body = self._replay.body  # fed here: a chunk costs no call on the replay
        self._account = Accounting(ctx.stats, ctx.access_log, request, writer, ctx.header_log)
        self._finished = False
        self.conn_id = 0  # 0 until a connection is chosen
        self.stream_id = 0

    # ----------------------------------------------------------------- listener side

    def start(self) -> None:
        request = self._request
        self._fields = request_headers(
            request.method, request.target, request.headers, self._ctx.upstream
        )
        self._size = header_list_size(self._fields)
        self._next_attempt()

    def feed_body(self, data: bytes) -> None:
        if self._finished:
            return  # the rest of a body the upstream no longer wants
        stream = self._stream
        if self._body.add(data, stream is None) == BUDGET_REACHED:
            log.warning(_UNKEPT, self._request.describe(), self._ctx.replay.budget.limit)
        if stream is not None:
            stream.send(data)
            if stream.backlogged:
                self._writer.pause_reading()
        elif send_backlog_full(self._body.waiting):
            self._writer.pause_reading()

    def end_body(self) -> None:
        self._body_ended = True
        if self._stream is not None:
            self._stream.end()

    def client_drained(self) -> None:
        if self._stream is not None:
            self._stream.ack_held()

    def cancel(self) -> None:
        """The client went away."""
        self._end("cancelled")

    def reject(self, status: int = 0) -> None:
        """The request body was malformed: the listener answers it with ``status``."""
        self._end("rejected", status)

    def cut(self) -> None:
        """The proxy is shutting down and the grace period is over."""
        self._end("cut_at_shutdown")

    # ----------------------------------------------------------------- stream side

    def on_response(self, headers: list[Header], end_stream: bool) -> None:
        try:
            status, fields = response_head(headers)
        except MalformedResponse as exc:
            self._bad_response(f"malformed response header block: {exc}")
            return
        self._account.response_head(status, headers)
        self._replay.response_began()
        self._writer.start(status, fields, has_body=not end_stream)

    def on_informational(self, headers: list[Header]) -> None:
        try:
            if not self._writer.interim(*response_head(headers)):
                self._bad_response(f"more than {MAX_INFORMATIONAL} informational responses")
        except MalformedResponse as exc:
            self._bad_response(f"malformed informational response: {exc}")

    def on_data(self, data: bytes, flow_controlled_length: int) -> int:
        """Write ``data`` to the client; the credit it took at once goes back to
        the peer (returned). While the client's socket is full the stream holds
        the credit until it drains (client_drained): a slow client holds back its
        own stream only."""
        writer = self._writer
        writer.write(data)
        return 0 if writer.paused else flow_controlled_length

    def on_end(self) -> None:
        self._stream = None  # over: nothing to cancel
        self._end("ok")

    def on_error(self, error: UpstreamError) -> None:
        self._stream = None
        self._attempt_failed(error)

    def on_send_ready(self) -> None:
        self._writer.resume_reading()

    def _bad_response(self, detail: str) -> None:
        """The upstream's answer broke HTTP's rules: reset its stream, fail the attempt."""
        if self._stream is not None:
            self._stream.reject_response()
        self.on_error(UpstreamError(errors.HTTP_PROTOCOL_ERROR, detail))

    # ----------------------------------------------------------------- attempts
    #
    # No task in the common case: with a stream slot free, the request leaves from
    # the parser's callback and its outcome arrives through the sink callbacks. A
    # task exists only while the request waits for a slot or a new connection.

    def _next_attempt(self) -> None:
        slot = self._ctx.pool.try_acquire()
        if slot is None:
            self._task = asyncio.get_running_loop().create_task(self._wait_for_slot())
        else:
            self._open_on(slot)

    async def _wait_for_slot(self) -> None:
        try:
            slot = await self._ctx.pool.acquire(early=goes_early(self._size, self._replay.replays))
        except UpstreamError as exc:
            self._task = None
            self._attempt_failed(exc)
            return
        self._task = None
        self._open_on(slot)

    def _open_on(self, slot: StreamSlot) -> None:
        """Send the request on a reserved stream slot, if its head is within the
        limit of the slot's connection (else 431, and the slot goes back unused)."""
        if (refused := head_refusal(self._size, slot.header_list_limit)) is not None:
            slot.release()
            self._end("rejected", error=refused)
            return
        self.conn_id = slot.conn_id
        end_now = self._body_ended and not any(self._body.chunks)
        try:
            stream = slot.open(self._fields, self, end_stream=end_now)
        except SlotLost:  # the connection ended since the reservation: nothing was sent
            self._next_attempt()
            return
        except UpstreamError as exc:
            self._attempt_failed(exc)
            return
        except Exception as exc:  # a bug of ours must not leave the client hanging
            log.exception("%s: internal error", self._where())
            self._attempt_failed(UpstreamError(errors.PROXY_INTERNAL_ERROR, type(exc).__name__))
            return
        self._stream = stream
        self.stream_id = stream.stream_id
        self._account.sent(self._fields, self.conn_id, self.stream_id)
        if self._request.expect_continue and not self._body_ended:
            self._writer.send_continue()
        if self._body.chunks:  # what arrived meanwhile; on a replay, the whole body
            self._body.send_on(stream, self._body_ended)
        if not stream.backlogged:
            self._writer.resume_reading()

    def _attempt_failed(self, error: UpstreamError) -> None:
        if self._finished:
            return
        if not self._replay.allows(error, self._writer.started):
            self._end("failed", 502, error)
            return
        log.info(_REPLAYING, self._where(), error.detail, self._replay.replays + 2)
        self._replay.schedule(self._next_attempt)

    # ----------------------------------------------------------------- the end

    def _end(self, outcome: str, status: int = 0, error: UpstreamError | None = None) -> None:
        """The one way an exchange ends, at most once and in one order: stop what still
        runs, free the body, leave the live set, answer the client, count and log.
        ``error``: a failure to tell the client (``outcome`` and ``status`` then follow)."""
        if self._finished:
            return  # a client leaving after its answer, say
        self._finished = True
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.cancel()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        self._replay.cancel()
        self._body.release()
        self._ctx.live.discard(self)
        if error is not None:
            where = self._where(error)
            outcome, status = tell_failure(error, self._writer, self._account, self._replay, where)
        elif outcome == "ok":
            self._writer.end()
        self._account.ended(
            outcome,
            status,
            bytes_in=self._body.received,
            conn_id=self.conn_id,
            stream_id=self.stream_id,
            replays=self._replay.replays,
        )

    def _where(self, error: UpstreamError | None = None) -> str:
        """``METHOD /path conn=N stream=M`` for log lines (what is known so far)."""
        where = self._request.describe()
        if error is not None and error.conn_id and error.conn_id != self.conn_id:
            return f"{where} conn={error.conn_id}"  # dialled for this request, never reached
        if self.conn_id:
            where += f" conn={self.conn_id}"
        if self.stream_id:
            where += f" stream={self.stream_id}"
        return where
