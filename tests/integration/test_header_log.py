"""``-log-headers``: each request's and response's fields, both sides, secrets masked."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys

import aiohttp
import pytest

from h2ping import Proxy
from h2ping.forward.headerlog import masked_target, masked_value, secret_name
from h2ping.testing import ScriptedRequest, ScriptedUpstream

from ..conftest import free_port

#: Values that must never reach the log, whichever side carried them.
SECRETS = ["sk-live-123", "k-999", "c-111", "c-222", "s3cr3t", "t0k", "sid-abc", "tok-777",
           "sig-555", "pw-444", "query-key"]  # fmt: skip


def header_lines(caplog: pytest.LogCaptureFixture) -> dict[str, tuple[str, list[str]]]:
    """Side -> (what comes before the fields, the fields), of the header log's lines."""
    found = {}
    for record in caplog.records:
        if record.name != "h2ping.headers":
            continue
        match = re.fullmatch(
            r"(.+?): ((?:client|upstream) \w+ as \w+): (.*?)(\[.*\])", record.message
        )
        assert match, record.message
        where, side, first, fields = match.groups()
        assert side not in found, f"two lines for {side}"
        found[side] = (f"{where}: {first}".strip(), json.loads(fields))
    return found


async def serve(request: ScriptedRequest) -> None:
    await request.body()
    await request.respond(
        200,
        [("content-type", "text/plain"), ("set-cookie", "sid=sid-abc; Path=/; HttpOnly"),
         ("x-session-token", "tok-777"), ("x-request-id", "r-1")],
        b"ok",
    )  # fmt: skip


async def test_four_lines_with_every_credential_masked(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="h2ping")
    async with (
        ScriptedUpstream(serve) as upstream,
        Proxy(
            upstream=upstream.url + "/v1?api-version=2024&key=s3cr3t",
            listen="127.0.0.1:0",
            log_headers=True,
        ) as proxy,
        aiohttp.ClientSession() as session,
    ):
        headers = {
            "Authorization": "Bearer sk-live-123",
            "X-Api-Key": "k-999",  # a secret by its name only: the value looks like any
            "Cookie": "a=c-111; b=c-222",
            "X-Amz-Signature": "sig-555",
            "X-Password": "pw-444",
            "X-Trace": "visible-1",
        }
        url = proxy.url + "/chat?user=query-key&token=t0k"
        async with session.post(url, data=b"{}", headers=headers) as resp:
            assert resp.status == 200 and await resp.read() == b"ok"
        seen = upstream.requests[-1]
    lines = header_lines(caplog)
    assert list(lines) == [
        "client request as received",
        "upstream request as sent",
        "upstream response as received",
        "client response as sent",
    ]
    where, fields = lines["client request as received"]
    assert where == "POST /chat conn=1 stream=1: POST /chat?user=***&token=*** HTTP/1.1"
    assert "authorization: Bearer ***" in fields and "x-api-key: ***" in fields
    assert "cookie: a=***; b=***" in fields and "x-trace: visible-1" in fields
    assert "x-amz-signature: ***" in fields and "x-password: ***" in fields
    _, fields = lines["upstream request as sent"]
    authority = f":authority: 127.0.0.1:{upstream.port}"
    assert fields[:4] == [":method: POST", ":scheme: http", authority,
                          ":path: /v1/chat?api-version=***&key=***&user=***&token=***"]  # fmt: skip
    assert "authorization: Bearer ***" in fields and "x-api-key: ***" in fields
    assert "host: " not in json.dumps(fields)  # it became :authority
    where, fields = lines["upstream response as received"]
    assert where == "POST /chat conn=1 stream=1:"
    assert fields == [":status: 200", "content-type: text/plain",
                      "set-cookie: sid=***; Path=/; HttpOnly", "x-session-token: ***",
                      "x-request-id: r-1"]  # fmt: skip
    where, fields = lines["client response as sent"]
    assert where == "POST /chat conn=1 stream=1: 200"
    assert fields[-1] == "transfer-encoding: chunked"  # the framing h2ping chose
    # What was masked in the log went upstream unchanged.
    assert seen.header("x-api-key") == "k-999"
    assert seen.header("authorization") == "Bearer sk-live-123"
    logged = "\n".join(record.message for record in caplog.records)
    leaked = [secret for secret in SECRETS if secret in logged]
    assert not leaked, f"in the log: {leaked}"


