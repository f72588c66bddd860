"""Agreement of offline extraction backends with gpt-3.5's OpenIE triples.

Why: the ``offline`` backend of ``triple_extract`` is chosen on evidence. Each backend reads the
``text`` (``--field passage``: title and text) of the first ``--limit`` passages of a HippoRAG-format OpenIE file and is scored
against that file's triples and entities (docs/BENCHMARKS.md, "Offline extraction agreement
with gpt-3.5").

Matching rule. A string is normalised: lowercased, every non-alphanumeric character a space,
the articles a/an/the dropped; its token set is compared by Jaccard similarity. A predicted
triple matches a gold triple of the same passage when subject and object each have Jaccard
>= 0.5 and the relation phrases, with the forms of "be" also dropped, have Jaccard >= 1/3 (two
relations that are both empty then, e.g. "is" and "was", match). Matching is one-to-one,
greedy in prediction order; precision = matched / predicted, recall = matched / gold, summed
over passages. "pair" ignores the relation. Entities match one-to-one by name Jaccard >= 0.5.

Backends: ``offline`` (text/offline_extractor.py, spaCy), ``regex`` (a model-free floor below:
capitalised runs, years and numbers as entities; the words between two entities of a sentence
as the relation) and ``smollm2`` (the embedded SmolLM2-135M, greedy, JSON forced by a GBNF
grammar, one thread).

usage: python -m bench.extraction_agreement [--corpus FILE] [--limit N]
       [--backends offline,regex,smollm2] [--field text|passage] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / \
    "musique-openie" / "openie_gpt-3.5-turbo-1106.json"
ARTICLES = {"a", "an", "the"}
BE = {"is", "was", "are", "were", "be", "been", "being"}
ARG_THRESHOLD, REL_THRESHOLD, ENTITY_THRESHOLD = 0.5, 1 / 3, 0.5


def tokens(text: str, drop=ARTICLES) -> frozenset:
    """The normalised token set of a string (the module docstring has the rule)."""
    return frozenset(t for t in re.sub(r"[^0-9a-z]+", " ", str(text).lower()).split()
                     if t not in drop)


def jaccard(a: frozenset, b: frozenset) -> float:
    """|a ∩ b| / |a ∪ b|; two empty sets are identical."""
    return 1.0 if not a and not b else len(a & b) / len(a | b)


def triple_key(triple) -> tuple:
    s, r, o = (list(triple) + ["", "", ""])[:3]
    return tokens(s), tokens(r, ARTICLES | BE), tokens(o)


def count_matches(predicted, gold, same) -> int:
    """One-to-one greedy matches of ``predicted`` against ``gold`` under ``same``."""
    free = list(gold)
    hits = 0
    for p in predicted:
        for i, g in enumerate(free):
            if same(p, g):
                hits += 1
                del free[i]
                break
    return hits


def triple_same(p, g) -> bool:
    return (jaccard(p[0], g[0]) >= ARG_THRESHOLD and jaccard(p[2], g[2]) >= ARG_THRESHOLD
            and jaccard(p[1], g[1]) >= REL_THRESHOLD)


def pair_same(p, g) -> bool:
    return jaccard(p[0], g[0]) >= ARG_THRESHOLD and jaccard(p[2], g[2]) >= ARG_THRESHOLD


def entity_same(p, g) -> bool:
    return jaccard(p, g) >= ENTITY_THRESHOLD


class RegexExtractor:
    """The floor: no model. Entities are runs of capitalised words, years and numbers; a triple
    joins two entities of one sentence with the 1-4 lowercase words between them."""

    ENTITY = r"(?:[A-Z][\w'-]*(?:\s+(?:of|the|de|and|for)?\s*[A-Z][\w'-]*)*|\d[\d,.]*)"

    def extract(self, text: str) -> dict:
        entities, triples = {}, []
        for sentence in re.split(r"(?<=[.!?;])\s+", text):
            found = [(m.start(), m.end(), m.group(0).strip())
                     for m in re.finditer(self.ENTITY, sentence)]
            for start, end, name in found:
                entities.setdefault(name, {"name": name, "type": "concept", "description": ""})
            for (_, end, a), (start, _, b) in zip(found, found[1:]):
                between = sentence[end:start].strip(" ,")
                if re.fullmatch(r"[a-z]+(?:\s+[a-z]+){0,3}", between):
                    triples.append([a, between, b])
        return {"entities": list(entities.values()), "triples": triples}


class SmolExtractor:
    """SmolLM2-135M through runtime/llm/local.py's engine with a JSON-triples grammar."""

    GRAMMAR = r'''root ::= "{\"triples\": [" ( triple ( ", " triple ){0,11} )? "]}"
triple ::= "[" str ", " str ", " str "]"
str ::= "\"" [^"\\\n]{1,60} "\""'''
    SYSTEM = ("Extract facts from the passage as JSON triples [subject, relation, object]. "
              "Example: passage 'Marie Curie was born in Warsaw.' -> "
              '{"triples": [["Marie Curie", "born in", "Warsaw"]]}')

    def __init__(self):
        from lokg.runtime.llm.local import _load, default_model_path
        self.llama = _load(default_model_path(), 4096, 1)

    def extract(self, text: str) -> dict:
        parts: list[str] = []
        self.llama.chat([{"role": "system", "content": self.SYSTEM},
                         {"role": "user", "content": f"Passage: {text}"}], 384, self.GRAMMAR,
                        lambda chunk, reason: parts.append(chunk) and False)
        try:
            triples = json.loads("".join(parts))["triples"]
        except (ValueError, KeyError):  # cut off at max_tokens: nothing usable
            triples = []
        names = dict.fromkeys(x for t in triples for x in (t[0], t[2]))
        return {"entities": [{"name": n, "type": "concept", "description": ""} for n in names],
                "triples": triples}


