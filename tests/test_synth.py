"""The synthetic KG generator: determinism, exact counts, malformed lines, questions, families."""

from __future__ import annotations

import collections
import gzip
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from lokg.cli import cli
from lokg.pipeline.synth import SynthError, generate
from lokg.pipeline.synth_schema import FAMILIES, MOVIE_FAMILIES, NS
from lokg.pipeline.synth_wording import HELDOUT_PHRASES, renderings
from lokg.runtime.errors import LokgError

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
    from lokg.pipeline.synth import labelled_overrides

    generate(tmp_path, n_triples=2000, seed=3, n_questions=40)
    every = [json.loads(line) for line in (tmp_path / "questions.jsonl").read_text().splitlines()]
    parts = {s: [json.loads(line) for line in (tmp_path / f"{s}.jsonl").read_text().splitlines()]
             for s in ("train", "dev", "test")}
    assert [len(parts[s]) for s in ("train", "dev", "test")] == [32, 4, 4]
    assert parts["test"][0]["id"] == every[0]["id"]
    assert sorted(q["id"] for p in parts.values() for q in p) == sorted(q["id"] for q in every)
    assert all(q["split"] == s for s, p in parts.items() for q in p)
    assert not any("test.jsonl" in o for o in labelled_overrides(tmp_path))


# ---- generalisation variants: naming, entity names, inverse hops, held-out wording

def en_names(nt_path: Path) -> dict[str, str]:
    """mid → its English name in kg.nt."""
    names = {}
    for line in nt_path.read_text(encoding="utf-8").splitlines():
        m = STRICT.match(line)
        if m and m.group(2) == NAME and m.group(3).endswith('"@en'):
            names[_local(m.group(1))] = json.loads(m.group(3)[:-3])
    return names


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_default_output_is_the_original_generators_byte_for_byte(tmp_path):
    """sha256 of every file written by the generator before the variants existed."""
    manifest = generate(tmp_path, n_triples=2000, seed=5, malformed_rate=0.01, n_questions=20)
    assert manifest["files"] == {
        "kg.nt": "767245fa6fcd35c72ce4a2d69233275635fd22c67497c0413c7d33c27d53a63c",
        "kg.tsv": "fd38f447e65abbe6d86ec4c08670676b00d89ba3450736994c73613e8b175547",
        "families.json": "ff721318b4d3d815a9ddfe234c8a29421ec04e349d570062b7328667c59de00d",
        "questions.jsonl": "90334ab5e99b633200973d1f66c7e909cc78945a4506931cf55f78b73d577a1b",
        "train.jsonl": "b37f324820720ceb742bd23531fbc2622bf788e4172f387e95a0ddf2784900a3",
        "dev.jsonl": "216099106117145a4cbda5dbfc25689adb33a35c2387d8291aa9ba8361a38ad0",
        "test.jsonl": "8f59749f4bfc53bdaa8cc7528bbc3ba31ee7e9610f981511d3af2fdc27d1abbe"}
    assert set(manifest["params"]) == {"n_triples", "seed", "malformed_rate", "gzip",
                                       "n_questions"}


