"""The sub-questions of the feedback log: each missing fact, mention, bridge and unlinked name
a question left, merged over every record that asks it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from lokg.runtime.feedback import BRIDGE
from lokg.text.chunking import content_id
from lokg.text.triple_extract import entity_key

INVERSE = "~"
#: The relation of a sub-question asking which entity a name the question wrote names.
ALIAS = "="


@dataclass
class SubQuestion:
    """One missing fact, merged over every feedback record that asks it."""

    entity: str  # entity key; "" for a topic mention nothing linked
    name: str
    relation: str  # canonical relation, "~name" walks it backwards; "" for a mention
    text: str
    feedback_ids: list[str] = field(default_factory=list)
    asked: list[tuple[str, str]] = field(default_factory=list)  # (time, build_id) per record
    skip: int = 0  # passages nearest the text already tried (a re-opened sub-question)
    #: chunk ids to extract instead of those nearest the text: the passages nearest the
    #: question that asked it (a record's ``passages``)
    passages: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """(entity, relation), or the folded name of an entity named without a key; a name
        retrieved by other words (the question, an LLM's sub-question) or asked of a
        question's passages is another question."""
        key = f"{self.entity}\t{self.relation}\t{entity_key(self.name) if not self.entity else ''}"
        if self.passages:
            return f"{key}\t{content_id(*self.passages)}"
        return key if self.entity or entity_key(self.text) == entity_key(self.name) \
            else f"{key}\t{content_id(self.text)}"


def sub_questions(records: list[dict]) -> list[SubQuestion]:
    """The sub-questions of the log, oldest first, one per (entity, relation) or name: a
    record's missing facts, its mentions (a chain's relation may be a guess — on a graph of
    free-text phrases it nearly always is — while its topic is not; retrieved by the question
    where the log kept it) and the bridge entities the answer reached (the next hop)."""
    return _merged(records, _asks)


def alias_questions(records: list[dict]) -> list[SubQuestion]:
    """One sub-question per name the questions wrote that nothing linked (a record's
    ``unlinked``; relation :data:`ALIAS`): which entity of the graph does it name?"""
    return _merged(records, lambda record: [
        SubQuestion("", name, ALIAS, _question(record) or name)
        for name in record.get("unlinked", ()) if entity_key(name)])


def _question(record: dict) -> str:
    question = record.get("question")
    return question if isinstance(question, str) else ""


def _merged(records: list[dict], asks) -> list[SubQuestion]:
    """``asks(record)``'s sub-questions over the records, merged by key, oldest first."""
    found: dict[str, SubQuestion] = {}
    for record in records:
        for sq in asks(record):
            sq = found.setdefault(sq.key, sq)
            if record["id"] not in sq.feedback_ids:
                sq.feedback_ids.append(record["id"])
            sq.asked.append((record.get("time", ""), record["build_id"]))
    return list(found.values())


def _asks(record: dict) -> list[SubQuestion]:
    """One record's sub-questions: missing facts, mentions, bridges; and, where the record
    names the passages nearest its question, each of them — and each name the question wrote
    that nothing linked — asked of those passages (the hop the links' paths never reach)."""
    question = _question(record)
    asks = [SubQuestion(m["entity"], str(m.get("name") or m["entity"]), m["relation"],
                        str(m.get("text") or "")) for m in record["missing"]]
    asks += [SubQuestion("", m, "", question or m)
             for m in record["mentions"] if isinstance(m, str) and entity_key(m)]
    asks += [SubQuestion("", b["name"], "", b["text"]) for b in record.get("bridges", ())
             if entity_key(b["name"])]
    passages = tuple(record.get("passages", ()))
    if not passages:
        return asks
    unlinked = [SubQuestion("", n, "", n) for n in record.get("unlinked", ()) if entity_key(n)]
    linked = [m for m in record["mentions"] if isinstance(m, str) and entity_key(m)]
    anchor = max(linked, key=lambda m: len(entity_key(m).split()), default="")
    bridge = [SubQuestion("", anchor, BRIDGE, anchor)] if anchor else []
    return asks + [replace(sq, passages=passages) for sq in asks + unlinked + bridge]
