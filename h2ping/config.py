"""Settings: one frozen dataclass, validated on construction.

This is the only place where defaults live. The command line (``flags.py``) and
the embedding API both build a :class:`Config`; every check of a value happens
here so both get the same errors.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import quote, urlsplit

#: AWS Global Accelerator cuts a flow after this long without application bytes.
MIDDLEBOX_IDLE_SECONDS = 340.0
#: The load balancer behind it closes client connections at about this age: a
#: max-conn-age at or above it lets that GOAWAY, not ours, retire connections.
MAX_CONN_AGE_CEILING_SECONDS = 3600.0


class ConfigError(ValueError):
    """A setting has a bad value. ``setting`` names it, the message says why."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting
        self.reason = message


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


LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")


@dataclass(frozen=True)
class Config:
    upstream: Upstream
    listen: HostPort = field(default_factory=lambda: HostPort("127.0.0.1", 1250))
    ping_interval: float = 60.0
    ping_timeout: float = 15.0
    shutdown_grace: float = 60.0
    retry_body_limit: int = 16 * 1024 * 1024
    max_conn_age: float = 50 * 60.0
    # Close a connection that has carried no stream this long, as Go's transport does.
    idle_conn_timeout: float = 90.0
    # The sum of all retry buffers; about average body size x requests in flight.
    max_buffered_bytes: int = 1024 * 1024 * 1024
    # Our SETTINGS_MAX_HEADER_LIST_SIZE: a response over it fails its stream only.
    max_response_header_bytes: int = 256 * 1024
    # Each stream's receive window grows with the link's bandwidth-delay product up to
    # this (http2/windows.py): what a slow client's stream may have buffered for it.
    max_receive_window: int = 16 * 1024 * 1024
    # At most this many streams on one connection, below the peer's own limit, so
    # that one dead connection fails fewer requests; 0: the peer's limit alone.
    max_streams_per_conn: int = 0
    insecure_skip_verify: bool = False
    ca_file: str | None = None
    connect_timeout: float = 10.0
    workers: int = 1  # processes serving one listening socket
    loop_lag_interval: float = 0.0  # tick for measuring event-loop lag; 0 disables
    header_timeout: float = 30.0  # a request head must arrive within this, else 408
    client_idle_timeout: float = 600.0  # close kept-alive client connections idle this long
    name: str = ""
    log_level: str = "info"
    log_format: str = "text"  # "json": one object per line
    # One line per finished request, in log_format, to this file ("-": stderr); None: off.
    access_log: str | None = None
    # /healthz, /readyz and /metrics; None serves none of them.
    admin_listen: HostPort | None = None
    # The command writes its PID here once it listens (for a supervisor); Proxy ignores it.
    ready_file: str | None = None

    def __post_init__(self) -> None:
        for setting, value in (
            ("ping-interval", self.ping_interval),
            ("ping-timeout", self.ping_timeout),
            ("shutdown-grace", self.shutdown_grace),
            ("max-conn-age", self.max_conn_age),
            ("idle-conn-timeout", self.idle_conn_timeout),
            ("connect-timeout", self.connect_timeout),
            ("header-timeout", self.header_timeout),
            ("loop-lag-interval", self.loop_lag_interval),
            ("client-idle-timeout", self.client_idle_timeout),
        ):
            if value != value or value in (float("inf"), float("-inf")):
                raise ConfigError(setting, "must be a finite duration")
        if self.ping_interval < 0:
            raise ConfigError("ping-interval", "must not be negative")
        if self.ping_interval >= MIDDLEBOX_IDLE_SECONDS:
            raise ConfigError(
                "ping-interval",
                f"must be below {MIDDLEBOX_IDLE_SECONDS:g}s, the middlebox idle timer "
                "(0 disables PINGs)",
            )
        if self.ping_timeout <= 0:
            raise ConfigError("ping-timeout", "must be greater than 0")
        if self.shutdown_grace < 0:
            raise ConfigError("shutdown-grace", "must not be negative")
        if self.retry_body_limit < 0:
            raise ConfigError("retry-body-limit", "must not be negative (0 disables)")
        if self.max_conn_age < 0:
            raise ConfigError("max-conn-age", "must not be negative (0s disables)")
        if self.idle_conn_timeout < 0:
            raise ConfigError("idle-conn-timeout", "must not be negative (0 keeps them)")
        if self.max_buffered_bytes < 0:
            raise ConfigError("max-buffered-bytes", "must not be negative (0 keeps no bodies)")
        if not 1 <= self.max_response_header_bytes <= 2**32 - 1:
            raise ConfigError("max-response-header-bytes", "must be between 1 and 4294967295")
        if not 65535 <= self.max_receive_window <= 2**31 - 1:
            raise ConfigError("max-receive-window", "must be between 65535 and 2147483647")
        if not 0 <= self.max_streams_per_conn <= 2**31 - 1:
            raise ConfigError(
                "max-streams-per-conn", "must be between 0 and 2147483647 (0: the server's limit)"
            )
        if not 1 <= self.workers <= 256:
            raise ConfigError("workers", "must be between 1 and 256")
        if self.loop_lag_interval < 0:
            raise ConfigError("loop-lag-interval", "must not be negative (0 disables)")
        if self.header_timeout <= 0:
            raise ConfigError("header-timeout", "must be greater than 0")
        if self.client_idle_timeout <= 0:
            raise ConfigError("client-idle-timeout", "must be greater than 0")
        if self.connect_timeout <= 0:
            raise ConfigError("connect-timeout", "must be greater than 0")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError("log-level", f"must be one of {', '.join(LOG_LEVELS)}")
        if self.log_format not in LOG_FORMATS:
            raise ConfigError("log-format", f"must be one of {', '.join(LOG_FORMATS)}")

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
