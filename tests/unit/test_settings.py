"""Each setting is declared once, on its field of Config (settings.py): Config's checks,
the flag, its H2PING_* variable and its --help line all come from that declaration,
so a new setting needs that one declaration and nothing else."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from h2ping import flags
from h2ping.config import DURATION, Config, ConfigError, parse_upstream
from h2ping.flags import FlagError, SettingError, help_text, parse_command_line
from h2ping.settings import (
    ENV_PREFIX,
    REQUIRED,
    declarations,
    greater_than_zero,
    setting,
    settings_class,
)

UPSTREAM = parse_upstream("https://api.example.com")
UP = ["-upstream", "https://api.example.com"]


def test_every_field_is_one_declared_setting() -> None:
    declared = declarations(Config)
    assert [d.field for d in declared] == [f.name for f in dataclasses.fields(Config)]
    assert len({d.name for d in declared}) == len({d.env for d in declared}) == len(declared)
    for d in declared:
        assert d.name == d.field.replace("_", "-")
        assert d.env == ENV_PREFIX + d.field.upper()
        assert d.help and d.doc and d.group and (d.metavar or d.is_bool)
        assert (d.default is REQUIRED) == (d.name == "upstream")


def test_a_field_without_a_declaration_is_refused() -> None:
    with pytest.raises(TypeError, match=r"Plain\.timeout: a setting is made with setting\(\)"):

        @settings_class
        class Plain:
            timeout: float = 1.0


def test_rules_are_declared_not_written_in_post_init() -> None:
    with pytest.raises(TypeError, match="belong in its setting"):

        @settings_class
        class Checked:
            def __post_init__(self) -> None:
                pass


def _help_section(text: str, flag_line: str) -> str:
    lines = text.splitlines()
    above = lines[: lines.index(flag_line)]
    return next(ln for ln in reversed(above) if ln.endswith(":") and not ln.startswith(" "))


def test_every_setting_is_a_flag_a_variable_and_a_help_line() -> None:
    text = help_text("h2ping")
    variables = text.split("Environment (", 1)[1].split("Other:", 1)[0].split()
    for d in declarations(Config):
        [line] = [ln for ln in text.splitlines() if ln.startswith(f"  -{d.name} ")]
        assert d.help in line and _help_section(text, line) == f"{d.group}:"
        assert d.env in variables
        # The parser knows the flag: a value flag given none asks for one.
        argv = [*UP, f"-{d.name}"] if d.name != "upstream" else ["-upstream"]
        if d.is_bool:
            assert getattr(parse_command_line(argv, {}).config, d.field) is True
        else:
            with pytest.raises(FlagError, match=f"^flag needs an argument: -{d.name}$"):
                parse_command_line(argv, {})
        # And the variable: either its value is taken, or refused under its name.
        try:
            noted = parse_command_line(UP, {d.env: "\x01"}).notes
        except FlagError as exc:
            assert str(exc).startswith(f"{d.env}: "), exc
        else:
            assert not any(d.env in note for note in noted), noted
    assert parse_command_line(UP, {"H2PING_NOT_A_SETTING": "1"}).notes == (
        "ignoring H2PING_NOT_A_SETTING: not a setting (see --help for the H2PING_* variables)",
    )


@pytest.mark.parametrize(
    ("field", "value", "text"),
    [("ping_interval", 340.0, "340s"), ("workers", 0, "0"), ("max_receive_window", 65534, "65534"),
     ("max_streams_per_conn", -1, "-1"), ("idle_conn_timeout", -1.0, "-1s"),
     ("log_format", "xml", "xml")],
)  # fmt: skip
def test_config_built_in_python_is_refused_as_the_command_line_refuses(
    field: str, value: object, text: str
) -> None:
    with pytest.raises(ConfigError) as built:
        Config(upstream=UPSTREAM, **{field: value})
    name = field.replace("_", "-")
    assert built.value.setting == name
    with pytest.raises(SettingError) as parsed:
        parse_command_line([*UP, f"-{name}={text}"], {})
    assert str(parsed.value) == f"-{name}: {built.value.reason}"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("ping_interval", math.nan, "ping-interval: must be a finite duration"),
     ("connect_timeout", -math.inf, "connect-timeout: must be a finite duration"),
     ("ping_interval", -1.0, "ping-interval: must not be negative"),
     ("ping_timeout", 0.0, "ping-timeout: must be greater than 0"),
     ("shutdown_grace", -1.0, "shutdown-grace: must not be negative"),
     ("retry_body_limit", -1, "retry-body-limit: must not be negative (0 disables)"),
     ("max_conn_age", -1.0, "max-conn-age: must not be negative (0s disables)")],
)  # fmt: skip
def test_values_the_go_binary_gives_a_meaning_are_refused_in_python(
    field: str, value: object, message: str
) -> None:
    # The command line takes these as the Go binary does; Python callers get an error.
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        Config(upstream=UPSTREAM, **{field: value})


@settings_class
class _WithOneMore(Config):
    drain_timeout: float = setting(
        default=5.0,
        type=DURATION,
        group="Lifecycle",
        metavar="duration",
        help="a made-up setting, declared here alone",
        doc="a made-up setting",
        rules=[greater_than_zero()],
    )


def test_a_new_setting_needs_its_declaration_only(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"^drain-timeout: must be greater than 0$"):
        _WithOneMore(upstream=UPSTREAM, drain_timeout=0)
    # The command line built on the class with one more declared field:
    monkeypatch.setattr(flags, "Config", _WithOneMore)
    monkeypatch.setattr(flags, "_FLAGS", declarations(_WithOneMore))
    line = "  -drain-timeout duration"
    assert [ln for ln in help_text("h2ping").splitlines() if ln.startswith(line)] == [
        f"{line:<33}a made-up setting, declared here alone (default 5s)"
    ]
    assert "H2PING_DRAIN_TIMEOUT" in help_text("h2ping").split("Environment (", 1)[1]
    given = parse_command_line([*UP, "-drain-timeout=2s"], {"H2PING_DRAIN_TIMEOUT": "3s"})
    assert getattr(given.config, "drain_timeout", None) == 2.0 and given.notes == ()
    from_env = parse_command_line(UP, {"H2PING_DRAIN_TIMEOUT": "3s"}).config
    assert getattr(from_env, "drain_timeout", None) == 3.0
    with pytest.raises(SettingError, match=r"^-drain-timeout: must be greater than 0$"):
        parse_command_line([*UP, "-drain-timeout=0s"], {})
