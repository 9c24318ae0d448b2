"""Header mapping (h1 -> h2). h2ping skips h2's outbound validation and
normalization for speed, so the mapping must already produce what they would:
checked here against h2's own functions for any head llhttp accepts."""

from __future__ import annotations

import httptools
import pytest
from h2.utilities import (
    HeaderValidationFlags,
    normalize_outbound_headers,
    validate_outbound_headers,
)
from hpack import NeverIndexedHeaderTuple
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from h2ping.config import parse_upstream
from h2ping.forward.headers import MalformedResponse, request_headers, request_path, response_head

UPSTREAM = parse_upstream("https://api.example.com")
FLAGS = HeaderValidationFlags(
    is_client=True, is_trailer=False, is_response_header=False, is_push_promise=False
)

TOKEN_CHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
SPECIAL_NAMES = [
    "Authorization", "proxy-authorization", "Cookie", "Connection", "TE", "Host",
    "Upgrade", "Keep-Alive", "Transfer-Encoding", "Expect", "HTTP2-Settings", "X-Hop",
]  # fmt: skip
names = st.one_of(
    st.sampled_from(SPECIAL_NAMES), st.text(alphabet=TOKEN_CHARS, min_size=1, max_size=20)
)
# Visible ASCII, obs-text, spaces and tabs anywhere (llhttp decides what it accepts).
values = st.binary(max_size=40).map(
    lambda b: bytes(c for c in b if c in (9, 32) or 0x21 <= c <= 0x7E or c >= 0x80)
)


def parse_head(raw: bytes) -> tuple[bytes, bytes, list[tuple[bytes, bytes]]] | None:
    """What the listener would see, or None when llhttp rejects the head."""
    seen: dict = {"headers": [], "url": b""}

    class Callbacks:
        def on_url(self, url: bytes) -> None:
            seen["url"] += url

        def on_header(self, name: bytes, value: bytes) -> None:
            seen["headers"].append((name.lower(), value))  # as the listener keeps them

    parser = httptools.HttpRequestParser(Callbacks())
    try:
        parser.feed_data(raw)
    except httptools.HttpParserUpgrade:
        pass
    except httptools.HttpParserError:
        return None
    return parser.get_method(), seen["url"], seen["headers"]


@settings(max_examples=300, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(names, values), max_size=12), st.sampled_from(["GET", "POST"]))
def test_mapping_is_what_h2_normalization_and_validation_would_produce(
    fields: list[tuple[str, bytes]], method: str
) -> None:
    raw = f"{method} /p?q=1 HTTP/1.1\r\n".encode()
    raw += b"".join(name.encode() + b": " + value + b"\r\n" for name, value in fields)
    raw += b"\r\n"
    parsed = parse_head(raw)
    assume(parsed is not None)  # llhttp refuses it: the listener answers 400 itself
    assert parsed is not None
    mapped = request_headers(parsed[0], parsed[1], parsed[2], UPSTREAM)
    normalized = list(normalize_outbound_headers(mapped, FLAGS))
    assert [tuple(h) for h in normalized] == [tuple(h) for h in mapped]
    assert [type(h) is NeverIndexedHeaderTuple for h in normalized] == [
        type(h) is NeverIndexedHeaderTuple for h in mapped
    ]
    # h2's validation raises on anything invalid, and passes the rest on unchanged.
    validated = validate_outbound_headers(mapped, FLAGS)
    assert [tuple(h) for h in validated] == [tuple(h) for h in mapped]


def test_trailing_whitespace_is_not_part_of_the_value() -> None:
    mapped = request_headers(b"GET", b"/", [(b"x-a", b"v \t")], UPSTREAM)
    assert (b"x-a", b"v") in mapped


def test_credentials_are_never_indexed() -> None:
    mapped = request_headers(
        b"GET",
        b"/",
        [(b"authorization", b"Bearer t"), (b"cookie", b"a=1"), (b"cookie", b"b=" + b"x" * 30)],
        UPSTREAM,
    )
    kinds = {h[0] + b"=" + h[1][:3]: type(h) is NeverIndexedHeaderTuple for h in mapped}
    assert kinds[b"authorization=Bea"] and kinds[b"cookie=a=1"]
    assert not kinds[b"cookie=b=x"]


def test_pseudo_headers_first_and_authority_is_the_upstreams() -> None:
    mapped = request_headers(b"GET", b"/x", [(b"host", b"127.0.0.1:1250")], UPSTREAM)
    assert mapped[:4] == [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", b"api.example.com"),
        (b":path", b"/x"),
    ]
    assert all(not name.startswith(b":") for name, _ in mapped[4:])


def test_request_path_forms() -> None:
    assert request_path(b"/a?b") == b"/a?b"
    assert request_path(b"*") == b"*"
    assert request_path(b"http://evil.example/x?y=1") == b"/x?y=1"
    assert request_path(b"http://evil.example?y=1") == b"/?y=1"
    assert request_path(b"http://evil.example") == b"/"
    # OPTIONS in absolute-form without a path asks about the server (RFC 9112 3.2.4)
    assert request_path(b"http://evil.example", options=True) == b"*"
    assert request_path(b"http://evil.example?y=1", options=True) == b"/?y=1"
    assert request_path(b"*", b"/v1", b"k=1", options=True) == b"*"


