"""Command line and environment -> :class:`Config`.

Parsed as Go's ``flag`` package parses the Go binary ``h2-ping-sidecar``'s command
line (the tool replaces it and existing launchers keep their command lines), with
GNU-style ``--flag``/``--flag=value`` too. One table drives parsing, ``H2PING_*``
environment lookup and the help text.

Errors come in the Go binary's two kinds. What Go's flag package itself rejects
(an unknown flag, a value its type cannot parse, a missing value) is a
:class:`UsageError`, exit 2; it stops the parse at once, so an ``-h`` after it is
not seen, as in Go. What the program refuses after parsing (no ``-upstream``, a URL
or address it cannot use, a value out of range) is a :class:`SettingError`, exit 1;
an ``-h`` anywhere wins over those. Values Go accepts keep Go's meaning where they
have one (``-ping-timeout 0``, a negative ``-shutdown-grace``), with a note saying so.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from ..config import (
    LOG_LEVELS,
    MAX_CONN_AGE_CEILING_SECONDS,
    CheckSettings,
    Config,
    ConfigError,
    HostPort,
    Upstream,
    format_duration,
    parse_duration,
    parse_listen,
    parse_upstream,
)

ENV_PREFIX = "H2PING_"

#: What the HTTP/2 transport of the Go binary uses for a PING timeout of 0 or less.
GO_DEFAULT_PING_TIMEOUT = 15.0


class FlagError(Exception):
    """Bad command line or environment; the message is one line naming the culprit."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        # Values are echoed back; escape control characters so a stray newline
        # in an argument cannot split the message (callers log it as one line).
        super().__init__("".join(c if c.isprintable() else _escape(c) for c in message))


class UsageError(FlagError):
    """Rejected while parsing, as Go's flag package would: exit 2."""


class SettingError(FlagError):
    """Parsed, but refused, as the Go binary's main() would: exit 1."""

    exit_code = 1


class HelpRequested(Exception):
    """-h, -help or --help was given: print :func:`help_text` and exit 0."""


class VersionRequested(Exception):
    """-version or --version was given: print the version and exit 0."""


@dataclass(frozen=True)
class CommandLine:
    config: Config
    notes: tuple[str, ...]  # warnings to log once logging is set up


@dataclass(frozen=True)
class CheckCommandLine:
    """``h2ping check``'s command line: the proxy's settings it shares, and its own."""

    config: Config
    check: CheckSettings
    notes: tuple[str, ...]


def _escape(char: str) -> str:
    return char.encode("unicode_escape").decode("ascii")


