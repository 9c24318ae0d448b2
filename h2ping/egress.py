"""Where upstream connections go out: directly, or through an HTTP forward proxy.

The ``-proxy`` setting is one of three things (:class:`ProxySetting`):

- ``none`` (the default): connect directly, as the Go binary does, whatever the
  environment says. A launcher that ran the Go binary keeps connecting directly.
- a URL, ``http://[user:password@]host:port``: every upstream connection goes
  through that proxy with ``CONNECT`` (RFC 9110 section 9.3.6).
- ``env``: the variables as curl and httpx read them: ``https_proxy`` /
  ``HTTPS_PROXY`` for an ``https://`` upstream, ``http_proxy`` / ``HTTP_PROXY`` for
  an ``http://`` (h2c) one, then ``all_proxy`` / ``ALL_PROXY`` (the lowercase name
  first, as both do), and ``no_proxy`` / ``NO_PROXY`` (:class:`NoProxy`) to go
  direct for some hosts.

The proxy's credentials (the URL's userinfo) are sent as ``Proxy-Authorization:
Basic`` and never shown: :class:`ProxyURL` prints as ``http://***@host:port``.
A shared leaf: it knows nothing of connections, only of names and addresses.
"""

from __future__ import annotations

import base64
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

#: What ``-proxy`` takes to mean "connect directly" ("" too: unset).
DIRECT = ("none", "direct", "")
#: What ``-proxy`` takes to mean "as the environment says".
FROM_ENVIRONMENT = "env"

#: The variables read with ``-proxy env``, by the upstream's scheme, in order: the
#: first one set wins (lowercase first, as curl and httpx read them).
PROXY_VARIABLES = {
    "https": ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"),
    "http": ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"),
}
NO_PROXY_VARIABLES = ("no_proxy", "NO_PROXY")
#: Every variable ``-proxy env`` looks at.
ENVIRONMENT = (
    *dict.fromkeys(v for names in PROXY_VARIABLES.values() for v in names),
    *NO_PROXY_VARIABLES,
)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True)
class ProxyURL:
    """An HTTP forward proxy: where to connect, and the credentials to send it.

    Its text (``str``, ``repr``) never holds the credentials."""

    host: str
    port: int
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        """``host:port`` (IPv6 in brackets): for log lines, metrics, Proxy-Status."""
        return f"{_bracketed(self.host)}:{self.port}"

    @property
    def has_credentials(self) -> bool:
        return self.username is not None

    @property
    def authorization(self) -> bytes | None:
        """The ``Proxy-Authorization`` value (RFC 7617 Basic), or None."""
        if self.username is None:
            return None
        pair = f"{self.username}:{self.password or ''}".encode()
        return b"Basic " + base64.b64encode(pair)

    def __str__(self) -> str:
        return f"http://{'***@' if self.has_credentials else ''}{self.address}"

    def __repr__(self) -> str:
        return f"ProxyURL({self})"


def parse_proxy_url(text: str) -> ProxyURL:
    """``http://[user[:password]@]host[:port][/]``; without a scheme, ``http://``
    is meant (as curl takes it); without a port, 80, the URL's own (as Python's
    clients take it; curl takes 1080). Raises ValueError, whose text never holds
    the URL (it may hold a password)."""
    raw = text.strip()
    if "://" not in raw:
        raw = "http://" + raw
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"not a proxy URL ({_without_secrets(exc)})") from None
    scheme = parts.scheme.lower()
    if scheme != "http":
        shown = scheme.encode("ascii", "replace").decode()[:20]
        raise ValueError(
            f"a {shown}:// proxy is not supported: h2ping speaks to the proxy in plain "
            "HTTP/1.1 (an http:// URL) and opens TLS to the upstream inside the tunnel"
        )
    if not parts.hostname:
        raise ValueError("a proxy URL needs a host: http://host:port")
    if port == 0:
        raise ValueError("a proxy URL needs a port other than 0")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("a proxy URL is http://[user:password@]host:port, with no path")
    username = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return ProxyURL(parts.hostname, port or 80, username, password)


def _without_secrets(exc: ValueError) -> str:
    # urllib's messages name the part that failed, never the URL's userinfo: kept short.
    return str(exc).split(":", 1)[0][:60]


# --------------------------------------------------------------------- NO_PROXY


