"""Deterministic synthetic Freebase-like knowledge graph (DESIGN §6).

Why this shape: the generator backs the ingest tests (exact row and quarantine counts), the SCOS
merge evaluation (planted redundant relations with known ground truth), the QA evaluation
(PathQuestion-style questions with exact gold answers) and the scale benchmarks (10⁵…10⁸
edges), so every count is exact, every byte is a function of (n_triples, seed, options), and
nothing proportional to the number of edges is ever held in memory.

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
  type pairs, so the §2.3 NMI signal is 0 for them by construction.
* The out-degree arrays of plain families are nudged (one slot at a time, seeded) until the
  edges total exactly ``n_triples``. Edges are distinct by construction: a subject's k Zipf
  ranks are sorted and the i-th gets +i, so the file holds exactly ``n_triples`` distinct
  entity→entity edges.
* Questions follow chains of base relations only (members[0]: never a synonym or an inverse
  member), so a subject's answers are recomputable from that subject alone — or, for a hop
  walked backwards (metaqa style), from a reverse index of that one relation.
* Malformed lines (``MALFORMED_KINDS``) are placed before well-formed line
  ⌊(i + u_i)·W/M⌋; each breaks the grammar even for a parser that accepts ``<>`` (the
  empty-IRI kind also lacks the final " .").

Output (``out_dir``): ``kg.nt`` or ``kg.nt.gz`` (N-Triples: graph edges, one ``type.object.type``
line, one ``@en`` name, an English description, 0-2 aliases per entity, some non-English names
and dated/numeric literal facts, and optionally malformed lines at stratified positions),
``kg.tsv`` (the edges: ``s_mid \\t relation \\t o_mid``, same order), ``families.json`` (ground
truth), ``questions.jsonl`` (2- and 3-hop questions, answers computed by walking the generated
graph), the same questions split into ``train.jsonl`` / ``dev.jsonl`` / ``test.jsonl``
(:func:`question_splits`) and ``manifest.json`` (params, counts, per-relation counts, sha256 of every file).

A question record: ``id``, ``question``, ``answers`` (names), ``answer_keys`` (mids, sorted),
``topic_entities`` (one mid), ``topic_names``, ``path`` (the gold chain in the graph's relation
names; a hop walked against the relation's direction is the name prefixed with
:data:`INVERSE_PREFIX`, e.g. ``["~film.film.directed_by", "film.film.starring"]``), ``hops``,
and — in every output but the all-defaults one, which stays byte for byte what it was —
``wording`` (train | heldout) and ``inverse`` (any ``~`` hop). The splits add ``split``.

Generalisation variants (options of :func:`generate`; ``lokg synth`` flags)
--------------------------------------------------------------------------------
Held-out graphs differ from a training graph in relation naming, entity names, question wording
and in questions that walk relations backwards; each option varies one of these:

* ``naming`` — relation names: ``dotted`` ``film.film.directed_by`` (default), ``freebase``
  ``/film/film/directed_by``, ``underscored`` ``__film__film__directed_by``, ``camel``
  ``filmFilmDirectedBy``, ``plain`` ``directed_by`` (the last segment; where two relations
  share it, type and relation: ``person_nationality`` / ``actor_nationality``). Edges,
  families.json, paths and manifest counts use the scheme's names; types, names and other
  literal predicates keep theirs.
* ``entity_names`` — the ``@en`` names (and so topic_names and answers): ``plain``,
  ``underscored`` (``John_Smith``) or ``disambiguated`` (a seeded :data:`DISAMBIGUATED_SHARE`
  get ``John Smith (politician)``, ``The Last Garden (film)``).
* ``question_style`` — ``pathquestion`` (default: forward 2-/3-hop chains over every family)
  or ``metaqa``: MetaQA-like movie questions over the film families (plus film.film.written_by,
  film.film.genre and film.film.language, with film genres and languages as types — added only
  in this style) whose hops may walk a relation backwards ("what movies did X direct": one
  ``~film.film.directed_by`` hop; "which films share the director of X": directed_by then
  ~directed_by, the topic never among the answers). ``hops`` picks the hop counts (1-3;
  default 1, 2, 3). Inverse hops read a reverse index of the families walked backwards, built
  on first use, so this style refuses graphs above :data:`MAX_INVERSE_TRIPLES` triples.
* ``test_wording`` — ``heldout`` writes the test split in the held-out wording
  (``pipeline.synth_wording``: other verbs and syntax than any training template) while
  train/dev keep the train wording; the questions themselves (topics, chains, answers) are the
  same as with ``train``, so the two dumps make a paired "unseen wording" transfer split.
* ``max_answers`` — the most answers a question may have (default 5).
* ``withhold`` — N > 0 leaves out of kg.nt / kg.tsv the last edge of the first N 2-hop
  questions that only that edge answers, and writes the documents that state them
  (``linked_documents.jsonl``, for ``documents.corpus``; their triples in
  ``openie_linked.json``, for ``triple_extract.backend=precomputed``; the edges and their
  questions in ``withheld.json``): questions a graph built from the dump cannot answer until
  query-driven feedback fills the edge in from the documents (DESIGN §9).
* ``articles`` — a share in [0, 1]: ``articles.jsonl`` holds an article for that seeded share of
  the entities, titled with the entity's name, a sentence per fact it is the subject of with a
  date the triple lacks (:func:`write_articles`): linked text for ``documents.corpus``, from
  which ``triple_context`` restores each triple's sentence and answers cite it (DESIGN §8).
  The graph and the questions are those of the same options without it.
"""

from __future__ import annotations

import functools
import gzip as _gzip
import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lokg.pipeline.synth_wording import METAQA, STYLES, WORDINGS, render, variant_counts
from lokg.runtime.errors import LokgError
from lokg.runtime.relknow import INVERSE_PREFIX

NS = "http://rdf.freebase.com/ns/"
XSD = "http://www.w3.org/2001/XMLSchema#"
GENERATOR = "lokg-synth"
VERSION = 1
MIN_TRIPLES = 100

#: Freebase's mid alphabet (digits, lowercase consonants, underscore).
MID_ALPHABET = "0123456789bcdfghjklmnpqrstvwxyz_"
#: The malformed line kinds, in the order their index is drawn.
MALFORMED_KINDS = ("missing_dot", "truncated_iri", "two_terms", "unterminated_literal",
                   "garbage", "empty_iri")

_CHUNK = 8192  # subjects per vectorised block

#: Relation naming schemes (``generate(naming=...)``, module docstring).
NAMINGS = ("dotted", "freebase", "underscored", "camel", "plain")
#: Surface forms of entity names (``generate(entity_names=...)``).
ENTITY_NAMES = ("plain", "underscored", "disambiguated")
#: Share of entities whose name carries a "(qualifier)" under ``entity_names="disambiguated"``.
DISAMBIGUATED_SHARE = 0.3
#: Largest graph the metaqa style accepts: its inverse hops need a reverse index in memory
#: (4 bytes per edge of every family walked backwards, about 30 while one is built).
MAX_INVERSE_TRIPLES = 2_000_000
#: The hop counts a question style may ask (all of them by default).
STYLE_HOPS = {"pathquestion": (2, 3), "metaqa": (1, 2, 3)}


class SynthError(LokgError, ValueError):
    """Generator arguments that cannot produce a graph; the message names the argument."""


# --------------------------------------------------------------------------------------------
# schema

#: Entity types in id order: (type, share of the proportional part, minimum count). ``None``
#: share = a small fixed-size type sized by ``_fixed_size``.
_TYPES = (
    ("people.person", 0.42, 8),
    ("film.actor", 0.10, 3),
    ("film.film", 0.16, 3),
    ("music.artist", 0.04, 2),
    ("music.album", 0.14, 3),
    ("organization.organization", 0.06, 2),
    ("location.city", 0.08, 3),
    ("location.country", None, 3),
    ("music.genre", None, 3),
    ("people.gender", None, 2),
)


