"""The synthetic KG generator: determinism, exact counts, malformed lines, questions, families."""

from __future__ import annotations

import collections
import gzip
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.synth import NS, generate

# A strict N-Triples line grammar (absolute, non-empty IRIs; literals with escapes, @lang, ^^type)
_IRI = r'<[^<>"{}|^`\\\x00-\x20]+>'
_LIT = (r'"(?:[^"\\\n\r]|\\[tbnrf"\'\\]|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})*"'
        rf'(?:@[a-zA-Z]+(?:-[a-zA-Z0-9]+)*|\^\^{_IRI})?')
STRICT = re.compile(rf"^({_IRI})[ \t]+({_IRI})[ \t]+({_IRI}|{_LIT})[ \t]*\.[ \t]*$")
# ... and a lenient one (any <...>, even empty; any quoted string): malformed lines fail it too.
LENIENT = re.compile(r'^\s*(<[^>]*>)\s+(<[^>]*>)\s+(<[^>]*>|"(?:[^"\\]|\\.)*"\S*)\s*\.\s*$')

TYPE = f"<{NS}type.object.type>"
NAME = f"<{NS}type.object.name>"


def _local(iri: str) -> str:
    return iri[len(NS) + 1:-1]


def parse_nt(text: str) -> dict:
    """Count what a simple line parser sees in kg.nt."""
    edges, literal, types, malformed, names = [], 0, 0, [], collections.Counter()
    lines = text.split("\n")
    assert lines[-1] == "", "file must end with a newline"
    for line in lines[:-1]:
        assert line.strip(), "no blank lines"
        m = STRICT.match(line)
        if m is None:
            assert LENIENT.match(line) is None, f"a lenient parser accepts: {line}"
            malformed.append(line)
            continue
        s, p, o = m.groups()
        if p == TYPE:
            types += 1
        elif o.startswith("<"):
            edges.append((_local(s), _local(p), _local(o)))
        else:
            literal += 1
            if p == NAME and o.endswith('"@en'):
                names[_local(s)] += 1
    return {"edges": edges, "literal": literal, "types": types, "malformed": malformed,
            "names": names}