@dataclass(frozen=True)
class _Entry:
    """One NO_PROXY entry: a domain (itself and every name under it), an IP address
    or network, and the port it is for (None: any)."""

    domain: str | None = None
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
    port: int | None = None

    def matches(
        self, host: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address | None, port: int
    ) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            return address is not None and address in self.network
        assert self.domain is not None
        return host == self.domain or host.endswith("." + self.domain)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _entry(text: str) -> _Entry | None:
    """One comma-separated item of NO_PROXY, or None when it means nothing."""
    item = text.strip().lower()
    if not item:
        return None
    port: int | None = None
    host = item
    if item.startswith("["):  # [v6] or [v6]:port
        end = item.find("]")
        host, rest = item[1:end], item[end + 1 :]
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    elif item.count(":") == 1:  # host:port (a bare IPv6 literal has more colons)
        name, _, digits = item.partition(":")
        if digits.isdigit():
            host, port = name, int(digits)
    try:
        network = ipaddress.ip_network(host, strict=False)
    except ValueError:
        network = None
    if network is not None:
        return _Entry(network=network, port=port)
    # ".example.com" and "*.example.com" mean the domain, as "example.com" does.
    domain = host.lstrip("*").lstrip(".").rstrip(".")
    return _Entry(domain=domain, port=port) if domain else None


@dataclass(frozen=True)
class NoProxy:
    """The hosts that ``NO_PROXY`` sends directly, read as curl reads it: entries
    separated by commas (spaces around them ignored), case-insensitive; ``*``
    alone: every host; ``example.com``, ``.example.com`` or ``*.example.com``:
    that domain and every name under it; an IP address, or a network in CIDR
    notation (``10.0.0.0/8``), for an upstream given by address (no name is
    resolved to match); any of these with ``:port``: that port only."""

    entries: tuple[_Entry, ...] = ()
    everything: bool = False

    @classmethod
    def parse(cls, text: str) -> NoProxy:
        if text.strip() == "*":
            return cls(everything=True)
        return cls(tuple(e for item in text.split(",") if (e := _entry(item)) is not None))

    def matches(self, host: str, port: int) -> bool:
        """Whether a connection to ``host:port`` goes directly."""
        if self.everything:
            return True
        name = host.lower().strip("[]").rstrip(".")
        address = _ip(name)
        return any(entry.matches(name, address, port) for entry in self.entries)


# ------------------------------------------------------------ the -proxy setting


@dataclass(frozen=True)
class ProxySetting:
    """The ``-proxy`` setting's value: directly, one proxy, or the environment's
    (the variables read when the setting was, kept here)."""

    url: ProxyURL | None = None
    from_environment: bool = False
    environment: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def read(cls, text: str, environ: Mapping[str, str] | None = None) -> ProxySetting:
        """``none``, ``env`` or a proxy URL; raises ValueError."""
        word = text.strip()
        if word.lower() in DIRECT:
            return cls()
        if word.lower() == FROM_ENVIRONMENT:
            env = os.environ if environ is None else environ
            found = tuple((name, env[name]) for name in ENVIRONMENT if env.get(name, "").strip())
            return cls(from_environment=True, environment=found)
        return cls(url=parse_proxy_url(word))

    def route(self, scheme: str, host: str, port: int) -> ProxyURL | None:
        """The proxy that connections to ``scheme://host:port`` go through, None for
        directly. Raises ValueError naming the variable that holds a proxy URL
        h2ping cannot use."""
        if not self.from_environment:
            return self.url
        env = dict(self.environment)
        no_proxy = next((env[name] for name in NO_PROXY_VARIABLES if name in env), "")
        if NoProxy.parse(no_proxy).matches(host, port):
            return None
        for name in PROXY_VARIABLES["https" if scheme == "https" else "http"]:
            if name in env:
                try:
                    return parse_proxy_url(env[name])
                except ValueError as exc:
                    raise ValueError(f"{name}: {exc}") from None
        return None

    def __str__(self) -> str:
        if self.from_environment:
            return FROM_ENVIRONMENT
        return "none" if self.url is None else str(self.url)


def read_proxy_setting(text: str) -> ProxySetting:
    """The ``-proxy`` flag's text to its value (ValueError: refused, exit 1)."""
    return ProxySetting.read(text)
