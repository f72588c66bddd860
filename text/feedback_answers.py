"""Which extracted triples answer a sub-question — oriented as it asks, with a relation close
to the one asked, not a near duplicate of the graph — and which entity an unlinked name means."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from lokg.runtime.feedback import BRIDGE
from lokg.runtime.linker import common_nouns, normalise
from lokg.text.feedback_deltas import Delta
from lokg.text.feedback_published import Published, loose, near_duplicate, triple_text
from lokg.text.feedback_questions import INVERSE, SubQuestion
from lokg.text.triple_context import readable_relation
from lokg.text.triple_extract import best_sentence, entity_key, relation_key, surface


class PassageTriples(Protocol):
    """Where a passage's extracted triples come from (the stage's ``Extraction``)."""

    def triples(self, chunk: dict) -> list:
        """The chunk's extracted triples."""


@dataclass
class Candidate:
    """An extracted triple of a passage retrieved for a sub-question, oriented as it asks."""

    sq: SubQuestion
    chunk: dict
    triple: tuple[str, str, str]  # as extracted: head, relation phrase, tail
    s: tuple[str, str] = ("", "")  # (key, name) in the graph's keys; new entities: folded name
    o: tuple[str, str] = ("", "")
    relation: str = ""
    sentences: list = field(default_factory=list)  # (sentence_id, text) of the chunk


def retrieved(sqs: list[SubQuestion], pub: Published, extraction: PassageTriples,
              k: int, bridge_ranks: range) -> list[Candidate]:
    """The triples of the ``k`` chunks nearest each sub-question (after the ``skip`` it tried;
    a question's passages: those) whose entity is on the side its relation asks about (a
    mention: either side); a :data:`BRIDGE` sub-question's passages at ``bridge_ranks`` of
    its list (nearest first) also get the bridge (:func:`bridged`)."""
    searched = [sq for sq in sqs if not sq.passages]
    texts = [sq.text or f"{sq.name} {readable_relation(sq.relation.lstrip(INVERSE))}"
             for sq in searched]
    nearest = iter(pub.nearest(texts, k, [sq.skip for sq in searched]) if searched else ())
    out = []
    for sq in sqs:
        rows = [pub.row_of[c] for c in sq.passages if c in pub.row_of] if sq.passages \
            else next(nearest)
        for row in rows:
            chunk = pub.chunks[row]
            sentences = pub.sentences[chunk["chunk_id"]]
            if sq.relation != BRIDGE:
                out += passage_candidates(sq, chunk, sentences, pub, extraction)
                continue
            rank = sq.passages.index(chunk["chunk_id"])
            out += bridged(sq, chunk, sentences, pub, extraction, rank in bridge_ranks)
    return out


def bridged(sq: SubQuestion, chunk: dict, sentences: list, pub: Published,
            extraction: PassageTriples, bridge: bool = True) -> list[Candidate]:
    """Every triple of a passage nearest the question (as a mention's: the graph relation
    nearest its phrase), and where ``bridge``, (the linked name, :data:`BRIDGE`, the passage's
    topic — the end most of its triples share, first seen) citing the sentence that names the
    topic, unless the topic is the name: the passage's facts and the path from the question
    to them. Each bridge is an edge of the name that takes a place among its top paths."""
    triples = [tuple(t) for t in extraction.triples(chunk)
               if entity_key(t[0]) and entity_key(t[2]) and entity_key(t[0]) != entity_key(t[2])]
    about = replace(sq, relation="")
    out = [Candidate(about, chunk, t, pub.end(None, t[0]), pub.end(None, t[2]),
                     sentences=sentences) for t in triples]
    ends: dict[str, list[str]] = {}
    for head, _, tail in triples:
        for end in (head, tail):
            ends.setdefault(entity_key(end), []).append(end)
    topic = max(ends.values(), key=len)[0] if ends and bridge else ""
    if topic and entity_key(topic) != entity_key(sq.name):
        out.append(Candidate(sq, chunk, (sq.name, BRIDGE, topic), pub.end(None, sq.name),
                             pub.end(None, topic), BRIDGE, sentences))
    return out