def _quote(text: str) -> str:
    """Quote like Go's %q (double quotes), which is what users of the Go binary saw."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- conversions done while parsing (Go's flag types): a failure is a UsageError ------


def _parse_bool(text: str) -> bool:
    # Exactly the spellings Go's strconv.ParseBool accepts.
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(f"invalid boolean value {text!r}: use true or false")


_INT_DIGITS = {2: "01", 8: "01234567", 10: "0123456789", 16: "0123456789abcdefABCDEF"}
_INT_PREFIXES = {"0x": 16, "0b": 2, "0o": 8}


def _parse_int(text: str) -> int:
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


# --- checks done after parsing (string flags in Go): a failure is a SettingError -------


def _parse_file(text: str) -> str | None:
    if not text:
        return None  # an empty value means "not given", as in the Go binary
    try:  # open() rather than os.access(): the latter says yes to root for any file
        with open(text, "rb"):
            pass
    except OSError as exc:
        raise ValueError(f"cannot read {text!r}: {exc.strerror or exc}") from None
    return text


def _parse_upstream(text: str) -> Upstream:
    # The Go binary never sends a URL's user:password (SetURL does not copy it): drop
    # it here too, rather than refuse a command line that works there. Noted below.
    parts = urlsplit(text.strip())
    if "@" in parts.netloc:
        text = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    return parse_upstream(text)


def _parse_admin_listen(text: str) -> HostPort | None:
    return parse_listen(text) if text else None  # empty: no admin endpoint, as by default


def _parse_path(text: str) -> str | None:
    return text or None  # empty: none, as when not given


_STRING = str
_DURATION = parse_duration


@dataclass(frozen=True)
class _Flag:
    name: str  # Go spelling, also the ConfigError setting name
    group: str
    convert: Callable[[str], Any]  # while parsing: bool, int, duration or plain string
    metavar: str  # "" for bool flags, which take no separate argument
    help: str
    shown_default: str | None = None  # help text for defaults without a literal value
    check: Callable[[str], Any] | None = None  # after parsing, for string flags

    @property
    def field(self) -> str:
        return self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.field.upper()

    @property
    def is_bool(self) -> bool:
        return self.convert is _parse_bool


_GROUPS = ("Required", "Listener", "Upstream", "Liveness", "Lifecycle", "Logging", "Admin")
# Help texts stay short enough for one line of at most 100 columns, default included.
_FLAGS: tuple[_Flag, ...] = (
    _Flag("upstream", "Required", _STRING, "URL",
          "https://host[:port][/base]; http:// means h2c", check=_parse_upstream),
    _Flag("listen", "Listener", _STRING, "host:port",
          "where HTTP/1.1 clients connect", check=parse_listen),
    _Flag("workers", "Listener", _parse_int, "n",
          "processes serving the one listening socket"),
    _Flag("header-timeout", "Listener", _DURATION, "duration",
          "a request head must arrive within this, else 408"),
    _Flag("client-idle-timeout", "Listener", _DURATION, "duration",
          "close a kept-alive client connection idle this long"),
    _Flag("connect-timeout", "Upstream", _DURATION, "duration",
          "limit for TCP + TLS + HTTP/2 setup"),
    _Flag("ca-file", "Upstream", _STRING, "path",
          "also trust the CA certificates in this PEM file", "none", check=_parse_file),
    _Flag("max-response-header-bytes", "Upstream", _parse_int, "n",
          "a larger response header list gets a 502"),
    _Flag("max-receive-window", "Upstream", _parse_int, "bytes",
          "receive window per stream grows up to this"),
    _Flag("max-streams-per-conn", "Upstream", _parse_int, "n",
          "streams per connection at most; 0: the server's limit"),
    _Flag("insecure-skip-verify", "Upstream", _parse_bool, "",
          "skip the upstream's certificate checks; tests only"),
    _Flag("ping-interval", "Liveness", _DURATION, "duration",
          "PING after this much silence; <340s, 0 disables"),
    _Flag("ping-timeout", "Liveness", _DURATION, "duration",
          "a connection silent this long after a PING is dead"),
    _Flag("max-conn-age", "Lifecycle", _DURATION, "duration",
          "retire a connection near this age; 0s disables"),
    _Flag("idle-conn-timeout", "Lifecycle", _DURATION, "duration",
          "close a connection idle this long; 0 keeps it"),
    _Flag("shutdown-grace", "Lifecycle", _DURATION, "duration",
          "time in-flight requests get to finish on SIGTERM"),
    _Flag("retry-body-limit", "Lifecycle", _parse_int, "bytes",
          "replay bodies up to this many bytes; 0 disables"),
    _Flag("max-buffered-bytes", "Lifecycle", _parse_int, "bytes",
          "cap on all bodies kept for replay, together"),
    _Flag("ready-file", "Lifecycle", _STRING, "path",
          "write the PID here once listening; removed at exit", "none", check=_parse_path),
    _Flag("loop-lag-interval", "Logging", _DURATION, "duration",
          "tick this often to measure event-loop lag; 0 disables"),
    _Flag("log-level", "Logging", _STRING, "level",
          ", ".join(LOG_LEVELS[:-1]) + " or " + LOG_LEVELS[-1]),
    _Flag("log-format", "Logging", _STRING, "format", "text, or json for one object per line"),
    _Flag("access-log", "Logging", _STRING, "path",
          "one line per finished request here; - for stderr", "off", check=_parse_path),
    _Flag("name", "Logging", _STRING, "string", "instance name in log lines", "upstream host"),
    _Flag("admin-listen", "Admin", _STRING, "host:port",
          "serve /healthz, /readyz and /metrics here", "off", check=_parse_admin_listen),
)  # fmt: skip
_BY_NAME = {f.name: f for f in _FLAGS}
_KNOWN_ENV = frozenset(f.env for f in _FLAGS)

#: ``h2ping check``: the proxy's flags that describe the upstream connection (also
#: read from their H2PING_* variables), then its own (command line only).
_CHECK_SHARED = tuple(
    _BY_NAME[name]
    for name in (
        "upstream", "ca-file", "insecure-skip-verify", "connect-timeout", "ping-timeout",
        "log-format",
    )
)  # fmt: skip
_CHECK_OWN: tuple[_Flag, ...] = (
    _Flag("path", "Check", _STRING, "path",
          "also GET this path, after the upstream's base path", "none", check=_parse_path),
    _Flag("pings", "Check", _parse_int, "n", "PINGs to send, one after another, each timed"),
    _Flag("request-timeout", "Check", _DURATION, "duration",
          "the -path response head must arrive within this"),
)  # fmt: skip
_CHECK_GROUPS = ("Required", "Check", "Upstream", "Liveness", "Logging")


def _message(exc: ValueError, raw: str) -> str:
    # config.py quotes with Python repr ('abc'); show Go's "abc" instead.
    return str(exc).replace(repr(raw), _quote(raw), 1)


@dataclass
class _Setting:
    raw: str
    value: Any
    source: str  # "-flag" or "H2PING_FLAG", for messages


def _convert(flag: _Flag, raw: str, source: str) -> _Setting:
    try:
        return _Setting(raw, flag.convert(raw), source)
    except ValueError as exc:
        raise UsageError(f"{source}: {_message(exc, raw)}") from None


def _parse_argv(
    argv: Sequence[str], notes: list[str], known: Mapping[str, _Flag]
) -> dict[str, _Setting]:
    """Go's flag.Parse loop over the ``known`` flags; returns field -> setting, the
    last occurrence winning."""
    found: dict[str, _Setting] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--" or len(arg) < 2 or arg[0] != "-":  # "-" alone is positional too
            # Go stops at the first argument that is not a flag and the Go binary
            # never looks at the rest: ignored here too, but not without a word.
            rest = args[i:] if arg == "--" else args[i - 1 :]
            if rest:
                notes.append(_ignored_arguments(rest, args[i - 2] if i >= 2 else "", known))
            break
        body = arg[2:] if arg.startswith("--") else arg[1:]
        if not body or body[0] in "-=":
            raise UsageError(f"bad flag syntax: {arg}")
        name, has_value, value = body.partition("=")
        if name in ("h", "help"):  # Go does this even for -help=x
            raise HelpRequested()
        if name == "version":
            raise VersionRequested()
        flag = known.get(name)
        if flag is None:
            hint = _did_you_mean(name, list(known), "-")
            raise UsageError(f"flag provided but not defined: -{name}{hint}")
        if flag.is_bool:  # never takes the next argument: -insecure-skip-verify=false
            value = value if has_value else "true"
        elif not has_value:  # the next argument is the value, even if it starts with "-"
            if i >= len(args):
                raise UsageError(f"flag needs an argument: -{flag.name}")
            value = args[i]
            i += 1
        found[flag.field] = _convert(flag, value, f"-{flag.name}")  # convert now, like Go
    return found


#: How alike a name must be to a known one to be offered in its place (difflib's ratio).
_CLOSE_ENOUGH = 0.75


def _did_you_mean(name: str, known: Sequence[str], prefix: str) -> str:
    """`` (did you mean -ping-interval?)`` for a name close to a known one (each
    without the ``prefix`` it is written with), else ""."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=_CLOSE_ENOUGH) if name else []
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def _ignored_arguments(rest: list[str], before: str, known: Mapping[str, _Flag]) -> str:
    others = len(rest) - 1
    text = f"ignoring {_quote(rest[0])}" + (
        f" and the {others} argument{'s' if others > 1 else ''} after it" if others else ""
    )
    text += ": flags end at the first argument that is not one (as in Go)"
    name = before.lstrip("-") if before.startswith("-") else ""
    if name in known and known[name].is_bool and rest[0] in ("true", "false"):
        text += f"; write -{name}={rest[0]}"
    return text


