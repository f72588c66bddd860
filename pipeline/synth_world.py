"""The generated graph as a pure function of (n_triples, seed, options): every edge, name and
literal line, recomputed on demand.

How the graph is made
---------------------
* Entities get contiguous integer ids grouped by type (people.person, film.actor, film.film,
  music.artist, music.album, organization.organization, location.city, location.country,
  music.genre, people.gender); mid = ``m.0`` + the id in the Freebase mid alphabet, fixed width.
* Every relation belongs to a *family* bound to one (subject type, object type) pair. For each
  subject the family draws ``k`` distinct objects (k from the family's out-degree distribution,
  kept in a small per-subject uint8 array); object popularity is Zipf-like over a seeded
  permutation of the object type, so in-degrees are heavily skewed. Every other random choice
  is a counter-based hash of (seed, family, subject, slot), so any subject's edges can be
  recomputed on demand (questions walk the graph that way) and a block of subjects is generated
  with a few vectorised numpy calls.
* Each drawn (subject, object) slot carries a *role*: the subset of the family's relations that
  state it. A plain family has one relation. A **synonym family** ``[base, syn, ...]`` shares one
  slot list, so a synonym states a large, partial subset of the base's (s, o) pairs (60-72 %
  pair Jaccard), adds pairs of its own, and ends up with a different triple count. An **inverse
  family** ``[fwd, inv]`` states most slots twice: (s, fwd, o) and (o, inv, s). Relations outside
  a family have a different type pair, except people.person.spouse versus children/parents,
  which live on disjoint halves of the people (even / odd ids), so no false merge is planted.
  Inverse pairs across two types (film.film.starring / film.actor.film) have mirrored ordered
  type pairs, so relation_stats' type-pair NMI signal is 0 for them by construction.
* The out-degree arrays of plain families are nudged (one slot at a time, seeded) until the
  edges total exactly ``n_triples``. Edges are distinct by construction: a subject's k Zipf
  ranks are sorted and the i-th gets +i, so the file holds exactly ``n_triples`` distinct
  entity→entity edges.
"""

from __future__ import annotations

import math

import numpy as np

from lokg.pipeline.synth_names import (ATTRIBUTES, DESCRIPTION_WORDS, FOREIGN_SHARE, GENDERS,
                                       GENRES, LABEL, LANGS, NAMERS, NAMES_OF, YEARS, aliases,
                                       attr_value, description, escape, foreign_name)
from lokg.pipeline.synth_random import Pool, coprime, stream_id, uniform, zipf_rank
from lokg.pipeline.synth_schema import (AC, CHUNK, CO, FAMILIES, FG, LA, MG, MOVIE_FAMILIES,
                                        MOVIE_TYPES, NS, TYPES, Family, P)