@dataclass(frozen=True)
class Family:
    """Relations sharing one slot list per subject (see the module docstring).

    ``roles`` are (bitmask over ``members``, probability); ``kdist[i]`` = P(k = i + 1) for a
    covered subject; ``parity`` restricts subjects and objects to people with that id parity.
    """

    members: tuple[str, ...]
    subj: str
    obj: str
    cov: float
    kdist: tuple[float, ...]
    zipf: float
    phrases: tuple[str, ...]
    roles: tuple[tuple[int, float], ...] = ((1, 1.0),)
    kind: str = "plain"  # plain | synonyms | inverse
    parity: int | None = None

    @property
    def base(self) -> str:
        return self.members[0]

    @property
    def mean_popcount(self) -> float:
        return sum(p * bin(m).count("1") for m, p in self.roles)


P, AC, FI, AR, AL = "people.person", "film.actor", "film.film", "music.artist", "music.album"
ORG, CI, CO, MG, GE = ("organization.organization", "location.city", "location.country",
                       "music.genre", "people.gender")

FAMILIES: tuple[Family, ...] = (
    Family(("people.person.place_of_birth", "people.person.birth_city", "people.person.born_in"),
           P, CI, 0.85, (1.0,), 1.1, ("place of birth", "birthplace"),
           roles=((0b111, .55), (0b011, .12), (0b101, .10), (0b001, .08), (0b010, .08),
                  (0b100, .07)), kind="synonyms"),
    Family(("people.person.nationality",), P, CO, 0.92, (.94, .06), 1.3,
           ("nationality", "country of citizenship")),
    Family(("people.person.gender",), P, GE, 0.95, (1.0,), 0.3, ("gender", "sex")),
    Family(("people.person.spouse",), P, P, 0.55, (.93, .07), 0.0, ("spouse", "partner"),
           parity=0),
    Family(("people.person.children", "people.person.parents"), P, P, 0.45,
           (.30, .35, .20, .10, .05), 0.0, ("child", "kid"),
           roles=((0b11, .80), (0b01, .12), (0b10, .08)), kind="inverse", parity=1),
    Family(("people.person.employer",), P, ORG, 0.55, (.50, .30, .20), 1.0,
           ("employer", "workplace")),
    Family(("location.city.country",), CI, CO, 1.0, (1.0,), 1.2, ("country", "nation")),
    Family(("location.country.capital",), CO, CI, 0.9, (1.0,), 0.5, ("capital", "capital city")),
    Family(("organization.organization.headquarters", "organization.organization.location"),
           ORG, CI, 0.9, (1.0,), 1.1, ("headquarters", "head office"),
           roles=((0b11, .70), (0b01, .12), (0b10, .18)), kind="synonyms"),
    Family(("organization.organization.founders",), ORG, P, 0.6, (.50, .30, .20), 0.8,
           ("founder", "creator")),
    Family(("film.film.directed_by", "film.film.director"), FI, P, 0.92, (.90, .10), 0.9,
           ("director", "filmmaker"),
           roles=((0b11, .62), (0b01, .23), (0b10, .15)), kind="synonyms"),
    Family(("film.film.starring", "film.actor.film"), FI, AC, 0.95,
           (0, .04, .07, .10, .12, .13, .12, .11, .10, .08, .07, .06), 1.0,
           ("star", "cast member"),
           roles=((0b11, .85), (0b01, .10), (0b10, .05)), kind="inverse"),
    Family(("film.film.country",), FI, CO, 0.85, (.90, .10), 1.3,
           ("country of origin", "production country")),
    Family(("film.film.production_company",), FI, ORG, 0.6, (.70, .30), 1.0,
           ("production company", "studio")),
    Family(("film.actor.nationality",), AC, CO, 0.8, (1.0,), 1.3,
           ("nationality", "home country")),
    Family(("music.artist.genre", "music.artist.genres"), AR, MG, 0.9, (.40, .35, .25), 1.0,
           ("genre", "musical style"),
           roles=((0b11, .72), (0b01, .16), (0b10, .12)), kind="synonyms"),
    Family(("music.artist.origin",), AR, CI, 0.7, (1.0,), 1.0, ("hometown", "place of origin")),
    Family(("music.artist.label",), AR, ORG, 0.5, (.80, .20), 1.0, ("record label", "label")),
    Family(("music.album.artist", "music.artist.album"), AL, AR, 1.0, (.95, .05), 1.0,
           ("artist", "performer"),
           roles=((0b11, .90), (0b01, .06), (0b10, .04)), kind="inverse"),
    Family(("music.album.genre",), AL, MG, 0.85, (.50, .30, .20), 1.0, ("genre", "style")),
)

FG, LA = "film.film_genre", "language.human_language"
#: Types and families only a metaqa-style graph has (``_TYPES`` / ``FAMILIES`` alone are the
#: default graph, byte for byte): what MetaQA's movie questions ask about besides directors,
#: casts, countries and studios. film.film.written_by shares film.film.directed_by's type pair;
#: its (film, person) pairs are drawn independently.
_MOVIE_TYPES = ((FG, None, 3), (LA, None, 3))
MOVIE_FAMILIES: tuple[Family, ...] = (
    Family(("film.film.written_by",), FI, P, 0.85, (.70, .25, .05), 0.9,
           ("writer", "screenwriter")),
    Family(("film.film.genre",), FI, FG, 0.95, (.45, .35, .20), 0.8, ("genre", "film genre")),
    Family(("film.film.language",), FI, LA, 0.95, (.85, .15), 1.4,
           ("language", "spoken language")),
)

#: Literal facts that are not names: type -> (predicate, share of entities, value kind).
_ATTRIBUTES = {
    P: ("people.person.date_of_birth", 0.7, "date"),
    FI: ("film.film.initial_release_date", 0.6, "date"),
    AL: ("music.album.release_date", 0.5, "year"),
    ORG: ("organization.organization.date_founded", 0.4, "year"),
    CI: ("location.city.population", 0.5, "integer"),
    CO: ("location.country.iso_alpha_3", 0.8, "code"),
}
#: Share of entities with a non-English name, by type.
_FOREIGN_SHARE = {CI: 0.4, CO: 0.4, FI: 0.2}
_LANGS = ("fr", "de", "es", "it")
_LOC_SUFFIX = {"fr": "é", "de": "en", "es": "a", "it": "o"}
_FILM_ARTICLE = {"fr": "Le ", "de": "Der ", "es": "El ", "it": "Il "}
_YEARS = {P: (1900, 2005), FI: (1920, 2023), AL: (1955, 2023), ORG: (1850, 2020)}
_LABEL = {P: "person", AC: "actor", FI: "film", AR: "band", AL: "album", ORG: "organization",
          CI: "city", CO: "country", MG: "genre", GE: "gender", FG: "film genre",
          LA: "language"}

_FIRST = ("James Mary John Patricia Robert Jennifer Michael Linda William Elizabeth David "
          "Barbara Richard Susan Joseph Jessica Thomas Sarah Charles Karen Daniel Nancy Matthew "
          "Lisa Anthony Betty Mark Margaret Paul Sandra Steven Ashley Andrew Kimberly Kenneth "
          "Emily Joshua Donna Kevin Michelle Brian Carol George Amanda Edward Melissa Ronald "
          "Deborah Timothy Stephanie Jason Rebecca Jeffrey Laura Ryan Sharon Jacob Cynthia Gary "
          "Kathleen Nicholas Amy Eric Angela").split()
