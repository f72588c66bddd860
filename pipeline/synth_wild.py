"""The ``wild`` wording of the synthetic generator's questions: asked as people type them.

Why: the ``train`` and ``heldout`` wordings are a few tidy templates per relation, so a
zero-shot score on them says little about questions written by real users, who ask in the
passive ("X was directed by whom"), walk a relation from its far end ("what films did X
direct", "which movies was X an actor in"), ask what two things share ("who shares a
birthplace with X"), leave the wh-word at the end ("X's director is who?"), type keywords
("director of X"), use words the relation's name does not ("who helmed X"), lower-case names
and make typos. This wording does all of that.

Nothing here is per relation but its *lexicon* (:data:`LEXICON`, the generator's own phrases per
family, by dotted base relation) and the words of each entity type (:data:`TYPE_WORDS`); the
forms (:func:`unit_forms`) are generic templates over them, each used where its lexicon has
the words: ``nouns`` (what the object is to the subject: "director"), ``verbs`` (base, past,
participle or None: the object does it to the subject: "direct, directed, directed") and
``links`` ("{subject} is ___ {object}": "from"). A unit is read as in ``synth_wording``: a hop
(``fwd``), a hop walked backwards (``inv``) or a hop there and back (``share``).

:func:`roughen` adds the noise of one question from its own seeded generator: the topic's name
lower-cased in :data:`LOWER_SHARE` of the questions, one character typo in
:data:`TYPO_SHARE` of the other words (of three letters or more).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import product

from lokg.pipeline.synth_schema import FAMILIES, MOVIE_FAMILIES

#: Share of the questions whose topic name is lower-cased.
LOWER_SHARE = 0.3
#: Share of the non-entity words (three letters or more) given one character typo.
TYPO_SHARE = 0.06
#: Stands for the topic in a text until the noise is added (no template contains it).
MARK = "\x00"


@dataclass(frozen=True)
class Lexicon:
    """One family's words (module docstring)."""

    nouns: tuple[str, ...]
    verbs: tuple[tuple[str, str, str | None], ...] = ()
    links: tuple[str, ...] = ()


@dataclass(frozen=True)
class TypeWords:
    """(singular, plural) nouns of an entity type; ``person``: asked with "who"."""

    nouns: tuple[tuple[str, str], ...]
    person: bool = False


TYPE_WORDS = {
    "people.person": TypeWords((("person", "people"), ("individual", "individuals")), True),
    "film.actor": TypeWords((("actor", "actors"), ("performer", "performers")), True),
    "film.film": TypeWords((("movie", "movies"), ("film", "films"), ("picture", "pictures"),
                            ("flick", "flicks"))),
    "music.artist": TypeWords((("musician", "musicians"), ("band", "bands")), True),
    "music.album": TypeWords((("album", "albums"), ("record", "records"))),
    "organization.organization": TypeWords((("company", "companies"), ("firm", "firms"))),
    "location.city": TypeWords((("city", "cities"), ("town", "towns"))),
    "location.country": TypeWords((("country", "countries"), ("nation", "nations"))),
    "music.genre": TypeWords((("genre", "genres"), ("style", "styles"))),
    "people.gender": TypeWords((("gender", "genders"),)),
    "film.film_genre": TypeWords((("genre", "genres"), ("kind", "kinds"))),
    "language.human_language": TypeWords((("language", "languages"), ("tongue", "tongues"))),
}