def passage_candidates(sq: SubQuestion, chunk: dict, sentences: list, pub: Published,
                       extraction: PassageTriples) -> list[Candidate]:
    """The triples extracted from one passage that are oriented as ``sq`` asks."""
    cands = (oriented(Candidate(sq, chunk, tuple(triple), sentences=sentences), pub)
             for triple in extraction.triples(chunk))
    return [c for c in cands if c is not None]


def oriented(cand: Candidate, pub: Published) -> Candidate | None:
    """The candidate with graph keys on both ends, or None when the entity is not where the
    sub-question's relation points from (``r``: the head; ``~r``: the tail). A name asked
    about (a mention, a bridge) is also met by its :func:`qualified` forms, and the triple is
    then written about the name asked: the passage of "Maharashtra" joins the graph's
    "Maharashtra state", which a question reached, instead of the separate "Maharashtra"."""
    sq, (head, _, tail) = cand.sq, cand.triple
    forms = pub.forms(sq.entity, sq.name) if sq.entity else {entity_key(sq.name)}
    sides = [(head, tail, False), (tail, head, True)]
    if sq.relation:
        sides = [sides[sq.relation.startswith(INVERSE)]]

    def names(written: str) -> bool:
        return entity_key(written) in forms or (
            not sq.entity and (qualified(written, sq.name) or qualified(sq.name, written)))

    for own, other, backwards in sides:
        if names(own) and not names(other) and entity_key(other):
            ends = (pub.end(sq.entity or None, own if entity_key(own) in forms else sq.name),
                    pub.end(None, other))
            cand.s, cand.o = ends[::-1] if backwards else ends
            return cand
    return None


def qualified(longer: str, shorter: str) -> bool:
    """``longer`` is the name ``shorter`` with a qualifier: after a comma ("Fredericton, New
    Brunswick") or in lower-case words ("Maharashtra state") — not another name that starts
    with it ("Neil Young Harvest", "Golden State Warriors")."""
    longer, shorter = surface(longer), surface(shorter)
    rest = longer[len(shorter):]
    if not rest or not longer.casefold().startswith(shorter.casefold()) \
            or not any(c.isupper() or c.isdigit() for c in shorter):
        return False
    return rest.startswith(",") or (rest.startswith(" ") and entity_key(rest) != "" and
                                    not any(c.isupper() or c.isdigit() for c in rest))


def with_relations(cands: list[Candidate], pub: Published, min_cosine: float) -> list[Candidate]:
    """Candidates whose phrase is close to the relation asked (cosine of the two as words),
    written with that relation; a mention's triple takes the nearest graph relation, else its
    own phrase."""
    phrases = sorted({readable_relation(c.triple[1]).lower() for c in cands})
    wanted = sorted({readable_relation(r).lower() for r in pub.relations}
                    | {readable_relation(c.sq.relation.lstrip(INVERSE)).lower()
                       for c in cands if c.sq.relation})
    if not phrases:
        return []
    vectors = pub.encoder.encode_passages(phrases + wanted)
    sims = vectors[:len(phrases)] @ vectors[len(phrases):].T
    row = {p: i for i, p in enumerate(phrases)}
    col = {w: j for j, w in enumerate(wanted)}
    kept = []
    for c in cands:
        scores = sims[row[readable_relation(c.triple[1]).lower()]]
        if c.sq.relation:
            name = c.sq.relation.lstrip(INVERSE)
            if scores[col[readable_relation(name).lower()]] >= min_cosine:
                c.relation = name
                kept.append(c)
            continue
        best = int(np.argmax(scores)) if len(wanted) else -1
        near = [r for r in pub.relations if readable_relation(r).lower() == wanted[best]] \
            if best >= 0 and scores[best] >= min_cosine else []
        c.relation = near[0] if near else relation_key(c.triple[1])
        kept.append(c)
    return kept