async def test_off_by_default_and_a_502_is_logged_too(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="h2ping")
    async with (
        Proxy(upstream="http://127.0.0.1:9", listen="127.0.0.1:0") as quiet,
        aiohttp.ClientSession() as session,
        session.get(quiet.url + "/x", headers={"x-api-key": "k-999"}) as resp,
    ):
        assert resp.status == 502
    assert not header_lines(caplog)
    port = free_port()  # nothing listens: the request never leaves
    async with (
        Proxy(upstream=f"http://127.0.0.1:{port}", listen="127.0.0.1:0", log_headers=True) as p,
        aiohttp.ClientSession() as session,
        session.get(p.url + "/x?k=v", headers={"x-api-key": "k-999"}) as resp,
    ):
        assert resp.status == 502
    lines = header_lines(caplog)
    assert list(lines) == ["client request as received", "client response as sent"]
    where, fields = lines["client response as sent"]
    assert where.startswith("GET /x") and where.endswith(": 502"), where
    assert any(f.startswith("proxy-status: h2ping; error=connection_refused") for f in fields)
    assert "x-api-key: ***" in lines["client request as received"][1]
    assert "k-999" not in "\n".join(r.message for r in caplog.records)


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        (b"authorization", b"Bearer abc.def", "Bearer ***"),
        (b"authorization", b"abc.def", "***"),  # no scheme: all of it
        (b"proxy-authorization", b"Basic dXNlcjpwdw==", "Basic ***"),
        (b"x-api-key", b"k-999", "***"),
        (b"api-key", b"k-999", "***"),
        (b"apikey", b"k-999", "***"),
        (b"x-goog-api-key", b"k", "***"),
        (b"x-auth-token", b"t", "***"),
        (b"openai-organization", b"org-1", "org-1"),  # no secret by its name
        (b"client-secret", b"s", "***"),
        (b"cookie", b"a=1;b=2", "a=***; b=***"),
        (b"set-cookie", b"id=9; Secure", "id=***; Secure"),
        (b":path", b"/v1/x?a=1&b&=3", "/v1/x?a=***&b=***&***"),
        (b":authority", b"api.example.com", "api.example.com"),
        (b"content-type", b"application/json", "application/json"),
        (b"x-trace", b"\x00\n", "\x00\n"),  # kept; the JSON list escapes it
    ],
)
def test_masking(name: bytes, value: bytes, shown: str) -> None:
    assert masked_value(name, value) == shown


def test_secret_names() -> None:
    assert all(map(secret_name, [b"x-api-key", b"x-amz-security-token", b"x-session-id"]))
    assert not any(map(secret_name, [b"content-type", b"x-request-id", b"accept"]))
    assert masked_target(b"/v1/chat") == "/v1/chat"


def test_the_flag_and_its_variable() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "h2ping", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "-log-headers" in done.stdout and "H2PING_LOG_HEADERS" in done.stdout


async def test_the_command_writes_them_at_every_level() -> None:
    """At -log-level error too: asked for, they are written, as the start lines are."""
    async with ScriptedUpstream() as upstream:
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "h2ping", "-upstream", upstream.url,
            "-listen", f"127.0.0.1:{port}", "-log-headers", "-log-level", "error",
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stderr is not None
        try:
            async with asyncio.timeout(30):
                while b"listening on" not in await proc.stderr.readline():
                    pass
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{port}/v1", headers={"x-api-key": "k"}) as resp,
            ):
                assert resp.status == 200
        finally:
            proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert err.decode().count("INFO h2ping 127.0.0.1: GET /v1 conn=1 stream=1: ") == 4, err
