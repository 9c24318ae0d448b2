"""Command line and environment -> :class:`Config`.

Spelled like Go's ``flag`` package (the tool replaces the Go binary
``h2-ping-sidecar`` and existing deployments keep their command lines), and also
GNU-style ``--flag``/``--flag=value`` and ``--flag_name``. One table drives
parsing, ``H2PING_*`` environment lookup and the help text. All value checks
live in ``config.py``; this module only converts strings and names the culprit.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .config import (
    LOG_LEVELS,
    Config,
    ConfigError,
    HostPort,
    format_duration,
    parse_duration,
    parse_listen,
    parse_upstream,
)

ENV_PREFIX = "H2PING_"


class FlagError(Exception):
    """Bad command line or environment; the message is one line naming the culprit."""

    def __init__(self, message: str) -> None:
        # Values are echoed back; escape control characters so a stray newline
        # in an argument cannot split the message (callers log it as one line).
        super().__init__("".join(c if c.isprintable() else _escape(c) for c in message))


class HelpRequested(Exception):
    """-h, -help or --help was given: print :func:`help_text` and exit 0."""


def _escape(char: str) -> str:
    return char.encode("unicode_escape").decode("ascii")


def _quote(text: str) -> str:
    """Quote like Go's %q (double quotes), which is what users of the Go binary saw."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _parse_bool(text: str) -> bool:
    # Exactly the spellings Go's strconv.ParseBool accepts.
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(f"invalid boolean value {text!r}: use true or false")


def _parse_int(text: str) -> int:
    # ASCII decimal only: int() would also take "1_000" and non-ASCII digits.
    if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", text):
        raise ValueError(f"invalid integer {text!r}: expected a whole number of bytes")
    return int(text)  # a negative value is left for Config to reject, with its reason


def _parse_file(text: str) -> str | None:
    if not text:
        return None  # an empty value means "not given", as in the Go binary
    try:  # open() rather than os.access(): the latter says yes to root for any file
        with open(text, "rb"):
            pass
    except OSError as exc:
        raise ValueError(f"cannot read {text!r}: {exc.strerror or exc}") from None
    return text


def _parse_admin_listen(text: str) -> HostPort | None:
    return parse_listen(text) if text else None  # empty: no admin endpoint, as by default


@dataclass(frozen=True)
class _Flag:
    name: str  # Go spelling, also the ConfigError setting name
    group: str
    parse: Callable[[str], Any]
    metavar: str  # "" for bool flags, which take no separate argument
    help: str
    shown_default: str | None = None  # help text for defaults without a literal value

    @property
    def field(self) -> str:
        return self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.field.upper()

    @property
    def is_bool(self) -> bool:
        return self.parse is _parse_bool


_GROUPS = ("Required", "Listener", "Upstream", "Liveness", "Lifecycle", "Logging", "Admin")
_DUR = parse_duration
# Help texts stay short enough for one line of at most 100 columns, default included.
_FLAGS: tuple[_Flag, ...] = (
    _Flag("upstream", "Required", parse_upstream, "URL",
          "https://host[:port] to forward to; http:// means h2c"),
    _Flag("listen", "Listener", parse_listen, "host:port",
          "where HTTP/1.1 clients connect"),
    _Flag("workers", "Listener", _parse_int, "n",
          "processes sharing the listen port (SO_REUSEPORT)"),
    _Flag("header-timeout", "Listener", _DUR, "duration",
          "a request head must arrive within this, else 408"),
    _Flag("client-idle-timeout", "Listener", _DUR, "duration",
          "close a kept-alive client connection idle this long"),
    _Flag("connect-timeout", "Upstream", _DUR, "duration",
          "limit for TCP + TLS + HTTP/2 setup"),
    _Flag("ca-file", "Upstream", _parse_file, "path",
          "also trust the CA certificates in this PEM file", "none"),
    _Flag("max-response-header-bytes", "Upstream", _parse_int, "n",
          "a larger response header list gets a 502"),
    _Flag("insecure-skip-verify", "Upstream", _parse_bool, "",
          "skip the upstream's certificate checks; tests only"),
    _Flag("ping-interval", "Liveness", _DUR, "duration",
          "PING after this much silence; <340s, 0 disables"),
    _Flag("ping-timeout", "Liveness", _DUR, "duration",
          "a connection silent this long after a PING is dead"),
    _Flag("max-conn-age", "Lifecycle", _DUR, "duration",
          "retire a connection near this age; <1h, 0s disables"),
    _Flag("idle-conn-timeout", "Lifecycle", _DUR, "duration",
          "close a connection idle this long; 0 keeps it"),
    _Flag("shutdown-grace", "Lifecycle", _DUR, "duration",
          "time in-flight requests get to finish on SIGTERM"),
    _Flag("retry-body-limit", "Lifecycle", _parse_int, "bytes",
          "replay bodies up to this many bytes; 0 disables"),
    _Flag("max-buffered-bytes", "Lifecycle", _parse_int, "bytes",
          "cap on all bodies kept for replay, together"),
    _Flag("loop-lag-interval", "Logging", _DUR, "duration",
          "tick this often to measure event-loop lag; 0 disables"),
    _Flag("log-level", "Logging", str, "level",
          ", ".join(LOG_LEVELS[:-1]) + " or " + LOG_LEVELS[-1]),
    _Flag("log-format", "Logging", str, "format", "text, or json for one object per line"),
    _Flag("name", "Logging", str, "string", "instance name in log lines", "upstream host"),
    _Flag("admin-listen", "Admin", _parse_admin_listen, "host:port",
          "serve /healthz, /readyz and /metrics here", "off"),
)  # fmt: skip
_BY_NAME = {f.name: f for f in _FLAGS}


