"""The synthetic KG's schema: entity types, relation families and what they plant.

Every relation belongs to a *family* bound to one (subject type, object type) pair; a family's
relations share one slot list per subject, and each slot's *role* says which of them state it
(a synonym family: a large, partial overlap of pairs; an inverse family: most slots stated both
ways). ``families.json`` records the planted families as ground truth.
"""

from __future__ import annotations

from dataclasses import dataclass

from lokg.runtime.errors import LokgError

NS = "http://rdf.freebase.com/ns/"
XSD = "http://www.w3.org/2001/XMLSchema#"
CHUNK = 8192  # subjects per vectorised block


class SynthError(LokgError, ValueError):
    """Generator arguments that cannot produce a graph; the message names the argument."""

#: Entity types in id order: (type, share of the proportional part, minimum count). ``None``
#: share = a small fixed-size type sized by ``_fixed_size``.
TYPES = (
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
#: Types and families only a metaqa-style graph has (``TYPES`` / ``FAMILIES`` alone are the
#: default graph, byte for byte): what MetaQA's movie questions ask about besides directors,
#: casts, countries and studios. film.film.written_by shares film.film.directed_by's type pair;
#: its (film, person) pairs are drawn independently.
MOVIE_TYPES = ((FG, None, 3), (LA, None, 3))
MOVIE_FAMILIES: tuple[Family, ...] = (
    Family(("film.film.written_by",), FI, P, 0.85, (.70, .25, .05), 0.9,
           ("writer", "screenwriter")),
    Family(("film.film.genre",), FI, FG, 0.95, (.45, .35, .20), 0.8, ("genre", "film genre")),
    Family(("film.film.language",), FI, LA, 0.95, (.85, .15), 1.4,
           ("language", "spoken language")),
)

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