def deduplicated(cands: list[Candidate], pub: Published, threshold: float) -> Delta:
    """Candidates not within ``threshold`` of a graph triple about the same entity, merged
    when two about the same entity are near each other (the feedback ids of both are then
    answered by one row). A text seen before is not compared again: a passage's triple comes
    once per sub-question asked of it."""
    graph = pub.graph_texts({k for c in cands for k in (c.s[0], c.o[0])})
    delta = Delta()
    kept: dict[str, list[tuple[str, int]]] = {}  # entity key -> (text, row) of rows about it
    seen: dict[str, int] = {}  # text -> its row, or -1: near a graph triple
    for c in cands:
        text = triple_text(c.s[1], c.relation, c.o[1])
        row = seen.get(text)
        if row is None:
            row = _near_row(text, graph.get(c.s[0], []) + graph.get(c.o[0], []),
                            kept.get(c.s[0], []) + kept.get(c.o[0], []), threshold)
        if row is None:
            row = len(delta.rows)
            delta.rows.append(_row(c))
            for key in {c.s[0], c.o[0]}:
                kept.setdefault(key, []).append((text, row))
        else:
            delta.duplicates += 1
        seen[text] = row
        if row < 0:
            continue
        ids = delta.rows[row]["feedback_ids"]
        ids.extend(i for i in c.sq.feedback_ids if i not in ids)
        delta.answered.setdefault(c.sq.key, c.sq.feedback_ids)
    return delta


def _near_row(text: str, graph: list[str], kept: list[tuple[str, int]],
              threshold: float) -> int | None:
    """-1 when ``text`` is near a graph triple, else the row of the first kept text near it,
    else None (``text`` is new)."""
    if near_duplicate(text, graph, threshold) is not None:
        return -1
    hit = near_duplicate(text, [t for t, _ in kept], threshold)
    return kept[hit][1] if hit is not None else None


def _row(c: Candidate) -> dict:
    sentence_id = best_sentence(c.triple[0], c.triple[2], c.sentences)
    text = dict(c.sentences).get(sentence_id, "")
    return {"s_key": c.s[0], "relation": c.relation, "o_key": c.o[0], "s_name": c.s[1],
            "o_name": c.o[1], "phrase": c.triple[1], "chunk_id": c.chunk["chunk_id"],
            "sentence_id": sentence_id or "", "sentence": text, "feedback_ids": []}


def aliases(sqs: list[SubQuestion], pub: Published, k: int) -> Delta:
    """For each unlinked name (:data:`ALIAS`) the entity it means — the only one the graph's
    names allow (:meth:`Names.meant`), itself a name (not "gravel walk" for "Walk"), written
    (its name or the name asked) in a passage among the ``k`` nearest the name's text after its
    ``skip`` — as an alias of that entity, which the next build links; a name the graph
    already gives that entity, a name of none or several entities, or one no such passage
    writes, answers nothing."""
    delta = Delta()
    rows = pub.nearest([sq.text for sq in sqs], k, [sq.skip for sq in sqs]) if sqs else []
    for sq, near in zip(sqs, rows):
        meant = pub.named.meant(sq.name)
        if len(meant) != 1 or common_nouns(pub.names, meant) \
                or normalise(sq.name) == normalise(pub.names[meant[0]]):
            continue
        texts = [f" {loose(pub.chunks[row]['text'])} " for row in near]
        if not any(f" {form} " in text for form in (pub.named.loose[meant[0]], loose(sq.name))
                   for text in texts):
            continue
        entry = delta.aliases.setdefault(pub.keys[meant[0]],
                                         {"name": pub.names[meant[0]], "aliases": []})
        if sq.name not in entry["aliases"]:
            entry["aliases"].append(sq.name)
        delta.answered[sq.key] = sq.feedback_ids
    return delta
