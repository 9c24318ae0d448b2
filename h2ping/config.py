"""Settings: one frozen dataclass, validated on construction.

Each setting is declared once, on its field of :class:`Config` (see
:mod:`h2ping.settings`): its default, type, rules, help and documentation, and the
Go binary's meaning for values it refuses. The command line (``flags.py``)
and the embedding API both build a :class:`Config`, so both get the same errors.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from .egress import ProxySetting, ProxyURL, read_proxy_setting
from .settings import (
    FINITE,
    ConfigError,
    Given,
    GoMeaning,
    GoType,
    below,
    between,
    greater_than_zero,
    not_negative,
    one_of,
    setting,
    settings_class,
)

#: AWS Global Accelerator cuts a flow after this long without application bytes.
MIDDLEBOX_IDLE_SECONDS = 340.0
#: The load balancer behind it closes client connections at about this age: a
#: max-conn-age at or above it lets that GOAWAY, not ours, retire connections.
MAX_CONN_AGE_CEILING_SECONDS = 3600.0


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)", re.ASCII)
_BARE_SECONDS = re.compile(r"\d+(?:\.\d*)?|\.\d+", re.ASCII)
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_MAX_DURATION_SECONDS = (2**63 - 1) / 1e9


def parse_duration(text: str) -> float:
    """Parse a Go duration (``60s``, ``1m30s``, ``500ms``, ``-1s``) or bare seconds.

    Negative values are returned as such: what they mean is the setting's business
    (the command line gives some of them the Go binary's meaning, Config refuses them).
    """
    s = text.strip()
    if not s:
        raise ValueError("empty duration")
    sign = -1.0 if s.startswith("-") else 1.0
    if s[:1] in "+-":
        s = s[1:]
    # Bare seconds; a plain pattern, since float() would also take "1_000" or "1e3".
    if _BARE_SECONDS.fullmatch(s):
        total = float(s)
    elif s == "0":
        total = 0.0
    else:
        pos = 0
        total = 0.0
        while pos < len(s) or pos == 0:
            m = _DURATION_PART.match(s, pos)
            if m is None:
                raise ValueError(
                    f"invalid duration {text!r}: use Go syntax such as 60s, 1m30s or 500ms"
                )
            total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
            pos = m.end()
    if total > _MAX_DURATION_SECONDS:  # Go's limit: an int64 of nanoseconds
        raise ValueError(f"invalid duration {text!r}: too large")
    return sign * total


def format_duration(seconds: float) -> str:
    """Render seconds the way Go prints a duration, for help text and logs."""
    if seconds == 0:
        return "0s"
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    whole = int(seconds)
    frac = seconds - whole
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    out = ""
    if hours:
        out += f"{hours}h"
    if hours or minutes:
        out += f"{minutes}m"
    out += f"{secs + frac:g}s"
    return out


@dataclass(frozen=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_listen(text: str) -> HostPort:
    """``host:port`` or ``[v6]:port``; an empty host means all interfaces, as in Go."""
    s = text.strip()
    if s.startswith("["):
        end = s.find("]")
        if end < 0 or not s[end + 1 :].startswith(":"):
            raise ValueError(f"invalid address {text!r}: expected [host]:port")
        host, port_text = s[1:end], s[end + 2 :]
    else:
        host, sep, port_text = s.rpartition(":")
        if not sep:
            raise ValueError(f"invalid address {text!r}: expected host:port")
        if ":" in host:
            raise ValueError(f"invalid address {text!r}: put IPv6 hosts in brackets")
    if not (port_text.isascii() and port_text.isdigit()) or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"invalid port in {text!r}: expected 0-65535")
    return HostPort(host or "0.0.0.0", int(port_text))


@dataclass(frozen=True)
class Upstream:
    """Where requests go: the connection's scheme, host and port, and a base path and
    query that each request's own are joined to (as Go's ``ProxyRequest.SetURL`` does)."""

    scheme: str  # "https" (TLS + ALPN h2) or "http" (h2c with prior knowledge)
    host: str
    port: int
    path: str = ""  # escaped, as sent: "" or "/v1"
    query: str = ""  # raw, without the "?"

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def authority(self) -> str:
        """The ``:authority`` sent upstream: the default port is left out."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.tls else 80
        return host if self.port == default else f"{host}:{self.port}"

    def __str__(self) -> str:
        """The connection's address, as ``https://host[:port]``."""
        return f"{self.scheme}://{self.authority}"

    @property
    def display(self) -> str:
        """For log lines: the base path too, and the query's names but not its values,
        which may be keys."""
        return f"{self}{self.path}" + (f"?{self.query_names}" if self.query else "")

    @property
    def query_names(self) -> str:
        """The query with each value shown as ``...``."""
        return "&".join(part.partition("=")[0] + "=..." for part in self.query.split("&"))

    # Per request the header mapping needs these as bytes: computed once.
    @cached_property
    def scheme_bytes(self) -> bytes:
        return self.scheme.encode()

    @cached_property
    def authority_bytes(self) -> bytes:
        return self.authority.encode()

    @cached_property
    def path_prefix(self) -> bytes:
        """The base path that request paths are appended to. One trailing slash goes,
        since the request's path brings its own (Go's ``singleJoiningSlash``)."""
        path = self.path.encode()
        return path[:-1] if path.endswith(b"/") else path

    @cached_property
    def query_bytes(self) -> bytes:
        return self.query.encode()