@pytest.mark.parametrize("style", ["pathquestion", "metaqa"])
@pytest.mark.parametrize("naming", ["freebase", "underscored", "camel", "plain"])
def test_every_naming_maps_one_to_one_onto_the_dotted_names(tmp_path, naming, style):
    options = dict(n_triples=1500, seed=4, n_questions=40, question_style=style)
    dotted = generate(tmp_path / "dotted", **options, naming="dotted")
    named = generate(tmp_path / naming, **options, naming=naming)
    pairs = {(a[1], b[1]) for a, b in zip(read_tsv(tmp_path / "dotted" / "kg.tsv"),
                                          read_tsv(tmp_path / naming / "kg.tsv"), strict=True)}
    rename = dict(pairs)
    assert len(rename) == len(set(rename.values())) == len(pairs) == dotted["counts"]["relations"]
    assert rename != {r: r for r in rename}
    for rel, name in rename.items():
        shape = {"freebase": "/" + rel.replace(".", "/"),
                 "underscored": "__" + rel.replace(".", "__")}.get(naming, name)
        assert name == shape and "." not in name
        if naming == "camel":
            assert "_" not in name and name.lower() == rel.replace(".", "").replace("_", "")
        if naming == "plain":
            assert name.endswith(rel.rsplit(".", 1)[1]) and name in {
                rel.rsplit(".", 1)[1], "_".join(rel.split(".")[-2:])}
    # kg.nt says the same edges, and the ground truth and gold paths use the scheme's names
    assert read_tsv(tmp_path / naming / "kg.tsv") == parse_nt(
        (tmp_path / naming / "kg.nt").read_text())["edges"]
    truth = json.loads((tmp_path / "dotted" / "families.json").read_text())
    renamed = json.loads((tmp_path / naming / "families.json").read_text())
    for kind in ("synonyms", "inverses"):
        assert renamed[kind] == [[rename[r] for r in group] for group in truth[kind]]
    plain_paths = [[p.lstrip("~") for p in q["path"]]
                   for q in read_jsonl(tmp_path / "dotted" / "questions.jsonl")]
    named_paths = [[p.lstrip("~") for p in q["path"]]
                   for q in read_jsonl(tmp_path / naming / "questions.jsonl")]
    assert named_paths == [[rename[r] for r in path] for path in plain_paths]
    assert {r: c for r, c in named["relation_counts"].items() if c} == {
        rename[r]: c for r, c in dotted["relation_counts"].items() if c}


