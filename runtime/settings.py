"""Declaring a config section once: each setting's type, default, rule and one-line doc.

A section is a frozen dataclass subclassing :class:`Settings`, written beside the code that
reads it; validation with did-you-mean errors, the defaults, ``lokg config`` and
docs/CONFIGURATION.md are all generated from these declarations (``runtime/config.py`` loads
a config against a set of them). This module imports nothing heavy, so every package can
declare its sections here without pulling in Spark or torch.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import re
import reprlib
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple

from lokg.runtime.errors import LokgError


class ConfigError(LokgError, ValueError):
    """A configuration file or override is invalid; the message names it."""


# ---- rules: what one setting accepts ---------------------------------------------------------
class Rule(NamedTuple):
    """What one key accepts. ``kind`` is the type test (a failure says "has the wrong type"),
    ``within`` the test of a value of that type (a failure says ``refusal``); ``expected`` is
    what both messages say is allowed. Validated before any stage starts, so a bad value fails
    in a second instead of after Spark has started."""

    expected: str
    kind: Callable[[object], bool]
    within: Callable[[object], bool] = lambda value: True
    nullable: bool = False
    refusal: str = "is out of range"
    choices: tuple = ()  # the allowed strings, for a "did you mean" suggestion


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # True is an int in Python


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value) -> bool:
    return isinstance(value, int) or math.isfinite(value)  # math.isfinite overflows on huge ints


def integer(low: int = 0, *, nullable: bool = False) -> Rule:
    """An int >= ``low`` (or null where ``nullable``); a bool is refused."""
    return Rule(f"{'null or ' if nullable else ''}an integer >= {low}", _is_int,
                lambda v: v >= low, nullable)


def number(low: float = -math.inf, high: float = math.inf, *, low_open: bool = False,
           high_open: bool = False, nullable: bool = False) -> Rule:
    """A finite int or float in the interval (YAML reads ``1`` as an int, so ints count)."""
    if high == math.inf:
        words = f"a number {'>' if low_open else '>='} {low:g}"
    else:
        words = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    return Rule(f"{'null or ' if nullable else ''}{words}", _is_number,
                lambda v: _finite(v) and (low < v if low_open else low <= v)
                and (v < high if high_open else v <= high), nullable)


def choice(*options, nullable: bool = False) -> Rule:
    """One of ``options``, of exactly their type (so True is not the int choice 1)."""
    types = {type(o) for o in options}
    return Rule(f"{'null or ' if nullable else ''}one of {' | '.join(map(str, options))}",
                lambda v: type(v) in types, lambda v: v in options, nullable,
                refusal="is not one of the choices",
                choices=tuple(o for o in options if isinstance(o, str)))


def text(pattern: str = r".*", expected: str = "a string", *, nullable: bool = False) -> Rule:
    """A str matching ``pattern`` whole (or null where ``nullable``)."""
    rx = re.compile(pattern, re.DOTALL | re.IGNORECASE)
    return Rule(f"{'null or ' if nullable else ''}{expected}", lambda v: isinstance(v, str),
                lambda v: rx.fullmatch(v) is not None, nullable, refusal="is not allowed")


def numbers(length: int) -> Rule:
    """A list of ``length`` finite numbers >= 0 with a positive sum (weights)."""
    return Rule(f"a list of {length} numbers >= 0 with a positive sum",
                lambda v: isinstance(v, list) and all(_is_number(w) for w in v),
                lambda v: len(v) == length and all(_finite(w) and w >= 0 for w in v)
                and sum(v) > 0)


BOOL = Rule("true or false", lambda v: isinstance(v, bool))
STRINGS = Rule("a list of strings", lambda v: isinstance(v, list)
               and all(isinstance(t, str) for t in v))
SHARE = number(0, 1)
COUNT = integer(1)
SEED = integer(0)
RATE = number(0, low_open=True)  # learning rates
WEIGHT = number(0)
DEVICE = text(r"auto|cpu|cuda(:\d+)?", "auto, cpu or cuda[:N]")
THREADS = integer(1, nullable=True)  # null = the library's default
FILE = text(r".+", "a file path", nullable=True)  # null = none

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def shown(value) -> str:
    """A value as the messages quote it (long values cut)."""
    return _REPR.repr(value)


def suggestion(word, candidates) -> str:
    """`` (did you mean 'x'?)`` for the nearest candidate, else the candidates themselves."""
    near = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1)
    if near:
        return f" (did you mean '{near[0]}'?)"
    return f" (known: {', '.join(map(str, candidates))})" if candidates else ""


def value_problem(key: str, value, rule: Rule) -> str | None:
    """The one-line complaint about ``value`` of ``key`` (``section.name``), or None if fine."""
    if value is None and rule.nullable:
        return None
    if not rule.kind(value):
        return f"{key}: {shown(value)} has the wrong type (expected {rule.expected})"
    if not rule.within(value):
        hint = suggestion(value, rule.choices) if rule.choices else ""
        return f"{key}: {shown(value)} {rule.refusal} (expected {rule.expected}){hint}"
    return None


# ---- declarations ----------------------------------------------------------------------------
def setting(default, rule: Rule, doc: str) -> Any:
    """One setting of a section: its default, the rule its values obey, and what it does."""
    metadata = {"rule": rule, "doc": doc}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default),
                                 metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


class Settings(dict):
    """One config section: subclass it as a frozen dataclass of ``setting`` fields and name the
    section (``class Gat(Settings, section="gat")``). An instance holds a config's values for
    the section, validated, read as attributes (``cfg.hidden``); it is also the section's
    plain dict (read-only), for code that takes one and for the JSON a stage writes.
    Cross-field rules go in ``related_problem``."""

    section: ClassVar[str]

    def __init_subclass__(cls, section: str | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if section is not None:
            cls.section = section

    def __post_init__(self):
        dict.update(self, {f.name: getattr(self, f.name) for f in self.fields()})

    def __reduce__(self):  # pickled (worker processes) and copied by its fields
        return type(self), tuple(getattr(self, f.name) for f in self.fields())

    def _read_only(self, *args, **kwargs):
        raise TypeError(f"config section {self.section!r} is read-only")

    __setitem__ = __delitem__ = update = pop = popitem = setdefault = clear = _read_only

    @classmethod
    def fields(cls) -> tuple[dataclasses.Field, ...]:
        return dataclasses.fields(cls)

    @classmethod
    def rules(cls) -> dict[str, Rule]:
        return {f.name: f.metadata["rule"] for f in cls.fields()}

    @classmethod
    def defaults(cls) -> dict:
        """The section's default values, a fresh copy."""
        return {f.name: copy.deepcopy(getattr(cls(), f.name)) for f in cls.fields()}

    @classmethod
    def merged(cls, config: Mapping) -> dict:
        """The config's values of this section over the defaults, unchecked."""
        return {**cls.defaults(), **(config.get(cls.section) or {})}

    @classmethod
    def related_problem(cls, settings: Mapping) -> tuple[str, str] | None:
        """(key path, complaint) where settings that are each valid do not fit together."""
        return None

    @classmethod
    def problem(cls, settings) -> tuple[str, str] | None:
        """(key path, complaint) of the first bad key of the section's ``settings``, or None."""
        name, rules = cls.section, cls.rules()
        if not isinstance(settings, Mapping):
            return name, f"config section '{name}' must be a mapping; got {shown(settings)}"
        for key, value in settings.items():
            where = f"{name}.{key}"
            if key not in rules:
                return where, f"{name}: unknown config key {shown(key)}" + suggestion(
                    key, list(rules))
            complaint = value_problem(where, value, rules[key])
            if complaint:
                return where, complaint
        return cls.related_problem({**cls.defaults(), **settings})

    @classmethod
    def of(cls, config: Mapping, error: type[Exception] = ConfigError):
        """The section of a build config, completed by the defaults and checked: ``error``
        with the one-line complaint where a key is unknown or a value breaks its rule."""
        found = cls.problem(config.get(cls.section) or {})
        if found:
            raise error(found[1])
        return cls(**cls.merged(config))
