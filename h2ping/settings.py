"""How a setting is declared: once, on its field, with all that is said about it.

A field of a settings class (:class:`~h2ping.config.Config`) is made with
:func:`setting`, which holds its default, the Go flag type that reads it from text,
the rules every value must keep (each with the reason given when one does not), its
``--help`` line and group, its meaning in the README's flags table, and what the Go
binary makes of values the rules refuse. The class checks its values against these
rules when it is built, so a setting made in Python is refused for the same reason
as on the command line; the command line (``flags.py``) takes its flags,
``H2PING_*`` variables and help from the same declarations.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, dataclass_transform

#: Each setting can also be given as this prefix and its name in capitals, with
#: underscores for dashes (``H2PING_PING_INTERVAL``).
ENV_PREFIX = "H2PING_"


class ConfigError(ValueError):
    """A setting has a bad value. ``setting`` names it, the message says why."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting
        self.reason = message


@dataclass(frozen=True)
class Rule:
    """What every value of a setting must be, and the reason given when it is not."""

    holds: Callable[[Any], bool]
    reason: str  # "must ...", after the setting's name


def _with(reason: str, why: str) -> str:
    return f"{reason} ({why})" if why else reason


def not_negative(why: str = "") -> Rule:
    return Rule(lambda value: value >= 0, _with("must not be negative", why))


def greater_than_zero() -> Rule:
    return Rule(lambda value: value > 0, "must be greater than 0")


def between(low: int, high: int, why: str = "") -> Rule:
    return Rule(lambda value: low <= value <= high, _with(f"must be between {low} and {high}", why))


def below(limit: float, reason: str) -> Rule:
    return Rule(lambda value: value < limit, reason)


def one_of(choices: Sequence[str]) -> Rule:
    return Rule(lambda value: value in choices, f"must be one of {', '.join(choices)}")


#: Every duration's first rule: NaN would pass every other, as it compares with nothing.
FINITE = Rule(math.isfinite, "must be a finite duration")


@dataclass(frozen=True)
class GoType:
    """A type of Go's flag package: how a flag's text becomes a value (a failure is a
    usage error, exit 2, as the Go binary's), and what every value of the type must be."""

    parse: Callable[[str], Any]
    rules: tuple[Rule, ...] = ()
    takes_argument: bool = True  # a bool flag alone means true, and never takes the next


@dataclass(frozen=True)
class Given:
    """A setting's value as the command line or the environment gave it."""

    raw: str
    value: Any
    source: str  # "-flag" or "H2PING_FLAG", for messages


#: What the Go binary makes of a value its command line accepts: the value to use
#: instead and a note saying so (None when there is nothing to say). A ValueError
#: refuses the value, its text the reason.
GoMeaning = Callable[[Given], tuple[Any, str | None]]


@dataclass(frozen=True)
class Setting:
    """One setting as its field declares it (see :func:`setting`)."""

    type: GoType
    group: str  # the --help heading it is listed under
    metavar: str  # what --help shows for its value; "" for a bool
    help: str  # its --help line, which with the default must fit 100 columns
    doc: str  # its meaning in the README's flags table
    read: Callable[[Any], Any] | None = None  # text to value once parsed; fails with exit 1
    rules: tuple[Rule, ...] = ()
    go_meanings: tuple[GoMeaning, ...] = ()  # in turn, on the command line only
    shown_default: str | None = None  # --help's words for a default without a value
    field: str = ""  # the field's name, filled in when its class is made
    default: Any = None  # its value, filled in when its class is made; or REQUIRED

    @property
    def name(self) -> str:
        """The flag's Go spelling, which errors name too: ``ping-interval``."""
        return self.field.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.field.upper()

    @property
    def is_bool(self) -> bool:
        return not self.type.takes_argument

    def problem(self, value: Any) -> str | None:
        """The reason ``value`` is refused, or None."""
        for rule in (*self.type.rules, *self.rules):
            if not rule.holds(value):
                return rule.reason
        return None


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: The default of a setting that has none: it must be given.
REQUIRED: Any = _Required()

_KEY = "h2ping.setting"


def setting(
    *,
    type: GoType,
    group: str,
    metavar: str,
    help: str,
    doc: str,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    read: Callable[[Any], Any] | None = None,
    rules: Sequence[Rule] = (),
    go_meanings: Sequence[GoMeaning] = (),
    shown_default: str | None = None,
) -> Any:
    """A field of a :func:`settings_class`, declared with everything said about it."""
    declared = Setting(
        type, group, metavar, help, doc, read, tuple(rules), tuple(go_meanings), shown_default
    )
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={_KEY: declared}
    )


_Class = TypeVar("_Class")
_DECLARED: dict[type, tuple[Setting, ...]] = {}


@dataclass_transform(frozen_default=True, field_specifiers=(setting,))
def settings_class(cls: type[_Class]) -> type[_Class]:
    """A frozen dataclass whose every field is a :func:`setting`; building one checks
    each value against its setting's rules (a :class:`ConfigError`)."""
    if "__post_init__" in cls.__dict__:
        raise TypeError(f"{cls.__name__}: a setting's rules belong in its setting()")
    cls.__post_init__ = _check  # type: ignore[attr-defined]  # before dataclass() writes __init__
    made = dataclass(frozen=True)(cls)
    _DECLARED[made] = _declared(made)
    return made


def _declared(kind: Any) -> tuple[Setting, ...]:
    found = []
    for f in dataclasses.fields(kind):
        if _KEY not in f.metadata:
            raise TypeError(f"{kind.__name__}.{f.name}: a setting is made with setting()")
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = REQUIRED
        found.append(dataclasses.replace(f.metadata[_KEY], field=f.name, default=default))
    return tuple(found)


def _check(self: object) -> None:
    for declared in declarations(type(self)):
        reason = declared.problem(getattr(self, declared.field))
        if reason is not None:
            raise ConfigError(declared.name, reason)


def declarations(kind: type) -> tuple[Setting, ...]:
    """The settings of a :func:`settings_class` (or of the nearest such class it
    derives from), in the order of its fields."""
    return next(_DECLARED[base] for base in kind.__mro__ if base in _DECLARED)
