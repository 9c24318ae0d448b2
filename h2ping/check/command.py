"""``h2ping check -upstream URL``: can h2ping use this endpoint, and what does it offer?

Run before a long job, it connects once as h2ping would and reports HTTP/2 (ALPN or
h2c), TLS, the server's SETTINGS, PING round trips and, with ``-path``, one GET
(:mod:`h2ping.check.probe` measures). Plain lines by default, one JSON object with
``-log-format json``; the last line, or the ``verdict`` key, says whether h2ping can
use the endpoint and, if not, why.

Exit codes as the proxy's: 0 when h2ping can use the endpoint; 2 for a flag that
cannot be parsed; 1 for a value refused after parsing, or an endpoint h2ping cannot
use (no HTTP/2, a TLS failure, a refused or timed-out connection, no PING answer, an
immediate GOAWAY...).
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..config import CheckSettings, Config
from ..flags import check_help_text, parse_check_command_line, read_command_line
from ..http2.dial import make_ssl_context
from .probe import SETTINGS, Findings, probe

LABEL_WIDTH = 13  # "certificate" and two spaces: the values start in one column


def main(args: Sequence[str], prog: str) -> int:
    """``prog check ARGS``; returns the exit code."""
    command_line = read_command_line(
        parse_check_command_line, args, prog, check_help_text, f"{prog} check"
    )
    if isinstance(command_line, int):
        return command_line
    for note in command_line.notes:
        print(f"{prog} check: {note}", file=sys.stderr)
    config, check = command_line.config, command_line.check
    try:
        ssl_context = make_ssl_context(config) if config.upstream.tls else None
    except ssl.SSLError as exc:  # an unusable -ca-file, worded as the proxy words it
        print(f"{prog} check: ca-file {config.ca_file}: {exc.reason or exc}", file=sys.stderr)
        return 1
    # The report says what went wrong; the connection's log lines are the proxy's.
    logging.getLogger("h2ping").addHandler(logging.NullHandler())
    try:
        findings = asyncio.run(probe(config, check, ssl_context))
    except KeyboardInterrupt:
        print(f"{prog} check: interrupted", file=sys.stderr)
        return 1
    if config.log_format == "json":
        print(json.dumps(report(findings, config, check)))
    else:
        print("\n".join(text_lines(findings, config, check)))
    return 0 if findings.usable else 1


# ------------------------------------------------------------------------- text


def _ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


def _line(label: str, value: str) -> str:
    return f"{label:<{LABEL_WIDTH}}{value}"


def text_lines(findings: Findings, config: Config, check: CheckSettings) -> list[str]:
    """The report as plain lines, the verdict last."""
    lines = [_line("upstream", config.upstream.display)]
    lines += _hop_lines(findings)
    lines += _connection_lines(findings)
    lines += _settings_lines(findings)
    if findings.pings_sent:
        lines.append(_line("pings", _pings_text(findings, check.pings)))
    if findings.response is not None:
        response = findings.response
        server = f" (server: {response.server})" if response.server else ""
        lines.append(
            _line(
                "request",
                f"GET {response.path}: {response.status}, "
                f"first byte in {_ms(response.first_byte)} ms{server}",
            )
        )
    lines += [_line("note", note) for note in findings.notes]
    lines.append(_line("verdict", verdict(findings)))
    return lines


def _hop_lines(findings: Findings) -> list[str]:
    """The way through the forward proxy, before what was found beyond it."""
    hop = findings.hop
    if hop is None:
        return []
    text = hop.proxy
    if hop.tcp_time is not None:
        text += f": TCP {_ms(hop.tcp_time)} ms"
        if hop.status is not None and hop.connect_time is not None:
            text += f", CONNECT {findings.address}: {hop.said} in {_ms(hop.connect_time)} ms"
    return [_line("proxy", text)]


def _connection_lines(findings: Findings) -> list[str]:
    steps = [
        (name, took)
        for name, took in (
            ("TCP", findings.tcp_time),
            ("TLS", findings.tls_time),
            ("SETTINGS", findings.settings_time),
        )
        if took is not None
    ]
    lines = []
    if steps:
        took = ", ".join(f"{name} {_ms(seconds)} ms" for name, seconds in steps)
        through = " through the tunnel" if findings.hop is not None else ""
        lines.append(_line("connected", f"{findings.address}{through}: {took}"))
    tls = findings.tls
    if tls is not None:
        resumes = {True: ", resumes sessions", False: ", does not resume sessions", None: ""}
        lines.append(_line("tls", f"{tls.version}, {tls.cipher}{resumes[tls.resumes]}"))
        lines.append(_line("certificate", _certificate_text(tls.not_after)))
    if findings.http2:
        how = "by ALPN h2" if findings.tls_used else "h2c with prior knowledge"
        lines.append(_line("http/2", f"yes, {how}"))
    return lines


def _certificate_text(not_after: float | None) -> str:
    if not_after is None:
        return "not verified (-insecure-skip-verify)"
    days = (not_after - time.time()) / 86400
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(not_after))
    return f"verified, valid until {when} (in {days:.0f} days)"


def _settings_lines(findings: Findings) -> list[str]:
    if findings.settings is None:
        return []
    width = max(len(name) for _, name, _ in SETTINGS)
    lines: list[str] = []
    for code, name, default in SETTINGS:
        value = findings.settings.get(code)
        shown = str(value) if value is not None else f"not sent ({default})"
        label = "settings" if not lines else ""
        lines.append(_line(label, f"{name.replace('_', ' '):<{width}}  {shown}"))
    return lines


def _pings_text(findings: Findings, asked: int) -> str:
    rtts = findings.ping_rtts
    text = f"{len(rtts)} of {asked} answered"
    if rtts:
        text += ": " + ", ".join(_ms(rtt) for rtt in rtts) + " ms"
        text += (
            f" (min {_ms(min(rtts))}, median {_ms(statistics.median(rtts))},"
            f" max {_ms(max(rtts))} ms)"
        )
    return text


def verdict(findings: Findings) -> str:
    if findings.problem is not None:
        return f"NOT usable: {findings.problem}"
    how = "over TLS (ALPN h2)" if findings.tls_used else "as h2c"
    if findings.hop is not None:
        how += f" through proxy {findings.hop.proxy}"
    text = f"usable: speaks HTTP/2 {how}, answered {len(findings.ping_rtts)} of "
    text += f"{findings.pings_sent} PINGs"
    if findings.goaway is not None and findings.goaway.punishes_pings:
        text += ", but limits PINGs (see the note)"
    return text


# ------------------------------------------------------------------------- JSON


def _json_ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def report(findings: Findings, config: Config, check: CheckSettings) -> dict[str, Any]:
    """The report as one JSON object: every key always there, null when not learnt."""
    tls = findings.tls
    rtts = findings.ping_rtts
    response = findings.response
    goaway = findings.goaway
    return {
        "upstream": config.upstream.display,
        "address": findings.address,
        "usable": findings.usable,
        "verdict": verdict(findings),
        "problem": findings.problem,
        "proxy": None
        if findings.hop is None
        else {
            "address": findings.hop.proxy,
            "tcp_ms": _json_ms(findings.hop.tcp_time),
            "connect_status": findings.hop.status,
            "connect_ms": _json_ms(findings.hop.connect_time),
        },
        "connect_ms": {
            "tcp": _json_ms(findings.tcp_time),
            "tls": _json_ms(findings.tls_time),
            "settings": _json_ms(findings.settings_time),
        },
        "http2": findings.http2,
        "tls": None
        if tls is None
        else {
            "version": tls.version,
            "cipher": tls.cipher,
            "alpn": tls.alpn,
            "resumes_sessions": tls.resumes,
            "certificate_verified": tls.not_after is not None,
            "certificate_not_after": None
            if tls.not_after is None
            else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(tls.not_after)),
        },
        "settings": None
        if findings.settings is None
        else {name: findings.settings.get(code) for code, name, _ in SETTINGS},
        "pings": {
            "asked": check.pings,
            "sent": findings.pings_sent,
            "answered": len(rtts),
            "rtt_ms": [_json_ms(rtt) for rtt in rtts],
            "min_ms": _json_ms(min(rtts)) if rtts else None,
            "median_ms": _json_ms(statistics.median(rtts)) if rtts else None,
            "max_ms": _json_ms(max(rtts)) if rtts else None,
        },
        "request": None
        if response is None
        else {
            "method": "GET",
            "path": response.path,
            "status": response.status,
            "first_byte_ms": _json_ms(response.first_byte),
            "server": response.server,
        },
        "goaway": None
        if goaway is None
        else {
            "last_stream_id": goaway.last_stream_id,
            "error": goaway.error,
            "debug": goaway.debug,
            "punishes_pings": goaway.punishes_pings,
        },
        "notes": findings.notes,
    }
