"""Warm starts of the learned stages in a refresh: ``transe`` and ``gat``
start from the previous build's parameters and train ``<stage>.refresh_epochs`` epochs (at most
``<stage>.epochs``) instead of a full run.

Ids are not stable across builds (ingest numbers entities and relations in key order, so one
new key shifts every id after it); parameters are therefore carried over **by key**: entity
keys and relation names. A key the previous build had keeps its row; a new key gets the usual
initialisation; a removed key's row is dropped. Whether a stage started warm or cold, and why,
goes into its report (``refresh``) and run directory.

Both stages keep the carried-over parameters without training while their loss on the new
graph (a fixed evaluation, ``losses.json``) stays within ``<stage>.refresh_loss_margin`` of the
last trained build's (``reference_loss``, ``stop_loss``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from lokg.common.stage import id_translation
from lokg.runtime.contract import read_table


@dataclass(frozen=True)
class KeyMatch:
    """Rows of one id-indexed table carried from the previous build to this one by key."""

    current: np.ndarray  # ids in this build whose key the previous build had
    previous: np.ndarray  # their ids in the previous build, in the same order
    new: int  # keys of this build the previous one lacked
    dropped: int  # keys of the previous build this one lacks

    def counts(self) -> dict:
        return {"kept": len(self.current), "new": self.new, "dropped": self.dropped}


def match_by_key(current: str | Path, previous: str | Path, key: str,
                 current_rows: int, previous_rows: int) -> KeyMatch:
    """Ids of the two builds' ``(id, key)`` tables (entities: ``key``, relations: ``name``)
    paired by key, limited to the ids that index a parameter row (``*_rows``: the table sizes;
    an entity without a triple has an id but no row)."""
    now, then = (read_table(Path(p), columns=["id", key]) for p in (current, previous))
    now = now.filter(pc.less(now.column("id"), current_rows))
    then = then.filter(pc.less(then.column("id"), previous_rows))
    translation = id_translation(now, then)
    kept = np.flatnonzero(translation >= 0)
    return KeyMatch(current=translation[kept], previous=kept, new=now.num_rows - len(kept),
                    dropped=then.num_rows - len(kept))


def refresh_epochs(cfg) -> int:
    """Epochs of a warm start: ``refresh_epochs``, never more than a full run's ``epochs``."""
    return min(int(cfg["refresh_epochs"]), int(cfg["epochs"]))


def cold(why: str) -> dict:
    """The report entry of a stage that trained from scratch."""
    return {"start": "cold", "why": why}


def warm(epochs: int, **matches: KeyMatch) -> dict:
    """The report entry of a warm start: epochs run and, per table, keys kept/new/dropped."""
    return {"start": "warm", "why": "refresh: previous parameters carried over by key",
            "epochs": epochs, **{name: m.counts() for name, m in matches.items()}}


def reference_loss(run_dir: Path, key: str) -> float | None:
    """The evaluation loss ``losses.json[key]`` of the last build that trained (its
    ``reference``; a run before that entry: its ``after``), or None where the run recorded
    neither. A refresh that trains no epoch passes the reference on, so a chain of such
    refreshes is always held to the last trained model's loss, never to a bound raised by a
    margin per refresh."""
    losses = json.loads((run_dir / "losses.json").read_text(encoding="utf-8"))
    found = losses.get(key) or {}
    value = found.get("reference", found.get("after"))
    return None if value is None else float(value)


def stop_loss(cfg: Mapping, reference: float | None) -> float | None:
    """The evaluation loss under which warm parameters are kept without training: the
    reference (``reference_loss``) plus ``refresh_loss_margin`` (None: margin unset, or no
    reference)."""
    if cfg["refresh_loss_margin"] is None or reference is None:
        return None
    return reference + float(cfg["refresh_loss_margin"])


def next_reference(refresh: dict, stop: float | None, trained: bool, loss: str,
                   before: float | None, after: float | None,
                   reference: float | None) -> float | None:
    """The reference a run records in ``losses.json``: where ``stop`` kept the carried-over
    parameters (no epoch), the refresh report says so (``stopped``: the ``loss`` before and
    the bound) and the previous reference passes on; a run that trained is the next one's."""
    if stop is not None and not trained:
        refresh.update(epochs=0, stopped={loss: round(before, 6), "at_most": round(stop, 6)})
        return reference
    return after
