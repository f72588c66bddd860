"""What every stage module shares: its error, input paths, laps,
and the thread setting of the torch stages (their device: ``runtime.encoder.resolve_device``,
which the query encoder uses too).

Stages (``spark_jobs``, ``training``, ``text``) and the build driver (``pipeline.driver``) import
this module, which imports only ``runtime``; the driver imports the stages only by name.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from lokg.runtime.errors import LokgError


#: Prefix of the inputs a partial stage of a refresh gets from the previous build's cached
#: outputs (``previous:entities``: the entities it read; pipeline/refresh.py).
PREVIOUS = "previous:"


def previous_inputs(inputs: Mapping[str, str], *names: str) -> dict[str, Path] | None:
    """The previous build's artefacts ``names`` (refresh), or None when one is missing: a
    full build, or a previous build without them."""
    paths = {name: inputs.get(PREVIOUS + name) for name in names}
    if not all(paths.values()) or not all(Path(p).exists() for p in paths.values()):
        return None
    return {name: Path(p) for name, p in paths.items()}


#: A partial stage recomputes at most this share of its rows; more touched, it runs in full.
PARTIAL_MAX_SHARE = 0.5


def changed_rows(now, then):
    """The distinct rows of two integer matrices (one row per record, same columns) whose
    counts differ between them — a multiset difference both ways, by one sort, no packing."""
    import numpy as np

    rows = np.concatenate([np.asarray(now, np.int64), np.asarray(then, np.int64)])
    sign = np.concatenate([np.ones(len(now), np.int64), -np.ones(len(then), np.int64)])
    if not len(rows):
        return rows
    order = np.lexsort(rows.T[::-1])
    rows, sign = rows[order], sign[order]
    starts = np.flatnonzero(np.r_[True, np.any(rows[1:] != rows[:-1], axis=1)])
    return rows[starts[np.add.reduceat(sign, starts) != 0]]


def id_translation(now, then):
    """Previous build's id → this build's id of the same key (-1: the key is gone), from the
    (id, key) columns of the two builds' tables (entities by key, relations by name): a refresh
    copies rows by id, and ids shift when entities or relations come and go."""
    import numpy as np
    import pyarrow.compute as pc

    where = pc.fill_null(pc.index_in(then.column(1), value_set=now.column(1)), -1).to_numpy()
    new_ids = now.column(0).to_numpy().astype(np.int64)
    old_ids = then.column(0).to_numpy().astype(np.int64)
    translation = np.full(int(old_ids.max(initial=-1)) + 1, -1, np.int64)
    translation[old_ids] = np.where(where >= 0, new_ids[np.maximum(where, 0)], -1)
    return translation


def keeps_order(translation) -> bool:
    """Whether an ``id_translation`` keeps the order of the ids it keeps (ids are ranks in key
    order, so dropping and adding keys does): ties broken by id then fall alike."""
    import numpy as np

    kept = translation[translation >= 0]
    return bool(np.all(kept[1:] > kept[:-1]))


class BuildError(LokgError, RuntimeError):
    """A stage failed or produced something unusable; the message names the stage."""


class StageError(BuildError):
    """A stage refused its input or configuration; the message tells the user what and where.

    ``kept``: files in the stage's own directory that the message names and the user needs
    after the failure (the quarantine of a refused dump). That directory is deleted when the
    stage fails, so the driver moves them to ``staging/<build_id>/failed/<stage>/`` first and
    makes the message name them there (``pipeline.driver.run_stage``).
    """

    def __init__(self, message: str, *, kept: Sequence[str | Path] = ()):
        super().__init__(message)
        self.kept = tuple(Path(p) for p in kept)


def stage_input(inputs: Mapping[str, str], stage: str, name: str) -> Path:
    """The path of a stage's input artefact; StageError naming what is missing."""
    if name not in inputs:
        raise StageError(f"stage {stage} needs input '{name}' (have {sorted(inputs)})")
    path = Path(inputs[name])
    if not path.exists():
        raise StageError(f"stage {stage}: input '{name}' not found at {path}")
    return path


class Laps:
    """Named wall-clock laps for a stage report: ``lap("step")`` records the time since the last."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(now - self._last, 3)
        self._last = now


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's CPU threads set to ``threads`` for a block (None or 0: left as they are) and
    restored after it: the setting is process-global, and a stage must not leave it changed
    for the next stage of an in-process build."""
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def stage_batch_encoder(stage: str, spec: Mapping, cfg: Mapping, exported: Path | None):
    """A stage's batch encoder per its ``encoder``, ``device`` and ``threads`` settings
    (``runtime.question_encoder.batch_encoder``): errors become StageError naming the stage,
    and an ``onnx`` that cannot run names the setting."""
    from lokg.runtime.encoder import EncoderError
    from lokg.runtime.bert_checkpoint import UnsupportedModelError
    from lokg.runtime.question_encoder import batch_encoder

    try:
        return batch_encoder(spec, str(cfg["encoder"]), str(cfg["device"]), exported,
                             cfg.get("threads"))
    except UnsupportedModelError as exc:
        raise StageError(f"{stage}.encoder={cfg['encoder']}: {exc}") from None
    except EncoderError as exc:
        raise StageError(f"{stage}: {exc}") from None


def published_encoder(stage: str, build, device: str):
    """The sentence encoder a published build's ``models/encoder.json`` describes, on
    ``device``: what reads the build's vectors embeds as they were made. Errors become
    StageError naming the stage."""
    import json

    from lokg.runtime.encoder import EncoderError, SentenceEncoder

    spec = json.loads((build.path / "models" / "encoder.json").read_text(encoding="utf-8"))
    try:
        return SentenceEncoder.from_spec(spec, device=str(device))
    except EncoderError as exc:
        raise StageError(f"{stage}: {exc}") from None
