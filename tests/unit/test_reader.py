"""The request reader alone: bytes in, what they held handed back as values, in
order (as h11 returns events); it calls no one."""

from __future__ import annotations

from h2ping.http1.messages import Request, RequestRejected
from h2ping.http1.reader import BODY_END, HEAD_BEGUN, ReadEvent, ReadState, RequestReader

GET = b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n"
POST = b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n"


def shown(events: list[ReadEvent]) -> list[object]:
    """Requests by target, refusals by status: the rest as they are."""
    return [
        event.target
        if isinstance(event, Request)
        else event.status
        if isinstance(event, RequestRejected)
        else event
        for event in events
    ]


def test_a_read_hands_back_its_requests_bodies_and_a_head_still_arriving() -> None:
    reader = RequestReader()
    events = reader.feed(GET % 1 + POST + b"abc" + b"GET /3 HTTP/1.1\r\nHo")
    assert shown(events) == [b"/1", b"/p", b"abc", BODY_END, HEAD_BEGUN]
    assert reader.state is ReadState.HEAD
    # The same head's rest: no head begun in this read, only its request.
    assert shown(reader.feed(b"st: x\r\n\r\n")) == [b"/3"]
    assert reader.state is ReadState.BETWEEN


def test_a_head_that_arrives_whole_is_told_by_its_request_alone() -> None:
    # Its deadline would be cleared by its request at once: the head is not told.
    reader = RequestReader()
    assert shown(reader.feed(GET % 1)) == [b"/1"]  # no body: no end of one either


def test_a_head_trickling_in_is_told_once_where_it_began() -> None:
    # Its deadline starts once: a client sending a byte at a time cannot move it on.
    reader = RequestReader()
    head = GET % 7
    told = [shown(reader.feed(head[i : i + 1])) for i in range(len(head))]
    assert told[0] == [HEAD_BEGUN]
    assert told[1:-1] == [[]] * (len(head) - 2)
    assert told[-1] == [b"/7"]


def test_a_body_in_pieces_then_its_end() -> None:
    reader = RequestReader()
    assert shown(reader.feed(POST + b"a")) == [b"/p", b"a"]
    assert shown(reader.feed(b"bc")) == [b"bc", BODY_END]


def test_what_cannot_be_forwarded_comes_last_and_nothing_after() -> None:
    reader = RequestReader()
    events = reader.feed(GET % 1 + b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n" + GET % 2)
    assert shown(events) == [b"/1", 400]
    assert reader.enter(ReadState.REJECTED)  # the connection's move, as it answers
    assert reader.feed(GET % 3) == []


def test_a_head_over_the_limit_is_refused_431() -> None:
    reader = RequestReader()
    events = reader.feed(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"v" * 70_000)
    assert shown(events) == [431]


def test_an_upgrade_body_reaches_the_request_and_reading_goes_on() -> None:
    reader = RequestReader()
    upgrade = b"POST /u HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: other\r\n"
    events = reader.feed(upgrade + b"Content-Length: 3\r\n\r\nabc" + GET % 2)
    assert shown(events) == [b"/u", b"abc", BODY_END, b"/2"]


def test_once_closed_it_reads_nothing() -> None:
    reader = RequestReader()
    reader.close()
    assert reader.feed(GET % 1) == []
