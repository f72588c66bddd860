"""Text a synthetic dump may carry besides the graph: the documents stating withheld edges
(``withhold``) and the dated articles about a share of the entities (``articles``)."""

from __future__ import annotations

import functools
import gzip as _gzip
import hashlib
import json
from pathlib import Path

import numpy as np

from lokg.pipeline.synth_dump import jsonl_text, write_text_files
from lokg.pipeline.synth_names import LABEL
from lokg.pipeline.synth_random import stream_id, uniform
from lokg.pipeline.synth_schema import CHUNK, SynthError
from lokg.pipeline.synth_world import World
from lokg.runtime.relknow import INVERSE_PREFIX
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
    files.update(write_text_files(out, {
        "linked_documents.jsonl": jsonl_text([{"title": d["title"], "text": d["text"]}
                                              for d in docs]),
        "openie_linked.json": json.dumps({"docs": docs}, indent=1) + "\n",
        "withheld.json": json.dumps({"edges": edges}, indent=2) + "\n"}))
    return edges


#: An article sentence states one fact with a date the triple does not carry: the context a
#: triple_context build restores and an answer cites (any linked text).
_ARTICLE_SENTENCES = ("The {phrase} of {s} is {o}, as recorded in {year}.",
                      "In {year}, {o} was listed as the {phrase} of {s}.")
_ARTICLE_YEARS = (1950, 2020)


def write_articles(world: World, out: Path, share: float) -> dict[str, str]:
    """``articles.jsonl``: for a seeded ``share`` of the entities with facts, an article titled
    with the entity's name (the link triple_context reads) whose sentences state each of its facts
    (every family slot it is the subject of, whichever relation names state it) with a dated
    qualifier. Subject block by subject block, so no edge-sized structure is held."""
    path, digest = out / "articles.jsonl", hashlib.sha256()
    chosen_stream = stream_id(world.seed, "article")
    draw_stream = stream_id(world.seed, "article-fact")
    with path.open("wb") as fh:
        for t in world.types:
            families = [f for f, fam in enumerate(world.families) if fam.subj == t]
            for lo in range(0, world.sizes[t], CHUNK):
                hi = min(world.sizes[t], lo + CHUNK)
                raw = "".join(jsonl_text(_articles(world, families, lo, hi, share, chosen_stream,
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
        keep = (mask != 0) & (uniform(chosen_stream, subj.astype(np.int64)) < share)
        subj, obj = subj[keep], obj[keep]
        draws = uniform(draw_stream, subj.astype(np.int64) * world.n_entities + obj)
        first, last = _ARTICLE_YEARS
        years = first + (draws * (last - first + 1)).astype(np.int64)
        phrase = world.families[f].phrases[0]
        for s, o, year in zip(subj.tolist(), obj.tolist(), years.tolist()):
            template = _ARTICLE_SENTENCES[year % len(_ARTICLE_SENTENCES)]
            sentences.setdefault(s, []).append(template.format(
                phrase=phrase, s=name(s), o=name(o), year=year))
    return [{"title": name(s),
             "text": f"{name(s)} is {_indefinite(LABEL[world.type_of(s)])}. " + " ".join(lines)}
            for s, lines in sorted(sentences.items())]


def _indefinite(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"
