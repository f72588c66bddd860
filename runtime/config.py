"""Loading a config: defaults, a YAML/JSON file on top, then ``key.path=value`` overrides,
checked against a catalogue of declared sections (runtime/settings.py) with did-you-mean errors.

The machinery is generic: the runtime declares only the query's section
(runtime/query_settings.py); the whole build config is a catalogue the pipeline assembles
(pipeline/config.py), so that a build's manifest records exactly what produced it.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

import yaml

from lokg.runtime.settings import ConfigError, Settings

#: The modes of ``Runtime.ask`` — here, not in runtime/query.py, so that the CLIs offer them
#: without importing numpy. Policy: one call on the LOKG context | the graph's derived answer or
#: an abstention | derived where that precision gate passes, else one call (runtime/relknow).
POLICIES = ("lokg", "precision", "route")
#: The knowledge budget B of a question when none is given, and the most a request may ask for.
DEFAULT_BUDGET = 2048
MAX_BUDGET = 131072
RETRIEVALS = ("taimr", "similarity", "neighbourhood")  # TAIMR | w/o TAIMR | 1-hop baseline
ENCODINGS = ("ittc", "uniform")  # ITTC | w/o ITTC (one template, cut by rank)
#: The question encoders runtime/question_encoder.py builds (``query_encoder``'s backend) and
#: the batch encoders of the stages (entity_encode.encoder, triple_context.encoder).
QUERY_BACKENDS = ("auto", "onnx", "torch")
BATCH_ENCODERS = ("auto", "onnx", "torch")

__all__ = ["ConfigError", "Catalogue", "POLICIES", "DEFAULT_BUDGET", "MAX_BUDGET", "RETRIEVALS",
           "ENCODINGS", "QUERY_BACKENDS", "BATCH_ENCODERS"]


class Catalogue(NamedTuple):
    """The sections a config knows, in order, and the old names of renamed ones (a config using
    one is refused with the new name instead of being silently ignored). Sections it does not
    know are the user's own and pass through."""

    sections: tuple[type[Settings], ...]
    renamed: Mapping[str, str] = {}

    def by_name(self) -> dict[str, type[Settings]]:
        return {s.section: s for s in self.sections}

    def section(self, config: Mapping, name: str) -> dict:
        """Section ``name`` of ``config`` over its declared defaults (none for a section of the
        user's own), unchecked."""
        declared = self.by_name().get(name)
        return declared.merged(config) if declared else dict(config.get(name) or {})

    def defaults(self) -> dict:
        """Every section's defaults, a fresh copy."""
        return {s.section: s.defaults() for s in self.sections}

    def check(self, config: Mapping, origins: Mapping[str, str] | None = None) -> None:
        """Every key of a known section has a valid value and no section has a pre-rename name;
        a section name one edit or so from a known one is refused (a typo like ``ingst`` would
        be silently ignored). ``origins`` maps a key path to the file it came from, which the
        message then names."""
        known = self.by_name()
        for name, value in config.items():
            if name in self.renamed:
                raise ConfigError(f"config section '{name}' is called '{self.renamed[name]}' now")
            near = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
            if name not in known and near:
                raise ConfigError(f"unknown config section '{name}' (did you mean '{near[0]}'?); "
                                  "a section of your own needs a name unlike LOKG's")
            found = known[name].problem(value) if name in known else None
            if found:
                where = (origins or {}).get(found[0])
                raise ConfigError(f"{where}: {found[1]}" if where else found[1])
        try:
            json.dumps(config)
        except (TypeError, ValueError, RecursionError) as exc:  # the manifest stores it as JSON
            raise ConfigError(f"config is not JSON-serialisable ({exc})") from None

    def reference(self, title: str, intro: str) -> str:
        """The catalogue as a Markdown page: per section its purpose and a table of every
        setting's type, default, allowed values and meaning."""
        lines = [f"# {title}", "", intro, ""]
        for declared in self.sections:
            lines += [f"## `{declared.section}`", "", " ".join(declared.__doc__.split()), ""]
            if not declared.fields():  # a stage's section with no settings (yet)
                continue
            lines += ["| setting | type | default | allowed | what it does |",
                      "| --- | --- | --- | --- | --- |"]
            defaults = declared.defaults()
            lines += [f"| `{f.name}` | {_cell(f.type)} | `{_cell(json.dumps(defaults[f.name]))}` | "
                      f"{_cell(f.metadata['rule'].expected)} | {_cell(f.metadata['doc'])} |"
                      for f in declared.fields()]
            lines.append("")
        return "\n".join(lines)

    def load(self, path: str | Path | None = None, overrides: Iterable[str] = ()) -> dict:
        """Defaults ← file (YAML or JSON) ← ``a.b.c=value`` overrides (values parsed as YAML),
        checked before it is returned, so no stage starts on a bad value."""
        config = self.defaults()
        origins: dict[str, str] = {}
        if path is not None:
            loaded = _read_file(Path(path))
            _merge(config, loaded)
            for name, value in loaded.items():
                origins[str(name)] = str(path)
                origins.update((f"{name}.{key}", str(path)) for key in
                               (value if isinstance(value, Mapping) else ()))
        for item in overrides:
            origins.pop(_apply_override(config, item), None)
        self.check(config, origins)
        return config


def _cell(text) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|")


# ---- loading ---------------------------------------------------------------------------------
def _merge(base: dict, update: Mapping) -> dict:
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


class _Loader(yaml.SafeLoader):
    """YAML as LOKG reads it: ``1e-3`` is a number (YAML 1.2; PyYAML's 1.1 wants ``1.0e-3``),
    and dates stay text (a datetime would not survive the JSON manifest)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                              re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"),
                              list("-+0123456789."))
_YAML_ERRORS = (yaml.YAMLError, ValueError, RecursionError)  # ValueError: e.g. !!int of 5000 digits


def _parse_value(text: str):
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader)
    except _YAML_ERRORS:
        return text


def _read_file(path: Path) -> Mapping:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config ({getattr(exc, 'strerror', exc)})") from None
    try:
        loaded = json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_Loader)  # noqa: S506
    except _YAML_ERRORS as exc:  # json.JSONDecodeError is a ValueError
        raise ConfigError(f"{path}: invalid config ({' '.join(str(exc).split())})") from None
    if loaded is not None and not isinstance(loaded, Mapping):
        raise ConfigError(f"{path}: top level must be a mapping")
    return loaded or {}


def _apply_override(config: dict, item: str) -> str:
    """Set ``a.b.c=value`` in ``config``; returns the key path."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {item!r}: expected key.path=value")
    node = config
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {item!r}: '{part}' is not a section")
    node[parts[-1]] = _parse_value(raw)
    return key
