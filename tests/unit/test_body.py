"""RequestBody and RetryBudget on their own: what is kept for a replay, and what is charged."""

from __future__ import annotations

from h2ping.forward.body import BUDGET_REACHED, TOO_LARGE, RequestBody, RetryBudget
from h2ping.stats import Stats


def budget(limit: int = 100) -> tuple[RetryBudget, Stats]:
    stats = Stats()
    return RetryBudget(limit, stats), stats


def test_declared_length_over_the_limit_keeps_nothing() -> None:
    retry, _ = budget()
    body = RequestBody(retry, limit=10, content_length=11)
    assert (body.kept, body.reason) == (False, TOO_LARGE)
    body.add(b"12345")
    assert (body.chunks, retry.used) == ([], 0)


def test_declared_length_at_the_limit_is_kept_whole() -> None:
    retry, _ = budget()
    body = RequestBody(retry, limit=10, content_length=10)
    body.add(b"12345")
    body.add(b"67890")
    assert body.kept
    assert (b"".join(body.chunks), retry.used) == (b"1234567890", 10)


def test_unknown_length_is_released_once_it_crosses_the_limit() -> None:
    retry, _ = budget()
    body = RequestBody(retry, limit=10, content_length=None)
    body.add(b"123456")
    assert (body.kept, retry.used) == (True, 6)
    body.add(b"78901")
    assert (body.kept, body.reason, body.chunks) == (False, TOO_LARGE, [])
    assert (retry.used, retry.peak) == (0, 6)
    body.add(b"1")  # never kept again, even though it would fit now
    assert (body.chunks, retry.used) == ([], 0)


def test_a_spent_budget_gives_the_body_up_and_counts_it() -> None:
    retry, stats = budget(limit=8)
    first = RequestBody(retry, limit=10, content_length=None)
    second = RequestBody(retry, limit=10, content_length=None)
    first.add(b"123456")
    second.add(b"12")
    second.add(b"3")  # 9 > 8 together
    assert (second.kept, second.reason, stats.unkept_bodies) == (False, BUDGET_REACHED, 1)
    assert retry.used == 6  # the second body's 2 bytes went back
    first.release()
    assert retry.used == 0


def test_the_first_reason_stays() -> None:
    retry, _ = budget()
    body = RequestBody(retry, limit=10, content_length=None)
    body.add(b"x" * 11)
    body.give_up("the response had begun")
    assert body.reason == TOO_LARGE


def test_release_frees_without_giving_up() -> None:
    retry, _ = budget()
    body = RequestBody(retry, limit=10, content_length=None)
    body.add(b"abc")
    body.release()
    assert (body.kept, body.chunks, retry.used) == (True, [], 0)


class Stream:
    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.ended = False

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    def end(self) -> None:
        self.ended = True


def test_a_held_body_stays_whole_when_keeping_stops() -> None:
    retry, _ = budget()
    body = RequestBody(retry, limit=10, content_length=None)
    assert body.add(b"123456", held=True) == ""
    assert body.add(b"78901", held=True) == TOO_LARGE  # no stream has it yet: it stays
    body.add(b"2", held=True)
    assert (body.kept, body.chunks, retry.used) == (False, [b"123456", b"78901", b"2"], 0)
    assert (body.waiting, body.received) == (12, 12)
    stream = Stream()
    body.send_on(stream, complete=True)
    assert (stream.sent, stream.ended) == ([b"123456", b"78901", b"2"], True)
    assert (body.chunks, body.waiting) == ([], 0)  # nothing left for a replay to need


def test_a_kept_body_stays_after_a_stream_takes_it() -> None:
    retry, _ = budget()
    body = RequestBody(retry, limit=10, content_length=None)
    body.add(b"abc", held=True)
    stream = Stream()
    body.send_on(stream, complete=False)
    body.add(b"de")  # sent on by the caller, and kept
    assert (stream.sent, stream.ended, body.waiting) == ([b"abc"], False, 0)
    assert (body.chunks, retry.used, body.received) == ([b"abc", b"de"], 5, 5)