_SURNAMES = ("Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez "
             "Hernandez Lopez Gonzalez Wilson Anderson Thomas Taylor Moore Jackson Martin Lee "
             "Perez Thompson White Harris Sanchez Clark Ramirez Lewis Robinson Walker Young "
             "Allen King Wright Scott Torres Nguyen Hill Flores Green Adams Nelson Baker Hall "
             "Rivera Campbell Mitchell Carter Roberts Turner Phillips Evans Parker Edwards "
             "Collins Stewart Morris Murphy Cook Rogers Morgan Peterson Cooper").split()
_FILM_ADJ = ("Silent Broken Hidden Last Golden Dark Crimson Lost Burning Frozen Wild Quiet "
             "Hollow Iron Savage Endless Secret Shattered Distant Electric Midnight Scarlet "
             "Invisible Restless Forgotten Eternal Falling Rising Velvet Wicked Bitter Sacred "
             "Stolen Twisted Fading Rogue Pale Northern Silver Lonely").split()
_FILM_NOUN = ("River Empire Garden Horizon Kingdom Shadow Witness Harbor Frontier Promise "
              "Storm Mirror Station Carnival Voyage Legacy Signal Canyon Tide Orchard Verdict "
              "Fortress Lantern Island Compass Requiem Outpost Labyrinth Summit Paradox "
              "Covenant Reckoning Meridian Sanctuary Odyssey Phantom Cipher Echo Wilderness "
              "Crossing").split()
_MUSIC_ADJ = ("Blue Neon Velvet Electric Paper Golden Static Lunar Solar Wooden Glass Honey "
              "Cosmic Rusty Cold Warm Lucid Hazy Sonic Analog Digital Feral Gentle Heavy "
              "Little Morning Ocean Plastic Royal Sugar Wired Violet").split()
_MUSIC_NOUN = ("Dreams Hearts Lights Roads Waves Machines Ghosts Animals Bridges Stars Rivers "
               "Mountains Cities Signals Flowers Wolves Engines Mirrors Windows Letters Secrets "
               "Tigers Shadows Voices Colors Seasons Islands Rockets Sparks Feathers Tapes "
               "Kings").split()
_GENRES = ("rock|pop|jazz|blues|hip hop|electronic|classical|folk|country|reggae|punk rock|"
           "heavy metal|soul|funk|disco|techno|house|ambient|indie rock|grunge|ska|gospel|opera|"
           "bluegrass|trip hop|drum and bass|dubstep|synth-pop|new wave|post-rock|shoegaze|"
           "bossa nova|salsa|flamenco|k-pop|afrobeat|zydeco|emo|trance|garage rock").split("|")
_GENDERS = ("male", "female")
_FILM_GENRES = ("drama|comedy|thriller|documentary|western|science fiction|horror|animation|"
                "romance|crime|mystery|fantasy|adventure|war|musical|family|biography|sport|"
                "film noir|action|history|short").split("|")
_LANGUAGES = ("English French German Spanish Italian Japanese Hindi Korean Mandarin Russian "
              "Portuguese Swedish Danish Turkish Persian Arabic Polish Dutch Greek Hebrew Czech "
              "Hungarian Finnish Norwegian Thai Tamil Cantonese Bengali Telugu Icelandic").split()
_NAMES_OF = {FG: _FILM_GENRES, LA: _LANGUAGES}
_ORG_KINDS = (("Corporation", "Company"), ("Group", "Conglomerate"), ("Records", "Record label"),
              ("Studios", "Film studio"), ("University", "University"),
              ("Foundation", "Non-profit organization"), ("Pictures", "Film production company"),
              ("Holdings", "Holding company"))
_CITY_SUFFIX = ("", "ville", "burg", "ton", "field", " Springs", "port", "ford")
_CITY_KINDS = ("City", "Town", "Port city", "Municipality")
_COUNTRY_SUFFIX = ("ria", "land", "stan", "nia")
_OCCUPATIONS = ("Politician", "Writer", "Musician", "Engineer", "Physician", "Athlete",
                "Painter", "Journalist", "Lawyer", "Scientist", "Teacher", "Entrepreneur")
_ACTOR_KINDS = ("Actor", "Actress", "Film actor", "Voice actor")
_FILM_KINDS = ("drama", "comedy", "thriller", "documentary", "western", "science fiction",
               "horror", "animated")
_BAND_KINDS = ("Band", "Musical group", "Solo artist", "Electronic music duo")
_CONS, _VOWELS = "bdfgklmnprstvz", "aeiou"
_SYLLABLES = [c + v for c in _CONS for v in _VOWELS]

# --------------------------------------------------------------------------------------------
# counter-based randomness: a splitmix64 hash of (stream, key) → uniform [0, 1)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _stream(seed: int, *labels) -> np.uint64:
    """An independent stream id for one purpose (stable across processes and versions)."""
    digest = hashlib.blake2b(repr((seed, labels)).encode(), digest_size=8).digest()
    return np.uint64(int.from_bytes(digest, "little"))


def _uniform(stream: np.uint64, keys: np.ndarray) -> np.ndarray:
    x = keys.astype(np.uint64) * _GOLDEN + stream
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def _zipf_rank(u: np.ndarray, n: int, a: float) -> np.ndarray:
    """Inverse CDF of the density ∝ (1 + x)^-a on [0, n), floored: rank 0 is the most popular."""
    if a == 1.0:
        x = np.power(n + 1.0, u) - 1.0
    else:
        c = (n + 1.0) ** (1.0 - a) - 1.0
        x = np.power(1.0 + u * c, 1.0 / (1.0 - a)) - 1.0
    return np.minimum(x.astype(np.int64), n - 1)


def _coprime(n: int, start: int) -> int:
    m = start % n or 1
    while math.gcd(m, n) != 1:
        m += 1
    return m