def read_tsv(path: Path) -> list[tuple[str, str, str]]:
    return [tuple(line.split("\t")) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("synth")
    manifest = generate(out, n_triples=5000, seed=7, malformed_rate=0.01, n_questions=200)
    return out, manifest


def test_same_seed_gives_identical_bytes(tmp_path):
    a = generate(tmp_path / "a", n_triples=100_000, seed=3)
    b = generate(tmp_path / "b", n_triples=100_000, seed=3)
    assert a == b
    for name in ("kg.nt", "kg.tsv", "families.json", "questions.jsonl", "manifest.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_different_seed_gives_different_bytes(tmp_path):
    generate(tmp_path / "a", n_triples=2000, seed=1, n_questions=50)
    generate(tmp_path / "b", n_triples=2000, seed=2, n_questions=50)
    for name in ("kg.nt", "kg.tsv", "questions.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() != (tmp_path / "b" / name).read_bytes(), name


def test_manifest_counts_match_a_parser(small):
    out, manifest = small
    parsed = parse_nt((out / "kg.nt").read_text(encoding="utf-8"))
    counts = manifest["counts"]
    assert len(parsed["edges"]) == len(set(parsed["edges"])) == counts["triples"] == 5000
    assert parsed["literal"] == counts["literal_lines"]
    assert parsed["types"] == counts["type_assertions"] == counts["entities"]
    assert len(parsed["malformed"]) == counts["malformed_lines"]
    assert counts["relations"] == len({r for _, r, _ in parsed["edges"]})
    # every entity has exactly one English name
    assert len(parsed["names"]) == counts["entities"] and set(parsed["names"].values()) == {1}
    assert sum(manifest["relation_counts"].values()) == 5000
    assert collections.Counter(r for _, r, _ in parsed["edges"]) == {
        r: c for r, c in manifest["relation_counts"].items() if c}
    # kg.tsv holds the same edges in the same order
    assert read_tsv(out / "kg.tsv") == parsed["edges"]


def test_malformed_rate_gives_the_stated_count(small):
    _, manifest = small
    c = manifest["counts"]
    wellformed = c["triples"] + c["literal_lines"] + c["type_assertions"]
    assert c["malformed_lines"] == round(0.01 * wellformed) > 0


def test_malformed_lines_cover_every_kind(tmp_path):
    generate(tmp_path, n_triples=3000, seed=0, malformed_rate=0.2, n_questions=0)
    bad = parse_nt((tmp_path / "kg.nt").read_text())["malformed"]
    assert any(line.startswith("<> ") for line in bad)                         # empty IRI
    assert any(line.endswith("> .") and line.count("<") == 2 for line in bad)  # two terms
    assert any(line.count('"') == 1 for line in bad)                           # open literal
    assert any(not line.startswith("<") for line in bad)                       # garbage
    assert any(line.endswith(">") and not line.startswith("<>") for line in bad)  # no " ."
    assert any(re.search(r"<http[^>]*$", line) for line in bad)                # truncated IRI


def test_questions_match_a_brute_force_walk(small):
    out, manifest = small
    graph = collections.defaultdict(set)
    for s, r, o in read_tsv(out / "kg.tsv"):
        graph[s, r].add(o)
    names = {}
    for line in (out / "kg.nt").read_text().splitlines():
        m = STRICT.match(line)
        if m and m.group(2) == NAME and m.group(3).endswith('"@en'):
            names[_local(m.group(1))] = json.loads(m.group(3)[:-3])
    questions = [json.loads(line) for line in (out / "questions.jsonl").read_text().splitlines()]
    assert len(questions) == manifest["counts"]["questions"] == 200
    assert {q["hops"] for q in questions} == {2, 3}
    assert len({q["id"] for q in questions}) == len(questions)
    for q in questions:
        frontier = set(q["topic_entities"])
        for rel in q["path"]:
            frontier = {o for x in frontier for o in graph[x, rel]}
        assert sorted(frontier) == q["answer_keys"], q
        assert 1 <= len(frontier) <= 5 and len(q["path"]) == q["hops"]
        assert q["answers"] == [names[k] for k in q["answer_keys"]]
        assert q["topic_names"] == [names[k] for k in q["topic_entities"]]
        assert q["topic_names"][0] in q["question"]


def test_families_exist_and_overlap_partially(small):
    out, _ = small
    families = json.loads((out / "families.json").read_text())
    pairs = collections.defaultdict(set)
    for s, r, o in read_tsv(out / "kg.tsv"):
        pairs[r].add((s, o))
    assert families["synonyms"] and families["inverses"] and families["description"]
    for group in families["synonyms"]:
        base = pairs[group[0]]
        for syn in group[1:]:
            shared = len(base & pairs[syn])
            assert 0.4 < shared / len(base | pairs[syn]) < 0.9, (group[0], syn)
            assert pairs[syn] - base and base - pairs[syn]
    for rel, inv in families["inverses"]:
        swapped = {(o, s) for s, o in pairs[inv]}
        shared = len(pairs[rel] & swapped)
        assert 0.6 < shared / len(pairs[rel] | swapped) < 1.0, (rel, inv)


def test_gzip_output_has_the_same_content(tmp_path):
    plain = generate(tmp_path / "plain", n_triples=2000, seed=5, malformed_rate=0.01,
                     n_questions=20)
    zipped = generate(tmp_path / "gz", n_triples=2000, seed=5, malformed_rate=0.01, gzip=True,
                      n_questions=20)
    assert not (tmp_path / "gz" / "kg.nt").exists()
    raw = gzip.decompress((tmp_path / "gz" / "kg.nt.gz").read_bytes())
    assert raw == (tmp_path / "plain" / "kg.nt").read_bytes()
    assert plain["counts"] == zipped["counts"]
    assert zipped["files"]["kg.tsv"] == plain["files"]["kg.tsv"]
    again = generate(tmp_path / "gz2", n_triples=2000, seed=5, malformed_rate=0.01, gzip=True,
                     n_questions=20)
    assert again["files"]["kg.nt.gz"] == zipped["files"]["kg.nt.gz"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_smallest_size_is_exact(tmp_path, seed):
    manifest = generate(tmp_path, n_triples=100, seed=seed, n_questions=10)
    edges = read_tsv(tmp_path / "kg.tsv")
    assert len(edges) == len(set(edges)) == 100
    families = json.loads((tmp_path / "families.json").read_text())
    present = {r for _, r, _ in edges}
    assert {r for group in families["synonyms"] + families["inverses"] for r in group} <= present
    assert manifest["counts"]["relations"] == len(present)


def test_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="at least 100"):
        generate(tmp_path, n_triples=99)
    with pytest.raises(ValueError, match="malformed_rate"):
        generate(tmp_path, n_triples=100, malformed_rate=0.9)


def test_cli_prints_counts(tmp_path):
    result = CliRunner().invoke(cli, ["synth", "--triples", "500", "--seed", "1", "--out",
                                      str(tmp_path), "--questions", "5", "--gzip"])
    assert result.exit_code == 0, result.output
    counts = json.loads(result.output)
    assert counts["triples"] == 500 and counts["questions"] == 5
    assert (tmp_path / "kg.nt.gz").is_file() and (tmp_path / "manifest.json").is_file()


def test_question_splits_partition_the_questions_and_the_first_is_test(tmp_path):
    from pipeline.synth import labelled_overrides

    generate(tmp_path, n_triples=2000, seed=3, n_questions=40)
    every = [json.loads(line) for line in (tmp_path / "questions.jsonl").read_text().splitlines()]
    parts = {s: [json.loads(line) for line in (tmp_path / f"{s}.jsonl").read_text().splitlines()]
             for s in ("train", "dev", "test")}
    assert [len(parts[s]) for s in ("train", "dev", "test")] == [32, 4, 4]
    assert parts["test"][0]["id"] == every[0]["id"]
    assert sorted(q["id"] for p in parts.values() for q in p) == sorted(q["id"] for q in every)
    assert all(q["split"] == s for s, p in parts.items() for q in p)
    assert not any("test.jsonl" in o for o in labelled_overrides(tmp_path))
