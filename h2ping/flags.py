"""Command line and environment -> :class:`Config`.

Parsed as Go's ``flag`` package parses the Go binary ``h2-ping-sidecar``'s command
line (the tool replaces it and existing launchers keep their command lines), with
GNU-style ``--flag``/``--flag=value`` too. The settings' declarations on
:class:`Config` (see :mod:`h2ping.settings`) drive parsing, ``H2PING_*`` environment
lookup and the help text.

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
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ._version import __version__
from .config import (
    DURATION,
    INT,
    TEXT,
    CheckSettings,
    Config,
    ConfigError,
    format_duration,
    optional_text,
)
from .egress import FROM_ENVIRONMENT, ProxySetting
from .settings import ENV_PREFIX, REQUIRED, Given, Setting, declarations


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


_GROUPS = ("Required", "Listener", "Upstream", "Liveness", "Lifecycle", "Logging", "Admin")
#: The proxy's flags: one for each setting of Config, in the order it declares them.
_FLAGS: tuple[Setting, ...] = declarations(Config)
_BY_NAME = {f.name: f for f in _FLAGS}

#: ``h2ping check``: the proxy's flags that describe the upstream connection (also
#: read from their H2PING_* variables), then its own (command line only).
_CHECK_SHARED = tuple(
    _BY_NAME[name]
    for name in (
        "upstream", "proxy", "ca-file", "insecure-skip-verify", "connect-timeout",
        "ping-timeout", "log-format",
    )
)  # fmt: skip
_CHECK_OWN: tuple[Setting, ...] = (
    Setting(field="path", type=TEXT, group="Check", metavar="path", doc="",
            help="also GET this path, after the upstream's base path", read=optional_text,
            shown_default="none"),
    Setting(field="pings", type=INT, group="Check", metavar="n", doc="",
            help="PINGs to send, one after another, each timed", default=CheckSettings.pings),
    Setting(field="request_timeout", type=DURATION, group="Check", metavar="duration", doc="",
            help="the -path response head must arrive within this",
            default=CheckSettings.request_timeout),
)  # fmt: skip
_CHECK_GROUPS = ("Required", "Check", "Upstream", "Liveness", "Logging")


def _message(exc: ValueError, raw: str) -> str:
    # config.py quotes with Python repr ('abc'); show Go's "abc" instead.
    return str(exc).replace(repr(raw), _quote(raw), 1)


def _convert(flag: Setting, raw: str, source: str) -> Given:
    try:
        return Given(raw, flag.type.parse(raw), source)
    except ValueError as exc:
        raise UsageError(f"{source}: {_message(exc, raw)}") from None


def _parse_argv(
    argv: Sequence[str],
    notes: list[str],
    known: Mapping[str, Setting],
    positional: Setting | None = None,
) -> dict[str, Given]:
    """Go's flag.Parse loop over the ``known`` flags; returns field -> setting, the
    last occurrence winning. With a ``positional`` setting, one argument that is not
    a flag, before or after the flags, is its value (``check https://host``), as
    curl and h2load take their URL; without, the flags end there, as in Go."""
    found: dict[str, Given] = {}
    url: str | None = None  # the positional argument, once seen
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if positional is not None and (len(arg) < 2 or arg[0] != "-"):
            if url is not None or positional.field in found:
                given = "the URL" if url is not None else f"-{positional.name}"
                raise UsageError(f"unexpected argument {_quote(arg)}: {given} is given already")
            url = arg
            found[positional.field] = _convert(positional, arg, f"-{positional.name}")
            continue
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
        if flag is positional and url is not None:
            raise UsageError(f"the URL is given twice: {_quote(url)} and -{flag.name}")
        found[flag.field] = _convert(flag, value, f"-{flag.name}")  # convert now, like Go
    return found


#: The words that may stand first on the command line instead of a flag.
COMMANDS = ("check",)


def command_word(args: Sequence[str]) -> str | None:
    """The command ``args`` starts with (``check``), or None when they start with a
    flag (or are empty): the proxy's command line. Only the first argument can be
    a command; a bare word anywhere else is where Go's flags end.

    No Go command line starts with a bare word (the Go binary would ignore every
    flag after it), so an unknown first word is a mistyped command: a UsageError
    that names it and, when one is close, the command it was meant to be.
    """
    if not args or args[0].startswith("-"):  # "-" alone is no command either
        return None
    word = args[0]
    if word in COMMANDS:
        return word
    hint = _did_you_mean(word, COMMANDS, "")
    if not hint and "://" in word:
        hint = f" (did you mean -upstream {word}?)"
    if not hint:
        hint = f" (the commands: {', '.join(COMMANDS)}; the proxy takes flags, see -h)"
    raise UsageError(f"unknown command {_quote(word)}{hint}")


#: How alike a name must be to a known one to be offered in its place (difflib's ratio).
_CLOSE_ENOUGH = 0.75


def _did_you_mean(name: str, known: Sequence[str], prefix: str) -> str:
    """`` (did you mean -ping-interval?)`` for a name close to a known one (each
    without the ``prefix`` it is written with), else ""."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=_CLOSE_ENOUGH) if name else []
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def _ignored_arguments(rest: list[str], before: str, known: Mapping[str, Setting]) -> str:
    others = len(rest) - 1
    text = f"ignoring {_quote(rest[0])}" + (
        f" and the {others} argument{'s' if others > 1 else ''} after it" if others else ""
    )
    text += ": flags end at the first argument that is not one (as in Go)"
    name = before.lstrip("-") if before.startswith("-") else ""
    if name in known and known[name].is_bool and rest[0] in ("true", "false"):
        text += f"; write -{name}={rest[0]}"
    return text


def _go_meaning(flag: Setting, given: Given, notes: list[str]) -> Any:
    """Values the Go binary accepts but Config refuses: give them Go's meaning, and say
    so; or refuse them with a reason of the command line's own (a SettingError)."""
    for meaning in flag.go_meanings:
        try:
            value, note = meaning(given)
        except ValueError as exc:
            raise SettingError(f"{given.source}: {_message(exc, given.raw)}") from None
        if note is not None:
            notes.append(note)
        given = dataclasses.replace(given, value=value)
    return given.value


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
    config = _routed(config, settings, environ)
    return CommandLine(config, tuple(notes))


def parse_proxy_command_line(
    argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> CommandLine:
    """``h2ping``'s own command line, ``check`` dispatched before: as
    :func:`parse_command_line`, but an unknown first word is a mistyped command (a
    :class:`UsageError` from :func:`command_word`), not where the flags end."""
    command_word(argv)
    return parse_command_line(argv, environ)


def parse_check_command_line(
    argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> CheckCommandLine:
    """``h2ping check``'s flags (``argv`` after ``check``): as :func:`parse_command_line`
    for the proxy's flags it shares, which may come from ``H2PING_*`` variables too,
    and its own, which may not."""
    notes: list[str] = []
    flags = (*_CHECK_SHARED, *_CHECK_OWN)
    settings = _gather(argv, environ, flags, _CHECK_SHARED, notes, _BY_NAME["upstream"])
    values = _values(flags, settings, notes)
    own = {flag.field for flag in _CHECK_OWN}
    config = _build(Config, {k: v for k, v in values.items() if k not in own}, settings)
    config = _routed(config, settings, environ)
    check = _build(CheckSettings, {k: v for k, v in values.items() if k in own}, settings)
    return CheckCommandLine(config, check, tuple(notes))


def _gather(
    argv: Sequence[str],
    environ: Mapping[str, str] | None,
    flags: Sequence[Setting],
    from_env: Sequence[Setting],
    notes: list[str],
    positional: Setting | None = None,
) -> dict[str, Given]:
    """The ``flags`` given in ``argv`` (and the ``positional`` one's value, if it
    takes one), then those of ``from_env`` given only as variables."""
    env = os.environ if environ is None else environ
    settings = _parse_argv(argv, notes, {flag.name: flag for flag in flags}, positional)
    for flag in from_env:
        raw = env.get(flag.env, "")
        # An empty variable counts as unset: templated deployments often export VAR="".
        if flag.field not in settings and raw != "":
            settings[flag.field] = _convert(flag, raw, flag.env)
    listed = f" (see --help for the {ENV_PREFIX}* variables)"
    known_env = {flag.env for flag in _FLAGS}  # for check too: a proxy's variable is no typo
    suffixes = sorted(known.removeprefix(ENV_PREFIX) for known in known_env)
    notes += [
        f"ignoring {name}: not a setting"
        + (_did_you_mean(name.removeprefix(ENV_PREFIX), suffixes, ENV_PREFIX) or listed)
        for name in sorted(env)
        if name.startswith(ENV_PREFIX) and name not in known_env
    ]
    if "upstream" not in settings:
        raise SettingError("-upstream is required")
    return settings


def _values(
    flags: Sequence[Setting], settings: dict[str, Given], notes: list[str]
) -> dict[str, Any]:
    """Field -> value of each given flag, checked after parsing (a SettingError)."""
    values: dict[str, Any] = {}
    for flag in flags:
        given = settings.get(flag.field)
        if given is None:
            continue
        if flag.read is not None:
            try:
                given = dataclasses.replace(given, value=flag.read(given.value))
            except ValueError as exc:
                raise SettingError(f"{given.source}: {_message(exc, given.raw)}") from None
        values[flag.field] = _go_meaning(flag, given, notes)
    return values


_Built = TypeVar("_Built")


def _build(
    kind: Callable[..., _Built], values: dict[str, Any], settings: dict[str, Given]
) -> _Built:
    """``kind(**values)``, its ConfigError a SettingError naming the flag or variable."""
    try:
        return kind(**values)
    except ConfigError as exc:
        given = settings.get(exc.setting.replace("-", "_"))
        source = given.source if given is not None else f"-{exc.setting}"
        raise SettingError(f"{source}: {exc.reason}") from None


def _routed(
    config: Config, settings: dict[str, Given], environ: Mapping[str, str] | None
) -> Config:
    """``config``, once the proxy its upstream goes through is known: ``-proxy env``
    reads ``environ``'s variables, one of which may hold a URL h2ping cannot use (a
    SettingError)."""
    if environ is not None and config.proxy.from_environment:
        config = config.replace(proxy=ProxySetting.read(FROM_ENVIRONMENT, environ))
    try:
        config.upstream_proxy  # noqa: B018 -- computed (and kept) now, to refuse it now
    except ConfigError as exc:
        given = settings.get("proxy")
        source = given.source if given is not None else "-proxy"
        raise SettingError(f"{source}: {exc.reason}") from None
    return config


_Line = TypeVar("_Line", CommandLine, CheckCommandLine)


def read_command_line(
    parse: Callable[[Sequence[str]], _Line],
    args: Sequence[str],
    prog: str,
    help_for: Callable[[str], str],
    who: str,
) -> _Line | int:
    """``parse(args)``, the proxy's or ``check``'s; or, when it raised, the exit code
    once that is answered as the Go binary answers: the help (``help_for(prog)``) or
    the version on stdout, exit 0; a bad flag on stderr after ``who:``, exit 2 or 1."""
    try:
        return parse(args)
    except HelpRequested:
        print(help_for(prog), end="")
        return 0
    except VersionRequested:
        print(f"h2ping {__version__}")
        return 0
    except FlagError as exc:
        print(f"{who}: {exc}", file=sys.stderr)
        return exc.exit_code


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Config:
    """:func:`parse_command_line` without the notes."""
    return parse_command_line(argv, environ).config


def _default_text(flag: Setting) -> str:
    if flag.shown_default is not None:
        return flag.shown_default
    value = flag.default
    if value is REQUIRED:  # the upstream shows none
        return ""
    if isinstance(value, float):
        return format_duration(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _flag_lines(flags: Sequence[Setting], groups: Sequence[str]) -> tuple[list[str], int]:
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
        f"       {prog} check URL [flags]",
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
