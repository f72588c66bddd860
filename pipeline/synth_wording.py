"""The English of the synthetic generator's questions (``pipeline.synth``): two styles, each in
three wordings (the third, ``wild``, made by ``pipeline.synth_wild``: generic forms over each
family's words, as varied as people ask, with lower-cased names and typos).

Why two wordings: relation knowledge learns from the words of its training questions; a test
split written in words and syntax no training question uses ("who directed X" in training,
"X was directed by whom" at test) measures whether it generalises beyond the templates. Every
template of the ``heldout`` wording differs from every ``train`` one, so no held-out question
text can be produced by the training wording (tests/test_synth.py checks the texts).

* ``pathquestion`` — PathQuestion-like chains of forward hops: ``templates(topic, phrases)``
  joins one relation phrase per hop, e.g. "what is the country of the place of birth of X ?";
  the train wording's phrases are the family's ``phrases``, the held-out wording's
  :data:`HELDOUT_PHRASES` ("which sovereign state does the native city of X have ?").
* ``metaqa`` — MetaQA-like questions over the movie families whose hops may walk a relation
  against its direction. A chain is read as *units*: a hop, or a forward hop followed by the
  same relation backwards (``share``: "which films share the director of X"). The last unit is
  asked as a question, the ones before it nest as noun phrases around the topic: "who acted in
  {the films directed by X}". ``{x}`` marks the entity or the inner noun phrase.

A text is chosen by a *choice*: one index per variant slot (:func:`variant_counts`), so the
generator maps its uniform draws to indices and :func:`renderings` lists every text of a chain.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import product

from lokg.pipeline.synth_wild import unit_forms

STYLES = ("pathquestion", "metaqa")
WORDINGS = ("train", "heldout", "wild")

#: PathQuestion-style templates by wording: (topic name, one phrase per hop) → question.
PATHQUESTION = {
    "train": (
        lambda topic, ps: "what is the " + " of the ".join(reversed(ps)) + f" of {topic} ?",
        lambda topic, ps: f"{topic} 's " + " 's ".join(ps) + " is what ?",
        lambda topic, ps: f"what is the {ps[-1]} of {topic} 's " + " 's ".join(ps[:-1]) + " ?",
    ),
    "heldout": (
        lambda topic, ps: "name the " + " belonging to the ".join(reversed(ps)) + f" of {topic} ?",
        lambda topic, ps: (f"which {ps[-1]} does the " + " of the ".join(reversed(ps[:-1]))
                           + f" of {topic} have ?"),
        lambda topic, ps: f"starting from {topic} , follow " + " , then ".join(ps)
                          + " : what do you reach ?",
    ),
}

#: The held-out relation phrases of the pathquestion style, by dotted base relation: words no
#: training phrase (``Family.phrases``, the train wording's) uses.
HELDOUT_PHRASES = {
    "people.person.place_of_birth": ("native town", "town they were born in"),
    "people.person.nationality": ("passport issuer", "state of allegiance"),
    "people.person.gender": ("male or female classification",),
    "people.person.spouse": ("husband or wife", "better half"),
    "people.person.children": ("offspring", "son or daughter"),
    "people.person.employer": ("firm they work at", "paymaster"),
    "location.city.country": ("sovereign state", "land it lies in"),
    "location.country.capital": ("seat of government", "ruling town"),
    "organization.organization.headquarters": ("main base", "central offices"),
    "organization.organization.founders": ("person who established it", "originator"),
    "film.film.directed_by": ("helmer", "person behind the camera"),
    "film.film.starring": ("leading player", "on-screen talent"),
    "film.film.country": ("producing land", "homeland of the picture"),
    "film.film.production_company": ("financing firm", "backer"),
    "film.actor.nationality": ("passport issuer", "state of allegiance"),
    "music.artist.genre": ("kind of music", "sound"),
    "music.artist.origin": ("town they come from", "roots"),
    "music.artist.label": ("music publisher", "recording imprint"),
    "music.album.artist": ("musician behind it", "act that recorded it"),
    "music.album.genre": ("kind of music", "sound"),
    "film.film.written_by": ("scriptwriter", "author of the script"),
    "film.film.genre": ("category of cinema", "kind of picture"),
    "film.film.language": ("tongue", "idiom"),
}


def _phrases(wording: str, relation: str, train: tuple[str, ...]) -> tuple[str, ...]:
    return train if wording == "train" else HELDOUT_PHRASES[relation]


def _forms(train_ask, train_np, heldout_ask, heldout_np) -> dict:
    return {"train": (train_ask, train_np), "heldout": (heldout_ask, heldout_np)}


#: MetaQA-style forms: dotted base relation → unit kind (fwd | inv | share) → wording →
#: (question forms, noun-phrase forms). These relations are the steps a metaqa chain may take.
METAQA = {
    "film.film.directed_by": {
        "fwd": _forms(("who directed {x}", "who is the director of {x}"),
                      ("the director of {x}",),
                      ("{x} was directed by whom", "name the filmmaker behind {x}"),
                      ("the filmmaker behind {x}",)),
        "inv": _forms(("what movies did {x} direct", "which films were directed by {x}"),
                      ("the films directed by {x}",),
                      ("{x} was the director of which movies", "list the pictures {x} helmed"),
                      ("the pictures helmed by {x}",)),
        "share": _forms(("which films share the director of {x}",),
                        ("the films sharing the director of {x}",),
                        ("what movies have the same filmmaker as {x}",),
                        ("the movies with the same filmmaker as {x}",)),
    },
    "film.film.written_by": {
        "fwd": _forms(("who wrote {x}", "who is the writer of {x}"),
                      ("the writer of {x}",),
                      ("{x} was written by whom", "name the screenwriter of {x}"),
                      ("the screenwriter of {x}",)),
        "inv": _forms(("what films did {x} write", "which movies were written by {x}"),
                      ("the films written by {x}",),
                      ("{x} penned the script of which pictures",),
                      ("the pictures scripted by {x}",)),
        "share": _forms(("which films share the writer of {x}",),
                        ("the films sharing the writer of {x}",),
                        ("what movies have the same screenwriter as {x}",),
                        ("the movies with the same screenwriter as {x}",)),
    },
    "film.film.starring": {
        "fwd": _forms(("who acted in {x}", "who starred in {x}"),
                      ("the actors in {x}",),
                      ("{x} featured which performers", "name the cast of {x}"),
                      ("the cast of {x}",)),
        "inv": _forms(("which films star {x}", "what movies did {x} act in"),
                      ("the films starring {x}",),
                      ("{x} appeared in which pictures", "list the movies featuring {x}"),
                      ("the pictures featuring {x}",)),
        "share": _forms(("which films share actors with {x}",),
                        ("the films sharing actors with {x}",),
                        ("what movies have cast members in common with {x}",),
                        ("the movies with cast members in common with {x}",)),
    },
    "film.film.genre": {
        "fwd": _forms(("what is the genre of {x}", "what genre is {x}"),
                      ("the genre of {x}",),
                      ("{x} belongs to which category of cinema",),
                      ("the film category of {x}",)),
        "inv": _forms(("which films have the genre {x}", "what movies are of the genre {x}"),
                      ("the films of the genre {x}",),
                      ("{x} is the category of which pictures",),
                      ("the pictures in the category {x}",)),
        "share": _forms(("which films share the genre of {x}",),
                        ("the films sharing the genre of {x}",),
                        ("what movies fall in the same category as {x}",),
                        ("the movies in the same category as {x}",)),
    },
    "film.film.language": {
        "fwd": _forms(("what language is {x} in", "what is the language of {x}"),
                      ("the language of {x}",),
                      ("{x} is spoken in which tongue",),
                      ("the tongue of {x}",)),
        "inv": _forms(("which films are in {x}", "what movies are in the language {x}"),
                      ("the films in {x}",),
                      ("{x} is the tongue of which pictures",),
                      ("the pictures spoken in {x}",)),
        "share": _forms(("which films share the language of {x}",),
                        ("the films sharing the language of {x}",),
                        ("what movies are spoken in the same tongue as {x}",),
                        ("the movies spoken in the same tongue as {x}",)),
    },
    "film.film.country": {
        "fwd": _forms(("what country is {x} from", "which country produced {x}"),
                      ("the country of {x}",),
                      ("{x} originates from which nation",),
                      ("the nation of origin of {x}",)),
        "inv": _forms(("which films are from {x}", "what movies were made in {x}"),
                      ("the films from {x}",),
                      ("{x} is the nation of origin of which pictures",),
                      ("the pictures originating from {x}",)),
        "share": _forms(("which films share the country of {x}",),
                        ("the films sharing the country of {x}",),
                        ("what movies come from the same nation as {x}",),
                        ("the movies from the same nation as {x}",)),
    },
    "film.film.production_company": {
        "fwd": _forms(("which company produced {x}", "what studio made {x}"),
                      ("the studio of {x}",),
                      ("{x} was financed by which firm",),
                      ("the firm that financed {x}",)),
        "inv": _forms(("what films did {x} produce", "which movies were produced by {x}"),
                      ("the films produced by {x}",),
                      ("{x} financed which pictures",),
                      ("the pictures financed by {x}",)),
        "share": _forms(("which films share the studio of {x}",),
                        ("the films sharing the studio of {x}",),
                        ("what movies were financed by the same firm as {x}",),
                        ("the movies financed by the same firm as {x}",)),
    },
    "film.actor.nationality": {
        "fwd": _forms(("what is the nationality of {x}", "which country is {x} from"),
                      ("the nationality of {x}",),
                      ("{x} holds the citizenship of which nation",),
                      ("the nation whose citizenship {x} holds",)),
        "inv": _forms(("which actors are from {x}", "who are the actors from {x}"),
                      ("the actors from {x}",),
                      ("{x} is the homeland of which performers",),
                      ("the performers whose homeland is {x}",)),
        "share": _forms(("which actors share the nationality of {x}",),
                        ("the actors sharing the nationality of {x}",),
                        ("who are the performers from the same nation as {x}",),
                        ("the performers from the same nation as {x}",)),
    },
}


def _units(steps) -> list[tuple[str, str]]:
    """(relation, kind) units of a metaqa chain: r followed by ~r is one ``share`` unit."""
    units, i = [], 0
    while i < len(steps):
        relation, _, inverse = steps[i]
        following = steps[i + 1] if i + 1 < len(steps) else None
        if not inverse and following and (following[0], following[2]) == (relation, True):
            units.append((relation, "share"))
            i += 2
        else:
            units.append((relation, "inv" if inverse else "fwd"))
            i += 1
    return units


@lru_cache(maxsize=None)
def _unit(wording: str, relation: str, kind: str) -> tuple:
    """(question forms, noun-phrase forms) of one unit: :data:`METAQA`'s, or the wild wording's
    (``pipeline.synth_wild``) less any the train wording has, so no wild text is a train one."""
    if wording != "wild":
        return METAQA[relation][kind][wording]
    train = METAQA.get(relation, {}).get(kind, {}).get("train", ((), ()))
    return tuple(tuple(f for f in forms if f not in seen)
                 for forms, seen in zip(unit_forms(relation, kind), train))


def variant_counts(style: str, wording: str, steps) -> list[int]:
    """Variants of each slot of a choice. ``steps``: (dotted base relation, its phrases, inverse)
    per hop. pathquestion: the template, then one phrase per hop; metaqa and the wild wording of
    either style: the question form of the last unit, then the noun phrase of each unit before
    it."""
    if style == "pathquestion" and wording != "wild":
        return [len(PATHQUESTION[wording])] + [len(_phrases(wording, r, p)) for r, p, _ in steps]
    units = _units(steps)
    last, kind = units[-1]
    return ([len(_unit(wording, last, kind)[0])]
            + [len(_unit(wording, r, k)[1]) for r, k in units[:-1]])


def render(style: str, wording: str, steps, topic: str, choice) -> str:
    """The question text of one choice (see :func:`variant_counts`)."""
    if style == "pathquestion" and wording != "wild":
        phrases = [_phrases(wording, r, p)[i] for (r, p, _), i in zip(steps, choice[1:])]
        return PATHQUESTION[wording][choice[0]](topic, phrases)
    units = _units(steps)
    text = topic
    for (relation, kind), i in zip(units[:-1], choice[1:]):
        text = _unit(wording, relation, kind)[1][i].replace("{x}", text)
    relation, kind = units[-1]
    return _unit(wording, relation, kind)[0][choice[0]].replace("{x}", text)


def renderings(style: str, wording: str, steps, topic: str) -> list[str]:
    """Every text a chain can be asked with in one wording (what the other wording avoids)."""
    counts = variant_counts(style, wording, steps)
    return [render(style, wording, steps, topic, c) for c in product(*map(range, counts))]
