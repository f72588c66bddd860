"""The ``models/relknow`` artefact the ``relation_knowledge`` stage writes
(``training/relation_knowledge.py``) and the runtime reads:

* ``relknow.json`` — settings, the thresholds picked on the dev split, the chains (canonical
  relation names hop by hop), the lexicon and the relations' priors, the functional relations,
  exclusive relation pairs and inverse relations learned from the KG, and the fit report;
* ``vectors.npz`` — ``question_vectors`` float32 [n, d] (unit norm, topic masked) and
  ``question_chain`` int32 [n] (index into the chains) of the training questions, and
  ``relation_vectors`` float32 [|R*|, d] (each canonical relation's name as text); d = 0 when
  the stage ran without an encoder (then the lexicon predicts and zero-shot is off)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from lokg.runtime.relknow.facts import RelknowError

ARTEFACT = "relknow"  # artefact name; published as models/relknow/
MODEL_FILE = "relknow.json"
VECTORS_FILE = "vectors.npz"
FORMAT_VERSION = 1
ARRAYS = ("question_vectors", "question_chain", "relation_vectors")


def read_artefact(directory: str | Path) -> tuple[dict, dict[str, np.ndarray], str]:
    """(spec, arrays, where: the model file's path) of an artefact directory."""
    directory = Path(directory)
    model, vectors = directory / MODEL_FILE, directory / VECTORS_FILE
    try:
        spec = json.loads(model.read_text(encoding="utf-8"))
        with np.load(vectors) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as exc:
        raise RelknowError(f"{directory}: unreadable relation knowledge ({exc})") from None
    missing = set(ARRAYS) - set(arrays)
    if missing:
        raise RelknowError(f"{vectors}: arrays {sorted(missing)} missing")
    return spec, arrays, str(model)


def check_format(spec: Mapping, where: str) -> None:
    """The spec is of the format this runtime reads."""
    if int(spec.get("format_version", -1)) != FORMAT_VERSION:
        raise RelknowError(f"{where}: format_version {spec.get('format_version')!r}; this "
                           f"runtime reads {FORMAT_VERSION}")


def relation_id(relation_ids: Mapping[str, int], where: str, name: str) -> int:
    """A relation the artefact names, as the store numbers it."""
    if name not in relation_ids:
        raise RelknowError(f"{where}: relation {name!r} is not a relation of the store")
    return int(relation_ids[name])


def check_arrays(question_vectors: np.ndarray, question_chain: np.ndarray, n_chains: int,
                 relation_vectors: np.ndarray, n_relation_names: int, where: str) -> None:
    """The vectors match what they label: a question per chain label, labels within the
    chains, a vector per relation name."""
    if len(question_vectors) != len(question_chain):
        raise RelknowError(f"{where}: {len(question_vectors)} question vectors but "
                           f"{len(question_chain)} chain labels")
    if len(question_chain) and (question_chain.min() < 0 or question_chain.max() >= n_chains):
        raise RelknowError(f"{where}: question_chain indexes outside the {n_chains} chains")
    if n_relation_names != len(relation_vectors):
        raise RelknowError(f"{where}: {len(relation_vectors)} relation vectors for "
                           f"{n_relation_names} relation names")