def make_backend(name: str):
    if name == "offline":
        from lokg.pipeline.config import DEFAULTS
        from lokg.text.offline_extractor import OfflineExtractor
        return OfflineExtractor(DEFAULTS["triple_extract"])
    if name == "regex":
        return RegexExtractor()
    if name == "smollm2":
        return SmolExtractor()
    raise SystemExit(f"unknown backend {name!r} (offline, regex, smollm2)")


def score(backend, docs, field: str = "text") -> dict:
    """Counts, precision/recall/F1 and speed of one backend over the passages' ``field``."""
    n = {"pred": 0, "gold": 0, "hit": 0, "pair": 0, "ent_pred": 0, "ent_gold": 0, "ent_hit": 0}
    started = time.perf_counter()
    outputs = [backend.extract(d[field]) for d in docs]
    seconds = time.perf_counter() - started
    for doc, out in zip(docs, outputs):
        pred = [triple_key(t) for t in out["triples"]]
        gold = [triple_key(t) for t in doc["extracted_triples"]]
        n["pred"] += len(pred)
        n["gold"] += len(gold)
        n["hit"] += count_matches(pred, gold, triple_same)
        n["pair"] += count_matches(pred, gold, pair_same)
        pe = [tokens(e["name"]) for e in out["entities"]]
        ge = [tokens(e) for e in doc["extracted_entities"]]
        n["ent_pred"] += len(pe)
        n["ent_gold"] += len(ge)
        n["ent_hit"] += count_matches(pe, ge, entity_same)
    return {**n, **prf("", n["hit"], n["pred"], n["gold"]), **prf("pair_", n["pair"], n["pred"],
                                                                 n["gold"]),
            **prf("ent_", n["ent_hit"], n["ent_pred"], n["ent_gold"]),
            "seconds": round(seconds, 2), "passages_per_s": round(len(docs) / seconds, 2)}


def prf(prefix: str, hit: int, pred: int, gold: int) -> dict:
    p = hit / pred if pred else 0.0
    r = hit / gold if gold else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {f"{prefix}p": round(p, 3), f"{prefix}r": round(r, 3), f"{prefix}f1": round(f, 3)}


def table(results: dict, n_docs: int) -> str:
    lines = [f"{n_docs} passages", "| backend | triples | triple P | R | F1 | pair F1 | "
             "entity P | R | F1 | passages/s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['pred']} (gold {r['gold']}) | {r['p']:.3f} | {r['r']:.3f} | "
                     f"{r['f1']:.3f} | {r['pair_f1']:.3f} | {r['ent_p']:.3f} | {r['ent_r']:.3f} | "
                     f"{r['ent_f1']:.3f} | {r['passages_per_s']:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--limit", type=int, default=None, help="first N passages (default: all)")
    ap.add_argument("--backends", default="offline,regex")
    ap.add_argument("--field", choices=("text", "passage"), default="text",
                    help="what a backend reads: the text, or the passage (title, newline, text)")
    ap.add_argument("--json", type=Path, default=None, help="write the numbers here too")
    args = ap.parse_args(argv)
    docs = json.loads(args.corpus.read_text())["docs"][:args.limit]
    results = {}
    for name in args.backends.split(","):
        results[name] = score(make_backend(name), docs, args.field)
        print(f"{name}: done", file=sys.stderr)
    print(table(results, len(docs)))
    if args.json:
        args.json.write_text(json.dumps({"passages": len(docs), "results": results}, indent=1))


if __name__ == "__main__":
    main()
