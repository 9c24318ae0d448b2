"""``h2ping check``: what it reports about an endpoint, and its verdict and exit code,
against the scripted upstream (TLS and h2c), raw scripted peers, nginx, and servers
that speak no HTTP/2."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import ssl
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hyperframe.frame import GoAwayFrame, PingFrame

from h2ping.check.command import report, text_lines
from h2ping.check.probe import Findings, probe
from h2ping.check.prober import printable
from h2ping.flags import (
    SettingError,
    UsageError,
    help_text,
    parse_check_command_line,
    parse_command_line,
)
from h2ping.http2.dial import make_ssl_context
from h2ping.process import cli
from h2ping.testing import RawPeer, RawUpstream, ScriptedRequest, ScriptedUpstream

from ..conftest import TLSFiles, free_port, running_proxy
from ..nginx_answering import run_answering_nginx

#: The command's environment: none of the caller's H2PING_* settings.
ENV = {name: value for name, value in os.environ.items() if not name.startswith("H2PING_")}


async def check(*args: str) -> tuple[Findings, list[str], dict[str, Any]]:
    """Findings, text lines and JSON report of a check run in this process (the
    command's own steps, without its asyncio.run)."""
    command_line = parse_check_command_line(list(args), environ={})
    config, settings = command_line.config, command_line.check
    context = make_ssl_context(config) if config.upstream.tls else None
    findings = await probe(config, settings, context)
    return findings, text_lines(findings, config, settings), report(findings, config, settings)


async def run_command(*args: str) -> tuple[int, str, str]:
    """``python -m h2ping check ARGS`` as a user runs it: exit code, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "h2ping", "check", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=ENV,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def value(lines: list[str], label: str) -> str:
    """The value on the line labelled ``label``."""
    [line] = [ln for ln in lines if ln.split(" ", 1)[0] == label]
    return line[len(label) :].strip()


def out_text(lines: list[str], found: dict[str, Any]) -> str:
    """All the check printed, in either format."""
    return "\n".join(lines) + json.dumps(found)


# --- usable endpoints -------------------------------------------------------------------


async def test_scripted_tls_upstream_is_usable(tls: TLSFiles) -> None:
    async with ScriptedUpstream(
        ssl_context=tls.server_context(), max_concurrent_streams=64
    ) as upstream:
        code, out, err = await run_command(
            "-upstream", f"{upstream.url}/v1", "-ca-file", tls.ca_file, "-path", "/models"
        )
    lines = out.splitlines()
    assert (code, err) == (0, ""), out
    assert lines[0] == f"upstream     {upstream.url}/v1"
    assert value(lines, "http/2") == "yes, by ALPN h2"
    assert value(lines, "tls").startswith("TLSv1.")
    assert value(lines, "tls").endswith(", resumes sessions")
    assert value(lines, "certificate").startswith("verified, valid until 3000-01-01 00:00:00 UTC")
    settings = lines.index(next(ln for ln in lines if ln.startswith("settings")))
    assert [ln.split("  ")[-1].strip() for ln in lines[settings : settings + 5]] == [
        "64", "65535", "16384", "65536", "4096"
    ]  # fmt: skip
    assert value(lines, "pings").startswith("3 of 3 answered: ")
    assert value(lines, "request").startswith("GET /v1/models: 200, first byte in ")
    assert lines[-1] == (
        "verdict      usable: speaks HTTP/2 over TLS (ALPN h2), answered 3 of 3 PINGs"
    )
    # What the server saw: three PINGs, the request joined to the base path as the proxy
    # joins it, and a clean end; then a handshake that resumed the first's session.
    conn, resumed = upstream.connections
    assert (conn.tls_resumed, resumed.tls_resumed) == (False, True)
    assert conn.pings_received == 3
    [request] = upstream.requests
    assert (request.method, request.path, request.authority) == (
        "GET", "/v1/models", f"127.0.0.1:{upstream.port}"
    )  # fmt: skip
    assert conn.goaway_received == ErrorCodes.NO_ERROR


async def test_scripted_h2c_upstream_as_json() -> None:
    async with ScriptedUpstream() as upstream:
        code, out, err = await run_command(
            "--upstream", upstream.url, "-pings=5", "-log-format", "json"
        )
    assert (code, err) == (0, "")
    [line] = out.splitlines()
    found = json.loads(line)
    assert found["usable"] is True and found["problem"] is None
    assert found["http2"] is True and found["tls"] is None
    assert found["verdict"] == "usable: speaks HTTP/2 as h2c, answered 5 of 5 PINGs"
    pings = found["pings"]
    assert (pings["asked"], pings["sent"], pings["answered"], len(pings["rtt_ms"])) == (5, 5, 5, 5)
    assert pings["min_ms"] <= pings["median_ms"] <= pings["max_ms"]
    assert found["settings"]["max_concurrent_streams"] == 100
    assert found["request"] is None and found["goaway"] is None
    assert upstream.connections[0].pings_received == 5


async def test_unverified_certificate_is_said_so(tls: TLSFiles) -> None:
    async with ScriptedUpstream(ssl_context=tls.server_context()) as upstream:
        findings, lines, found = await check("-upstream", upstream.url, "-insecure-skip-verify")
    assert findings.usable
    assert value(lines, "certificate") == "not verified (-insecure-skip-verify)"
    assert found["tls"]["certificate_verified"] is False
    assert found["tls"]["certificate_not_after"] is None
    assert "the certificate was not verified (-insecure-skip-verify)" in findings.notes


async def test_an_error_status_is_a_note_not_a_failure() -> None:
    async def not_found(request: ScriptedRequest) -> None:
        await request.respond(404, [("server", "scripted\x01")])

    async with ScriptedUpstream(not_found) as upstream:
        findings, lines, _ = await check("-upstream", upstream.url, "-path", "/nope?x=1")
    assert findings.usable
    assert value(lines, "request").startswith("GET /nope?x=1: 404, first byte in ")
    assert value(lines, "request").endswith("(server: scripted\\x01)")  # escaped as Python does
    assert value(lines, "note") == (
        "GET /nope?x=1 answered 404: check -path, and the upstream's base path it is joined to"
    )


async def test_the_request_joins_the_base_path_and_hides_its_query_values() -> None:
    async def goaway_then_answer(request: ScriptedRequest) -> None:
        request.connection.goaway()  # a graceful one: this stream is still served
        await request.respond(200)

    async with ScriptedUpstream(goaway_then_answer) as upstream:
        findings, lines, found = await check(
            "-upstream", f"{upstream.url}/v1/?key=secret", "-path", "/models?x=1"
        )
    assert upstream.requests[0].path == "/v1/models?key=secret&x=1"  # as the proxy joins
    assert findings.usable, findings.problem
    assert value(lines, "request").startswith("GET /v1/models?key=...&x=1: 200, first byte in ")
    assert found["request"]["path"] == "/v1/models?key=...&x=1"
    assert "secret" not in out_text(lines, found)
    assert value(lines, "note") == (
        "the upstream ended the connection with GOAWAY NO_ERROR (last stream 1) during the "
        "check: h2ping finishes what runs on such a connection and opens a new one"
    )


# --- raw peers: SETTINGS left out, GOAWAYs ----------------------------------------------


def answering_pings(
    settings: dict[int, int], after: Callable[[RawPeer, int], Awaitable[bool]] | None = None
) -> Callable[[RawPeer], Awaitable[None]]:
    """A raw peer's script: send ``settings``, then ACK each PING; ``after(peer, n)``
    runs on the n-th PING first and returns False to leave it unanswered."""

    async def script(peer: RawPeer) -> None:
        await peer.handshake(settings)
        pings = 0
        while True:
            frame = await peer.read_frame()
            if isinstance(frame, PingFrame) and "ACK" not in frame.flags:
                pings += 1
                if after is None or await after(peer, pings):
                    peer.send(
                        PingFrame(0, flags=["ACK"], opaque_data=frame.opaque_data).serialize()
                    )
                    await peer.drain()

    return script


async def test_settings_not_sent_are_shown_with_their_defaults() -> None:
    script = answering_pings({SettingCodes.MAX_CONCURRENT_STREAMS: 4})
    async with RawUpstream(script) as upstream:
        findings, lines, found = await check("-upstream", upstream.url)
    assert findings.usable, findings.problem
    settings = lines.index(next(ln for ln in lines if ln.startswith("settings")))
    assert [" ".join(ln.split()) for ln in lines[settings : settings + 5]] == [
        "settings max concurrent streams 4",
        "initial window size not sent (65535)",
        "max frame size not sent (16384)",
        "max header list size not sent (unlimited)",
        "header table size not sent (4096)",
    ]
    assert found["settings"] == {
        "max_concurrent_streams": 4,
        "initial_window_size": None,
        "max_frame_size": None,
        "max_header_list_size": None,
        "header_table_size": None,
    }
    assert value(lines, "note") == (
        "the upstream allows 4 concurrent streams per connection: "
        "h2ping opens more connections for more requests"
    )


async def test_no_streams_allowed_is_not_usable() -> None:
    script = answering_pings({SettingCodes.MAX_CONCURRENT_STREAMS: 0})
    async with RawUpstream(script) as upstream:
        findings, lines, _ = await check("-upstream", upstream.url)
    assert findings.problem == (
        "the upstream allows no streams (SETTINGS_MAX_CONCURRENT_STREAMS 0)"
    )
    assert lines[-1] == f"verdict      NOT usable: {findings.problem}"


async def test_goaway_at_once_is_not_usable() -> None:
    async def goaway_at_once(peer: RawPeer) -> None:
        await peer.handshake()
        peer.send(GoAwayFrame(0, last_stream_id=0, error_code=0).serialize())
        await peer.drain()
        while await peer.reader.read(65536):
            pass

    async with RawUpstream(goaway_at_once) as upstream:
        findings, lines, found = await check("-upstream", upstream.url)
    assert findings.problem == (
        "the upstream sent GOAWAY NO_ERROR (last stream 0) right after the connection "
        "opened: h2ping would open no stream on it"
    )
    assert lines[-1] == f"verdict      NOT usable: {findings.problem}"
    assert found["goaway"] == {
        "last_stream_id": 0, "error": "NO_ERROR", "debug": "", "punishes_pings": False
    }  # fmt: skip


async def test_a_server_that_limits_pings_is_usable_with_a_note() -> None:
    """gRPC's policy: GOAWAY(ENHANCE_YOUR_CALM, too_many_pings) on the third PING in a
    row. h2ping backs off on it, so the endpoint is usable."""

    async def punish_third(peer: RawPeer, n: int) -> bool:
        if n < 3:
            return True
        frame = GoAwayFrame(
            0, last_stream_id=0, error_code=ErrorCodes.ENHANCE_YOUR_CALM,
            additional_data=b"too_many_pings",
        )  # fmt: skip
        peer.send(frame.serialize())
        await peer.drain()
        return False

    async with RawUpstream(answering_pings({}, punish_third)) as upstream:
        findings, lines, _ = await check("-upstream", upstream.url, "-path", "/v1/models")
    assert findings.usable, findings.problem
    assert value(lines, "pings").startswith("2 of 3 answered: ")
    assert lines[-1] == (
        "verdict      usable: speaks HTTP/2 as h2c, answered 2 of 3 PINGs, "
        "but limits PINGs (see the note)"
    )
    assert findings.notes == [
        'the upstream sent GOAWAY ENHANCE_YOUR_CALM (last stream 0, debug "too_many_pings") '
        "after 2 PINGs in a row: it limits PINGs; h2ping doubles its PING interval on this "
        "GOAWAY (up to 300s)",
        "the GET was not sent: the upstream had ended the connection",
    ]


# --- endpoints h2ping cannot use --------------------------------------------------------


async def test_unanswered_pings_are_not_usable() -> None:
    async with ScriptedUpstream(auto_ping_ack=False) as upstream:
        findings, lines, found = await check("-upstream", upstream.url, "-ping-timeout", "200ms")
    assert findings.problem == (
        "no PING ACK within 0.2s (-ping-timeout): h2ping would close its connections as dead"
    )
    assert value(lines, "pings") == "0 of 3 answered"
    assert (found["pings"]["sent"], found["pings"]["answered"]) == (1, 0)


async def test_no_response_to_the_request() -> None:
    async def silent(request: ScriptedRequest) -> None:
        await asyncio.sleep(60)

    async with ScriptedUpstream(silent) as upstream:
        findings, _, _ = await check(
            "-upstream", upstream.url, "-path", "/slow", "-request-timeout", "200ms"
        )
    assert findings.problem == "GET /slow: no response head within 0.2s (-request-timeout)"


async def test_a_reset_request() -> None:
    async def refuse(request: ScriptedRequest) -> None:
        request.reset(ErrorCodes.REFUSED_STREAM)

    async with ScriptedUpstream(refuse) as upstream:
        findings, _, _ = await check("-upstream", upstream.url, "-path", "/")
    assert findings.problem == "GET /: the upstream reset the request stream (REFUSED_STREAM)"


async def test_tls_server_offering_only_http1(tls: TLSFiles) -> None:
    async def http1(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        writer.close()

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    context.set_alpn_protocols(["http/1.1"])
    server = await asyncio.start_server(http1, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    async with server:
        code, out, err = await run_command(
            "-upstream", f"https://127.0.0.1:{port}", "-ca-file", tls.ca_file
        )
    assert (code, err) == (1, "")
    lines = out.splitlines()
    assert lines[-1] == (
        f"verdict      NOT usable: 127.0.0.1:{port} did not negotiate HTTP/2 with ALPN "
        "(got http/1.1): h2ping needs h2"
    )
    assert value(lines, "tls").startswith("TLSv1.")  # what was learnt comes first
    assert not [ln for ln in lines if ln.startswith(("http/2", "settings", "pings"))]


async def test_the_proxys_502_words_it_as_the_check_does(tls: TLSFiles) -> None:
    """Both offer ALPN h2 alone (as the Go binary does); the server picks nothing,
    and both ask it what it speaks, and say so in the same words."""

    async def http1(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.close()

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    context.set_alpn_protocols(["http/1.1"])
    server = await asyncio.start_server(http1, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    url = f"https://127.0.0.1:{port}"
    async with server:
        findings, _, _ = await check("-upstream", url, "-ca-file", tls.ca_file)
        async with (
            running_proxy(url, ca_file=tls.ca_file) as proxy,
            aiohttp.ClientSession() as session,
            session.get(proxy.url + "/v1/models") as resp,
        ):
            assert resp.status == 502
            body = await resp.text()
            status = resp.headers["proxy-status"]
    said = f"127.0.0.1:{port} did not negotiate HTTP/2 with ALPN (got http/1.1): h2ping needs h2"
    assert findings.problem == said
    assert said in body and "error=tls_protocol_error" in status, (status, body)


@pytest.mark.parametrize(
    ("scheme", "why"),
    [
        ("https", "did not answer TLS: is it plain HTTP? (WRONG_VERSION_NUMBER)"),
        ("http", "answered in HTTP/1.x, not HTTP/2"),
    ],
)
async def test_plain_http1_server(scheme: str, why: str) -> None:
    async def http1(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)  # a ClientHello, or the HTTP/2 preface
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(http1, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        code, out, err = await run_command("-upstream", f"{scheme}://127.0.0.1:{port}")
    assert (code, err) == (1, "")
    assert out.splitlines()[-1] == f"verdict      NOT usable: 127.0.0.1:{port} {why}"


async def test_connection_refused() -> None:
    port = free_port()  # bound and closed again: nothing listens there
    findings, lines, _ = await check("-upstream", f"http://127.0.0.1:{port}")
    assert findings.problem == f"127.0.0.1:{port} refused the connection"
    assert lines == [
        f"upstream     http://127.0.0.1:{port}",
        f"verdict      NOT usable: 127.0.0.1:{port} refused the connection",
    ]


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_silent_server_times_out(scheme: str) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the check hangs up

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        findings, _, _ = await check(
            "-upstream", f"{scheme}://127.0.0.1:{port}", "-connect-timeout", "300ms"
        )
    assert findings.problem == f"127.0.0.1:{port} did not complete HTTP/2 setup in 0.3s"


async def test_an_unknown_ca(tls: TLSFiles) -> None:
    async with ScriptedUpstream(ssl_context=tls.server_context()) as upstream:
        findings, _, _ = await check("-upstream", upstream.url)  # no -ca-file
    assert findings.problem is not None
    assert findings.problem.startswith(
        f"the certificate of 127.0.0.1:{upstream.port} is signed by an unknown CA: "
        "pass that CA with -ca-file"
    )


# --- a real server ----------------------------------------------------------------------


async def test_nginx(tls: TLSFiles, tmp_path: pathlib.Path) -> None:
    async with run_answering_nginx(tls, tmp_path) as url:
        code, out, err = await run_command(
            "-upstream", url, "-ca-file", tls.ca_file, "-path", "/v1/models"
        )
    assert (code, err) == (0, ""), out
    lines = out.splitlines()
    assert value(lines, "http/2") == "yes, by ALPN h2"
    assert " ".join(value(lines, "settings").split()) == "max concurrent streams 128"
    assert any(" ".join(ln.split()) == "max header list size not sent (unlimited)" for ln in lines)
    assert value(lines, "pings").startswith("3 of 3 answered: ")
    request = value(lines, "request")
    assert request.startswith("GET /v1/models: 200, first byte in ")
    assert "(server: nginx" in request
    assert lines[-1].startswith("verdict      usable: speaks HTTP/2 over TLS (ALPN h2)")


# --- the command line -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["-bogus"], 2, "flag provided but not defined: -bogus"),
        (["-upstream", "http://x", "-pings", "x"], 2, '-pings: invalid integer "x": '
         "expected a whole number"),
        (["-upstream"], 2, "flag needs an argument: -upstream"),
        (["-upstream", "http://x", "-listen", ":1"], 2, "flag provided but not defined: -listen"),
        (["-upstream", "http://x", "-pings", "0"], 1, "-pings: must be between 1 and 100"),
        (["-upstream", "http://x", "-path", "v1"], 1,
         "-path: must start with / and hold no spaces or control characters"),
        (["-upstream", "ftp://x"], 1,
         '-upstream: invalid URL "ftp://x": scheme must be https:// (or http:// for h2c)'),
        ([], 1, "-upstream is required"),
    ],
)  # fmt: skip
def test_bad_flags(args: list[str], code: int, message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "h2ping", "check", *args],
        capture_output=True, text=True, env=ENV, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (code, "")
    assert done.stderr.splitlines() == [f"python -m h2ping check: {message}"]


def test_help_and_the_main_help_mention() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "h2ping", "check", "-h"],
        capture_output=True, text=True, env=ENV, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0
    assert done.stdout.startswith("Usage: python -m h2ping check -upstream URL [flags]\n")
    for flag in ("-path", "-pings", "-request-timeout", "-ca-file", "-connect-timeout"):
        assert f"\n  {flag} " in done.stdout
    assert "  h2ping check -upstream URL [flags]" in help_text("h2ping")


def test_the_proxys_variables_apply_but_flags_win() -> None:
    env = {"H2PING_UPSTREAM": "http://a", "H2PING_PING_TIMEOUT": "2s", "H2PING_LISTEN": ":1"}
    command_line = parse_check_command_line(["-pings", "4"], env)
    assert str(command_line.config.upstream) == "http://a"
    assert command_line.config.ping_timeout == 2
    assert (command_line.check.pings, command_line.notes) == (4, ())
    command_line = parse_check_command_line(["-upstream", "http://b"], env)
    assert str(command_line.config.upstream) == "http://b"


def test_check_is_dispatched_on_the_first_argument(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "-h"]) == 0
    assert capsys.readouterr().out.startswith("Usage: h2ping check -upstream URL")
    assert cli.main(["check", "-pings", "x"]) == 2
    assert (
        capsys.readouterr().err
        == 'h2ping check: -pings: invalid integer "x": expected a whole number\n'
    )


def test_the_url_may_be_given_alone_before_or_after_the_flags() -> None:
    # As curl and h2load take it.
    for argv in (["http://a:81", "-pings", "4"], ["-pings", "4", "http://a:81"]):
        command_line = parse_check_command_line(argv, {})
        assert (str(command_line.config.upstream), command_line.check.pings) == ("http://a:81", 4)
    with pytest.raises(UsageError, match='the URL is given twice: "http://a" and -upstream'):
        parse_check_command_line(["http://a", "-upstream", "http://b"], {})
    with pytest.raises(UsageError, match='unexpected argument "http://b": -upstream is given'):
        parse_check_command_line(["-upstream", "http://a", "http://b"], {})
    with pytest.raises(SettingError, match='-upstream: invalid URL "ftp://x"'):
        parse_check_command_line(["ftp://x"], {})


async def test_the_url_given_alone_is_checked() -> None:
    async with ScriptedUpstream() as upstream:
        code, out, err = await run_command(upstream.url, "-pings", "1")
    assert (code, err) == (0, ""), out
    assert out.splitlines()[0] == f"upstream     {upstream.url}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["chek", "-upstream", "http://x"], 'unknown command "chek" (did you mean check?)'),
        (["Check", "http://x"], 'unknown command "Check" (did you mean check?)'),
        (["https://x"], 'unknown command "https://x" (did you mean -upstream https://x?)'),
        (["serve", "-upstream", "http://x"],
         'unknown command "serve" (the commands: check; the proxy takes flags, see -h)'),
    ],
)  # fmt: skip
def test_an_unknown_command_is_named(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == f"h2ping: {message}\n"


def test_a_bare_word_after_the_flags_is_no_command() -> None:
    # Go's flags end at the first bare word, which the Go binary ignores: so does h2ping.
    command_line = parse_command_line(["-upstream", "http://x", "chek"], {})
    assert command_line.notes[0].startswith('ignoring "chek": flags end at the first argument')


async def test_http_to_a_tls_port_says_to_use_https(tls: TLSFiles) -> None:
    """A TLS server hangs up on the h2c preface without a word: the check then
    tries a TLS handshake on the same port and says what it found."""

    async def tls_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.close()

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    server = await asyncio.start_server(tls_only, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    async with server:
        findings, _, _ = await check("-upstream", f"http://127.0.0.1:{port}")
    assert findings.problem is not None
    assert findings.problem.endswith(
        "before its HTTP/2 SETTINGS: it speaks TLS, use an https:// upstream"
    ), findings.problem


async def test_a_plain_port_that_hangs_up_gets_no_tls_hint() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        findings, _, _ = await check("-upstream", f"http://127.0.0.1:{port}")
    assert findings.problem is not None and "TLS" not in findings.problem, findings.problem
    assert findings.problem.endswith("before its HTTP/2 SETTINGS")


async def test_a_text_answer_says_the_port_speaks_http1() -> None:
    """Python's http.server answers the HTTP/2 preface (version "HTTP/2.0") with an
    error page and no status line, as HTTP/0.9 would: text, not a frame."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        findings, _, _ = await check("-upstream", f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()
    assert findings.problem is not None
    # The proxy's words, then the start of the text, escaped as Python escapes it.
    assert findings.problem.endswith(
        'answered with text, not HTTP/2: it speaks HTTP/1.x (it began "<!DOCTYPE HTML>\\n<htm")'
    ), findings.problem
    assert "frame of" not in findings.problem


@pytest.mark.parametrize("answer", ["status line", "text"])
async def test_the_proxys_502_says_what_the_check_says_of_an_http1_port(answer: str) -> None:
    """One wording for a port that speaks HTTP/1.x where HTTP/2 was expected: the
    proxy's 502 says it as the check does, not as a malformed frame."""
    import http.server
    import threading

    async def http1(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)  # the HTTP/2 preface
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server: Any = None
    if answer == "status line":
        server = await asyncio.start_server(http1, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        said = "answered in HTTP/1.x, not HTTP/2"
    else:  # http.server answers "PRI * HTTP/2.0" with an error page and no status line
        server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), http.server.BaseHTTPRequestHandler
        )
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_port
        said = "answered with text, not HTTP/2: it speaks HTTP/1.x"
    try:
        findings, _, _ = await check("-upstream", f"http://127.0.0.1:{port}")
        async with (
            running_proxy(f"http://127.0.0.1:{port}") as proxy,
            aiohttp.ClientSession() as session,
            session.get(proxy.url + "/") as resp,
        ):
            assert resp.status == 502
            body = await resp.text()
    finally:
        if answer == "status line":
            server.close()
        else:
            server.shutdown()
            server.server_close()
    assert findings.problem is not None and findings.problem.startswith(
        f"127.0.0.1:{port} {said}"
    ), findings.problem
    # http_protocol_error, or connection_terminated for a request that waited for the dial
    assert body.startswith("h2ping: ") and body.endswith(f": {said}\n"), body


def test_printable_escapes_as_python_does() -> None:
    raw = b'<!DOCTYPE HTML>\n<a href="x">\\\r\t\x00\xff'
    text = printable(raw)
    assert text == '<!DOCTYPE HTML>\\n<a href=\\"x\\">\\\\\\r\\t\\x00\\xff'
    assert eval(f'b"{text}"') == raw  # read back as a Python literal, nothing lost
    assert printable(b"abcdef", 3) == "abc"


async def test_a_server_without_tickets_does_not_resume(tls: TLSFiles) -> None:
    context = tls.server_context()
    context.options |= ssl.OP_NO_TICKET
    context.num_tickets = 0  # TLS 1.3: no ticket, no resumption
    async with ScriptedUpstream(ssl_context=context) as upstream:
        code, out, _ = await run_command("-upstream", upstream.url, "-ca-file", tls.ca_file)
    assert code == 0, out
    assert value(out.splitlines(), "tls").endswith(", does not resume sessions")
    assert len(upstream.connections) == 1  # no ticket: nothing to try it with