#: The wild wording's words per family (dotted base relation); every family has some that its
#: relation's name does not.
LEXICON = {
    "people.person.place_of_birth": Lexicon(("birthplace", "home town", "native city"),
                                            links=("born in",)),
    "people.person.nationality": Lexicon(("citizenship", "passport country"),
                                         links=("a citizen of", "from")),
    "people.person.gender": Lexicon(("sex", "gender identity")),
    "people.person.spouse": Lexicon(("husband or wife", "partner"), links=("married to",)),
    "people.person.children": Lexicon(("kid", "son or daughter", "offspring"),
                                      verbs=(("raise", "raised", "raised"),)),
    "people.person.employer": Lexicon(("boss company", "workplace"), links=("employed at",
                                                                            "working for")),
    "location.city.country": Lexicon(("nation", "home country"), links=("located in", "in")),
    "location.country.capital": Lexicon(("capital", "seat of government", "main city")),
    "organization.organization.headquarters": Lexicon(("head office", "home base"),
                                                      links=("based in",)),
    "organization.organization.founders": Lexicon(
        ("founder", "creator"), verbs=(("found", "founded", "founded"),
                                       ("start", "started", "started"),
                                       ("set up", "set up", "set up"))),
    "film.film.directed_by": Lexicon(
        ("director", "filmmaker", "helmer"), verbs=(("direct", "directed", "directed"),
                                                    ("helm", "helmed", "helmed"),
                                                    ("make", "made", "made"))),
    "film.film.written_by": Lexicon(
        ("writer", "screenwriter", "scribe"), verbs=(("write", "wrote", "written"),
                                                     ("pen", "penned", "penned"),
                                                     ("script", "scripted", "scripted"))),
    "film.film.starring": Lexicon(
        ("actor", "cast member", "performer", "lead"),
        verbs=(("act in", "acted in", None), ("appear in", "appeared in", None),
               ("play in", "played in", None))),
    "film.film.country": Lexicon(("country", "nation of origin", "homeland"),
                                 links=("made in", "from", "shot in")),
    "film.film.production_company": Lexicon(
        ("studio", "production company", "backer"),
        verbs=(("produce", "produced", "produced"), ("finance", "financed", "financed"),
               ("bankroll", "bankrolled", "bankrolled"))),
    "film.actor.nationality": Lexicon(("citizenship", "home country", "homeland"),
                                      links=("from", "native to")),
    "music.artist.genre": Lexicon(("style", "kind of music", "sound"), links=("playing",)),
    "music.artist.origin": Lexicon(("home town", "roots"), links=("from",)),
    "music.artist.label": Lexicon(("label", "record company"), links=("signed to",)),
    "music.album.artist": Lexicon(
        ("artist", "musician", "band"), verbs=(("record", "recorded", "recorded"),
                                               ("release", "released", "released"))),
    "music.album.genre": Lexicon(("style", "kind of music", "sound")),
    "film.film.genre": Lexicon(("genre", "kind", "category", "type of film"),
                               links=("categorised as", "classed as")),
    "film.film.language": Lexicon(("language", "tongue", "spoken language"),
                                  links=("in", "spoken in", "filmed in")),
}

#: (subject type, object type) of each family's base relation.
TYPES = {f.base: (f.subj, f.obj) for f in FAMILIES + MOVIE_FAMILIES}


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _grid(templates: tuple[str, ...], **axes) -> list[str]:
    """Every template filled with every combination of the axes' words (the first axis
    slowest, the templates fastest; a word that is a dict fills several fields); ``{x}``
    stays."""
    out = []
    for words in product(*axes.values()):
        fill = {"x": "{x}"}
        for axis, word in zip(axes, words):
            fill.update(word if isinstance(word, dict) else {axis: word})
        out += [t.format(**fill) for t in templates]
    return out


def _forward(lex: Lexicon, obj: TypeWords) -> tuple[list[str], list[str]]:
    """Ask the object of the topic {x}; noun phrases naming it."""
    wh, one = ("who" if obj.person else "what"), [s for s, _ in obj.nouns]
    asks = _grid(("{wh} is the {n} of {x}", "{x}'s {n} is {wh}?", "{n} of {x}", "{x} {n}"),
                 n=lex.nouns, wh=[wh])
    nps = _grid(("the {n} of {x}", "{x}'s {n}"), n=lex.nouns)
    for _, past, part in lex.verbs:
        asks.append(f"{wh} {past} {{x}}")
        nps += ([f"whoever {past} {{x}}"] if obj.person
                else _grid(("the {s} that {v} {x}",), v=[past], s=one))
        if part:
            asks += [f"{{x}} was {part} by {'whom' if obj.person else 'what'}"]
            asks += _grid(("{x} was {v} by which {s}",), v=[part], s=one)
    for link in lex.links:
        asks += _grid(("{x} is {l} which {s}", "which {s} is {x} {l}"), l=[link], s=one)
        nps += _grid(("the {s} {x} is {l}",), l=[link], s=one)
    return asks, nps