@pytest.fixture(scope="module")
def metaqa(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("metaqa")
    generate(out, n_triples=6000, seed=2, n_questions=300, question_style="metaqa",
             naming="plain", entity_names="disambiguated")
    return out


def test_inverse_hop_answers_match_a_brute_force_walk_with_reverse_hops(metaqa):
    forward, backward = collections.defaultdict(set), collections.defaultdict(set)
    for s, r, o in read_tsv(metaqa / "kg.tsv"):
        forward[s, r].add(o)
        backward[o, r].add(s)
    names = en_names(metaqa / "kg.nt")
    questions = read_jsonl(metaqa / "questions.jsonl")
    assert len(questions) == 300 and {q["hops"] for q in questions} == {1, 2, 3}
    for q in questions:
        frontier = set(q["topic_entities"])
        for hop in q["path"]:
            graph, rel = (backward, hop[1:]) if hop.startswith("~") else (forward, hop)
            frontier = {o for x in frontier for o in graph[x, rel]}
        frontier -= set(q["topic_entities"])
        assert sorted(frontier) == q["answer_keys"] and 1 <= len(frontier) <= 5, q
        assert q["answers"] == [names[k] for k in q["answer_keys"]]
        assert q["topic_names"] == [names[k] for k in q["topic_entities"]]
        assert q["topic_names"][0] in q["question"] and len(q["path"]) == q["hops"]
        assert q["inverse"] == any(h.startswith("~") for h in q["path"])
        assert q["wording"] == "train"
    inverse = [q for q in questions if q["inverse"]]
    assert {q["hops"] for q in inverse} == {1, 2, 3} and len(inverse) < len(questions)
    shared = [q for q in questions if len(q["path"]) > 1 and q["path"][1] == "~" + q["path"][0]]
    assert shared, "no question walks a relation there and back (r then ~r)"
    # the topic is reachable by such a walk but never an answer
    assert all(q["topic_entities"][0] not in q["answer_keys"] for q in shared)


def test_entity_name_variants_change_only_the_english_names(tmp_path, metaqa):
    generate(tmp_path / "p", n_triples=6000, seed=2, n_questions=0, question_style="metaqa")
    plain = en_names(tmp_path / "p" / "kg.nt")
    marked = en_names(metaqa / "kg.nt")
    assert plain.keys() == marked.keys()
    qualified = {k for k in plain if marked[k] != plain[k]}
    assert 0.2 < len(qualified) / len(plain) < 0.4
    assert all(re.fullmatch(re.escape(plain[k]) + r" \([a-z ]+\)", marked[k]) for k in qualified)
    generate(tmp_path / "u", n_triples=6000, seed=2, n_questions=30, question_style="metaqa",
             entity_names="underscored")
    underscored = en_names(tmp_path / "u" / "kg.nt")
    assert underscored == {k: n.replace(" ", "_") for k, n in plain.items()}
    for q in read_jsonl(tmp_path / "u" / "questions.jsonl"):
        assert q["answers"] == [underscored[k] for k in q["answer_keys"]]
        assert q["topic_names"][0] in q["question"] and " " not in q["topic_names"][0]


def wording_steps(path: list[str]) -> list[tuple[str, tuple[str, ...], bool]]:
    """(dotted relation, its phrases, inverse) per hop of a dotted gold path."""
    phrases = {fam.base: fam.phrases for fam in FAMILIES + MOVIE_FAMILIES}
    return [(hop.lstrip("~"), phrases[hop.lstrip("~")], hop.startswith("~")) for hop in path]


@pytest.mark.parametrize("style", ["pathquestion", "metaqa"])
def test_heldout_wording_differs_from_every_train_template(tmp_path, style):
    options = dict(n_triples=4000, seed=6, n_questions=200, question_style=style)
    generate(tmp_path / "train", **options)
    generate(tmp_path / "heldout", **options, test_wording="heldout")
    def asked(split: str, wording: str) -> list[dict]:
        """The records without the fields only a non-default dump has (and the text)."""
        return [{k: v for k, v in q.items() if k not in ("wording", "inverse", "question")}
                for q in read_jsonl(tmp_path / wording / f"{split}.jsonl")]

    for split in ("train", "dev", "test"):  # the same questions: topics, chains, answers
        assert asked(split, "train") == asked(split, "heldout")
    for split in ("train", "dev"):
        assert [q["question"] for q in read_jsonl(tmp_path / "train" / f"{split}.jsonl")] == [
            q["question"] for q in read_jsonl(tmp_path / "heldout" / f"{split}.jsonl")]
        assert {q["wording"] for q in read_jsonl(tmp_path / "heldout" / f"{split}.jsonl")} == {
            "train"}
    same_wording = read_jsonl(tmp_path / "train" / "test.jsonl")
    heldout = read_jsonl(tmp_path / "heldout" / "test.jsonl")
    assert len(heldout) == 20
    for seen, q in zip(same_wording, heldout, strict=True):
        assert (seen.get("wording", "train"), q["wording"]) == ("train", "heldout")
        steps, topic = wording_steps(q["path"]), q["topic_names"][0]
        assert seen["question"] in renderings(style, "train", steps, topic)
        assert q["question"] in renderings(style, "heldout", steps, topic)
        assert q["question"] not in renderings(style, "train", steps, topic), q
    assert (tmp_path / "train" / "kg.nt").read_bytes() == (
        tmp_path / "heldout" / "kg.nt").read_bytes()


def test_heldout_relation_phrases_use_no_training_word():
    train = {w for fam in FAMILIES + MOVIE_FAMILIES for p in fam.phrases for w in p.split()}
    assert set(HELDOUT_PHRASES) == {fam.base for fam in FAMILIES + MOVIE_FAMILIES}
    for relation, phrases in HELDOUT_PHRASES.items():
        assert all(set(p.split()) & train <= {"of", "the"} for p in phrases), relation


def test_bad_variant_options_are_refused_naming_the_option(tmp_path):
    for options, message in (
            (dict(naming="kebab"), "naming='kebab'"),
            (dict(entity_names="upper"), "entity_names='upper'"),
            (dict(question_style="webqsp"), "question_style='webqsp'"),
            (dict(test_wording="other"), "test_wording='other'"),
            (dict(hops=(1, 2)), "hops=\\[1, 2\\]: question_style='pathquestion'"),
            (dict(hops=(4,), question_style="metaqa"), "hops=\\[4\\]"),
            (dict(max_answers=0), "max_answers"),
            (dict(n_triples=3_000_000, question_style="metaqa"), "at most 2,000,000")):
        with pytest.raises(SynthError, match=message):
            generate(tmp_path, **{"n_triples": 100, **options})
    assert issubclass(SynthError, LokgError)
    assert not any(tmp_path.iterdir()), "a refused call writes nothing"


def test_cli_passes_the_variant_options(tmp_path):
    result = CliRunner().invoke(cli, [
        "synth", "--triples", "2000", "--out", str(tmp_path), "--questions", "30",
        "--naming", "freebase", "--entity-names", "underscored", "--question-style", "metaqa",
        "--hops", "1", "--hops", "2", "--test-wording", "heldout", "--max-answers", "3"])
    assert result.exit_code == 0, result.output
    params = json.loads((tmp_path / "manifest.json").read_text())["params"]
    assert params == {"n_triples": 2000, "seed": 0, "malformed_rate": 0.0, "gzip": False,
                      "n_questions": 30, "naming": "freebase", "entity_names": "underscored",
                      "question_style": "metaqa", "hops": [1, 2], "test_wording": "heldout",
                      "max_answers": 3}
    questions = read_jsonl(tmp_path / "questions.jsonl")
    assert {q["hops"] for q in questions} == {1, 2}
    assert all(1 <= len(q["answers"]) <= 3 and q["path"][0].lstrip("~").startswith("/film/")
               for q in questions)
    refused = CliRunner().invoke(cli, ["synth", "--triples", "100", "--out", str(tmp_path / "x"),
                                       "--hops", "1"])
    assert refused.exit_code == 1 and "question_style='pathquestion'" in refused.output


def article_facts(path: Path) -> set[tuple[str, str, str]]:
    """(subject name, family phrase, object name) of every fact sentence of articles.jsonl;
    each article is titled with its subject and opens with what kind of entity it is."""
    facts = set()
    for article in read_jsonl(path):
        title = re.escape(article["title"])
        first, *sentences = re.split(r"(?<=\.) (?=The |In \d{4},)", article["text"])
        assert re.match(rf"{re.escape(article['title'])} is an? [a-z ]+\.$", first)
        for sentence in sentences:
            m = (re.fullmatch(rf"The (.+) of {title} is (.+), as recorded in \d{{4}}\.", sentence)
                 or re.fullmatch(rf"In \d{{4}}, (?P<o>.+) was listed as the (?P<p>.+) of {title}\.",
                                 sentence))
            assert m, sentence
            phrase, o = m.group(1, 2) if m.re.pattern.startswith("The") else m.group("p", "o")
            facts.add((article["title"], phrase, o))
    return facts


def test_articles_state_every_fact_of_the_dump_and_change_nothing_else(tmp_path):
    plain, linked = tmp_path / "plain", tmp_path / "linked"
    generate(plain, n_triples=2000, seed=3, n_questions=20)
    manifest = generate(linked, n_triples=2000, seed=3, n_questions=20, articles=1.0)
    for name in ("kg.nt", "kg.tsv", "questions.jsonl", "test.jsonl", "families.json"):
        assert (plain / name).read_bytes() == (linked / name).read_bytes(), name
    assert manifest["params"]["articles"] == 1.0 and "articles.jsonl" in manifest["files"]
    names = en_names(linked / "kg.nt")
    family_of = {m: (fam, i) for fam in FAMILIES for i, m in enumerate(fam.members)}
    stated = set()
    for s, relation, o in read_tsv(linked / "kg.tsv"):
        fam, member = family_of[relation]
        if fam.kind == "inverse" and member == 1:  # (o, inverse, s) states the forward fact
            s, o = o, s
        stated.add((names[s], fam.phrases[0], names[o]))
    assert article_facts(linked / "articles.jsonl") == stated


def test_an_article_share_picks_a_seeded_part_of_the_entities(tmp_path):
    half = generate(tmp_path / "a", n_triples=2000, seed=3, n_questions=20, articles=0.5)
    again = generate(tmp_path / "b", n_triples=2000, seed=3, n_questions=20, articles=0.5)
    assert half["files"]["articles.jsonl"] == again["files"]["articles.jsonl"]
    everyone = generate(tmp_path / "c", n_triples=2000, seed=3, n_questions=20, articles=1.0)
    n_half, n_all = (len(read_jsonl(tmp_path / d / "articles.jsonl")) for d in ("a", "c"))
    assert 0.4 * n_all < n_half < 0.6 * n_all
    assert article_facts(tmp_path / "a" / "articles.jsonl") < article_facts(
        tmp_path / "c" / "articles.jsonl")
    with pytest.raises(SynthError, match="articles=1.5"):
        generate(tmp_path / "d", n_triples=2000, articles=1.5)
    assert everyone["counts"] == half["counts"]