def _convert(flag: _Flag, raw: str, source: str) -> Any:
    try:
        return flag.parse(raw)
    except ValueError as exc:
        # config.py quotes with Python repr ('abc'); show Go's "abc" instead.
        raise FlagError(f"{source}: {str(exc).replace(repr(raw), _quote(raw), 1)}") from None


def _parse_argv(argv: Sequence[str]) -> dict[str, tuple[Any, str]]:
    """Go's flag.Parse loop; returns field -> (value, source) with the last one winning."""
    found: dict[str, tuple[Any, str]] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":  # ends flags; whatever follows is positional, and we take none
            if i < len(args):
                raise FlagError(f"unexpected argument {_quote(args[i])}")
            break
        if len(arg) < 2 or arg[0] != "-":  # "-" alone is positional in Go too
            raise FlagError(f"unexpected argument {_quote(arg)}")
        body = arg[2:] if arg.startswith("--") else arg[1:]
        if not body or body[0] in "-=":
            raise FlagError(f"bad flag syntax: {arg}")
        name, has_value, value = body.partition("=")
        if name in ("h", "help"):  # Go does this even for -help=x
            raise HelpRequested()
        flag = _BY_NAME.get(name.replace("_", "-"))
        if flag is None:
            raise FlagError(f"flag provided but not defined: -{name}")
        if flag.is_bool:  # never takes the next argument: -insecure-skip-verify=false
            value = value if has_value else "true"
        elif not has_value:  # the next argument is the value, even if it starts with "-"
            if i >= len(args):
                raise FlagError(f"flag needs an argument: -{flag.name}")
            value = args[i]
            i += 1
        source = f"-{flag.name}"
        found[flag.field] = (_convert(flag, value, source), source)  # convert now, like Go
    return found


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Config:
    """Build a Config from ``argv`` (without the program name) and ``H2PING_*`` variables.

    Flags win over the environment. Raises :class:`FlagError` or :class:`HelpRequested`.
    GOMEMLIMIT/GOMAXPROCS are not looked at here: they are not our settings.
    """
    env = os.environ if environ is None else environ
    settings = _parse_argv(argv)
    for flag in _FLAGS:
        raw = env.get(flag.env, "")
        # An empty variable counts as unset: templated deployments often export VAR="".
        if flag.field not in settings and raw != "":
            settings[flag.field] = (_convert(flag, raw, flag.env), flag.env)
    if "upstream" not in settings:
        raise FlagError("-upstream is required")
    try:
        return Config(**{name: value for name, (value, _) in settings.items()})
    except ConfigError as exc:
        _, source = settings.get(exc.setting.replace("-", "_"), (None, f"-{exc.setting}"))
        raise FlagError(f"{source}: {exc.reason}") from None


def _default_text(flag: _Flag) -> str:
    if flag.shown_default is not None:
        return flag.shown_default
    default = next(f for f in dataclasses.fields(Config) if f.name == flag.field)
    value = default.default_factory() if default.default is dataclasses.MISSING else default.default
    if isinstance(value, float):
        return format_duration(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def help_text(prog: str) -> str:
    """Usage, then one line per flag under its group, defaults shown Go-style."""
    lines = [
        f"Usage: {prog} -upstream URL [flags]",
        "",
        "Forwards HTTP/1.1 requests over HTTP/2 and keeps quiet connections alive with PINGs.",
        "Flags may be written -flag value, -flag=value, --flag value or --flag=value.",
        f"Each flag can also be set as {ENV_PREFIX}<FLAG> (e.g. {ENV_PREFIX}PING_INTERVAL=30s);",
        "flags win over the environment. GOMEMLIMIT and GOMAXPROCS are accepted and ignored.",
    ]
    usages = {f.name: f"-{f.name} {f.metavar}".rstrip() for f in _FLAGS}
    width = max(map(len, usages.values())) + 2
    for group in _GROUPS:
        lines += ["", f"{group}:"]
        for flag in (f for f in _FLAGS if f.group == group):
            default = "" if flag.group == "Required" else f" (default {_default_text(flag)})"
            lines.append(f"  {usages[flag.name]:<{width}}{flag.help}{default}")
    return "\n".join(lines) + "\n"
