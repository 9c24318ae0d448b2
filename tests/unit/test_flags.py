"""Command line / environment parsing (flags.py) and the value parsers in config.py."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from h2ping.config import (
    Config,
    HostPort,
    Upstream,
    format_duration,
    parse_duration,
    parse_listen,
    parse_upstream,
)
from h2ping.egress import ProxySetting, ProxyURL
from h2ping.flags import (
    FlagError,
    HelpRequested,
    SettingError,
    UsageError,
    VersionRequested,
    help_text,
    parse_args,
    parse_check_command_line,
    parse_command_line,
)

UP = ["-upstream", "https://api.example.com"]


def parse(*argv: str, env: dict[str, str] | None = None) -> Config:
    # Always pass an explicit environ so the developer's shell cannot leak in.
    return parse_args(list(argv), env or {})


def notes(*argv: str, env: dict[str, str] | None = None) -> tuple[str, ...]:
    return parse_command_line(list(argv), env or {}).notes


def error(*argv: str, env: dict[str, str] | None = None, code: int | None = None) -> str:
    """The one-line message; ``code`` is the exit code it must carry (2: Go's flag
    package would reject it, 1: the program refuses it after parsing)."""
    with pytest.raises(FlagError) as info:
        parse(*argv, env=env)
    message = str(info.value)
    assert "\n" not in message and len(message.splitlines()) == 1, message
    if code is not None:
        assert info.value.exit_code == code, (message, info.value.exit_code)
        assert isinstance(info.value, UsageError if code == 2 else SettingError)
    return message


# --- spellings -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["-listen", "127.0.0.2:9000"],
        ["-listen=127.0.0.2:9000"],
        ["--listen", "127.0.0.2:9000"],
        ["--listen=127.0.0.2:9000"],
    ],
)
def test_value_flag_spellings(argv: list[str]) -> None:
    assert parse(*UP, *argv).listen == HostPort("127.0.0.2", 9000)


@pytest.mark.parametrize(
    "argv", [["--ping_interval", "30s"], ["--ping_interval=30s"], ["-ping_interval=30s"]]
)
def test_underscores_are_not_flags(argv: list[str]) -> None:
    # Go knows only the dashed names; only the H2PING_* variables use underscores.
    assert error(*UP, *argv, code=2) == (
        "flag provided but not defined: -ping_interval (did you mean -ping-interval?)"
    )
    assert parse(*UP, "--ping-interval", "30s").ping_interval == 30.0


@pytest.mark.parametrize("upstream", [["-upstream=http://h:8080"], ["--upstream", "http://h:8080"]])
def test_upstream_spellings(upstream: list[str]) -> None:
    assert parse(*upstream).upstream == Upstream("http", "h", 8080)


def test_no_prefix_abbreviations() -> None:
    assert error(*UP, "--list", "127.0.0.1:1") == (
        "flag provided but not defined: -list (did you mean -listen?)"
    )
    assert error(*UP, "-ping", "1s") == "flag provided but not defined: -ping"


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("-ping-intervall", "-ping-interval"),
        ("-ping-inteval", "-ping-interval"),
        ("--upstrem", "-upstream"),
        ("-max-conn-ages", "-max-conn-age"),
        ("-readyfile", "-ready-file"),
        ("-shutdown_grace", "-shutdown-grace"),
    ],
)
def test_a_typo_gets_the_flag_it_was_close_to(typo: str, meant: str) -> None:
    name = typo.lstrip("-")
    assert error(*UP, typo, "1", code=2) == (
        f"flag provided but not defined: -{name} (did you mean {meant}?)"
    )


def test_a_name_close_to_none_gets_no_guess() -> None:
    assert error(*UP, "-verbose", code=2) == "flag provided but not defined: -verbose"


def test_an_unknown_variable_close_to_a_setting_is_named(caplog: pytest.LogCaptureFixture) -> None:
    notes = parse_command_line(
        [*UP], {"H2PING_PING_INTERVALL": "30s", "H2PING_NOTHING_LIKE_IT": "1"}
    ).notes
    assert notes == (
        "ignoring H2PING_NOTHING_LIKE_IT: not a setting (see --help for the H2PING_* variables)",
        "ignoring H2PING_PING_INTERVALL: not a setting (did you mean H2PING_PING_INTERVAL?)",
    )


def test_help_lists_every_variable() -> None:
    text = help_text("h2ping")
    listed = text.split("Environment (", 1)[1].split("Other:", 1)[0].split()
    for flag in ("upstream", "ping-interval", "max-buffered-bytes", "admin-listen"):
        assert "H2PING_" + flag.upper().replace("-", "_") in listed


@pytest.mark.parametrize("url", ["https://127.0.0.1:", "http://[::1]:", "https://host:/v1"])
def test_an_empty_port_is_refused(url: str) -> None:
    message = error("-upstream", url, code=1)
    assert message.startswith(f'-upstream: invalid URL "{url}": no port after the')


def test_all_flags_together() -> None:
    cfg = parse(
        *UP,
        "-listen=:8080",
        "-ping-interval=30s",
        "-ping-timeout=5s",
        "-shutdown-grace=2m",
        "-max-conn-age=45m",
        "-connect-timeout=3s",
        "-retry-body-limit=1024",
        "-insecure-skip-verify",
        "-name=edge",
        "-log-level=debug",
    )
    assert cfg.listen == HostPort("0.0.0.0", 8080)
    assert (cfg.ping_interval, cfg.ping_timeout, cfg.shutdown_grace) == (30, 5, 120)
    assert (cfg.max_conn_age, cfg.connect_timeout) == (2700, 3)
    assert cfg.retry_body_limit == 1024
    assert cfg.insecure_skip_verify is True
    assert (cfg.name, cfg.log_level) == ("edge", "debug")


def test_last_flag_wins() -> None:
    assert parse(*UP, "-name", "a", "--name=b").name == "b"
    assert parse("-upstream=https://a", "-upstream=https://b").upstream.host == "b"


def test_value_starting_with_dash_is_taken() -> None:
    assert parse(*UP, "-name", "-x").name == "-x"
    assert parse(*UP, "-name", "--").name == "--"
    assert parse(*UP, "-name", "-h").name == "-h"


def test_empty_value_with_equals() -> None:
    assert parse(*UP, "-name=").instance_name == "api.example.com"  # empty name = upstream host
    assert parse(*UP, "-ca-file=").ca_file is None
    assert error(*UP, "-ping-interval=") == "-ping-interval: empty duration"


# --- bools -----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_bool_true_forms(text: str) -> None:
    assert parse(*UP, f"-insecure-skip-verify={text}").insecure_skip_verify is True


@pytest.mark.parametrize("text", ["0", "f", "F", "FALSE", "false", "False"])
def test_bool_false_forms(text: str) -> None:
    assert parse(*UP, f"--insecure-skip-verify={text}").insecure_skip_verify is False


@pytest.mark.parametrize("text", ["yes", "no", "on", "", "tRUE", "2"])
def test_bool_bad_forms(text: str) -> None:
    message = error(*UP, f"-insecure-skip-verify={text}")
    assert message.startswith(f'-insecure-skip-verify: invalid boolean value "{text}"')


def test_bool_alone_is_true_and_never_eats_next_arg() -> None:
    assert parse(*UP, "-insecure-skip-verify").insecure_skip_verify is True
    assert parse("-insecure-skip-verify", *UP).upstream.host == "api.example.com"
    # "false" after a bare bool flag is a positional argument, as in Go: it ends the
    # flags (the rest is ignored) and the flag stays true. Said in a note.
    cfg = parse(*UP, "-insecure-skip-verify", "false", "-name", "x")
    assert cfg.insecure_skip_verify is True and cfg.name == ""
    assert notes(*UP, "-insecure-skip-verify", "false", "-name", "x") == (
        'ignoring "false" and the 2 arguments after it: flags end at the first argument '
        "that is not one (as in Go); write -insecure-skip-verify=false",
    )


def test_bool_false_overrides_env() -> None:
    env = {"H2PING_INSECURE_SKIP_VERIFY": "true"}
    assert parse(*UP, "-insecure-skip-verify=false", env=env).insecure_skip_verify is False
    assert parse(*UP, env=env).insecure_skip_verify is True


# --- structure errors ------------------------------------------------------------------


def test_double_dash_ends_flags() -> None:
    assert parse(*UP, "--").upstream.host == "api.example.com"
    assert notes(*UP, "--") == ()
    assert parse(*UP, "--", "-listen", ":1").listen == HostPort("127.0.0.1", 1250)
    assert notes(*UP, "--", "-listen", ":1")[0].startswith(
        'ignoring "-listen" and the 1 argument after it: flags end'
    )


@pytest.mark.parametrize("arg", ["x", "-", "http://h"])
def test_positional_ends_the_flags_as_in_go(arg: str) -> None:
    assert notes(*UP, arg) == (
        f'ignoring "{arg}": flags end at the first argument that is not one (as in Go)',
    )
    # Whatever follows is not read, so here -upstream is never seen.
    assert error(arg, *UP, code=1) == "-upstream is required"


def test_unknown_flag() -> None:
    assert error(*UP, "-foo") == "flag provided but not defined: -foo"
    assert error(*UP, "--foo=1") == "flag provided but not defined: -foo"
    assert error("-foo", *UP) == "flag provided but not defined: -foo"


@pytest.mark.parametrize("arg", ["---x", "-=x", "--=x"])
def test_bad_flag_syntax(arg: str) -> None:
    assert error(*UP, arg) == f"bad flag syntax: {arg}"


@pytest.mark.parametrize("name", ["listen", "ping-interval", "name", "upstream"])
def test_missing_value(name: str) -> None:
    assert error("-upstream=https://h", f"-{name}") == f"flag needs an argument: -{name}"
    assert error("-upstream=https://h", f"--{name}") == f"flag needs an argument: -{name}"


def test_missing_upstream() -> None:
    assert error() == "-upstream is required"
    assert error("-listen", ":1") == "-upstream is required"
    assert error(env={"H2PING_UPSTREAM": ""}) == "-upstream is required"


@pytest.mark.parametrize("argv", [["-h"], ["-help"], ["--help"], ["--h"], ["-help=1"]])
def test_help(argv: list[str]) -> None:
    with pytest.raises(HelpRequested):
        parse(*argv)
    with pytest.raises(HelpRequested):
        parse(*UP, *argv)


def test_errors_are_reported_in_argument_order() -> None:
    # Go converts each value as it is read, so the first problem wins.
    assert error(*UP, "-ping-interval=abc", "-foo").startswith("-ping-interval:")
    assert error(*UP, "-foo", "-h") == "flag provided but not defined: -foo"


def test_help_wins_over_what_is_refused_after_parsing() -> None:
    # As in Go: -h ends the parse, so values checked afterwards are never looked at...
    for argv in (["-upstream", "x", "-h"], ["-listen", "nope", "-help"], ["-h", "-foo"], ["-h"]):
        with pytest.raises(HelpRequested):
            parse(*argv)
    # ...but a flag error before it has already ended the parse (Go exits 2 there too).
    assert error("-ping-interval", "abc", "-h", code=2).startswith("-ping-interval:")
    assert error("-foo", "-h", code=2) == "flag provided but not defined: -foo"


@pytest.mark.parametrize(
    "argv", [["-version"], ["--version"], [*UP, "-version"], ["-upstream", "x", "--version"]]
)
def test_version(argv: list[str]) -> None:
    with pytest.raises(VersionRequested):
        parse(*argv)


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        # What Go's flag package rejects: exit 2.
        (["-foo"], 2),
        (["-listen"], 2),
        (["---x"], 2),
        (["-insecure-skip-verify=yes"], 2),
        (["-ping-interval", "soon"], 2),
        (["-retry-body-limit", "1.5"], 2),
        (["-workers", "two"], 2),
        # What the program refuses once parsed: exit 1.
        (["-upstream", "ftp://h"], 1),
        (["-upstream", "https://"], 1),
        (["-ping-interval", "340s"], 1),
        (["-listen", "nope"], 1),
        (["-log-level", "trace"], 1),
        (["-admin-listen", "9901"], 1),
        (["-workers", "0"], 1),
        (["-ca-file", "/nonexistent/ca.pem"], 1),
    ],
)
def test_exit_code_kinds(argv: list[str], code: int) -> None:
    error("-upstream=https://h", *argv, code=code)


def test_missing_upstream_is_refused_after_parsing() -> None:
    assert error(code=1) == "-upstream is required"


def test_unknown_h2ping_variables_are_named_once() -> None:
    env = {"H2PING_PING_INTERVL": "30s", "H2PING_": "", "H2PING_LISTEN": "", "H2PINGX": "1"}
    assert notes(*UP, env=env) == (
        "ignoring H2PING_: not a setting (see --help for the H2PING_* variables)",
        "ignoring H2PING_PING_INTERVL: not a setting (did you mean H2PING_PING_INTERVAL?)",
    )
    assert notes(*UP, env={"H2PING_READY_FILE": "/tmp/r", "H2PING_WORKERS": "2"}) == ()


def test_ready_file() -> None:
    assert parse(*UP).ready_file is None
    assert parse(*UP, "-ready-file", "/run/genrm.ready").ready_file == "/run/genrm.ready"
    assert parse(*UP, env={"H2PING_READY_FILE": "/run/x"}).ready_file == "/run/x"
    assert parse(*UP, "-ready-file=", env={"H2PING_READY_FILE": "/run/x"}).ready_file is None


def test_control_characters_cannot_split_the_message() -> None:
    assert error("-x\ny") == "flag provided but not defined: -x\\ny"
    assert error(*UP, "-foo\u2028bar") == "flag provided but not defined: -foo\\u2028bar"
    assert error(*UP, "-ping-interval=a\nb").startswith('-ping-interval: invalid duration "a\\nb"')


# --- durations -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("60s", 60),
        ("1m30s", 90),
        ("500ms", 0.5),
        ("1.5h", 5400),
        ("30", 30),
        ("0", 0),
        ("0s", 0),
        ("2.5", 2.5),
        ("1h2m3s", 3723),
        ("1500us", 0.0015),
        ("1500µs", 0.0015),
        ("+5s", 5),
    ],
)
def test_duration_forms(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)
    assert parse(*UP, f"-shutdown-grace={text}").shutdown_grace == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["abc", "1x", "1m30", "s", "1 m", "5d", "nan", "inf", ""])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)
    message = error(*UP, "-ping-timeout", text)
    assert message.startswith("-ping-timeout: ")


def test_bad_duration_message_is_go_quoted() -> None:
    assert error(*UP, "-ping-interval", "abc") == (
        '-ping-interval: invalid duration "abc": use Go syntax such as 60s, 1m30s or 500ms'
    )


@pytest.mark.parametrize(("text", "seconds"), [("-1s", -1), ("-1", -1), ("-1m30s", -90)])
def test_negative_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds  # what they mean is each setting's business


def test_negative_durations_take_the_go_binarys_meaning() -> None:
    # Go: a grace already over cuts at once; retirement only for an age above 0.
    assert parse(*UP, "-shutdown-grace=-1s").shutdown_grace == 0
    assert notes(*UP, "-shutdown-grace=-1s") == (
        "-shutdown-grace -1s: taken as 0s, cut in-flight requests at once",
    )
    assert parse(*UP, "-max-conn-age=-5m").max_conn_age == 0
    assert notes(*UP, "-max-conn-age=-5m") == (
        "-max-conn-age -5m: taken as 0s, connections are never retired",
    )
    # Go would PING after every frame it reads, a flood: the one value refused.
    assert error(*UP, "-ping-interval=-1s", code=1) == (
        "-ping-interval: must not be negative (0 disables PINGs)"
    )
    # Settings the Go binary does not have keep refusing negative values.
    assert error(*UP, "-connect-timeout=-1s", code=1) == "-connect-timeout: must be greater than 0"
    assert error(*UP, "-idle-conn-timeout=-1s", code=1).startswith(
        "-idle-conn-timeout: must not be negative"
    )


def test_ping_interval_limit() -> None:
    assert parse(*UP, "-ping-interval=339s").ping_interval == 339
    assert parse(*UP, "-ping-interval=0").ping_interval == 0
    for text in ("340s", "5m40s", "6m", "1h"):
        message = error(*UP, "-ping-interval", text, code=1)
        assert message.startswith("-ping-interval: must be below 340s")


def test_max_conn_age_at_or_above_an_hour_is_taken_with_a_warning() -> None:
    assert parse(*UP, "-max-conn-age=0s").max_conn_age == 0
    assert parse(*UP, "-max-conn-age=59m59s").max_conn_age == 3599
    assert notes(*UP, "-max-conn-age=59m59s") == ()
    for text, seconds in (("1h", 3600), ("3600", 3600), ("2h", 7200)):
        assert parse(*UP, "-max-conn-age", text).max_conn_age == seconds
        [note] = notes(*UP, "-max-conn-age", text)
        assert note.startswith(f"-max-conn-age {text} is not below 1h0m0s, the usual load-bal")


@pytest.mark.parametrize("text", ["0s", "0", "-3s"])
def test_ping_timeout_zero_or_less_is_gos_default(text: str) -> None:
    # Go's HTTP/2 transport replaces a PING timeout <= 0 with 15s.
    assert parse(*UP, f"-ping-timeout={text}").ping_timeout == 15
    assert notes(*UP, f"-ping-timeout={text}") == (
        f"-ping-timeout {text}: taken as 15s, the default the Go binary's HTTP/2 "
        "transport uses for it",
    )


def test_our_own_timeouts_must_be_positive() -> None:
    assert error(*UP, "-connect-timeout=0s", code=1) == "-connect-timeout: must be greater than 0"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.5, "500ms"), (1, "1s"), (60, "1m0s"), (90, "1m30s"), (3000, "50m0s"),
     (3600, "1h0m0s"), (5400, "1h30m0s"), (1.5, "1.5s"), (15, "15s")],
)  # fmt: skip
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds)


# --- integers, files, strings ----------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["1.5", "abc", "16M", "1e6", "", "١٢", " 1", "0x", "08", "1__0", "_1", "1_", "0b2",
     "9223372036854775808"],
)  # fmt: skip
def test_retry_body_limit_not_integer(text: str) -> None:
    message = error(*UP, "-retry-body-limit", text, code=2)
    assert message.startswith("-retry-body-limit: invalid integer"), message


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("+10", 10), ("16777216", 16777216), ("0x10", 16), ("0X1_0", 16), ("010", 8),
     ("0o10", 8), ("0b101", 5), ("1_000", 1000), ("0x_1", 1), ("-0", 0)],
)  # fmt: skip
def test_integers_as_gos_parse_int_base_0(text: str, value: int) -> None:
    # The flag package reads integers with strconv.ParseInt(s, 0, 64).
    assert parse(*UP, "-retry-body-limit", text).retry_body_limit == value


def test_negative_retry_body_limit_disables_as_in_go() -> None:
    assert parse(*UP, "-retry-body-limit", "-1").retry_body_limit == 0
    assert notes(*UP, "-retry-body-limit", "-1") == (
        "-retry-body-limit -1: taken as 0, no body is kept for replay",
    )
    assert error(*UP, "-max-buffered-bytes", "-1", code=1) == (
        "-max-buffered-bytes: must not be negative (0 keeps no bodies)"
    )


def test_max_receive_window_values() -> None:
    assert parse(*UP).max_receive_window == 16 * 1024 * 1024
    assert parse(*UP, "-max-receive-window=65535").max_receive_window == 65535
    for bad in ("65534", "2147483648", "-1"):  # a window has 31 bits, h2's least is 65,535
        assert error(*UP, "-max-receive-window", bad) == (
            "-max-receive-window: must be between 65535 and 2147483647"
        )


def test_max_response_header_bytes_values() -> None:
    assert parse(*UP).max_response_header_bytes == 256 * 1024
    assert parse(*UP, "-max-response-header-bytes=1").max_response_header_bytes == 1
    for bad in ("0", "4294967296"):  # a SETTINGS value has 32 bits
        assert error(*UP, "-max-response-header-bytes", bad) == (
            "-max-response-header-bytes: must be between 1 and 4294967295"
        )


def test_ca_file(tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    assert parse(*UP, "-ca-file", str(pem)).ca_file == str(pem)
    missing = tmp_path / "nope.pem"
    assert error(*UP, "-ca-file", str(missing)) == (
        f'-ca-file: cannot read "{missing}": No such file or directory'
    )
    assert error(*UP, "-ca-file", str(tmp_path)).startswith("-ca-file: cannot read")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read any file")
def test_ca_file_unreadable(tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"
    pem.write_text("x")
    pem.chmod(0)
    assert "Permission denied" in error(*UP, "-ca-file", str(pem))


def test_log_level() -> None:
    for level in ("debug", "info", "warning", "error"):
        assert parse(*UP, "-log-level", level).log_level == level
    assert error(*UP, "-log-level=trace") == (
        "-log-level: must be one of debug, info, warning, error"
    )


def test_named_values_are_taken_in_any_case() -> None:
    # -log-level INFO as Python's logging and most tools spell it, flag and variable alike.
    assert parse(*UP, "-log-level", "INFO").log_level == "info"
    assert parse(*UP, "--log-level=Warning").log_level == "warning"
    assert parse(*UP, env={"H2PING_LOG_LEVEL": "DEBUG"}).log_level == "debug"
    assert parse(*UP, "-log-format", "JSON").log_format == "json"
    assert parse(*UP, env={"H2PING_LOG_FORMAT": "Text"}).log_format == "text"
    check = parse_check_command_line([*UP, "-log-format", "JSON"], {})
    assert check.config.log_format == "json"
    assert error(*UP, "-log-level", "TRACE") == (
        "-log-level: must be one of debug, info, warning, error"
    )


def test_credentials_in_the_upstream_url_are_dropped_with_a_note() -> None:
    # The Go binary accepts them and never sends them; h2ping does the same, and says so.
    assert parse("-upstream", "https://user:pw@h:8443/v1").upstream == Upstream(
        "https", "h", 8443, "/v1"
    )
    [note] = notes("-upstream", "https://user:pw@h:8443/v1")
    assert note.startswith("-upstream: the credentials in the URL are not sent")
    assert "pw" not in note


def test_bad_listen_and_upstream_values() -> None:
    assert error(*UP, "-listen", "nope").startswith('-listen: invalid address "nope"')
    assert error("-upstream", "ftp://h").startswith('-upstream: invalid URL "ftp://h"')


# --- environment -----------------------------------------------------------------------


def test_env_applies_every_setting(tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"
    pem.write_text("x")
    env = {
        "H2PING_UPSTREAM": "http://up:81",
        "H2PING_LISTEN": "[::1]:7000",
        "H2PING_PING_INTERVAL": "30s",
        "H2PING_PING_TIMEOUT": "5s",
        "H2PING_SHUTDOWN_GRACE": "1s",
        "H2PING_MAX_CONN_AGE": "10m",
        "H2PING_CONNECT_TIMEOUT": "2s",
        "H2PING_RETRY_BODY_LIMIT": "7",
        "H2PING_INSECURE_SKIP_VERIFY": "1",
        "H2PING_CA_FILE": str(pem),
        "H2PING_NAME": "envname",
        "H2PING_LOG_LEVEL": "error",
    }
    cfg = parse(env=env)
    assert cfg == Config(
        upstream=Upstream("http", "up", 81),
        listen=HostPort("::1", 7000),
        ping_interval=30,
        ping_timeout=5,
        shutdown_grace=1,
        max_conn_age=600,
        connect_timeout=2,
        retry_body_limit=7,
        insecure_skip_verify=True,
        ca_file=str(pem),
        name="envname",
        log_level="error",
    )


Sample = tuple[str, object]  # a raw value and what it parses to


def _samples(field: dataclasses.Field, tmp_path: Path) -> tuple[Sample, Sample]:
    """Two different valid values of a setting: one for its variable, one for its flag."""
    env_ca, flag_ca = str(tmp_path / "env.pem"), str(tmp_path / "flag.pem")
    special: dict[str, tuple[Sample, Sample]] = {
        "upstream": (
            ("http://envhost:81", Upstream("http", "envhost", 81)),
            ("https://flaghost", Upstream("https", "flaghost", 443)),
        ),
        "listen": (("127.0.0.9:7", HostPort("127.0.0.9", 7)), (":8", HostPort("0.0.0.0", 8))),
        "admin_listen": (("127.0.0.8:9", HostPort("127.0.0.8", 9)), ("", None)),
        "ca_file": ((env_ca, env_ca), (flag_ca, flag_ca)),
        "log_level": (("error", "error"), ("debug", "debug")),
        "log_format": (("json", "json"), ("text", "text")),
        "ready_file": (
            ("/run/env.ready", "/run/env.ready"),
            ("/run/flag.ready", "/run/flag.ready"),
        ),
        "name": (("envname", "envname"), ("flagname", "flagname")),
        "access_log": (("/var/log/env.log", "/var/log/env.log"), ("-", "-")),
        "max_receive_window": (("65535", 65535), ("1048576", 1048576)),
        "proxy": (
            ("http://envproxy:3128", ProxySetting(url=ProxyURL("envproxy", 3128))),
            ("none", ProxySetting()),
        ),
    }
    if field.name in special:
        return special[field.name]
    if isinstance(field.default, bool):
        return ("true", True), ("false", False)
    if isinstance(field.default, int):
        return ("7", 7), ("8", 8)
    if isinstance(field.default, float):
        return ("7s", 7.0), ("1m30s", 90.0)
    raise AssertionError(f"no sample values for the new setting {field.name}: add them here")


def test_every_setting_has_a_variable_and_a_flag_wins(tmp_path: Path) -> None:
    (tmp_path / "env.pem").write_text("x")
    (tmp_path / "flag.pem").write_text("x")
    for field in dataclasses.fields(Config):
        (env_raw, env_value), (flag_raw, flag_value) = _samples(field, tmp_path)
        env = {"H2PING_UPSTREAM": "https://api.example.com"}
        env[f"H2PING_{field.name.upper()}"] = env_raw
        assert getattr(parse(env=env), field.name) == env_value, field.name
        flag = f"-{field.name.replace('_', '-')}={flag_raw}"
        assert getattr(parse(flag, env=env), field.name) == flag_value, field.name


def test_admin_listen() -> None:
    assert parse(*UP).admin_listen is None
    assert parse(*UP, "-admin-listen", "127.0.0.1:9901").admin_listen == HostPort("127.0.0.1", 9901)
    assert parse(*UP, "--admin-listen=:0").admin_listen == HostPort("0.0.0.0", 0)
    assert parse(*UP, "-admin-listen=", env={"H2PING_ADMIN_LISTEN": ":1"}).admin_listen is None
    assert error(*UP, "-admin-listen", "9901").startswith('-admin-listen: invalid address "9901"')


def test_log_format() -> None:
    assert parse(*UP).log_format == "text"
    assert parse(*UP, "-log-format", "json").log_format == "json"
    assert error(*UP, "-log-format=yaml") == "-log-format: must be one of text, json"
    assert error(*UP, env={"H2PING_LOG_FORMAT": "xml"}) == (
        "H2PING_LOG_FORMAT: must be one of text, json"
    )


def test_the_go_launchers_command_line() -> None:
    """Exactly what the framework passes to the Go binary."""
    cfg = parse(
        "-listen", "127.0.0.1:1250", "-upstream", "https://h", "-ping-interval", "60s",
        "-ping-timeout", "15s", "-shutdown-grace", "60s", "-retry-body-limit", "16777216",
        "-max-conn-age", "50m", "-insecure-skip-verify",
        env={"GOMEMLIMIT": "4GiB", "GOMAXPROCS": "2"},
    )  # fmt: skip
    assert cfg == Config(
        upstream=Upstream("https", "h", 443),
        listen=HostPort("127.0.0.1", 1250),
        ping_interval=60,
        ping_timeout=15,
        shutdown_grace=60,
        retry_body_limit=16777216,
        max_conn_age=3000,
        insecure_skip_verify=True,
    )


def test_flags_override_env() -> None:
    env = {"H2PING_PING_INTERVAL": "30s", "H2PING_UPSTREAM": "https://env", "H2PING_NAME": "e"}
    cfg = parse("-ping-interval=10s", "--upstream", "https://flag", env=env)
    assert (cfg.ping_interval, cfg.upstream.host, cfg.name) == (10, "flag", "e")


def test_bad_env_is_ignored_when_flag_given() -> None:
    env = {"H2PING_PING_INTERVAL": "garbage"}
    assert parse(*UP, "-ping-interval=1s", env=env).ping_interval == 1


def test_env_errors_name_the_variable() -> None:
    assert error(*UP, env={"H2PING_PING_INTERVAL": "abc"}) == (
        'H2PING_PING_INTERVAL: invalid duration "abc": use Go syntax such as 60s, 1m30s or 500ms'
    )
    assert error(*UP, env={"H2PING_PING_INTERVAL": "400s"}).startswith(
        "H2PING_PING_INTERVAL: must be below 340s"
    )
    assert error(*UP, env={"H2PING_INSECURE_SKIP_VERIFY": "yes"}).startswith(
        "H2PING_INSECURE_SKIP_VERIFY: invalid boolean value"
    )
    assert error(env={"H2PING_UPSTREAM": "ftp://x"}).startswith("H2PING_UPSTREAM: invalid URL")


def test_unrelated_env_is_ignored() -> None:
    env = {"GOMEMLIMIT": "junk", "GOMAXPROCS": "junk", "H2PING_LISTEN": ""}
    assert parse(*UP, env=env).listen == HostPort("127.0.0.1", 1250)


def test_environ_none_means_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("H2PING_UPSTREAM", "https://from-os")
    assert parse_args([]).upstream.host == "from-os"


# --- defaults and help -----------------------------------------------------------------


def test_defaults_equal_config_defaults() -> None:
    upstream = parse_upstream("https://api.example.com")
    assert parse(*UP) == Config(upstream=upstream)
    cfg = parse(*UP)
    assert cfg.listen == HostPort("127.0.0.1", 1250)
    assert (cfg.ping_interval, cfg.ping_timeout, cfg.shutdown_grace) == (60, 15, 60)
    assert (cfg.max_conn_age, cfg.connect_timeout) == (3000, 10)
    assert cfg.retry_body_limit == 16777216
    assert (cfg.insecure_skip_verify, cfg.ca_file) == (False, None)
    assert (cfg.instance_name, cfg.log_level) == ("api.example.com", "info")


# Every setting of Config is a flag: one spelled like the field, dashes for underscores.
FLAG_NAMES = [f.name.replace("_", "-") for f in dataclasses.fields(Config)]


def test_help_lists_every_flag_with_default() -> None:
    text = help_text("h2ping")
    assert text.startswith("Usage: h2ping ")
    lines = text.splitlines()
    defaults = {f.name: f for f in dataclasses.fields(Config)}
    for name in FLAG_NAMES:
        [line] = [ln for ln in lines if ln.lstrip().split(" ")[0] == f"-{name}"]
        field = defaults[name.replace("-", "_")]
        if name == "upstream":
            assert "default" not in line
            continue
        assert "(default " in line, line
        value = field.default
        if isinstance(value, float):
            assert f"(default {format_duration(value)})" in line
        elif isinstance(value, bool):
            assert f"(default {str(value).lower()})" in line
        elif isinstance(value, int) or (isinstance(value, str) and value):
            assert f"(default {value})" in line
    assert "(default 127.0.0.1:1250)" in text
    assert "(default 1m0s)" in text and "(default 50m0s)" in text


def test_help_is_one_line_per_flag_within_100_columns() -> None:
    lines = help_text("python -m h2ping").splitlines()
    other = lines.index("Other:")
    assert lines[other + 1 : other + 3] == [
        f"  {'-version':<31}print the version and exit",
        f"  {'-h, -help':<31}print this help and exit",
    ]
    flag_lines = [ln for ln in lines[:other] if ln.startswith("  -")]
    assert sorted(ln.split()[0] for ln in flag_lines) == sorted(f"-{n}" for n in FLAG_NAMES)
    for line in lines:
        assert len(line) <= 100, line
    # Help texts start in one column, so the list reads as a table.
    starts = {len(ln) - len(ln[2:].split("  ", 1)[1].lstrip()) for ln in flag_lines}
    assert len(starts) == 1, starts


def test_help_groups_in_order() -> None:
    lines = help_text("h2ping").splitlines()
    headings = [
        "Required:", "Listener:", "Upstream:", "Liveness:", "Lifecycle:", "Logging:", "Admin:"
    ]  # fmt: skip
    positions = [lines.index(h) for h in headings]
    assert positions == sorted(positions)
    upstream_line = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("-upstream "))
    assert positions[0] < upstream_line < positions[1]


# --- config.py parsers -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:1250", HostPort("127.0.0.1", 1250)),
        ("[::1]:1250", HostPort("::1", 1250)),
        (":1250", HostPort("0.0.0.0", 1250)),
        ("localhost:0", HostPort("localhost", 0)),
        ("0.0.0.0:65535", HostPort("0.0.0.0", 65535)),
    ],
)
def test_parse_listen(text: str, expected: HostPort) -> None:
    assert parse_listen(text) == expected


def test_hostport_str_and_loopback() -> None:
    assert str(HostPort("::1", 1250)) == "[::1]:1250"
    assert str(HostPort("127.0.0.1", 1)) == "127.0.0.1:1"
    assert HostPort("::1", 1).is_loopback and HostPort("localhost", 1).is_loopback
    assert not HostPort("0.0.0.0", 1).is_loopback and not HostPort("example.com", 1).is_loopback


@pytest.mark.parametrize(
    "text", ["127.0.0.1", "127.0.0.1:", "h:65536", "h:-1", "h:abc", "::1:80", "[::1]", "[::1"]
)
def test_parse_listen_bad(text: str) -> None:
    with pytest.raises(ValueError):
        parse_listen(text)


@pytest.mark.parametrize(
    ("text", "expected", "authority"),
    [
        ("https://api.example.com", Upstream("https", "api.example.com", 443), "api.example.com"),
        ("http://api.example.com", Upstream("http", "api.example.com", 80), "api.example.com"),
        (
            "https://h:8443/some/path?q=1#f",
            Upstream("https", "h", 8443, "/some/path", "q=1"),
            "h:8443",
        ),
        ("https://h:443", Upstream("https", "h", 443), "h"),
        ("http://h:443", Upstream("http", "h", 443), "h:443"),
        ("https://h:80", Upstream("https", "h", 80), "h:80"),
        ("HTTPS://H.Example", Upstream("https", "h.example", 443), "h.example"),
        ("https://[::1]:8443", Upstream("https", "::1", 8443), "[::1]:8443"),
        ("https://[::1]", Upstream("https", "::1", 443), "[::1]"),
    ],
)
def test_parse_upstream(text: str, expected: Upstream, authority: str) -> None:
    up = parse_upstream(text)
    assert up == expected
    assert up.authority == authority
    assert str(up) == f"{expected.scheme}://{authority}"
    assert up.tls == (expected.scheme == "https")


@pytest.mark.parametrize(
    ("text", "path", "query"),
    [
        ("https://h/v1", "/v1", ""),
        ("https://h/v1/", "/v1/", ""),
        ("https://h/v1?api-version=2024&k=1", "/v1", "api-version=2024&k=1"),
        ("https://h?k=1", "", "k=1"),
        ("https://h/", "/", ""),
        ("https://h/a%2Fb/c d/\u00e9", "/a%2Fb/c%20d/%C3%A9", ""),
        ("https://h/v1#frag", "/v1", ""),
    ],
)
def test_parse_upstream_base_path_and_query(text: str, path: str, query: str) -> None:
    up = parse_upstream(text)
    assert (up.path, up.query) == (path, query)
    assert str(up) == "https://h"  # the connection's address


def test_upstream_display_hides_query_values() -> None:
    assert parse_upstream("https://h:8443/v1").display == "https://h:8443/v1"
    assert parse_upstream("https://h/v1?key=s3cret&v=2").display == "https://h/v1?key=...&v=..."
    assert parse_upstream("https://[::1]").display == "https://[::1]"


@pytest.mark.parametrize(
    "text",
    [
        "ftp://h",
        "h:443",
        "https://",
        "https:///path",
        "https://user@h",
        "https://user:pw@h",
        "https://h:0",
        "https://h:99999",
        "https://h:abc",
        "https://h/a%zz",
    ],
)
def test_parse_upstream_bad(text: str) -> None:
    with pytest.raises(ValueError):
        parse_upstream(text)
    if "@" not in text:  # the command line drops credentials instead (tested above)
        assert error("-upstream", text, code=1).startswith("-upstream: invalid URL")


def test_the_readme_flag_table_lists_every_flag() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    usage = readme.split("## Usage\n", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("`")[1] for line in usage.splitlines() if line.startswith("| `-")}
    assert rows == {f"-{name}" for name in FLAG_NAMES} | {"-version", "-h"}
