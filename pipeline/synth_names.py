"""Names and literal values of the synthetic KG: entity names (bijective in the name index),
aliases, non-English names, descriptions, dated/numeric facts, and the relation naming
schemes."""

from __future__ import annotations

import functools
from collections import Counter

from lokg.pipeline.synth_schema import (AC, AL, AR, CI, CO, FG, FI, GE, LA, MG, ORG, XSD, P,
                                        SynthError)
#: Literal facts that are not names: type -> (predicate, share of entities, value kind).
ATTRIBUTES = {
    P: ("people.person.date_of_birth", 0.7, "date"),
    FI: ("film.film.initial_release_date", 0.6, "date"),
    AL: ("music.album.release_date", 0.5, "year"),
    ORG: ("organization.organization.date_founded", 0.4, "year"),
    CI: ("location.city.population", 0.5, "integer"),
    CO: ("location.country.iso_alpha_3", 0.8, "code"),
}
#: Share of entities with a non-English name, by type.
FOREIGN_SHARE = {CI: 0.4, CO: 0.4, FI: 0.2}
LANGS = ("fr", "de", "es", "it")
_LOC_SUFFIX = {"fr": "é", "de": "en", "es": "a", "it": "o"}
_FILM_ARTICLE = {"fr": "Le ", "de": "Der ", "es": "El ", "it": "Il "}
YEARS = {P: (1900, 2005), FI: (1920, 2023), AL: (1955, 2023), ORG: (1850, 2020)}
LABEL = {P: "person", AC: "actor", FI: "film", AR: "band", AL: "album", ORG: "organization",
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
GENRES = ("rock|pop|jazz|blues|hip hop|electronic|classical|folk|country|reggae|punk rock|"
          "heavy metal|soul|funk|disco|techno|house|ambient|indie rock|grunge|ska|gospel|opera|"
          "bluegrass|trip hop|drum and bass|dubstep|synth-pop|new wave|post-rock|shoegaze|"
          "bossa nova|salsa|flamenco|k-pop|afrobeat|zydeco|emo|trance|garage rock").split("|")
GENDERS = ("male", "female")
_FILM_GENRES = ("drama|comedy|thriller|documentary|western|science fiction|horror|animation|"
                "romance|crime|mystery|fantasy|adventure|war|musical|family|biography|sport|"
                "film noir|action|history|short").split("|")
_LANGUAGES = ("English French German Spanish Italian Japanese Hindi Korean Mandarin Russian "
              "Portuguese Swedish Danish Turkish Persian Arabic Polish Dutch Greek Hebrew Czech "
              "Hungarian Finnish Norwegian Thai Tamil Cantonese Bengali Telugu Icelandic").split()
NAMES_OF = {FG: _FILM_GENRES, LA: _LANGUAGES}
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


def escape(text: str) -> str:
    if '"' in text or "\\" in text:
        return text.replace("\\", "\\\\").replace('"', '\\"')
    return text

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


NAMERS = {
    P: _person_name,
    AC: _person_name,
    FI: _film_name,
    AR: _artist_name,
    AL: _album_name,
    ORG: lambda i: f"{_word(i // len(_ORG_KINDS))} {_ORG_KINDS[i % len(_ORG_KINDS)][0]}",
    CI: lambda i: _word(i // len(_CITY_SUFFIX)) + _CITY_SUFFIX[i % len(_CITY_SUFFIX)],
    CO: lambda i: _word(i // len(_COUNTRY_SUFFIX)) + _COUNTRY_SUFFIX[i % len(_COUNTRY_SUFFIX)],
    MG: lambda i: GENRES[i],
    GE: lambda i: GENDERS[i],
    FG: lambda i: _FILM_GENRES[i],
    LA: lambda i: _LANGUAGES[i],
}


def aliases(type_name: str, name: str) -> list[str]:
    if type_name in (P, AC):
        first, last = name.split(" ", 1)
        return [f"{first[0]}. {last}", f"{last}, {first}"]
    label = LABEL[type_name]
    words = [w for w in name.replace('"', "").split() if w[0].isalpha()]
    short = "".join(w[0] for w in words).upper() if len(words) > 1 else f"{label.title()} of {name}"
    return [short, f"{name} ({label})"]


def foreign_name(type_name: str, name: str, lang: str) -> str:
    if type_name == FI:
        return _FILM_ARTICLE[lang] + name.removeprefix("The ")
    suffix = _LOC_SUFFIX[lang]
    return name if name.endswith(suffix) else name + suffix


def attr_value(kind: str, name: str, year: int | None, v1: float, v2: float, v3: float) -> str:
    """The N-Triples literal of an entity's non-name literal fact."""
    if kind == "integer":
        return f'"{int(1000 * 5000 ** v1)}"^^<{XSD}integer>'
    if kind == "code":
        letters = "".join(c for c in name.upper() if c.isalpha())
        return f'"{(letters + "XXX")[:3]}"'
    if kind == "year":
        return f'"{year}"^^<{XSD}gYear>'
    return f'"{year:04d}-{1 + int(v2 * 12):02d}-{1 + int(v3 * 28):02d}"^^<{XSD}date>'


DESCRIPTION_WORDS = {P: _OCCUPATIONS, FI: _FILM_KINDS, AC: _ACTOR_KINDS, AR: _BAND_KINDS,
                     CI: _CITY_KINDS, CO: ("Sovereign state",), MG: ("Music genre",),
                     GE: ("Gender identity",), AL: ("studio album",), ORG: ("",),
                     FG: ("Film genre",), LA: ("Human language",)}


def description(type_name: str, name_index: int, u: float, year: int | None) -> str:
    words = DESCRIPTION_WORDS[type_name]
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