def _inverse(lex: Lexicon, subj: TypeWords, obj: TypeWords) -> tuple[list[str], list[str]]:
    """Ask the subjects whose object is the topic {x}; noun phrases naming them."""
    many = [p for _, p in subj.nouns]
    asks = _grid(("which {p} have {x} as {n}", "which {p} was {x} the {n} of",
                  "{p} with {x} as {n}"), p=many, n=lex.nouns)
    if obj.person:
        asks += _grid(("which {p} was {x} {n} in",), p=many, n=list(map(_a, lex.nouns)))
    nps = _grid(("the {p} with {x} as {n}",), p=many, n=lex.nouns)
    for base, past, part in lex.verbs:
        for p in many:
            asks += [f"what {p} did {{x}} {base}", f"{{x}} {past} which {p}"]
            nps.append(f"the {p} {{x}} {past}")
            if part:
                asks.append(f"which {p} were {part} by {{x}}")
                nps.append(f"the {p} {part} by {{x}}")
    for link in lex.links:
        asks += _grid(("which {p} are {l} {x}", "{p} {l} {x}"), l=[link], p=many)
        nps += _grid(("the {p} {l} {x}",), l=[link], p=many)
    return asks, nps


def _share(lex: Lexicon, subj: TypeWords, obj: TypeWords) -> tuple[list[str], list[str]]:
    """Ask the other subjects with an object of the topic {x}; noun phrases naming them."""
    many, nouns = [p for _, p in subj.nouns], lex.nouns
    both = [{"n": n, "a": _a(n)} for n in nouns]
    asks = _grid(("which {p} have the same {n} as {x}", "what {p} share {a} with {x}",
                  "{x} has the same {n} as which {p}", "{p} with the same {n} as {x}"),
                 p=many, n=both)
    if subj.person:
        asks += _grid(("who shares {a} with {x}", "who has the same {n} as {x}"), n=both)
    nps = _grid(("the {p} with the same {n} as {x}", "the {p} sharing {a} with {x}"),
                p=many, n=both)
    for base, _, _ in lex.verbs:
        asks += _grid(("what other {p} did the {n} of {x} {v}",), v=[base], n=nouns[:1], p=many)
    for link in lex.links:
        pairs = dict(l=[link], p=many, o=[o for o, _ in obj.nouns])
        asks += _grid(("which {p} are {l} the same {o} as {x}",), **pairs)
        nps += _grid(("the {p} {l} the same {o} as {x}",), **pairs)
    return asks, nps


@lru_cache(maxsize=None)
def unit_forms(relation: str, kind: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(question forms, noun-phrase forms) of one unit (kind fwd | inv | share) in the wild
    wording; ``{x}`` marks the topic or the inner noun phrase."""
    lex = LEXICON[relation]
    subj, obj = (TYPE_WORDS[t] for t in TYPES[relation])
    if kind == "fwd":
        asks, nps = _forward(lex, obj)
    elif kind == "inv":
        asks, nps = _inverse(lex, subj, obj)
    else:
        asks, nps = _share(lex, subj, obj)
    return tuple(asks), tuple(nps)


def _typo(word: str, u: float, v: float) -> str:
    """One character typo: two letters swapped, one dropped, doubled or replaced."""
    i = int(u * (len(word) - 1))
    kind = int(v * 4)
    if kind == 0 and word[i] != word[i + 1]:
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if kind == 1:
        return word[:i] + word[i] + word[i:]
    if kind == 2:
        letter = "abcdefghijklmnopqrstuvwxyz"[int(v * 104) % 26]
        if letter != word[i]:
            return word[:i] + letter + word[i + 1:]
    return word[:i] + word[i + 1:]


def roughen(text: str, topic: str, rng) -> tuple[str, dict]:
    """The question of a text whose topic is :data:`MARK`, with its noise drawn from ``rng``
    (a numpy Generator of this question alone): (text, {"typos": n, "lower": bool})."""
    lower = bool(rng.random() < LOWER_SHARE)
    words, typos = text.split(" "), 0
    for k, word in enumerate(words):
        if MARK in word or len(word) < 3 or not word.isalpha():
            continue
        u, v, w = rng.random(3)
        if u < TYPO_SHARE:
            words[k] = _typo(word, v, w)
            typos += 1
    return (" ".join(words).replace(MARK, topic.lower() if lower else topic),
            {"typos": typos, "lower": lower})