def _go_meaning(field: str, setting: _Setting, notes: list[str]) -> Any:
    """Values the Go binary accepts but Config refuses: give them Go's meaning, and say so."""
    value, source = setting.value, setting.source
    if field == "upstream" and "@" in urlsplit(setting.raw.strip()).netloc:
        notes.append(
            f"{source}: the credentials in the URL are not sent (nor are they by the Go "
            "binary); send an Authorization header from the client instead"
        )
    if field == "ping_interval" and value < 0:
        # Go's transport would PING after every frame it reads: a PING flood. Refused.
        raise SettingError(f"{source}: must not be negative (0 disables PINGs)")
    if field == "ping_timeout" and value <= 0:
        notes.append(
            f"{source} {setting.raw}: taken as {format_duration(GO_DEFAULT_PING_TIMEOUT)}, "
            "the default the Go binary's HTTP/2 transport uses for it"
        )
        return GO_DEFAULT_PING_TIMEOUT
    if field == "shutdown_grace" and value < 0:
        notes.append(f"{source} {setting.raw}: taken as 0s, cut in-flight requests at once")
        return 0.0
    if field == "max_conn_age" and value < 0:
        notes.append(f"{source} {setting.raw}: taken as 0s, connections are never retired")
        return 0.0
    if field == "max_conn_age" and value >= MAX_CONN_AGE_CEILING_SECONDS:
        notes.append(
            f"{source} {setting.raw} is not below "
            f"{format_duration(MAX_CONN_AGE_CEILING_SECONDS)}, the usual load-balancer "
            "keep-alive: its GOAWAY may end connections first"
        )
    if field == "retry_body_limit" and value < 0:
        notes.append(f"{source} {setting.raw}: taken as 0, no body is kept for replay")
        return 0
    return value