@dataclass(frozen=True)
class _Pool:
    """Objects of one type (optionally one id parity), ordered by a seeded affine permutation."""

    offset: int
    count: int
    stride: int
    phase: int
    mult: int
    add: int

    def to_global(self, rank: np.ndarray) -> np.ndarray:
        return self.offset + self.phase + self.stride * ((self.mult * rank + self.add) % self.count)

    def rank_of(self, local: np.ndarray) -> np.ndarray:
        inv = pow(self.mult, -1, self.count) if self.count > 1 else 0
        return (((local - self.phase) // self.stride - self.add) * inv) % self.count


@functools.lru_cache(maxsize=1 << 20)
def _word(i: int, min_syllables: int = 2) -> str:
    """Bijective: i ↦ a capitalised pronounceable word of consonant-vowel syllables."""
    n = min_syllables
    while i >= len(_SYLLABLES) ** n:
        i -= len(_SYLLABLES) ** n
        n += 1
    i = (i * 2654435761 + 11) % len(_SYLLABLES) ** n  # coprime to 70: neighbours look unrelated
    out = []
    for _ in range(n):
        i, d = divmod(i, len(_SYLLABLES))
        out.append(_SYLLABLES[d])
    return "".join(out).capitalize()


def _escape(text: str) -> str:
    if '"' in text or "\\" in text:
        return text.replace("\\", "\\\\").replace('"', '\\"')
    return text


def _fixed_size(type_name: str, n_entities: int) -> int:
    if type_name == CO:
        return min(200, max(3, n_entities // 400))
    if type_name == MG:
        return min(len(_GENRES), max(3, n_entities // 2500))
    if type_name in (FG, LA):
        return min(len(_NAMES_OF[type_name]), max(3, n_entities // 1000))
    return len(_GENDERS)



def _type_sizes(n_entities: int, type_table=_TYPES) -> dict[str, int]:
    """Entities per type for a target total (the real total may exceed it by the minimums)."""
    fixed = {t: _fixed_size(t, n_entities) for t, share, _ in type_table if share is None}
    rest = max(0, n_entities - sum(fixed.values()))
    sizes = {t: max(minimum, int(share * rest)) for t, share, minimum in type_table if share}
    sizes[P] += max(0, rest - sum(sizes.values()))
    return {t: sizes.get(t, fixed.get(t)) for t, _, _ in type_table}


# --------------------------------------------------------------------------------------------
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
                                  _TYPES + _MOVIE_TYPES if movie else _TYPES)
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
        h = int(_stream(self.seed, "names", type_name if type_name not in (P, AC) else "human"))
        return _coprime(space, (h >> 20) % space + space // 2), h % space, space

    def _pool(self, fam: Family) -> _Pool:
        n = self.sizes[fam.obj]
        stride, phase, count = 1, 0, n
        if fam.parity is not None:
            stride, phase, count = 2, fam.parity, (n - fam.parity + 1) // 2
        h = int(_stream(self.seed, "pool", fam.base))
        return _Pool(self.offset[fam.obj], count, stride, phase,
                     _coprime(count, (h >> 20) % count + count // 3), h % count)

    def _capacity(self, f: int) -> int:
        """Most distinct objects one subject can have (its own id excluded on a same-type pool)."""
        fam = self.families[f]
        return min(255, self.pools[f].count - (fam.subj == fam.obj))

    def _draw_degrees(self, f: int) -> np.ndarray:
        fam = self.families[f]
        n = self.sizes[fam.subj]
        keys = np.arange(n, dtype=np.int64) + self.offset[fam.subj]
        covered = _uniform(_stream(self.seed, "cov", fam.base), keys) < fam.cov
        k = np.searchsorted(np.cumsum(fam.kdist), _uniform(_stream(self.seed, "k", fam.base), keys),
                            side="right") + 1
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
        return sum(int(popcount[self._roles(f, lo, min(n, lo + 8 * _CHUNK))[-1]].sum())
                   for lo in range(0, n, 8 * _CHUNK))

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
        role = np.minimum(np.searchsorted(cum / cum[-1], _uniform(
            _stream(self.seed, "role", fam.base), keys), side="right"), len(fam.roles) - 1)
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
        rank = _zipf_rank(_uniform(_stream(self.seed, "obj", fam.base), keys), n, fam.zipf)
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
            parts = [self.edges(f, lo, min(n, lo + 8 * _CHUNK)) for lo in range(0, n, 8 * _CHUNK)]
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
        return self.surface(t, local, [_NAMERS[t](int(self._name_index(t, local)[0]))])[0]

    def surface(self, type_name: str, local: np.ndarray, names: list[str]) -> list[str]:
        """The English names as the dump writes them (``entity_names``): as made, ``_`` for
        spaces, or a "(qualifier)" — the occupation of a person, else the type's label — on a
        seeded share of the entities. Aliases and other languages keep the made name."""
        if self.entity_names == "plain":
            return names
        if self.entity_names == "underscored":
            return [n.replace(" ", "_") for n in names]
        keys = local + self.offset[type_name]
        marked = _uniform(_stream(self.seed, "entity", "disambiguate"), keys) < DISAMBIGUATED_SHARE
        words = _DESCRIPTION_WORDS[type_name] if type_name in (P, AC) else None
        desc = _uniform(_stream(self.seed, "entity", "desc"), keys).tolist()
        return [f"{n} ({words[int(u * len(words))].lower() if words else _LABEL[type_name]})"
                if m else n for n, m, u in zip(names, marked.tolist(), desc)]

    def entity_draws(self, type_name: str, lo: int, hi: int) -> dict[str, np.ndarray]:
        """Per-entity choices (aliases, non-English name, literal fact) as uniform draws."""
        keys = np.arange(lo, hi, dtype=np.int64) + self.offset[type_name]
        u = {what: _uniform(_stream(self.seed, "entity", what), keys)
             for what in ("alias", "foreign", "lang", "attr", "v1", "v2", "v3", "desc")}
        attr = _ATTRIBUTES.get(type_name)
        u["n_alias"] = (u["alias"] >= 0.45).astype(np.int64) + (u["alias"] >= 0.8)
        u["has_foreign"] = u["foreign"] < _FOREIGN_SHARE.get(type_name, 0.0)
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
        namer, attr, w = _NAMERS[type_name], _ATTRIBUTES.get(type_name), self.mid_width
        mids = self.midtab[ids].tobytes().decode()
        subj = [f"<{NS}m.0{mids[i:i + w]}> <{NS}" for i in range(0, len(mids), w)]
        name_ids = self._name_index(type_name, np.arange(lo, hi)).tolist()
        names = [namer(i) for i in name_ids]
        years = [None] * (hi - lo)
        if type_name in _YEARS:
            first, last = _YEARS[type_name]
            years = np.where(d["has_attr"], first + (d["v1"] * (last - first + 1)).astype(int),
                             0).tolist()
        shown = self.surface(type_name, np.arange(lo, hi), names)
        out = [f'{s}type.object.name> "{_escape(n)}"@en .\n' for s, n in zip(subj, shown)]
        for i in np.flatnonzero(d["has_foreign"]).tolist():
            lang = _LANGS[int(d["lang"][i] * len(_LANGS))]
            out.append(f'{subj[i]}type.object.name> '
                       f'"{_escape(_foreign(type_name, names[i], lang))}"@{lang} .\n')
        for i in np.flatnonzero(d["n_alias"]).tolist():
            for alias in _aliases(type_name, names[i])[: d["n_alias"][i]]:
                out.append(f'{subj[i]}common.topic.alias> "{_escape(alias)}"@en .\n')
        for i in np.flatnonzero(d["has_attr"]).tolist():
            value = _attr_value(attr[2], names[i], years[i], d["v1"][i], d["v2"][i], d["v3"][i])
            out.append(f"{subj[i]}{attr[0]}> {value} .\n")
        out.extend(f'{s}common.topic.description> '
                   f'"{_escape(_description(type_name, ni, u, y))}"@en .\n'
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


def _solve_sizes(n_triples: int, families=FAMILIES, type_table=_TYPES) -> dict[str, int]:
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


# --------------------------------------------------------------------------------------------
# names, aliases, descriptions, literal values


def _person_name(i: int) -> str:
    s = i // len(_FIRST)
    surname = _SURNAMES[s] if s < len(_SURNAMES) else _word(s - len(_SURNAMES))
    return f"{_FIRST[i % len(_FIRST)]} {surname}"


def _pair_name(i: int, adjs, nouns, patterns, overflow: str) -> str:
    """Mixed radix: pattern, adjective, noun, then a numbered overflow suffix (so: bijective)."""
    i, p = divmod(i, len(patterns))
    i, a = divmod(i, len(adjs))
    i, n = divmod(i, len(nouns))
    title = patterns[p].format(a=adjs[a], n=nouns[n])
    return title + overflow.format(i + 1) if i else title


def _film_name(i: int) -> str:
    return _pair_name(i, _FILM_ADJ, _FILM_NOUN,
                      ("The {a} {n}", "{a} {n}", "{n} of the {a}", 'The "{a}" {n}', "{n}: {a}"),
                      " {}")


def _album_name(i: int) -> str:
    return _pair_name(i, _MUSIC_ADJ, _MUSIC_NOUN,
                      ("{a} {n}", "{n} in {a}", "{a} {n} Live", "{n} \\ {a}", "Songs for {a} {n}"),
                      " Vol. {}")


def _artist_name(i: int) -> str:
    i, p = divmod(i, 4)
    if p == 0:
        return _pair_name(i, _MUSIC_ADJ, _MUSIC_NOUN, ("The {a} {n}",), " {}")
    if p == 1:
        return _pair_name(i, _MUSIC_ADJ, _MUSIC_NOUN, ("{a} {n} Collective",), " {}")
    if p == 2:
        i, n = divmod(i, len(_MUSIC_NOUN))
        return f"{_word(i)} and the {_MUSIC_NOUN[n]}"
    return f"DJ {_word(i)}"


_NAMERS = {
    P: _person_name,
    AC: _person_name,
    FI: _film_name,
    AR: _artist_name,
    AL: _album_name,
    ORG: lambda i: f"{_word(i // len(_ORG_KINDS))} {_ORG_KINDS[i % len(_ORG_KINDS)][0]}",
    CI: lambda i: _word(i // len(_CITY_SUFFIX)) + _CITY_SUFFIX[i % len(_CITY_SUFFIX)],
    CO: lambda i: _word(i // len(_COUNTRY_SUFFIX)) + _COUNTRY_SUFFIX[i % len(_COUNTRY_SUFFIX)],
    MG: lambda i: _GENRES[i],
    GE: lambda i: _GENDERS[i],
    FG: lambda i: _FILM_GENRES[i],
    LA: lambda i: _LANGUAGES[i],
}


def _aliases(type_name: str, name: str) -> list[str]:
    if type_name in (P, AC):
        first, last = name.split(" ", 1)
        return [f"{first[0]}. {last}", f"{last}, {first}"]
    label = _LABEL[type_name]
    words = [w for w in name.replace('"', "").split() if w[0].isalpha()]
    short = "".join(w[0] for w in words).upper() if len(words) > 1 else f"{label.title()} of {name}"
    return [short, f"{name} ({label})"]


def _foreign(type_name: str, name: str, lang: str) -> str:
    if type_name == FI:
        return _FILM_ARTICLE[lang] + name.removeprefix("The ")
    suffix = _LOC_SUFFIX[lang]
    return name if name.endswith(suffix) else name + suffix


def _attr_value(kind: str, name: str, year: int | None, v1: float, v2: float, v3: float) -> str:
    """The N-Triples literal of an entity's non-name literal fact."""
    if kind == "integer":
        return f'"{int(1000 * 5000 ** v1)}"^^<{XSD}integer>'
    if kind == "code":
        letters = "".join(c for c in name.upper() if c.isalpha())
        return f'"{(letters + "XXX")[:3]}"'
    if kind == "year":
        return f'"{year}"^^<{XSD}gYear>'
    return f'"{year:04d}-{1 + int(v2 * 12):02d}-{1 + int(v3 * 28):02d}"^^<{XSD}date>'


_DESCRIPTION_WORDS = {P: _OCCUPATIONS, FI: _FILM_KINDS, AC: _ACTOR_KINDS, AR: _BAND_KINDS,
                      CI: _CITY_KINDS, CO: ("Sovereign state",), MG: ("Music genre",),
                      GE: ("Gender identity",), AL: ("studio album",), ORG: ("",),
                      FG: ("Film genre",), LA: ("Human language",)}


def _description(type_name: str, name_index: int, u: float, year: int | None) -> str:
    words = _DESCRIPTION_WORDS[type_name]
    word = words[int(u * len(words))]
    if type_name == P:
        return f"{word}, born {year}" if year else word
    if type_name == FI:
        return f"{year} {word} film" if year else f"Feature {word} film"
    if type_name == AL:
        return f"{year} {word}" if year else word.capitalize()
    if type_name == ORG:
        kind = _ORG_KINDS[name_index % len(_ORG_KINDS)][1]
        return f"{kind} founded in {year}" if year else kind
    return word


# --------------------------------------------------------------------------------------------
# malformed lines


class _Malformed:
    """M malformed lines at stratified positions: line i goes before well-formed line q_i,
    q_i = floor((i + u_i) · W / M), so they spread evenly and each is placed exactly once."""

    def __init__(self, world: World, names: dict[str, str], n_wellformed: int, rate: float):
        self.world, self.names, self.w = world, names, n_wellformed
        self.m = int(round(rate * n_wellformed))
        self.stream = _stream(world.seed, "malformed")
        self.text_stream = _stream(world.seed, "malformed-text")

    def between(self, g0: int, g1: int) -> tuple[np.ndarray, np.ndarray]:
        """(malformed ids, positions) placed before well-formed lines g0..g1-1."""
        if self.m == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        i = np.arange(max(0, g0 * self.m // self.w - 1), min(self.m, g1 * self.m // self.w + 2))
        q = np.minimum(((i + _uniform(self.stream, i)) * (self.w / self.m)).astype(np.int64),
                       self.w - 1)
        keep = (q >= g0) & (q < g1)
        return i[keep], q[keep]

    def line(self, i: int) -> bytes:
        """Malformed line i: every kind breaks the N-Triples grammar, whatever IRI rules apply."""
        u = _uniform(self.text_stream, np.arange(4 * i, 4 * i + 4))
        w = self.world
        s = w.mid(int(u[1] * w.n_entities))
        o = w.mid(int(u[2] * w.n_entities))
        families = w.families
        rel = self.names[families[int(u[3] * len(families))].base]
        kind = MALFORMED_KINDS[int(u[0] * len(MALFORMED_KINDS))]
        text = {
            "missing_dot": f"<{NS}{s}> <{NS}{rel}> <{NS}{o}>",
            "truncated_iri": f"<{NS}{s}> <{NS}{rel}> <{NS}{o[:5]}",
            "two_terms": f"<{NS}{s}> <{NS}{rel}> .",
            "unterminated_literal": f'<{NS}{s}> <{NS}type.object.name> "Unterminated {s}@en .',
            "garbage": f"%% garbage {s} ;; not a triple {int(u[2] * 1e9)} !!",
            "empty_iri": f"<> <{NS}{rel}> <{NS}{o}>",  # also lacks the final " ."
        }[kind]
        return (text + "\n").encode()

    def write(self, out, chunk: bytes, g0: int, n_lines: int) -> None:
        ids, pos = self.between(g0, g0 + n_lines)
        if len(ids) == 0:
            out.write(chunk)
            return
        line_ends = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10) + 1
        starts = np.concatenate([[0], line_ends[:-1]])
        view, cut0 = memoryview(chunk), 0
        for i, q in zip(ids.tolist(), pos.tolist()):
            cut = int(starts[q - g0])
            out.write(view[cut0:cut])
            out.write(self.line(i))
            cut0 = cut
        out.write(view[cut0:])


# --------------------------------------------------------------------------------------------
# relation names


def _camel(segments: list[str]) -> str:
    words = [w for segment in segments for w in segment.split("_") if w]
    return words[0].lower() + "".join(w.capitalize() for w in words[1:])


_RENAMERS = {"dotted": ".".join, "freebase": lambda s: "/" + "/".join(s),
             "underscored": lambda s: "__" + "__".join(s), "camel": _camel}


def _plain(dotted: list[str]) -> dict[str, str]:
    """The last segment; where two relations share it, the type's last segment before it."""
    last = Counter(r.rsplit(".", 1)[1] for r in dotted)
    return {r: r.rsplit(".", 1)[1] if last[r.rsplit(".", 1)[1]] == 1
            else "_".join(r.split(".")[-2:]) for r in dotted}


def relation_names(families, naming: str) -> dict[str, str]:
    """Each dotted relation of ``families`` → its name under ``naming`` (module docstring); a
    scheme that is not one-to-one on them raises SynthError."""
    dotted = [r for fam in families for r in fam.members]
    names = _plain(dotted) if naming == "plain" else {
        r: _RENAMERS[naming](r.split(".")) for r in dotted}
    if len(set(names.values())) != len(names):
        raise SynthError(f"naming={naming!r} gives two relations one name")
    return names


# --------------------------------------------------------------------------------------------
# questions

#: A hop of a question chain: (family index, walked against the relation's direction).
Step = tuple[int, bool]


def _ends(fam: Family, inverse: bool) -> tuple[str, str]:
    """(start type, end type) of a hop along the family's base relation."""
    return (fam.obj, fam.subj) if inverse else (fam.subj, fam.obj)


def _connects(a: tuple[Family, bool], b: tuple[Family, bool]) -> bool:
    """Hop b can follow hop a: a ends on b's start type (and on the same half of the people)."""
    (fa, ia), (fb, ib) = a, b
    return (_ends(fa, ia)[1] == _ends(fb, ib)[0]
            and (fa.parity is None or fb.parity in (None, fa.parity)))


def _chains(families, steps: list[Step], hops: int) -> list[tuple[Step, ...]]:
    """Chains of ``hops`` steps that connect type to type, in a fixed order."""
    chains = [(s,) for s in steps]
    for _ in range(hops - 1):
        chains = [c + (s,) for c in chains for s in steps
                  if _connects((families[c[-1][0]], c[-1][1]), (families[s[0]], s[1]))]
    return chains


def _style_steps(families, style: str) -> list[Step]:
    """pathquestion: every base relation, forward (a subject's answers need only that subject);
    metaqa: the movie relations synth_wording.METAQA words, both ways."""
    if style == "pathquestion":
        return [(f, False) for f in range(len(families))]
    return [(f, inverse) for f, fam in enumerate(families) if fam.base in METAQA
            for inverse in (False, True)]


def split_of(index: int) -> str:
    """The split of the question at ``index`` (every 10th from the first is test, the one after
    it dev): the labelled questions a build may learn from and the ones it is judged on stay
    apart, and the first question — the demo's — is a test one."""
    return "test" if index % 10 == 0 else "dev" if index % 10 == 1 else "train"


def question_splits(questions: list[dict]) -> dict[str, list[dict]]:
    """Train/dev/test by position (:func:`split_of`)."""
    splits: dict[str, list[dict]] = {"train": [], "dev": [], "test": []}
    for i, q in enumerate(questions):
        split = split_of(i)
        splits[split].append({**q, "split": split})
    return splits


def labelled_overrides(dump: str | Path) -> list[str]:
    """Build overrides that let a build of this dump learn from its train/dev questions:
    relation knowledge (and its gates, on dev) and GAT's gold-path term."""
    dump = Path(dump)
    return [f"relation_knowledge.questions={dump / 'train.jsonl'}",
            f"relation_knowledge.dev_questions={dump / 'dev.jsonl'}",
            f"gat.questions={dump / 'train.jsonl'}"]


def linked_text_overrides(dump: str | Path) -> list[str]:
    """Build overrides that read the dump's articles (``articles`` > 0) as linked text, from
    which triple_context restores sentences that answers cite; none when it has none."""
    return ["documents.corpus=articles.jsonl"] if (Path(dump) / "articles.jsonl").is_file() else []


def _jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def _endpoints(world: World, chain: tuple[Step, ...], topic: int, max_answers: int,
               style: str) -> list[int] | None:
    """The chain's endpoints walked from the topic, ordered by mid; None refuses the question
    (no endpoint, more than ``max_answers``, or — pathquestion only — the topic among them;
    metaqa drops the topic instead: the films sharing X's director are not X)."""
    frontier = {topic}
    for f, inverse in chain:
        frontier = {o for x in frontier for o in world.walk(f, inverse, x)}
        if not frontier or len(frontier) > 10 * max_answers:
            break
    if style == "metaqa":
        frontier.discard(topic)
    elif topic in frontier:
        return None
    return sorted(frontier, key=world.mid) if 1 <= len(frontier) <= max_answers else None


def _record(world: World, names: dict[str, str], style: str, wording: str,
            chain: tuple[Step, ...], topic: int, answers: list[int], draws: list[float],
            index: int, extended: bool) -> dict:
    """One question record; ``draws`` pick the wording's template and phrases."""
    hops = [(world.families[f], inverse) for f, inverse in chain]
    steps = [(fam.base, fam.phrases, inverse) for fam, inverse in hops]
    choice = [int(u * n) for u, n in zip(draws, variant_counts(style, wording, steps))]
    topic_name = world.name(topic)
    record = {
        "id": f"synth-{index + 1:05d}",
        "question": render(style, wording, steps, topic_name, choice),
        "answers": [world.name(a) for a in answers],
        "answer_keys": [world.mid(a) for a in answers],
        "topic_entities": [world.mid(topic)],
        "topic_names": [topic_name],
        "path": [INVERSE_PREFIX * inverse + names[fam.base] for fam, inverse in hops],
        "hops": len(chain),
    }
    if extended:
        record.update(wording=wording, inverse=any(inverse for _, inverse in chain))
    return record


def _questions(world: World, n_questions: int, names: dict[str, str], *,
               style: str = "pathquestion", hops: tuple[int, ...] = (2, 3), max_answers: int = 5,
               test_wording: str = "train", extended: bool = False) -> list[dict]:
    """Questions on random chains and topics whose answers are every endpoint of the chain;
    test questions (:func:`split_of`) in the ``test_wording``, the others in ``train``."""
    rng = np.random.default_rng([world.seed, 0x51])
    chains = {h: _chains(world.families, _style_steps(world.families, style), h) for h in hops}
    seen, out = set(), []
    attempts = 0
    while len(out) < n_questions and attempts < 50 * n_questions + 100:
        attempts += 1
        n_hops = hops[len(hops) - 1 - int(rng.random() * len(hops))]
        chain = chains[n_hops][int(rng.random() * len(chains[n_hops]))]
        start = _ends(world.families[chain[0][0]], chain[0][1])[0]
        topic = world.offset[start] + int(rng.random() * world.sizes[start])
        phrase_u, template_u = rng.random(n_hops), rng.random()
        answers = _endpoints(world, chain, topic, max_answers, style)
        if answers is None or (topic, chain) in seen:
            continue
        seen.add((topic, chain))
        wording = test_wording if split_of(len(out)) == "test" else "train"
        out.append(_record(world, names, style, wording, chain, topic, answers,
                           [template_u, *phrase_u], len(out), extended))
    return out


# --------------------------------------------------------------------------------------------
# writing


class _HashingFile:
    """A binary file that hashes what it writes (the manifest records every file's sha256)."""

    def __init__(self, path: Path):
        self.file = open(path, "wb")  # noqa: SIM115 - closed by close()
        self.sha = hashlib.sha256()

    def write(self, data) -> int:
        self.sha.update(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def families_ground_truth(families, names: dict[str, str]) -> dict:
    """The planted redundant relation families (written as families.json), in ``names``."""
    description = (
        "Each family draws one list of distinct (subject, object) slots per subject; every "
        "slot is stated by a random subset of the family's relations (its role). Synonyms "
        "(first = canonical) have the same subject and object types, share about 60-72% of "
        "their (s, o) pairs by Jaccard, add pairs of their own and differ in triple counts. "
        "Inverses state most slots as (s, r, o) and (o, r_inv, s) and some only one way. "
        f"All other relations differ in type pair, except {names['people.person.spouse']}, "
        "which lives on people with even ids while children/parents live on odd ids.")
    if "film.film.written_by" in names:
        description += (f" {names['film.film.written_by']} has the type pair of "
                        f"{names['film.film.directed_by']}; their pairs are drawn independently.")
    return {
        "synonyms": [[names[r] for r in f.members] for f in families if f.kind == "synonyms"],
        "inverses": [[names[r] for r in f.members] for f in families if f.kind == "inverse"],
        "description": description,
    }


#: The generalisation options of :func:`generate` and their defaults (``hops``: the style's).
OPTION_DEFAULTS = {"naming": "dotted", "entity_names": "plain",
                   "question_style": "pathquestion", "hops": None, "test_wording": "train",
                   "max_answers": 5, "withhold": 0, "articles": 0.0}


def _options(n_triples: int, given: dict) -> tuple[dict, dict]:
    """(every option resolved, the ones differing from their defaults) — SynthError names an
    option that is unknown or out of range."""
    for key, allowed in (("naming", NAMINGS), ("entity_names", ENTITY_NAMES),
                         ("question_style", STYLES), ("test_wording", WORDINGS)):
        if given[key] not in allowed:
            raise SynthError(f"{key}={given[key]!r}: choose one of {', '.join(allowed)}")
    style = given["question_style"]
    allowed = STYLE_HOPS[style]
    hops = tuple(sorted(set(given["hops"] or allowed)))
    if not set(hops) <= set(allowed):
        raise SynthError(f"hops={list(given['hops'])}: question_style={style!r} asks "
                         f"{'/'.join(map(str, allowed))}-hop questions only")
    if given["withhold"] < 0 or (given["withhold"] and n_triples > MAX_INVERSE_TRIPLES):
        raise SynthError(f"withhold={given['withhold']}: a count >= 0, on graphs of at most "
                         f"{MAX_INVERSE_TRIPLES:,} triples (the dump files are rewritten)")
    if not 0.0 <= given["articles"] <= 1.0:
        raise SynthError(f"articles={given['articles']}: a share of the entities within [0, 1]")
    if given["max_answers"] < 1:
        raise SynthError(f"max_answers must be at least 1, got {given['max_answers']}")
    if style == "metaqa" and n_triples > MAX_INVERSE_TRIPLES:
        raise SynthError(f"question_style='metaqa' holds a reverse index in memory: n_triples "
                         f"must be at most {MAX_INVERSE_TRIPLES:,}, got {n_triples:,}")
    resolved = {**given, "hops": hops}
    defaults = {**OPTION_DEFAULTS, "hops": allowed}
    changed = {k: list(v) if k == "hops" else v for k, v in resolved.items() if v != defaults[k]}
    return resolved, changed


def _write_graph(world: World, names: dict[str, str], out: Path, n_triples: int,
                 malformed_rate: float, gzip: bool) -> tuple[dict, dict, int, int, int]:
    """kg.nt(.gz) and kg.tsv, subject block by subject block: (sha256 by file, triples by
    relation, literal lines, type assertions, malformed lines)."""
    n_literal = sum(world.literal_count(t, lo, min(world.sizes[t], lo + 8 * _CHUNK))
                    for t in world.types for lo in range(0, world.sizes[t], 8 * _CHUNK))
    malformed = _Malformed(world, names, n_triples + n_literal + world.n_entities,
                           malformed_rate)
    nt_name = "kg.nt.gz" if gzip else "kg.nt"
    (out / ("kg.nt" if gzip else "kg.nt.gz")).unlink(missing_ok=True)
    nt_file, tsv_file = _HashingFile(out / nt_name), _HashingFile(out / "kg.tsv")
    nt = _gzip.GzipFile(filename="kg.nt", mode="wb", fileobj=nt_file, mtime=0,
                        compresslevel=6) if gzip else nt_file
    relation_counts = {names[rel]: 0 for fam in world.families for rel in fam.members}
    written = literal = typed = 0
    for t in world.types:
        for lo in range(0, world.sizes[t], _CHUNK):
            hi = min(world.sizes[t], lo + _CHUNK)
            text, n_lit, n_typed = world.entity_lines(t, lo, hi)
            nt_edges, tsv_edges, n_edges = _edge_rows(world, names, t, lo, hi, relation_counts)
            n_lines = n_lit + n_typed + n_edges
            malformed.write(nt, text + nt_edges, written, n_lines)
            tsv_file.write(tsv_edges)
            written, literal, typed = written + n_lines, literal + n_lit, typed + n_typed
    if gzip:
        nt.close()
    nt_file.close()
    tsv_file.close()
    assert sum(relation_counts.values()) == n_triples and written == malformed.w, "count drift"
    files = {nt_name: nt_file.sha.hexdigest(), "kg.tsv": tsv_file.sha.hexdigest()}
    return files, relation_counts, literal, typed, malformed.m


def _edge_rows(world: World, names: dict[str, str], t: str, lo: int, hi: int,
               relation_counts: dict[str, int]) -> tuple[bytes, bytes, int]:
    """The N-Triples and TSV lines of the edges of subjects lo..hi-1 of type t, and how many;
    ``relation_counts`` gets them added."""
    nt_parts, tsv_parts, n_edges = [], [], 0
    for f, fam in enumerate(world.families):
        if fam.subj != t:
            continue
        subj, obj, mask = world.edges(f, lo, hi)
        for m, rel in enumerate(fam.members):
            sel = (mask >> m) & 1 == 1
            s, o = subj[sel], obj[sel]
            if fam.kind == "inverse" and m == 1:
                s, o = o, s
            nt_parts.append(world.rows("nt", names[rel], s, o))
            tsv_parts.append(world.rows("tsv", names[rel], s, o))
            relation_counts[names[rel]] += len(s)
            n_edges += len(s)
    return b"".join(nt_parts), b"".join(tsv_parts), n_edges


def _write_texts(out: Path, families: dict, questions: list[dict]) -> dict[str, str]:
    """families.json, questions.jsonl and the split files: sha256 by file."""
    return _write_texts_raw(out, {
        "families.json": json.dumps(families, indent=2) + "\n",
        "questions.jsonl": _jsonl(questions),
        **{f"{split}.jsonl": _jsonl(part) for split, part in question_splits(questions).items()},
    })


def _withheld_facts(world: World, names: dict[str, str], questions: list[dict],
                    count: int) -> list[dict]:
    """The last hop of the first ``count`` 2-hop questions that only that one edge answers
    (the first hop reaches one entity, which has that one object under a plain relation):
    withheld from the dump, each question stops at it — a sub-question (m, r, ?)."""
    family = {names[fam.base]: f for f, fam in enumerate(world.families)}
    entity = {world.mid(i): i for i in range(world.n_entities)}
    facts = []
    for q in questions:
        if len(facts) == count:
            break
        if q["hops"] != 2 or len(q["answers"]) != 1 or any(INVERSE_PREFIX in p for p in q["path"]):
            continue
        (f1, f2), topic = (family[p] for p in q["path"]), entity[q["topic_entities"][0]]
        middle = world.walk(f1, False, topic)
        if len(middle) == 1 and world.families[f2].kind == "plain" \
                and world.walk(f2, False, middle[0]) == [entity[q["answer_keys"][0]]]:
            facts.append({"question": q["id"], "topic": topic, "s": middle[0], "family": f2,
                          "first": f1, "o": entity[q["answer_keys"][0]]})
    if len(facts) < count:
        raise SynthError(f"withhold={count}: only {len(facts)} questions end in an edge only "
                         "they reach; generate more questions")
    return facts


def _without_lines(path: Path, drop: set[bytes]) -> str:
    """Rewrite a dump file without the lines in ``drop`` (gzip kept deterministic); sha256."""
    gz = path.suffix == ".gz"
    raw = _gzip.decompress(path.read_bytes()) if gz else path.read_bytes()
    kept = b"".join(line for line in raw.splitlines(keepends=True) if line not in drop)
    data = _gzip.compress(kept, compresslevel=6, mtime=0) if gz else kept
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def _phrase(relation: str) -> str:
    return relation.replace("/", ".").strip(".").split(".")[-1].replace("_", " ")


def withhold_edges(world: World, names: dict[str, str], out: Path, questions: list[dict],
                   count: int, files: dict[str, str]) -> list[dict]:
    """Withhold ``count`` edges from kg.nt / kg.tsv and write the documents that state them:
    ``linked_documents.jsonl`` (a document per withheld edge, and one stating each question's
    first hop, which the graph keeps), ``openie_linked.json`` (their triples, HippoRAG's
    shape, for ``triple_extract.backend=precomputed``) and ``withheld.json``."""
    facts = _withheld_facts(world, names, questions, count)
    for kind, name in (("nt", next(n for n in files if n.startswith("kg.nt"))), ("tsv", "kg.tsv")):
        drop = {world.rows(kind, names[world.families[f["family"]].base], np.array([f["s"]]),
                           np.array([f["o"]])) for f in facts}
        files[name] = _without_lines(out / name, drop)
    docs, edges = [], []
    for f in facts:
        for s, fam, o in ((f["s"], f["family"], f["o"]), (f["topic"], f["first"], f["s"])):
            relation = names[world.families[fam].base]
            triple = [world.name(s), _phrase(relation), world.name(o)]
            docs.append({"title": world.name(s), "text": " ".join(triple) + ".",
                         "extracted_entities": [triple[0], triple[2]],
                         "extracted_triples": [triple]})
        edges.append({"question": f["question"], "s": world.mid(f["s"]),
                      "s_name": world.name(f["s"]),
                      "relation": names[world.families[f["family"]].base],
                      "o": world.mid(f["o"]), "o_name": world.name(f["o"]),
                      "sentence": docs[-2]["text"]})
    files.update(_write_texts_raw(out, {
        "linked_documents.jsonl": _jsonl([{"title": d["title"], "text": d["text"]} for d in docs]),
        "openie_linked.json": json.dumps({"docs": docs}, indent=1) + "\n",
        "withheld.json": json.dumps({"edges": edges}, indent=2) + "\n"}))
    return edges


#: An article sentence states one fact with a date the triple does not carry: the context a
#: triple_context build restores and an answer cites (DESIGN §8, "any linked text").
_ARTICLE_SENTENCES = ("The {phrase} of {s} is {o}, as recorded in {year}.",
                      "In {year}, {o} was listed as the {phrase} of {s}.")
_ARTICLE_YEARS = (1950, 2020)


def write_articles(world: World, out: Path, share: float) -> dict[str, str]:
    """``articles.jsonl``: for a seeded ``share`` of the entities with facts, an article titled
    with the entity's name (the link DESIGN §8 reads) whose sentences state each of its facts
    (every family slot it is the subject of, whichever relation names state it) with a dated
    qualifier. Subject block by subject block, so no edge-sized structure is held."""
    path, digest = out / "articles.jsonl", hashlib.sha256()
    chosen_stream, draw_stream = _stream(world.seed, "article"), _stream(world.seed, "article-fact")
    with path.open("wb") as fh:
        for t in world.types:
            families = [f for f, fam in enumerate(world.families) if fam.subj == t]
            for lo in range(0, world.sizes[t], _CHUNK):
                hi = min(world.sizes[t], lo + _CHUNK)
                raw = "".join(_jsonl(_articles(world, families, lo, hi, share, chosen_stream,
                                               draw_stream))).encode()
                fh.write(raw)
                digest.update(raw)
    return {path.name: digest.hexdigest()}


def _articles(world: World, families: list[int], lo: int, hi: int, share: float,
              chosen_stream: np.uint64, draw_stream: np.uint64) -> list[dict]:
    """The articles of the chosen subjects among local ids lo..hi-1 of one type."""
    name = functools.lru_cache(maxsize=None)(world.name)  # a subject is named in every sentence
    sentences: dict[int, list[str]] = {}
    for f in families:
        subj, obj, mask = world.edges(f, lo, hi)
        keep = (mask != 0) & (_uniform(chosen_stream, subj.astype(np.int64)) < share)
        subj, obj = subj[keep], obj[keep]
        draws = _uniform(draw_stream, subj.astype(np.int64) * world.n_entities + obj)
        first, last = _ARTICLE_YEARS
        years = first + (draws * (last - first + 1)).astype(np.int64)
        phrase = world.families[f].phrases[0]
        for s, o, year in zip(subj.tolist(), obj.tolist(), years.tolist()):
            template = _ARTICLE_SENTENCES[year % len(_ARTICLE_SENTENCES)]
            sentences.setdefault(s, []).append(template.format(
                phrase=phrase, s=name(s), o=name(o), year=year))
    return [{"title": name(s),
             "text": f"{name(s)} is {_indefinite(_LABEL[world.type_of(s)])}. " + " ".join(lines)}
            for s, lines in sorted(sentences.items())]


def _indefinite(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _write_texts_raw(out: Path, texts: dict[str, str]) -> dict[str, str]:
    files = {}
    for name, data in texts.items():
        raw = data.encode()
        (out / name).write_bytes(raw)
        files[name] = hashlib.sha256(raw).hexdigest()
    return files


def generate(out_dir, *, n_triples: int, seed: int = 0, malformed_rate: float = 0.0,
             gzip: bool = False, n_questions: int = 1000,
             naming: str = OPTION_DEFAULTS["naming"],
             entity_names: str = OPTION_DEFAULTS["entity_names"],
             question_style: str = OPTION_DEFAULTS["question_style"],
             hops: tuple[int, ...] | None = OPTION_DEFAULTS["hops"],
             test_wording: str = OPTION_DEFAULTS["test_wording"],
             max_answers: int = OPTION_DEFAULTS["max_answers"],
             withhold: int = OPTION_DEFAULTS["withhold"],
             articles: float = OPTION_DEFAULTS["articles"]) -> dict:
    """Write the synthetic KG into ``out_dir`` and return its manifest (also manifest.json).

    The options after ``n_questions`` are the generalisation variants (module docstring); with
    all of them at their defaults the output is the original generator's, byte for byte."""
    if n_triples < MIN_TRIPLES:
        raise SynthError(f"n_triples must be at least {MIN_TRIPLES}, got {n_triples}")
    if not 0.0 <= malformed_rate <= 0.5:
        raise SynthError(f"malformed_rate must be within [0, 0.5], got {malformed_rate}")
    options, changed = _options(n_triples, dict(
        naming=naming, entity_names=entity_names, question_style=question_style, hops=hops,
        test_wording=test_wording, max_answers=max_answers, withhold=withhold,
        articles=articles))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    world = World(n_triples, seed, movie=question_style == "metaqa", entity_names=entity_names)
    names = relation_names(world.families, naming)
    files, relation_counts, literal, typed, n_malformed = _write_graph(
        world, names, out, n_triples, malformed_rate, gzip)
    questions = _questions(world, n_questions, names, style=question_style,
                           hops=options["hops"], max_answers=max_answers,
                           test_wording=test_wording,
                           extended=bool(changed.keys() - {"articles"}))
    files.update(_write_texts(out, families_ground_truth(world.families, names), questions))
    withheld = withhold_edges(world, names, out, questions, withhold, files) if withhold else []
    for edge in withheld:
        relation_counts[edge["relation"]] -= 1
    if articles:
        files.update(write_articles(world, out, articles))
    manifest = {
        "generator": GENERATOR,
        "version": VERSION,
        "params": {"n_triples": n_triples, "seed": seed, "malformed_rate": malformed_rate,
                   "gzip": gzip, "n_questions": n_questions, **changed},
        "counts": {
            "triples": n_triples - len(withheld),
            "entities": world.n_entities,
            "relations": sum(1 for c in relation_counts.values() if c),
            "literal_lines": literal,
            "type_assertions": typed,
            "malformed_lines": n_malformed,
            "questions": len(questions),
        },
        "entity_types": world.sizes,
        "relation_counts": relation_counts,
        "files": files,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