#: Freebase's mid alphabet (digits, lowercase consonants, underscore).
MID_ALPHABET = "0123456789bcdfghjklmnpqrstvwxyz_"
#: Share of entities whose name carries a "(qualifier)" under ``entity_names="disambiguated"``.
DISAMBIGUATED_SHARE = 0.3
def _fixed_size(type_name: str, n_entities: int) -> int:
    if type_name == CO:
        return min(200, max(3, n_entities // 400))
    if type_name == MG:
        return min(len(GENRES), max(3, n_entities // 2500))
    if type_name in (FG, LA):
        return min(len(NAMES_OF[type_name]), max(3, n_entities // 1000))
    return len(GENDERS)


def _type_sizes(n_entities: int, type_table=TYPES) -> dict[str, int]:
    """Entities per type for a target total (the real total may exceed it by the minimums)."""
    fixed = {t: _fixed_size(t, n_entities) for t, share, _ in type_table if share is None}
    rest = max(0, n_entities - sum(fixed.values()))
    sizes = {t: max(minimum, int(share * rest)) for t, share, minimum in type_table if share}
    sizes[P] += max(0, rest - sum(sizes.values()))
    return {t: sizes.get(t, fixed.get(t)) for t, _, _ in type_table}

# the world: every edge, name and literal as a pure function of (n_triples, seed)


class World:
    """The generated KG. Holds only per-entity arrays; edges are recomputed on demand (but for
    the reverse index of the families a metaqa question walks backwards, built on first use).

    ``movie`` adds the movie types and families; ``entity_names`` is the surface form of the
    English names (module docstring)."""

    def __init__(self, n_triples: int, seed: int, *, movie: bool = False,
                 entity_names: str = "plain"):
        self.seed, self.entity_names = seed, entity_names
        self.families = FAMILIES + MOVIE_FAMILIES if movie else FAMILIES
        self.sizes = _solve_sizes(n_triples, self.families,
                                  TYPES + MOVIE_TYPES if movie else TYPES)
        self.types = list(self.sizes)
        self.offset: dict[str, int] = {}
        total = 0
        for t in self.types:
            self.offset[t] = total
            total += self.sizes[t]
        self.n_entities = total
        self._type_starts = np.array([self.offset[t] for t in self.types])
        self.mid_width = max(4, math.ceil(math.log(max(total, 2), 32)))
        self.midtab = self._mid_table()
        self.pools = [self._pool(f) for f in self.families]
        self.k = [self._draw_degrees(i) for i in range(len(self.families))]
        self._fit(n_triples)
        self._templates: dict[tuple[str, str], tuple[np.ndarray, int, int]] = {}
        self._name_perm = {t: self._perm(t) for t in self.types}
        self._reverse: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    # ---- ids, pools, degrees ---------------------------------------------------------------
    def _mid_table(self) -> np.ndarray:
        ids = np.arange(self.n_entities, dtype=np.int64)
        digits = np.empty((self.n_entities, self.mid_width), dtype=np.uint8)
        alphabet = np.frombuffer(MID_ALPHABET.encode(), dtype=np.uint8)
        for col in range(self.mid_width - 1, -1, -1):
            digits[:, col] = alphabet[ids % 32]
            ids //= 32
        return digits

    def mid(self, entity: int) -> str:
        return "m.0" + self.midtab[entity].tobytes().decode()

    def type_of(self, entity: int) -> str:
        return self.types[int(np.searchsorted(self._type_starts, entity, side="right")) - 1]

    def _perm(self, type_name: str) -> tuple[int, int, int]:
        """Seeded affine bijection (mult, add, modulus) over a type's name space."""
        space = self.sizes[P] + self.sizes[AC] if type_name in (P, AC) else self.sizes[type_name]
        h = int(stream_id(self.seed, "names", type_name if type_name not in (P, AC) else "human"))
        return coprime(space, (h >> 20) % space + space // 2), h % space, space

    def _pool(self, fam: Family) -> Pool:
        n = self.sizes[fam.obj]
        stride, phase, count = 1, 0, n
        if fam.parity is not None:
            stride, phase, count = 2, fam.parity, (n - fam.parity + 1) // 2
        h = int(stream_id(self.seed, "pool", fam.base))
        return Pool(self.offset[fam.obj], count, stride, phase,
                    coprime(count, (h >> 20) % count + count // 3), h % count)

    def _capacity(self, f: int) -> int:
        """Most distinct objects one subject can have (its own id excluded on a same-type pool)."""
        fam = self.families[f]
        return min(255, self.pools[f].count - (fam.subj == fam.obj))

    def _draw_degrees(self, f: int) -> np.ndarray:
        fam = self.families[f]
        n = self.sizes[fam.subj]
        keys = np.arange(n, dtype=np.int64) + self.offset[fam.subj]
        covered = uniform(stream_id(self.seed, "cov", fam.base), keys) < fam.cov
        k = np.searchsorted(np.cumsum(fam.kdist),
                            uniform(stream_id(self.seed, "k", fam.base), keys), side="right") + 1
        k = np.where(covered, np.minimum(k, min(len(fam.kdist), self._capacity(f))), 0)
        if fam.parity is not None:
            k[np.arange(n) % 2 != fam.parity] = 0
        k[self._anchor(f)] = max(1, k[self._anchor(f)])
        return k.astype(np.uint8)

    def _anchor(self, f: int) -> int:
        """The first eligible subject: it always keeps one slot stating every family member."""
        return self.families[f].parity or 0

    def _fit(self, n_triples: int) -> None:
        """Nudge plain families' degrees (seeded, ±1 slot per subject a round) to hit n exactly."""
        plain = [f for f, fam in enumerate(self.families) if len(fam.members) == 1]
        total = sum(self._count_edges(f) for f in range(len(self.families)))
        rng = np.random.default_rng([self.seed, n_triples, 0xF17])
        while total != n_triples:
            grow = total < n_triples
            cells = []
            for f in plain:
                k, fam = self.k[f], self.families[f]
                if grow:
                    ok = k < min(len(fam.kdist) + 2, self._capacity(f)) if len(fam.kdist) > 1 \
                        else np.zeros(len(k), bool)
                    if fam.parity is not None:
                        ok &= np.arange(len(k)) % 2 == fam.parity
                else:
                    ok = k > (np.arange(len(k)) == self._anchor(f))
                idx = np.flatnonzero(ok)
                cells.append(np.stack([np.full(len(idx), f), idx], axis=1))
            cells = np.concatenate(cells)
            if len(cells) == 0:
                raise ValueError(f"cannot place exactly {n_triples} distinct triples")
            take = cells[np.argsort(rng.random(len(cells)), kind="stable")]
            take = take[: abs(n_triples - total)]
            for f in np.unique(take[:, 0]):
                np.add.at(self.k[f], take[take[:, 0] == f, 1], 1 if grow else -1)
            total += len(take) if grow else -len(take)

    def _count_edges(self, f: int) -> int:
        fam = self.families[f]
        if len(fam.members) == 1:
            return int(self.k[f].sum(dtype=np.int64))
        popcount = np.array([bin(m).count("1") for m in self._role_masks(fam)])
        n = self.sizes[fam.subj]
        return sum(int(popcount[self._roles(f, lo, min(n, lo + 8 * CHUNK))[-1]].sum())
                   for lo in range(0, n, 8 * CHUNK))

    @staticmethod
    def _role_masks(fam: Family) -> np.ndarray:
        return np.array([m for m, _ in fam.roles] + [(1 << len(fam.members)) - 1], dtype=np.int64)

    def _slots(self, f: int, lo: int, hi: int):
        """Slots of family f for subjects lo..hi-1 (local ids): subject-relative arrays."""
        k = self.k[f][lo:hi].astype(np.int64)
        starts = np.cumsum(k) - k
        seg = np.repeat(np.arange(hi - lo), k)
        slot = np.arange(len(seg)) - starts[seg]
        subj = self.offset[self.families[f].subj] + lo + seg
        keys = (subj.astype(np.uint64) << np.uint64(8)) | slot.astype(np.uint64)
        return k, seg, slot, subj, keys

    def _roles(self, f: int, lo: int, hi: int):
        """Slots plus each slot's role index (len(roles) = the anchor's all-members role)."""
        fam = self.families[f]
        k, seg, slot, subj, keys = self._slots(f, lo, hi)
        cum = np.cumsum([p for _, p in fam.roles])
        role = np.minimum(np.searchsorted(cum / cum[-1], uniform(
            stream_id(self.seed, "role", fam.base), keys), side="right"), len(fam.roles) - 1)
        role[(seg + lo == self._anchor(f)) & (slot == 0)] = len(fam.roles)
        return k, seg, slot, subj, keys, role

    def edges(self, f: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(subject ids, object ids, member bitmask) of family f's slots for subjects lo..hi-1."""
        fam, pool = self.families[f], self.pools[f]
        if len(fam.members) == 1:
            k, seg, slot, subj, keys = self._slots(f, lo, hi)
            mask = np.ones(len(seg), dtype=np.int64)
        else:
            k, seg, slot, subj, keys, role = self._roles(f, lo, hi)
            mask = self._role_masks(fam)[role]
        same = fam.subj == fam.obj
        n = pool.count - same
        rank = zipf_rank(uniform(stream_id(self.seed, "obj", fam.base), keys), n, fam.zipf)
        rank = np.minimum(rank, n - k[seg])
        order = np.argsort(seg * n + rank, kind="stable")
        value = np.empty_like(rank)
        value[order] = rank[order] + slot  # distinct within a subject: sorted ranks + position
        if same:  # skip the subject itself
            value += value >= pool.rank_of(subj - self.offset[fam.subj])
        return subj, pool.to_global(value), mask

    def out(self, f: int, entity: int) -> list[int]:
        """Objects of the family's base relation for one subject (question walks)."""
        local = entity - self.offset[self.families[f].subj]
        if not 0 <= local < self.sizes[self.families[f].subj]:
            return []
        _, obj, mask = self.edges(f, local, local + 1)
        return obj[(mask & 1) == 1].tolist()

    def walk(self, f: int, inverse: bool, entity: int) -> list[int]:
        """One hop of a question chain: the base relation's objects of ``entity`` or, walked
        ``inverse``, its subjects (from the reverse index)."""
        if not inverse:
            return self.out(f, entity)
        subjects, starts = self._reverse_index(f)
        local = entity - self.offset[self.families[f].obj]
        if not 0 <= local < self.sizes[self.families[f].obj]:
            return []
        return subjects[starts[local]:starts[local + 1]].tolist()

    def _reverse_index(self, f: int) -> tuple[np.ndarray, np.ndarray]:
        """Family f's base-relation subjects ordered by object, and where each object starts:
        the only edge-sized structure the generator holds (metaqa questions only)."""
        if f not in self._reverse:
            fam = self.families[f]
            n = self.sizes[fam.subj]
            parts = [self.edges(f, lo, min(n, lo + 8 * CHUNK)) for lo in range(0, n, 8 * CHUNK)]
            subj = np.concatenate([s[(m & 1) == 1] for s, _, m in parts])
            obj = np.concatenate([o[(m & 1) == 1] for _, o, m in parts]) - self.offset[fam.obj]
            counts = np.bincount(obj, minlength=self.sizes[fam.obj])
            self._reverse[f] = (subj[np.argsort(obj, kind="stable")].astype(np.int32),
                                np.concatenate([[0], np.cumsum(counts)]))
        return self._reverse[f]

    # ---- entities: names and literal lines --------------------------------------------------
    def _name_index(self, type_name: str, local: np.ndarray) -> np.ndarray:
        mult, add, space = self._name_perm[type_name]
        x = local + (self.sizes[P] if type_name == AC else 0)
        return (mult * x + add) % space

    def name(self, entity: int) -> str:
        t = self.type_of(entity)
        local = np.array([entity - self.offset[t]])
        return self.surface(t, local, [NAMERS[t](int(self._name_index(t, local)[0]))])[0]

    def surface(self, type_name: str, local: np.ndarray, names: list[str]) -> list[str]:
        """The English names as the dump writes them (``entity_names``): as made, ``_`` for
        spaces, or a "(qualifier)" — the occupation of a person, else the type's label — on a
        seeded share of the entities. Aliases and other languages keep the made name."""
        if self.entity_names == "plain":
            return names
        if self.entity_names == "underscored":
            return [n.replace(" ", "_") for n in names]
        keys = local + self.offset[type_name]
        marked = uniform(stream_id(self.seed, "entity", "disambiguate"), keys) < DISAMBIGUATED_SHARE
        words = DESCRIPTION_WORDS[type_name] if type_name in (P, AC) else None
        desc = uniform(stream_id(self.seed, "entity", "desc"), keys).tolist()
        return [f"{n} ({words[int(u * len(words))].lower() if words else LABEL[type_name]})"
                if m else n for n, m, u in zip(names, marked.tolist(), desc)]

    def entity_draws(self, type_name: str, lo: int, hi: int) -> dict[str, np.ndarray]:
        """Per-entity choices (aliases, non-English name, literal fact) as uniform draws."""
        keys = np.arange(lo, hi, dtype=np.int64) + self.offset[type_name]
        u = {what: uniform(stream_id(self.seed, "entity", what), keys)
             for what in ("alias", "foreign", "lang", "attr", "v1", "v2", "v3", "desc")}
        attr = ATTRIBUTES.get(type_name)
        u["n_alias"] = (u["alias"] >= 0.45).astype(np.int64) + (u["alias"] >= 0.8)
        u["has_foreign"] = u["foreign"] < FOREIGN_SHARE.get(type_name, 0.0)
        u["has_attr"] = u["attr"] < (attr[1] if attr else 0.0)
        return u

    def literal_count(self, type_name: str, lo: int, hi: int) -> int:
        d = self.entity_draws(type_name, lo, hi)
        extra = d["n_alias"].sum() + d["has_foreign"].sum() + d["has_attr"].sum()
        return int(2 * (hi - lo) + extra)

    def entity_lines(self, type_name: str, lo: int, hi: int) -> tuple[bytes, int, int]:
        """N-Triples of entities lo..hi-1 grouped by predicate: (bytes, literal lines, types)."""
        d = self.entity_draws(type_name, lo, hi)
        ids = np.arange(lo, hi) + self.offset[type_name]
        namer, attr, w = NAMERS[type_name], ATTRIBUTES.get(type_name), self.mid_width
        mids = self.midtab[ids].tobytes().decode()
        subj = [f"<{NS}m.0{mids[i:i + w]}> <{NS}" for i in range(0, len(mids), w)]
        name_ids = self._name_index(type_name, np.arange(lo, hi)).tolist()
        names = [namer(i) for i in name_ids]
        years = [None] * (hi - lo)
        if type_name in YEARS:
            first, last = YEARS[type_name]
            years = np.where(d["has_attr"], first + (d["v1"] * (last - first + 1)).astype(int),
                             0).tolist()
        shown = self.surface(type_name, np.arange(lo, hi), names)
        out = [f'{s}type.object.name> "{escape(n)}"@en .\n' for s, n in zip(subj, shown)]
        for i in np.flatnonzero(d["has_foreign"]).tolist():
            lang = LANGS[int(d["lang"][i] * len(LANGS))]
            out.append(f'{subj[i]}type.object.name> '
                       f'"{escape(foreign_name(type_name, names[i], lang))}"@{lang} .\n')
        for i in np.flatnonzero(d["n_alias"]).tolist():
            for alias in aliases(type_name, names[i])[: d["n_alias"][i]]:
                out.append(f'{subj[i]}common.topic.alias> "{escape(alias)}"@en .\n')
        for i in np.flatnonzero(d["has_attr"]).tolist():
            value = attr_value(attr[2], names[i], years[i], d["v1"][i], d["v2"][i], d["v3"][i])
            out.append(f"{subj[i]}{attr[0]}> {value} .\n")
        out.extend(f'{s}common.topic.description> '
                   f'"{escape(description(type_name, ni, u, y))}"@en .\n'
                   for s, ni, u, y in zip(subj, name_ids, d["desc"].tolist(), years))
        return self.rows("type", type_name, ids) + "".join(out).encode(), len(out), hi - lo

    # ---- fixed-width lines ------------------------------------------------------------------
    def rows(self, kind: str, label: str, s: np.ndarray, o: np.ndarray | None = None) -> bytes:
        """Lines of one shape for many mids at once: kind "nt"/"tsv" (an edge with relation
        ``label``) or "type" (the type assertion of type ``label``), as numpy byte rows."""
        key = (kind, label)
        if key not in self._templates:
            self._templates[key] = self._template(kind, label)
        tmpl, s_at, o_at = self._templates[key]
        rows = np.empty((len(s), len(tmpl)), dtype=np.uint8)
        rows[:] = tmpl
        rows[:, s_at:s_at + self.mid_width] = self.midtab[s]
        if o is not None:
            rows[:, o_at:o_at + self.mid_width] = self.midtab[o]
        return rows.tobytes()

    def _template(self, kind: str, label: str) -> tuple[np.ndarray, int, int]:
        hole = "#" * self.mid_width
        head, middle, tail = {
            "nt": (f"<{NS}m.0", f"> <{NS}{label}> <{NS}m.0", "> .\n"),
            "tsv": ("m.0", f"\t{label}\tm.0", "\n"),
            "type": (f"<{NS}m.0", f"> <{NS}type.object.type> <{NS}{label}> .\n", ""),
        }[kind]
        text = head + hole + middle + (hole + tail if tail else "")
        o_at = len(head) + self.mid_width + len(middle)
        return np.frombuffer(text.encode(), dtype=np.uint8), len(head), o_at


def _solve_sizes(n_triples: int, families=FAMILIES, type_table=TYPES) -> dict[str, int]:
    """Smallest entity total whose expected edge count reaches n_triples (binary search)."""
    def expected(n_entities: int) -> float:
        sizes = _type_sizes(n_entities, type_table)
        total = 0.0
        for fam in families:
            subjects = sizes[fam.subj] / (2 if fam.parity is not None else 1)
            cap = max(1, (sizes[fam.obj] // (2 if fam.parity is not None else 1))
                      - (fam.subj == fam.obj))
            mean_k = sum(p * min(i + 1, cap) for i, p in enumerate(fam.kdist))
            total += subjects * fam.cov * mean_k * fam.mean_popcount
        return total

    lo, hi = 1, max(2, n_triples)
    while lo < hi:
        mid = (lo + hi) // 2
        if expected(mid) >= n_triples:
            hi = mid
        else:
            lo = mid + 1
    return _type_sizes(lo, type_table)