# Each row checked against Go's httputil.ProxyRequest.SetURL (singleJoiningSlash for
# the path; the target's RawQuery, "&", the request's, or either alone).
@pytest.mark.parametrize(
    ("upstream", "target", "path"),
    [
        ("https://h/v1", b"/chat?x=1", b"/v1/chat?x=1"),
        ("https://h/v1/", b"/chat?x=1", b"/v1/chat?x=1"),
        ("https://h/v1//", b"/chat", b"/v1//chat"),
        ("https://h/", b"/chat", b"/chat"),
        ("https://h", b"/chat", b"/chat"),
        ("https://h/v1", b"/", b"/v1/"),
        ("https://h/v1?key=k", b"/chat?x=1", b"/v1/chat?key=k&x=1"),
        ("https://h/v1?key=k", b"/chat", b"/v1/chat?key=k"),
        ("https://h/v1?key=k", b"/chat?", b"/v1/chat?key=k"),
        ("https://h/v1", b"/chat?", b"/v1/chat?"),
        ("https://h?key=k", b"/chat?a=1&b=2", b"/chat?key=k&a=1&b=2"),
        ("https://h/a%2Fb", b"/c%2Fd", b"/a%2Fb/c%2Fd"),
        # Absolute-form: only the path and query of the URL count.
        ("https://h/v1", b"http://evil.example/chat?x=1", b"/v1/chat?x=1"),
        ("https://h/v1", b"http://evil.example", b"/v1/"),
        ("https://h/v1?key=k", b"http://evil.example?y=1", b"/v1/?key=k&y=1"),
        # OPTIONS * names no resource: nothing to join it to.
        ("https://h/v1", b"*", b"*"),
    ],
)
def test_base_path_and_query_joined_as_go_does(upstream: str, target: bytes, path: bytes) -> None:
    mapped = request_headers(b"GET", target, [], parse_upstream(upstream))
    assert mapped[3] == (b":path", path)
    assert mapped[2] == (b":authority", b"h")


def test_without_a_base_the_target_is_passed_as_it_is() -> None:
    target = b"/v1/chat/completions?stream=true"
    assert request_path(target) is target  # no copy on the common path


def test_a_repeated_content_length_of_the_same_value_is_passed_on_once() -> None:
    block = [(b":status", b"200"), (b"content-length", b"2"), (b"x-a", b"1")]
    _, fields = response_head([*block, (b"content-length", b"2")])
    assert fields == [(b"content-length", b"2"), (b"x-a", b"1")]


def test_response_head_splits_status_and_fields() -> None:
    status, fields = response_head([(b":status", b"204"), (b"x-a", b"1 2"), (b"x-b", b"\xe9")])
    assert status == 204
    assert fields == [(b"x-a", b"1 2"), (b"x-b", b"\xe9")]


@pytest.mark.parametrize(
    "block",
    [
        [(b":status", b"200"), (b"connection", b"close")],
        [(b":status", b"200"), (b"te", b"trailers")],
        [(b":status", b"200"), (b"X-Upper", b"1")],
        [(b":status", b"200"), (b"x a", b"1")],
        [(b":status", b"200"), (b"x-split", b"a\r\nset-cookie: injected")],
        [(b":status", b"200"), (b"x-nul", b"a\x00b")],
        [(b":status", b"200"), (b"x-space", b" padded")],
        [(b"x-a", b"1"), (b":status", b"200")],
        [(b":status", b"200"), (b":status", b"200")],
        [(b":status", b"200"), (b":path", b"/")],
        [(b":status", b"2000")],
        [(b"x-a", b"1")],
        [(b":status", b"200"), (b"content-length", b"1"), (b"content-length", b"2")],
        [(b":status", b"200"), (b"content-length", b"+1")],
    ],
    ids=[
        "connection", "te", "uppercase", "not-a-token", "response-splitting", "nul",
        "surrounding-space", "pseudo-after-field", "repeated-status", "request-pseudo",
        "bad-status", "no-status", "two-lengths", "invalid-length",
    ],
)  # fmt: skip
def test_malformed_response_blocks_are_refused(block: list[tuple[bytes, bytes]]) -> None:
    with pytest.raises(MalformedResponse) as caught:
        response_head(block)
    assert b"injected" not in str(caught.value).encode()


def test_checked_fields_are_bounded_and_never_let_a_bad_field_through() -> None:
    from h2ping.forward import headers

    for i in range(headers.CHECKED_FIELDS + 50):
        response_head([(b":status", b"200"), (b"etag", b'"%d"' % i)])
        assert len(headers._CHECKED_FIELDS) <= headers.CHECKED_FIELDS
    assert (b"etag", b'"%d"' % (headers.CHECKED_FIELDS + 49)) in headers._CHECKED_FIELDS
    # Fields that may carry credentials are checked each time and never kept.
    response_head([(b":status", b"200"), (b"set-cookie", b"session=s3cret")])
    assert not any(b"s3cret" in value for _, value in headers._CHECKED_FIELDS)
    for _ in range(2):  # refused, and refused again: nothing bad is kept
        for bad in [(b"X-Name-1", b"v"), (b"x-name-1", b" v"), (b"content-length", b"x")]:
            with pytest.raises(MalformedResponse):
                response_head([(b":status", b"200"), bad])
    # A field kept as valid is still counted for the content-length rules.
    with pytest.raises(MalformedResponse):
        response_head(
            [(b":status", b"200"), (b"content-length", b"1")] * 2 + [(b"content-length", b"2")]
        )
