"""The fast layer: the plain engine (:mod:`.plain`) with h2ping's fast paths.

:class:`FastEngine` is :class:`~.plain.H2Engine` over h2's connection with the
changes of :mod:`.fastconnection`: the frames every request and response has
skip h2's per-frame machinery where h2 would do nothing else (a response's
plain DATA frames are handed out by the frame splitter as their payload, its
plain HEADERS and last DATA as whole frames), and one stream's fault fails that
stream only. Everything else, and every case a fast path declines, goes the
plain engine's way. What the streams and the connection are told is the same
either way, one call per thing said, and so are the bytes sent: the engine's
differential test (``tests/fuzz/test_engine_differential.py``) holds the layer
to the plain engine, event for event and byte for byte.

A fast path is taken only where its probe passed in this process
(:mod:`.fastpaths`, :mod:`.probes`, :mod:`.manifest`); with none passing,
:func:`new_engine` makes the plain engine. To run plain h2 alone, delete this
module and those it alone imports (``fastconnection``, ``fastpaths``,
``probes``, ``manifest``, ``hpackdecode``, ``hpackencode``, ``__main__``) and
make the marked line of the package's ``__init__`` choose :mod:`.plain`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

import h2.events
import h2.stream

from ...fields import Header
from . import fastpaths
from .fastconnection import FastConnection, StreamFault
from .frames import (
    FRAME,
    FRAME_HEADER,
    GOAWAY,
    HEADERS_TYPE,
    RUN,
    FrameSplitter,
    data_frame,
    unreadable,
)
from .manifest import DATA, RESPONSE_HEADERS
from .plain import H2_CONFIG, H2Engine, PeerEvents, StreamEvents


class FastEngine(H2Engine):
    """The plain engine, taking the fast paths named in ``fast``."""

    def __init__(
        self,
        events: PeerEvents,
        header_list_limit: int,
        fast: Collection[str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fast = frozenset(fast)  # read by the parts made in H2Engine.__init__
        super().__init__(events, header_list_limit, clock)
        self._h2: FastConnection
        self._run = b""  # the run of frames h2 is reading, while it reads it
        # h2's stream the DATA held was counted in by the fast path (None: told
        # by h2's events), to give its credit back without looking it up again.
        self._held_in: h2.stream.H2Stream | None = None

    def _new_h2(self) -> FastConnection:
        return FastConnection(H2_CONFIG, self.header_list_limit, self.fast)

    def _new_splitter(self, clock: Callable[[], float]) -> FrameSplitter:
        return FrameSplitter(
            clock,
            plain_data=DATA in self.fast,
            plain_headers=RESPONSE_HEADERS in self.fast,
            guard=self._guard,
        )

    # ------------------------------------------------------------------ inbound

    def handle(self, budget: int | None = None) -> int:
        """As :meth:`H2Engine.handle`, with the pieces the fast paths take: a
        plain DATA frame's payload (or the payloads of one stream's in a row,
        :meth:`_plain_run`), a whole plain HEADERS or last DATA frame, and runs
        of the other frames, each run given to h2 whole (its own
        ``_receive_frame`` says which frame it refused)."""
        frames = self._frames
        backlog = frames.backlog
        take_data = self._h2.take_data
        try:
            for kind, piece in frames.take(budget):
                if self._over:
                    break  # the connection ended meanwhile (see H2Engine.handle)
                if kind > 0:  # plain DATA on stream ``kind``: a payload, or a run's
                    if piece.__class__ is list:
                        self._plain_run(kind, piece)
                        continue
                    # (:meth:`_plain_one`, inline: a call less per streamed event)
                    size = len(piece)
                    counted = take_data(kind, size)
                    if counted is None:  # h2's to refuse (or more than counting)
                        self._tell(self._h2.receive_data(data_frame(kind, piece)))
                    elif kind == self._held_stream:  # (see _deliver)
                        self._held.append(piece)
                        self._held_length += size
                    else:
                        self._hand_over(kind, [piece], size, counted)
                elif kind == RUN:
                    self._run = piece  # to name a frame h2 could not read
                    said = self._h2.receive_data(piece)
                    self._run = b""
                    self._tell(said)
                elif kind == FRAME:
                    self._whole_frame(piece)
                elif kind == GOAWAY:
                    self._goaway(piece)
        except Exception as exc:
            raise self._connection_fault(exc) from exc
        finally:
            self._release()  # what came before a fault was good
        return backlog - frames.backlog

    def _plain_run(self, stream_id: int, payloads: list[bytes]) -> None:
        """Plain DATA frames of one stream in a row, counted and held in one step
        where that is what taking each in turn would do: the windows and the
        content-length count only shrink along the run (nothing is told, so no
        credit comes back, before it ends), so the fast path takes all of them
        exactly when it takes their total. Else frame by frame, so that what h2
        says is said of the frame it concerns."""
        if self._held_stream and stream_id != self._held_stream:
            # DATA held for another stream is delivered once this first frame is
            # counted, as frame by frame: what that stream does then may see the windows.
            self._plain_one(stream_id, payloads[0])
            payloads = payloads[1:]
        if len(payloads) > 1 and not self._over:
            size = sum(map(len, payloads))
            counted = self._h2.take_data(stream_id, size)
            if counted is not None:
                if stream_id == self._held_stream:
                    self._held += payloads
                    self._held_length += size
                else:
                    self._hand_over(stream_id, payloads, size, counted)
                return
        for payload in payloads:
            if self._over:
                return  # the connection ended meanwhile (see H2Engine.handle)
            self._plain_one(stream_id, payload)

    def _plain_one(self, stream_id: int, payload: bytes) -> None:
        """One plain DATA frame's payload, as :meth:`handle` takes it."""
        size = len(payload)
        counted = self._h2.take_data(stream_id, size)
        if counted is None:  # h2's to refuse (or more than counting)
            self._tell(self._h2.receive_data(data_frame(stream_id, payload)))
        elif stream_id == self._held_stream:
            self._held.append(payload)
            self._held_length += size
        else:
            self._hand_over(stream_id, [payload], size, counted)

    def _refused(self) -> tuple[int, int] | None:
        return self._h2.fault_frame or (unreadable(self._run) if self._run else None)

    def _deliver(
        self,
        stream_id: int,
        data: bytes,
        flow_controlled_length: int,
        counted: h2.stream.H2Stream | None = None,
    ) -> None:
        """As :meth:`H2Engine._deliver`; ``counted``: h2's stream the fast path
        counted the DATA in (see :meth:`_hand_over`)."""
        if stream_id == self._held_stream:
            self._held.append(data)
            self._held_length += flow_controlled_length
        else:
            self._hand_over(stream_id, [data], flow_controlled_length, counted)

    def _release(self) -> None:
        """Deliver the DATA held, if any (see :meth:`_hand_over`)."""
        if self._held_stream:
            self._hand_over(0, [], 0, None)

    def _hand_over(
        self, stream_id: int, held: list[bytes], length: int, counted: h2.stream.H2Stream | None
    ) -> None:
        """Hold ``held``, ``length`` bytes of ``stream_id``'s DATA (0: nothing),
        and deliver what was held before (see :meth:`H2Engine._release`): one
        call where a stream's DATA follows another's. The credit its client
        took at once goes back through h2's stream the fast path counted the
        DATA in, when it did: one lookup in h2 per frame, not two."""
        previous = self._held_stream
        data, length_before, counted_before = self._held, self._held_length, self._held_in
        self._held_stream = stream_id
        self._held = held
        self._held_length = length
        self._held_in = counted
        if not previous:
            return
        try:
            stream = self._hear(previous)
            if stream is None:  # nobody's: its credit still counts against the connection's window
                self.give_credit(previous, length_before)
            # (b"".join of one payload hands back the payload itself: no copy)
            elif (taken := stream.got_data(b"".join(data), length_before)) and (
                counted_before is None or not self._h2.ack_taken(counted_before, taken)
            ):
                self.give_credit(previous, taken)  # (a WINDOW_UPDATE may be due)
        except Exception:  # a bug serving one stream must not end the others
            self._events.on_internal_error(previous)

    def _whole_frame(self, frame: bytes) -> None:
        """A response's plain HEADERS, or a last DATA frame: taken without h2's
        frame parsing where h2 would do nothing else, else given to h2."""
        stream_id = int.from_bytes(frame[5:9], "big") & 0x7FFFFFFF
        payload = frame[FRAME_HEADER:]
        if frame[3] == HEADERS_TYPE:
            self._release()
            end = bool(frame[4] & 0x1)
            taken = self._h2.take_response_headers(stream_id, payload, end)
            if taken is None:
                self._tell(self._h2.receive_data(frame))
            elif taken[0] is None:
                self._tell(taken[1])
            else:
                self._final_response(stream_id, taken[0], end)
            return
        size = len(payload)
        counted = self._h2.take_last_data(stream_id, size)
        if counted is None:
            self._tell(self._h2.receive_data(frame))
            return
        if stream_id == self._held_stream:  # after its stream's DATA in this read
            self._held.append(payload)
            self._held_length += size
        else:
            self._hand_over(stream_id, [payload], size, counted)
        self._hand_over(0, [], 0, None)  # delivered now: its end follows
        try:
            if (stream := self._hear(stream_id)) is not None:
                stream.got_end()
        except Exception:
            self._events.on_internal_error(stream_id)

    def _final_response(self, stream_id: int, headers: list[Header], end: bool) -> None:
        """What h2's ResponseReceived (and StreamEnded, with ``end``) would tell."""
        try:
            self._got_response(stream_id, headers, end)
        except Exception:  # a bug serving one stream must not end the others
            self._events.on_internal_error(stream_id)
        if not end:
            return
        try:
            self._got_end(stream_id)
        except Exception:
            self._events.on_internal_error(stream_id)

    def _tell_other(self, event: h2.events.Event) -> None:
        """A stream's own fault (``stream_faults``): the stream is reset, alone."""
        if isinstance(event, StreamFault):
            self._guard.reset(event.stream_id)  # reset by h2ping: frames may follow
            stream: StreamEvents | None = self._hear(event.stream_id)
            if stream is not None:
                stream.got_fault(event.error, event.detail)

    # ------------------------------------------------------------------ outbound

    def _limit_decoding(self) -> None:
        """Nothing to do: the connection set its decoder's limit when made."""

    def send_request(self, stream_id: int, headers: list[Header], end_stream: bool) -> None:
        self._h2.send_request(stream_id, headers, end_stream)
        self._guard.opened(stream_id)

    def send_data(self, stream_id: int, data: bytes | memoryview, end_stream: bool) -> None:
        self._h2.send_body(stream_id, data, end_stream)
        self._guard.sent_data()

    def data_to_send(self) -> bytes | bytearray:
        return self._h2.take_outbound()

    def give_credit(self, stream_id: int, nbytes: int) -> bool:
        if self._h2.ack_quietly(stream_id, nbytes):
            return False  # no WINDOW_UPDATE due yet: nothing to send
        return super().give_credit(stream_id, nbytes)

    def let_go(self) -> None:
        super().let_go()
        self._h2.let_go()  # h2's own cycle too


def new_engine(
    events: PeerEvents, header_list_limit: int, fast: Collection[str] | None = None
) -> H2Engine:
    """An engine for a new upstream connection, taking ``fast`` (default: the
    fast paths whose probes passed); the plain engine where none is taken."""
    paths = fastpaths.enabled() if fast is None else frozenset(fast)
    if not paths:
        return H2Engine(events, header_list_limit)
    return FastEngine(events, header_list_limit, paths)


fast_paths_taken = fastpaths.enabled
fast_path_states = fastpaths.states
