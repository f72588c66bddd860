"""An overlay: a published build plus triples held in memory, answered as one graph.

The online feedback policy ``tcr-qf`` (evaluation/tcr_qf.py) adds the triples it extracts for
one question and answers again; the published store is never written. :func:`overlaid` returns
a shallow copy of a :class:`~runtime.query.Runtime` whose graph-dependent parts are rebuilt with
the extra triples:

* entities the triples name by a key the build lacks get new ids after the build's (names as
  given, no types, aliases or description); relations the build lacks get new ids after its;
* the TAIMR graph gets the triples both ways (:meth:`runtime.taimr.EdgeGraph.with_triples`: an
  untrained edge's attention, new nodes at the build's median μ);
* the linker indexes the new entities' names, a common noun among them as a fallback form
  (runtime/linker.py); their entity vectors are zero (no cosine term);
* the relation knowledge's facts include the new triples of the build's relations (a new
  relation is one no chain of the knowledge can name);
* a triple's sentence is its restored source sentence (ITTC's verbose rendering);
* there is no path cache (its paths predate the triples): every head's paths are computed by
  the same scorer, and the overlay neither logs feedback nor holds the build's pin.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lokg.runtime import relknow
from lokg.runtime.contract import to_numpy
from lokg.runtime.linker import common_nouns


@dataclass(frozen=True)
class ExtraTriple:
    """One triple of an overlay, by entity keys and relation name (the names name new ones)."""

    s_key: str
    relation: str
    o_key: str
    s_name: str = ""
    o_name: str = ""
    sentence: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return self.s_key, self.relation, self.o_key


class _Ids:
    """Ids of keys and relation names, existing ones first, new ones numbered after them."""

    def __init__(self, rt):
        self.entity = dict(rt.entity_ids())
        self.relation = {name: i for i, name in rt.relation_names.items()}
        self.n_entities, self.n_relations = rt.n_entities, rt.n_relations
        self.new_entities: list[tuple[str, str]] = []  # (key, name)
        self.new_relations: dict[int, str] = {}

    def of_entity(self, key: str, name: str) -> int:
        if key not in self.entity:
            self.entity[key] = self.n_entities + len(self.new_entities)
            self.new_entities.append((key, name or key))
        return self.entity[key]

    def of_relation(self, name: str) -> int:
        if name not in self.relation:
            self.relation[name] = self.n_relations + len(self.new_relations)
            self.new_relations[self.relation[name]] = name
        return self.relation[name]


def overlaid(rt, extra: Sequence[ExtraTriple]):
    """``rt`` plus ``extra`` (module docstring); ``rt`` itself is left as it was."""
    if not extra:
        raise ValueError("an overlay needs at least one extra triple")
    ids = _Ids(rt)
    sro = np.array([(ids.of_entity(t.s_key, t.s_name), ids.of_relation(t.relation),
                     ids.of_entity(t.o_key, t.o_name)) for t in extra], dtype=np.int64)
    view = copy.copy(rt)
    _add_entities(view, ids.new_entities)
    view.name_relations({**rt.relation_names, **ids.new_relations})
    mu = float(np.median(np.exp(rt.graph.log_mu))) if rt.graph.n_nodes else 1.0
    view.graph = rt.graph.with_triples(*sro.T, view.n_entities, mu)
    new_ids = range(rt.n_entities, view.n_entities)
    view.linker = rt.linker.with_forms(
        ((rt.n_entities + i, name) for i, (_, name) in enumerate(ids.new_entities)),
        view.graph.out_degree(), common_nouns(view.names, new_ids), view.names)
    if rt.vectors is not None and ids.new_entities:
        view.vectors = np.vstack([np.asarray(rt.vectors),
                                  np.zeros((len(ids.new_entities), rt.vectors.shape[1]),
                                           rt.vectors.dtype)])
    view.relknow = _with_facts(rt, sro[sro[:, 1] < ids.n_relations])
    view.provenance = copy.copy(rt.provenance)
    view.provenance.sentence = {**rt.provenance.sentence,
                                **{tuple(map(int, row)): t.sentence
                                   for row, t in zip(sro, extra) if t.sentence}}
    view.path_cache, view.feedback, view._release, view._base = None, None, None, rt
    view._cold, view._cold_lock = OrderedDict(), threading.Lock()
    view._fields, view._domains, view._entity_ids = {}, None, ids.entity  # keys and new ones
    return view


def _add_entities(view, new: list[tuple[str, str]]) -> None:
    """The per-entity lists of ``view`` (copied, never the base's) with the new entities."""
    view.keys = view.keys + [k for k, _ in new]
    view.names = view.names + [n for _, n in new]
    view._types = view._types + [[] for _ in new]
    view._descriptions = view._descriptions + ["" for _ in new]
    view._aliases = view._aliases + [[] for _ in new]
    view._attributes = view._attributes + [[] for _ in new]
    view.n_entities = len(view.keys)


def _with_facts(rt, sro: np.ndarray):
    """The relation knowledge with its facts plus the overlay's (None without knowledge)."""
    if rt.relknow is None:
        return None
    know, facts = rt.relknow
    table = rt.build.read("triples", columns=["s", "r", "o"])
    s, r, o = (np.concatenate([to_numpy(table.column(c)), sro[:, i]])
               for i, c in enumerate("sro"))
    return know, relknow.Facts(s, r, o, facts.n_relations)