# RFC 3986 pchar plus "/" and "%" (existing escapes stay as given); Go escapes the rest.
_PATH_SAFE = "/%:@!$&'()*+,;=~"
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def parse_upstream(text: str) -> Upstream:
    """``https://host[:port][/base/path][?query]``; a fragment is ignored, as in Go."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"invalid URL {text!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise ValueError(f"invalid URL {text!r}: scheme must be https:// (or http:// for h2c)")
    if not parts.hostname:
        raise ValueError(f"invalid URL {text!r}: no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"invalid URL {text!r}: credentials in the URL are not supported")
    if port == 0:
        raise ValueError(f"invalid URL {text!r}: port 0")
    if port is None and parts.netloc.rpartition("@")[2].endswith(":"):
        default = 443 if scheme == "https" else 80
        raise ValueError(
            f"invalid URL {text!r}: no port after the ':' (leave the ':' out for {default})"
        )
    if _BAD_ESCAPE.search(parts.path) or _BAD_ESCAPE.search(parts.query):
        raise ValueError(f"invalid URL {text!r}: a % that starts no escape")
    return Upstream(
        scheme,
        parts.hostname,
        port or (443 if scheme == "https" else 80),
        quote(parts.path, safe=_PATH_SAFE),
        quote(parts.query, safe=_PATH_SAFE + "?"),
    )


# --- Go's flag types, and values read from text after parsing ----------------------------


def parse_bool(text: str) -> bool:
    # Exactly the spellings Go's strconv.ParseBool accepts.
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(f"invalid boolean value {text!r}: use true or false")


_INT_DIGITS = {2: "01", 8: "01234567", 10: "0123456789", 16: "0123456789abcdefABCDEF"}
_INT_PREFIXES = {"0x": 16, "0b": 2, "0o": 8}


def parse_int(text: str) -> int:
    """Go's ``strconv.ParseInt(text, 0, 64)``, which the flag package uses: an optional
    sign, ``0x``/``0b``/``0o`` or a leading ``0`` (octal) for the base, and ``_``
    between digits."""
    sign = text[:1] if text[:1] in "+-" else ""
    body = text[len(sign) :]
    base = _INT_PREFIXES.get(body[:2].lower(), 0)
    if base:
        lead, digits = "0", body[2:]  # the prefix counts as a digit before an "_"
    elif body[:1] == "0" and len(body) > 1:
        base, lead, digits = 8, "0", body[1:]
    else:
        base, lead, digits = 10, "", body
    plain = digits.replace("_", "")
    separated = "_" not in digits or not re.search(r"^_|__|_$", lead + digits)
    if not plain or not separated or any(c not in _INT_DIGITS[base] for c in plain):
        raise ValueError(f"invalid integer {text!r}: expected a whole number")
    value = int(sign + plain, base)
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"invalid integer {text!r}: out of range")
    return value  # a negative value is for the setting to interpret


BOOL = GoType(parse_bool, takes_argument=False)
INT = GoType(parse_int)
DURATION = GoType(parse_duration, rules=(FINITE,))
TEXT = GoType(str)


# Values read from a text flag once it is parsed, as the Go binary's main() reads its
# string flags: a ValueError here exits 1, not 2.


def readable_file(text: str) -> str | None:
    if not text:
        return None  # an empty value means "not given", as in the Go binary
    try:  # open() rather than os.access(): the latter says yes to root for any file
        with open(text, "rb"):
            pass
    except OSError as exc:
        raise ValueError(f"cannot read {text!r}: {exc.strerror or exc}") from None
    return text


def upstream_without_credentials(text: str) -> Upstream:
    # The Go binary never sends a URL's user:password (SetURL does not copy it): drop
    # it here too, rather than refuse a command line that works there, and say so
    # (_credentials_not_sent).
    parts = urlsplit(text.strip())
    if "@" in parts.netloc:
        text = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    return parse_upstream(text)


def optional_listen(text: str) -> HostPort | None:
    return parse_listen(text) if text else None  # empty: none, as by default


def optional_text(text: str) -> str | None:
    return text or None  # empty: none, as when not given


def choice(text: str) -> str:
    # A name from a fixed list (a level, a format): any case, as people write them.
    return text.lower()


# --- the Go binary's meaning for values Config refuses --------------------------------------

#: What the HTTP/2 transport of the Go binary uses for a PING timeout of 0 or less.
GO_DEFAULT_PING_TIMEOUT = 15.0


def _negative(value: float) -> bool:
    return value < 0


def _go_takes(value: float, why: str, when: Callable[[float], bool] = _negative) -> GoMeaning:
    """Values that ``when`` picks are taken as ``value``, with a note saying ``why``."""
    shown = format_duration(value) if isinstance(value, float) else str(value)

    def meaning(given: Given) -> tuple[Any, str | None]:
        if when(given.value):
            return value, f"{given.source} {given.raw}: taken as {shown}, {why}"
        return given.value, None

    return meaning


def _no_ping_flood(given: Given) -> tuple[Any, str | None]:
    # Go's transport would PING after every frame it reads: a PING flood. Refused.
    if given.value < 0:
        raise ValueError("must not be negative (0 disables PINGs)")
    return given.value, None


def _past_keep_alive(given: Given) -> tuple[Any, str | None]:
    if given.value < MAX_CONN_AGE_CEILING_SECONDS:
        return given.value, None
    return given.value, (
        f"{given.source} {given.raw} is not below "
        f"{format_duration(MAX_CONN_AGE_CEILING_SECONDS)}, the usual load-balancer "
        "keep-alive: its GOAWAY may end connections first"
    )


def _credentials_not_sent(given: Given) -> tuple[Any, str | None]:
    if "@" not in urlsplit(given.raw.strip()).netloc:
        return given.value, None
    return given.value, (
        f"{given.source}: the credentials in the URL are not sent (nor are they by the Go "
        "binary); send an Authorization header from the client instead"
    )


LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")


@settings_class
class Config:
    """Every setting of the proxy, each declared once: the command line, its
    ``H2PING_*`` variables, ``--help`` and the README's flags table follow these."""

    upstream: Upstream = setting(
        type=TEXT,
        group="Required",
        metavar="URL",
        help="https://host[:port][/base]; http:// means h2c",
        doc="`https://host[:port][/base/path][?query]`. `http://` means h2c with prior knowledge",
        read=upstream_without_credentials,
        go_meanings=[_credentials_not_sent],
    )
    listen: HostPort = setting(
        default_factory=lambda: HostPort("127.0.0.1", 1250),
        type=TEXT,
        group="Listener",
        metavar="host:port",
        help="where HTTP/1.1 clients connect",
        doc="HTTP/1.1 listener; h2ping warns when it is not loopback, because there is no "
        "authentication. The Go binary's default is `127.0.0.1:8080` (see [In place of "
        "the Go binary](docs/go-binary.md))",
        read=parse_listen,
    )
    workers: int = setting(
        default=1,
        type=INT,
        group="Listener",
        metavar="n",
        help="processes serving the one listening socket",
        doc="processes serving the one listening socket, each with its own upstream "
        "connections (see [Running it](docs/running.md#-workers))",
        rules=[between(1, 256)],
    )
    header_timeout: float = setting(
        default=30.0,
        type=DURATION,
        group="Listener",
        metavar="duration",
        help="a request head must arrive within this, else 408",
        doc="a request head must arrive within this, else `408` and close",
        rules=[greater_than_zero()],
    )
    client_idle_timeout: float = setting(
        default=600.0,
        type=DURATION,
        group="Listener",
        metavar="duration",
        help="close a kept-alive client connection idle this long",
        doc="close a kept-alive client connection idle this long",
        rules=[greater_than_zero()],
    )
    connect_timeout: float = setting(
        default=10.0,
        type=DURATION,
        group="Upstream",
        metavar="duration",
        help="limit for TCP + TLS + HTTP/2 setup",
        doc="TCP + TLS + HTTP/2 setup limit",
        rules=[greater_than_zero()],
    )
    ca_file: str | None = setting(
        default=None,
        type=TEXT,
        group="Upstream",
        metavar="path",
        help="also trust the CA certificates in this PEM file",
        doc="extra trust roots (PEM)",
        read=readable_file,
        shown_default="none",
    )
    # Our SETTINGS_MAX_HEADER_LIST_SIZE: a response over it fails its stream only.
    max_response_header_bytes: int = setting(
        default=256 * 1024,
        type=INT,
        group="Upstream",
        metavar="n",
        help="a larger response header list gets a 502",
        doc="our `SETTINGS_MAX_HEADER_LIST_SIZE`; a response whose header list is larger "
        "gets its request a `502`, and only that request",
        rules=[between(1, 2**32 - 1)],  # a SETTINGS value has 32 bits
    )
    # Each stream's receive window grows with the link's bandwidth-delay product up to
    # this (http2/windows.py): what a slow client's stream may have buffered for it.
    max_receive_window: int = setting(
        default=16 * 1024 * 1024,
        type=INT,
        group="Upstream",
        metavar="bytes",
        help="receive window per stream grows up to this",
        doc="each response stream's HTTP/2 receive window grows with the link's measured "
        "bandwidth-delay product up to this; also what a slow client's stream may have "
        "buffered for it (see [Connections](docs/connections.md#receive-windows))",
        rules=[between(65535, 2**31 - 1)],  # h2's least window, and 31 bits
    )
    # A window is a promise to buffer: with many slow clients, the sum of the
    # windows is what they can hold, so their growth comes from one budget.
    receive_window_budget: int = setting(
        default=256 * 1024 * 1024,
        type=INT,
        group="Upstream",
        metavar="bytes",
        help="streams' windows past 128 KiB each, in all",
        doc="the response streams' receive windows grow past their first 128 KiB only "
        "out of this, all upstream connections of a process together: with many slow "
        "clients, what they can have buffered for them (see [Sizing](docs/sizing.md#memory))",
        rules=[not_negative("0: no stream's window grows")],
    )
    # At most this many streams on one connection, below the peer's own limit, so
    # that one dead connection fails fewer requests; 0: the peer's limit alone.
    max_streams_per_conn: int = setting(
        default=0,
        type=INT,
        group="Upstream",
        metavar="n",
        help="streams per connection at most; 0: the server's limit",
        doc="open at most this many streams on one upstream connection, and more "
        "connections instead, so that one dead connection fails at most this many "
        "requests; `0` uses the server's limit alone (`SETTINGS_MAX_CONCURRENT_STREAMS`, "
        "100 or 128 on most)",
        rules=[between(0, 2**31 - 1, "0: the server's limit")],
    )
    # However many connections the server's limits would call for (one stream
    # each, or none), the pool holds at most this many.
    max_upstream_conns: int = setting(
        default=1000,
        type=INT,
        group="Upstream",
        metavar="n",
        help="upstream connections held at most, dials included",
        doc="hold at most this many upstream connections (those being opened "
        "included); at the bound requests wait for a stream slot, and h2ping warns "
        "(see [Connections](docs/connections.md#how-many-connections))",
        rules=[between(1, 2**31 - 1)],
    )
    # Through an HTTP forward proxy (CONNECT), or directly; the environment only when asked.
    proxy: ProxySetting = setting(
        default=ProxySetting(),
        type=TEXT,
        group="Upstream",
        metavar="URL",
        help="via this HTTP proxy (CONNECT); env: from HTTPS_PROXY",
        doc="connect to the upstream through this HTTP forward proxy with `CONNECT`: "
        "`http://[user:password@]host:port`; `env` reads `HTTPS_PROXY`, `NO_PROXY` and the "
        "others as curl does; `none` connects directly, whatever the environment says, as "
        "the Go binary does (see [Running it](docs/running.md#through-an-egress-proxy))",
        read=read_proxy_setting,
        shown_default="none",
    )
    insecure_skip_verify: bool = setting(
        default=False,
        type=BOOL,
        group="Upstream",
        metavar="",
        help="skip the upstream's certificate checks; tests only",
        doc="skip upstream certificate checks (tests only)",
    )
    ping_interval: float = setting(
        default=60.0,
        type=DURATION,
        group="Liveness",
        metavar="duration",
        help="PING after this much silence; <340s, 0 disables",
        doc="send a PING after this long with nothing read; must stay below 340s; `0` disables",
        rules=[
            not_negative(),
            below(
                MIDDLEBOX_IDLE_SECONDS,
                f"must be below {MIDDLEBOX_IDLE_SECONDS:g}s, the middlebox idle timer "
                "(0 disables PINGs)",
            ),
        ],
        go_meanings=[_no_ping_flood],
    )
    ping_timeout: float = setting(
        default=15.0,
        type=DURATION,
        group="Liveness",
        metavar="duration",
        help="a connection silent this long after a PING is dead",
        doc="a connection that sends nothing at all this long after a PING is dead",
        rules=[greater_than_zero()],
        go_meanings=[
            _go_takes(
                GO_DEFAULT_PING_TIMEOUT,
                "the default the Go binary's HTTP/2 transport uses for it",
                when=lambda value: value <= 0,
            )
        ],
    )
    # A peer that takes none of what a connection writes must not make h2ping buffer
    # its answers without end: past this, the connection is cut.
    write_timeout: float = setting(
        default=30.0,
        type=DURATION,
        group="Liveness",
        metavar="duration",
        help="cut a connection the server stops reading this long",
        doc="while an upstream connection's writes wait (the server reads nothing of what "
        "h2ping sends), h2ping reads nothing from it and opens no stream on it; cut it "
        "when this long passes with none of them taken (see "
        "[Connections](docs/connections.md#back-pressure-from-the-upstream))",
        rules=[greater_than_zero()],
    )
    max_conn_age: float = setting(
        default=50 * 60.0,
        type=DURATION,
        group="Lifecycle",
        metavar="duration",
        help="retire a connection near this age; 0s disables",
        doc="retire connections at 90-100 % of this age; `0s` disables. At or above `1h` "
        "(a load balancer's usual keep-alive) h2ping warns",
        rules=[not_negative("0s disables")],
        go_meanings=[_go_takes(0.0, "connections are never retired"), _past_keep_alive],
    )
    # Close a connection that has carried no stream this long, as Go's transport does.
    idle_conn_timeout: float = setting(
        default=90.0,
        type=DURATION,
        group="Lifecycle",
        metavar="duration",
        help="close a connection idle this long; 0 keeps it",
        doc="close an upstream connection that has carried no stream this long, as Go's "
        "transport does; `0` keeps them",
        rules=[not_negative("0 keeps them")],
    )
    shutdown_grace: float = setting(
        default=60.0,
        type=DURATION,
        group="Lifecycle",
        metavar="duration",
        help="time in-flight requests get to finish on SIGTERM",
        doc="on SIGINT/SIGTERM, in-flight requests get this long to finish. The Go "
        "binary's default is `15m`",
        rules=[not_negative()],
        go_meanings=[_go_takes(0.0, "cut in-flight requests at once")],
    )
    retry_body_limit: int = setting(
        default=16 * 1024 * 1024,
        type=INT,
        group="Lifecycle",
        metavar="bytes",
        help="replay bodies up to this many bytes; 0 disables",
        doc="bodies up to this size are kept so a refused request can be replayed; `0` disables",
        rules=[not_negative("0 disables")],
        go_meanings=[_go_takes(0, "no body is kept for replay")],
    )
    # The sum of all retry buffers; about average body size x requests in flight.
    max_buffered_bytes: int = setting(
        default=1024 * 1024 * 1024,
        type=INT,
        group="Lifecycle",
        metavar="bytes",
        help="cap on all bodies kept for replay, together",
        doc="cap on all kept bodies together; beyond it a body streams through without a "
        "replay guarantee",
        rules=[not_negative("0 keeps no bodies")],
    )
    # The command writes its PID here once it listens (for a supervisor); Proxy ignores it.
    ready_file: str | None = setting(
        default=None,
        type=TEXT,
        group="Lifecycle",
        metavar="path",
        help="write the PID here once listening; removed at exit",
        doc="once listening, write the process's PID and a newline here; removed at exit "
        "(see [In place of the Go binary](docs/go-binary.md))",
        read=optional_text,
        shown_default="none",
    )
    loop_lag_interval: float = setting(
        default=0.0,
        type=DURATION,
        group="Logging",
        metavar="duration",
        help="tick this often to measure event-loop lag; 0 disables",
        doc="tick this often to measure event-loop lag, reported in the `stopped:` line and "
        "`/metrics`",
        rules=[not_negative("0 disables")],
    )
    log_level: str = setting(
        default="info",
        type=TEXT,
        group="Logging",
        metavar="level",
        help=", ".join(LOG_LEVELS[:-1]) + " or " + LOG_LEVELS[-1],
        doc="`debug`, `info`, `warning`, `error`; the start and stop lines are written at "
        "every level",
        read=choice,
        rules=[one_of(LOG_LEVELS)],
    )
    log_format: str = setting(
        default="text",
        type=TEXT,
        group="Logging",
        metavar="format",
        help="text, or json for one object per line",
        doc="`json` writes one JSON object per line (see [Observability](docs/observability.md))",
        read=choice,
        rules=[one_of(LOG_FORMATS)],
    )
    # One line per finished request, in log_format, to this file ("-": stderr); None: off.
    access_log: str | None = setting(
        default=None,
        type=TEXT,
        group="Logging",
        metavar="path",
        help="one line per finished request here; - for stderr",
        doc="one line per finished request to this file, or `-` for stderr, in "
        "`-log-format` (see [Observability](docs/observability.md#access-log))",
        read=optional_text,
        shown_default="off",
    )
    # Each request's and response's fields, both sides, credentials masked (forward/headerlog.py).
    log_headers: bool = setting(
        default=False,
        type=BOOL,
        group="Logging",
        metavar="",
        help="log headers as received and sent, secrets masked",
        doc="log the header fields of each request and response as received and as sent, on "
        "both sides, credentials and query values masked (see "
        "[Observability](docs/observability.md#header-log))",
    )
    name: str = setting(
        default="",
        type=TEXT,
        group="Logging",
        metavar="string",
        help="instance name in log lines",
        doc="instance name in log lines",
        shown_default="upstream host",
    )
    # /healthz, /readyz and /metrics; None serves none of them.
    admin_listen: HostPort | None = setting(
        default=None,
        type=TEXT,
        group="Admin",
        metavar="host:port",
        help="serve /healthz, /readyz and /metrics here",
        doc="serve `/healthz`, `/readyz` and `/metrics` on this address (see "
        "[Observability](docs/observability.md))",
        read=optional_listen,
        shown_default="off",
    )

    @cached_property
    def upstream_proxy(self) -> ProxyURL | None:
        """The proxy that upstream connections go through (None: directly). Raises
        :class:`ConfigError` when ``-proxy env`` finds a proxy URL it cannot use."""
        upstream = self.upstream
        try:
            return self.proxy.route(upstream.scheme, upstream.host, upstream.port)
        except ValueError as exc:
            raise ConfigError("proxy", str(exc)) from None

    @property
    def instance_name(self) -> str:
        """The name in log lines: ``--name``, else the upstream host."""
        return self.name or self.upstream.host

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)


_ORIGIN_FORM = re.compile(r"/[!-~]*", re.ASCII)


@dataclass(frozen=True)
class CheckSettings:
    """``h2ping check``'s own settings, beside the :class:`Config` it shares with the
    proxy (upstream, TLS trust, timeouts, log format)."""

    # GET this origin-form path (joined to the upstream's base path) once; None: no request.
    path: str | None = None
    pings: int = 3  # PINGs sent one after another, each timed
    request_timeout: float = 30.0  # the -path response head must arrive within this

    def __post_init__(self) -> None:
        # Sent as the request target is: printable ASCII, no spaces.
        if self.path is not None and not _ORIGIN_FORM.fullmatch(self.path):
            raise ConfigError("path", "must start with / and hold no spaces or control characters")
        if not 1 <= self.pings <= 100:
            raise ConfigError("pings", "must be between 1 and 100")
        if not 0 < self.request_timeout < float("inf"):  # NaN fails too
            raise ConfigError("request-timeout", "must be a finite duration greater than 0")