def parse_command_line(
    argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> CommandLine:
    """Build a Config from ``argv`` (without the program name) and ``H2PING_*`` variables.

    Flags win over the environment. Raises :class:`UsageError`, :class:`SettingError`,
    :class:`HelpRequested` or :class:`VersionRequested`. GOMEMLIMIT/GOMAXPROCS are not
    looked at here: they are not our settings.
    """
    notes: list[str] = []
    settings = _gather(argv, environ, _FLAGS, _FLAGS, notes)
    config = _build(Config, _values(_FLAGS, settings, notes), settings)
    return CommandLine(config, tuple(notes))


def parse_check_command_line(
    argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> CheckCommandLine:
    """``h2ping check``'s flags (``argv`` after ``check``): as :func:`parse_command_line`
    for the proxy's flags it shares, which may come from ``H2PING_*`` variables too,
    and its own, which may not."""
    notes: list[str] = []
    flags = (*_CHECK_SHARED, *_CHECK_OWN)
    settings = _gather(argv, environ, flags, _CHECK_SHARED, notes)
    values = _values(flags, settings, notes)
    own = {flag.field for flag in _CHECK_OWN}
    config = _build(Config, {k: v for k, v in values.items() if k not in own}, settings)
    check = _build(CheckSettings, {k: v for k, v in values.items() if k in own}, settings)
    return CheckCommandLine(config, check, tuple(notes))


def _gather(
    argv: Sequence[str],
    environ: Mapping[str, str] | None,
    flags: Sequence[_Flag],
    from_env: Sequence[_Flag],
    notes: list[str],
) -> dict[str, _Setting]:
    """The ``flags`` given in ``argv``, then those of ``from_env`` given only as variables."""
    env = os.environ if environ is None else environ
    settings = _parse_argv(argv, notes, {flag.name: flag for flag in flags})
    for flag in from_env:
        raw = env.get(flag.env, "")
        # An empty variable counts as unset: templated deployments often export VAR="".
        if flag.field not in settings and raw != "":
            settings[flag.field] = _convert(flag, raw, flag.env)
    listed = f" (see --help for the {ENV_PREFIX}* variables)"
    suffixes = sorted(known.removeprefix(ENV_PREFIX) for known in _KNOWN_ENV)
    notes += [
        f"ignoring {name}: not a setting"
        + (_did_you_mean(name.removeprefix(ENV_PREFIX), suffixes, ENV_PREFIX) or listed)
        for name in sorted(env)
        if name.startswith(ENV_PREFIX) and name not in _KNOWN_ENV
    ]
    if "upstream" not in settings:
        raise SettingError("-upstream is required")
    return settings


def _values(
    flags: Sequence[_Flag], settings: dict[str, _Setting], notes: list[str]
) -> dict[str, Any]:
    """Field -> value of each given flag, checked after parsing (a SettingError)."""
    values: dict[str, Any] = {}
    for flag in flags:
        setting = settings.get(flag.field)
        if setting is None:
            continue
        if flag.check is not None:
            try:
                setting.value = flag.check(setting.value)
            except ValueError as exc:
                raise SettingError(f"{setting.source}: {_message(exc, setting.raw)}") from None
        values[flag.field] = _go_meaning(flag.field, setting, notes)
    return values


_Built = TypeVar("_Built")


def _build(
    kind: Callable[..., _Built], values: dict[str, Any], settings: dict[str, _Setting]
) -> _Built:
    """``kind(**values)``, its ConfigError a SettingError naming the flag or variable."""
    try:
        return kind(**values)
    except ConfigError as exc:
        given = settings.get(exc.setting.replace("-", "_"))
        source = given.source if given is not None else f"-{exc.setting}"
        raise SettingError(f"{source}: {exc.reason}") from None


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Config:
    """:func:`parse_command_line` without the notes."""
    return parse_command_line(argv, environ).config


def _default_text(flag: _Flag) -> str:
    if flag.shown_default is not None:
        return flag.shown_default
    fields = {f.name: f for kind in (Config, CheckSettings) for f in dataclasses.fields(kind)}
    default = fields[flag.field]
    if default.default is not dataclasses.MISSING:
        value = default.default
    elif default.default_factory is not dataclasses.MISSING:
        value = default.default_factory()
    else:  # a field without a default (the upstream) shows none
        return ""
    if isinstance(value, float):
        return format_duration(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _flag_lines(flags: Sequence[_Flag], groups: Sequence[str]) -> tuple[list[str], int]:
    """One line per flag under its group, defaults shown Go-style; and the column
    where the help texts start."""
    usages = {f.name: f"-{f.name} {f.metavar}".rstrip() for f in flags}
    width = max(map(len, usages.values())) + 2
    lines: list[str] = []
    for group in groups:
        lines += ["", f"{group}:"]
        for flag in (f for f in flags if f.group == group):
            default = "" if flag.group == "Required" else f" (default {_default_text(flag)})"
            lines.append(f"  {usages[flag.name]:<{width}}{flag.help}{default}")
    return lines, width


def help_text(prog: str) -> str:
    """Usage, then one line per flag under its group, defaults shown Go-style."""
    lines = [
        f"Usage: {prog} -upstream URL [flags]",
        f"       {prog} check -upstream URL [flags]   (report on an endpoint: check -h)",
        "",
        "Forwards HTTP/1.1 requests over HTTP/2 and keeps quiet connections alive with PINGs.",
        "A drop-in for the Go binary h2-ping-sidecar: its flags, messages and exit codes.",
        "Flags may be written -flag value, -flag=value, --flag value or --flag=value.",
        f"Each flag can also be set as {ENV_PREFIX}<FLAG> (e.g. {ENV_PREFIX}PING_INTERVAL=30s);",
        "flags win over the environment. GOMEMLIMIT and GOMAXPROCS are accepted and ignored.",
    ]
    flag_lines, width = _flag_lines(_FLAGS, _GROUPS)
    lines += flag_lines
    lines += ["", "Environment (each sets the flag of its name; an unknown one is reported):"]
    lines += textwrap.wrap(
        " ".join(flag.env for flag in _FLAGS), width=88, initial_indent="  ", subsequent_indent="  "
    )
    lines += [
        "",
        "Other:",
        f"  {'-version':<{width}}print the version and exit",
        f"  {'-h, -help':<{width}}print this help and exit",
        "",
        "Defaults that differ from the Go binary's: -listen 127.0.0.1:1250 (Go: 127.0.0.1:8080)",
        "and -shutdown-grace 60s (Go: 15m). They are what NeMo Gym's launcher passes, so",
        "h2ping started by hand behaves as the binary does under Gym.",
        "Exit codes: 0 after a clean stop or -h; 2 for a flag Go's flag package would reject",
        "(unknown, unparsable, missing value); 1 for a value refused after parsing, a port",
        "that cannot be bound, a -ready-file that cannot be written, or an internal error.",
    ]
    return "\n".join(lines) + "\n"


def check_help_text(prog: str) -> str:
    """``h2ping check -h``: what it reports, its flags, its exit codes."""
    lines = [
        f"Usage: {prog} check -upstream URL [flags]",
        "",
        "Connects to the upstream as h2ping would and reports what it offers: HTTP/2 by ALPN",
        "(or h2c for http://), the TLS version, cipher and certificate expiry, the server's",
        "SETTINGS, PING round trips and, with -path, the status and first-byte time of a GET.",
        "The last line is the verdict: whether h2ping can use the endpoint, and if not, why.",
        f"The shared flags can also be set as {ENV_PREFIX}<FLAG>; flags win over the environment.",
    ]
    flag_lines, width = _flag_lines((*_CHECK_SHARED, *_CHECK_OWN), _CHECK_GROUPS)
    lines += flag_lines
    lines += [
        "",
        "Other:",
        f"  {'-h, -help':<{width}}print this help and exit",
        "",
        "Exit codes: 0 when h2ping can use the endpoint; 1 when it cannot (the verdict says",
        "why) or for a value refused after parsing; 2 for a flag that cannot be parsed.",
    ]
    return "\n".join(lines) + "\n"
