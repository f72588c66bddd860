"""The query runtime on a hand-built store: linking, TAIMR retrieval, ITTC, one call, bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from lokg.runtime import feedback, taimr
from lokg.pipeline.config import section
from lokg.runtime.contract import StoreError, read_table
from lokg.runtime.linker import Linker, normalise
from lokg.runtime.llm import LLMError
from lokg.runtime.overlay import ExtraTriple
from lokg.runtime.path_cache import PathCache, path_rows, path_triples
from lokg.runtime.config import MAX_BUDGET
from lokg.runtime.prompt import CHOICE_INSTRUCTIONS, CHOICES_HEADER
from lokg.runtime.query import QueryError, Runtime
from lokg.runtime.tokens import count_tokens
from lokg.testing import stores
from lokg.testing.cli import BLOCK_HEAVY
from lokg.testing.doubles import ChoosingLLM, FakeLLM
from lokg.testing.stores import ENTITIES, RELATIONS, TRIPLES, make_store


@pytest.fixture(scope="module")
def store_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    make_store(root)
    return root / "store"


@pytest.fixture(scope="module")
def rt(store_root):
    return Runtime.open(store_root)


def blas_threads() -> set[int]:
    from threadpoolctl import threadpool_info

    return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}


def test_open_sets_numpys_blas_threads_whatever_the_encoder(store_root):
    """Every product a question makes is small; the default thread per core only waits."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=2, user_api="blas"):
        if blas_threads() != {2}:
            pytest.skip("numpy's BLAS cannot run 2 threads here")
        Runtime.open(store_root, threads=None)
        assert blas_threads() == {2}
        Runtime.open(store_root)  # query.threads defaults to 1; the toy store has no encoder
        assert blas_threads() == {1}


@pytest.fixture(scope="module")
def rt_free(store_root):
    """The free-form reader: any answer list, grounded where it can be."""
    return Runtime.open(store_root, reader="free")


# ------------------------------------------------------------------------------------ linker

def test_normalise_folds_case_underscores_punctuation_and_possessives():
    assert normalise("Yixin_Prince_Gong") == normalise("yixin prince-gong") == "yixin prince gong"
    assert normalise("The Long Road 's director?") == "the long road director"
    assert normalise("  ÉCOLE\tNormale ") == "école normale"


def test_linker_prefers_the_longest_span_and_skips_stop_words():
    linker = Linker([(0, "The Long Road"), (1, "The Long Road II"), (2, "Long"), (3, "The"),
                     (4, "Road")])
    links = linker.link("who directed the long road ii ?")
    assert [link.id for link in links] == [1]  # the longest span claims its words
    assert [link.id for link in linker.link("what is the Long Road about")] == [0]
    assert linker.link("what is the answer") == []  # "The" alone is a stop word


def test_linker_keeps_ambiguous_names_best_connected_first():
    degree = np.array([1, 9, 5])
    linker = Linker([(0, "Paris"), (1, "Paris"), (2, "Paris")], degree, max_per_span=2)
    assert [link.id for link in linker.link("where is paris")] == [1, 2]


# ------------------------------------------------------------------------------------ runtime

def test_two_hop_question_answered_from_the_path_cache(rt):
    answer = rt.ask("Who directed the sequel of The Long Road?")
    assert [link["name"] for link in answer.linked] == ["The Long Road"]
    assert answer.status == "ok" and answer.llm_calls == 0
    assert answer.encoding["paths"] == {0: "cache"}
    reached = {c["name"] for c in answer.candidates}
    assert {"The Long Road II", "Ada Brook", "Ben Stone", "Port Ellis"} <= reached
    assert answer.answers == [answer.candidates[0]["name"]]
    lines = {(t["s"], t["r"], t["o"]) for t in answer.triples}
    assert ("The Long Road II", "film.film.directed_by", "Ben Stone") in lines
    assert json.loads(answer.to_json())["build_id"] == "toy"


BRIDGE_TOPICS = [f"Passage Topic {i}" for i in range(6)]


def bridged_candidates(rt: Runtime) -> list[str]:
    """The candidates of the toy's 2-hop question, by name."""
    return [c["name"] for c in rt.ask("Who directed the sequel of The Long Road?").candidates]


def test_bridges_rank_after_the_linked_names_facts_in_a_quota_of_their_own(tmp_path, monkeypatch):
    """Six feedback bridges of the linked name (feedback_enrich's "asked with"), each outscoring
    every fact, leave the facts' top candidates as they are without bridges and add at most
    ``query.bridge_candidates`` of their own after them (Kim Jong-chul's gold line was lost to
    six such edges, docs/BENCHMARKS.md)."""
    facts = bridged_candidates(Runtime.open(make_store(tmp_path / "facts").root, max_candidates=2))
    n, bridge = len(ENTITIES), len(RELATIONS)
    here = stores  # make_store reads the toy graph from there
    monkeypatch.setattr(here, "ENTITIES", ENTITIES + [(f"m.p{i}", name, [], "", [])
                                                      for i, name in enumerate(BRIDGE_TOPICS)])
    monkeypatch.setattr(here, "RELATIONS", RELATIONS + [feedback.BRIDGE])
    monkeypatch.setattr(here, "TRIPLES", TRIPLES + [(0, bridge, n + i)
                                                    for i in range(len(BRIDGE_TOPICS))])
    store = make_store(tmp_path / "bridged", mu={n + i: 8.0 for i in range(len(BRIDGE_TOPICS))})
    reached = bridged_candidates(Runtime.open(store.root, max_candidates=2))
    quota = section({}, "query")["bridge_candidates"]
    assert len(facts) == 2 and reached[:2] == facts
    assert 0 < quota < len(BRIDGE_TOPICS) and len(reached) == 2 + quota
    assert set(reached[2:]) <= set(BRIDGE_TOPICS)


def test_an_overlays_bridges_rank_apart_too(tmp_path):
    """The online loop's overlay (tcr-qf) names the bridge relation the build lacks: its
    bridges get their own quota after the facts' candidates, as a refreshed build's do."""
    rt = Runtime.open(make_store(tmp_path).root, max_candidates=2)
    view = rt.with_triples([ExtraTriple("m.film1", feedback.BRIDGE, f"m.p{i}", o_name=name)
                            for i, name in enumerate(BRIDGE_TOPICS)])
    reached = bridged_candidates(view)
    assert reached[:2] == bridged_candidates(rt)
    assert len(reached) == 2 + section({}, "query")["bridge_candidates"]
    assert set(reached[2:]) <= set(BRIDGE_TOPICS)


def test_an_overlays_new_entities_are_given_by_key_and_the_base_knows_none(tmp_path):
    rt = Runtime.open(make_store(tmp_path).root)
    rt.ask("who directed its sequel?", entities=["m.film1"])  # the base's key ids, made first
    view = rt.with_triples([ExtraTriple("m.film1", feedback.BRIDGE, "m.new", o_name="Newcomer")])
    linked = view.ask("who is it?", entities=["m.new"]).linked
    assert [(link["key"], link["id"]) for link in linked] == [("m.new", rt.n_entities)]
    with pytest.raises(QueryError, match="unknown entity"):
        rt.ask("who is it?", entities=["m.new"])


def test_cold_head_is_computed_with_the_offline_scorer(tmp_path):
    make_store(tmp_path, with_cache=False)
    cold = Runtime.open(tmp_path / "store")
    rows, source = cold.paths(1)
    assert source == "computed"
    assert rows == path_rows(taimr.top_paths(cold.graph, 1))


def test_cold_heads_are_kept_in_a_bounded_lru(tmp_path, monkeypatch):
    monkeypatch.setattr("lokg.runtime.opened.COLD_HEADS_KEPT", 2)
    make_store(tmp_path, with_cache=False)
    cold = Runtime.open(tmp_path / "store")
    for head in (0, 1, 2, 3, 1):
        rows, source = cold.paths(head)
        assert source == "computed" and rows == path_rows(taimr.top_paths(cold.graph, head))
        assert len(cold._cold) <= 2
    assert list(cold._cold) == [3, 1]  # least recently used first


def test_cached_rows_equal_the_scorer(rt):
    cached, source = rt.paths(0)
    assert source == "cache"
    assert cached == path_rows(taimr.top_paths(rt.graph, 0, **rt.path_settings))


def test_path_cache_buckets_are_compact_bounded_and_read_back_exactly(rt):
    cache = PathCache(rt.path_cache.directory, rt.path_cache.buckets, keep=1)
    for head in range(rt.n_entities - 1):  # the last entity ("lone") has no cached paths
        table = read_table(cache.directory / f"bucket-{head % cache.buckets:05d}.parquet")
        rows = [r for r in table.to_pylist() if r["head"] == head]
        assert cache.get(head) == [(r["score"], r["relations"], r["inverses"], r["nodes"])
                                   for r in rows]
        assert len(cache._loaded) == 1  # keep=1: the LRU holds one bucket, never more
    (_, _, relations, inverses, nodes), _ = cache._bucket(0)
    assert relations.dtype == nodes.dtype == np.uint8 and inverses.dtype == bool
    assert cache.get(rt.n_entities - 1) is None


def test_open_and_ask_never_import_pandas(store_root):
    # pyarrow imports pandas (~0.9 s, ~45 MiB) on its first to_numpy or pq.read_table
    code = f"""
import sys
from lokg.runtime.query import Runtime
a = Runtime.open({str(store_root)!r}).ask("Who directed the sequel of The Long Road?")
assert a.status == "ok" and a.encoding["paths"], a
assert "pandas" not in sys.modules
print("OK")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-2000:]


def test_path_triples_walk_inverse_hops_backwards():
    # Ben Stone -[directed_by⁻¹]-> The Long Road II -[sequel⁻¹]-> The Long Road
    assert path_triples(3, (0.0, [1, 0], [True, True], [1, 0])) == [(1, 1, 3), (0, 0, 1)]


@pytest.mark.parametrize("budget", [12, 30, 64, 2048])
def test_knowledge_fits_the_budget_and_the_prompt_adds_only_its_overhead(rt, budget):
    llm = FakeLLM("Ben Stone")
    answer = rt.ask("Who directed the sequel of The Long Road?", budget=budget, llm=llm)
    assert llm.calls == 1 and answer.llm_calls == 1
    system, user = llm.prompts[0]
    knowledge = user.split("Knowledge:\n", 1)[1].rsplit("Question: ", 1)[0]
    knowledge = knowledge.rsplit(CHOICES_HEADER, 1)[0]  # the forced choice's candidates follow
    assert count_tokens(knowledge) == answer.tokens["knowledge"] <= budget
    assert answer.tokens["prompt"] == count_tokens(system) + count_tokens(user)
    assert answer.tokens["prompt"] <= budget + answer.tokens["overhead"]["instructions"] \
        + answer.tokens["overhead"]["question"]


def test_llm_answer_is_parsed_and_resolved_to_entities(rt_free):
    answer = rt_free.ask("Who directed the sequel of The Long Road?",
                    llm=FakeLLM("Answers:\n1. ben stone\n2. Nobody Known"))
    assert answer.answers == ["ben stone", "Nobody Known"]
    assert answer.answer_ids == [3, None]
    assert not answer.fallback and answer.tokens["completion"] > 0


@pytest.mark.parametrize("llm", [FakeLLM(error=LLMError("refused", kind="connect")),
                                 FakeLLM("I don't know.")])
def test_failed_or_empty_llm_call_gives_the_flagged_none_answer(rt, llm):
    plain = rt.ask("Who directed the sequel of The Long Road?")
    answer = rt.ask("Who directed the sequel of The Long Road?", llm=llm)
    assert llm.calls == 1 and answer.llm_calls == 1
    assert answer.fallback and answer.status == "fallback" and answer.fallback_reason
    assert answer.answers == plain.answers


def test_given_entities_bypass_the_linker(rt):
    answer = rt.ask("who directed its sequel?", entities=["m.film1"])
    assert [(link["id"], link["method"]) for link in answer.linked] == [(0, "given")]
    assert rt.ask("who directed its sequel?", entities=[0]).answers == answer.answers


@pytest.mark.parametrize("question,status", [("What is the capital of Atlantis?", "no_entity"),
                                             ("Where is Lonely Island?", "no_paths")])
def test_unanswerable_questions_give_a_well_formed_answer(rt, question, status):
    answer = rt.ask(question, llm=FakeLLM("x"))
    assert answer.status == status and answer.answers == [] and answer.llm_calls == 0
    assert answer.message


@pytest.mark.parametrize("kwargs,match", [
    ({"question": ""}, "empty"),
    ({"question": "   \n"}, "empty"),
    ({"question": "x" * 10_000_000}, "limit"),
    ({"question": 42}, "string"),
    ({"budget": 0}, "budget"),
    ({"budget": -5}, "budget"),
    ({"budget": MAX_BUDGET + 1}, "budget"),
    ({"budget": 10**30}, "budget"),
    ({"budget": "many"}, "budget"),
    ({"entities": [99]}, "unknown entity"),
    ({"entities": ["m.nope"]}, "unknown entity"),
    ({"retrieval": "magic"}, "retrieval"),
    ({"encoding": "zip"}, "encoding"),
    ({"llm": "gpt-17"}, "llm"),
])
def test_bad_requests_raise_a_query_error_naming_the_argument(rt, kwargs, match):
    args = {"question": "Who directed The Long Road?", **kwargs}
    with pytest.raises(QueryError, match=match):
        rt.ask(args.pop("question"), **args)


def test_a_path_that_is_not_a_store_is_refused(tmp_path):
    with pytest.raises(StoreError, match="no published build"):
        Runtime.open(tmp_path)
    with pytest.raises(StoreError, match="not a directory"):
        Runtime.open(tmp_path / "missing")


def test_a_corrupted_build_is_refused(tmp_path):
    store = make_store(tmp_path)
    victim = store.build().table_path("triples")
    victim.write_bytes(victim.read_bytes()[:-9] + b"corrupted")
    with pytest.raises(StoreError, match="triples"):
        Runtime.open(tmp_path / "store")


def test_uniform_encoding_and_neighbourhood_retrieval(rt):
    answer = rt.ask("Who directed The Long Road?", encoding="uniform", retrieval="neighbourhood")
    assert answer.encoding["mode"] == "uniform"
    assert {(t["s"], t["o"]) for t in answer.triples} == {("The Long Road", "The Long Road II"),
                                                          ("The Long Road", "Ada Brook")}


def test_runtime_imports_and_answers_without_torch_pyspark_or_airflow(store_root):
    code = BLOCK_HEAVY + f"""
import lokg.runtime.cli
from lokg.runtime.query import Runtime
a = Runtime.open({str(store_root)!r}).ask("Who directed the sequel of The Long Road?")
assert a.status == "ok" and a.answers, a
assert a.encoding["semantic"] is False
from click.testing import CliRunner
r = CliRunner().invoke(lokg.runtime.cli.cli, ["query", "Who directed The Long Road?", "--store",
                                         {str(store_root)!r}, "--llm", "none", "--json"])
assert r.exit_code == 0, r.output
mods = [m for m in sys.modules if m.split('.')[0] in {{'torch', 'pyspark', 'airflow'}}]
assert not mods, mods
print("OK")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("mode", ["rt", "rt_free"])
def test_a_sentence_reply_is_grounded_to_the_candidate_it_names(mode, request):
    answer = request.getfixturevalue(mode).ask("Who directed the sequel of The Long Road?",
                                               llm=FakeLLM("The director of the sequel is Ben Stone."))
    assert answer.answers == ["Ben Stone"] and answer.answer_ids == [3]


def test_forced_choice_lists_the_candidates_and_keeps_a_reply_among_them(rt):
    llm = ChoosingLLM("Ben Stone")
    answer = rt.ask("Who directed the sequel of The Long Road?", llm=llm)
    best = answer.candidates[0]["s_final"]
    listed = [c["name"] for c in answer.candidates[:5] if best - c["s_final"] <= 1.0]
    assert llm.choices == listed and "Ben Stone" in listed and 1 < len(listed)
    system, user = llm.prompts[0]
    assert system == CHOICE_INSTRUCTIONS
    assert CHOICES_HEADER + "".join(f"- {n}\n" for n in listed) in user
    assert answer.answers == ["Ben Stone"] and answer.answer_ids == [3] and not answer.fallback
    assert answer.tokens["prompt"] == count_tokens(system) + count_tokens(user) \
        == answer.tokens["overhead"]["total"] + answer.tokens["knowledge"]


def test_the_choice_margin_lists_only_the_near_ties_and_one_candidate_makes_no_call(store_root):
    """choice_margin 0: only candidates tied with the top are offered; a choice of one is no
    choice — retrieval answers, no call, no prompt tokens."""
    question = "Who directed the sequel of The Long Road?"
    llm = ChoosingLLM("Ben Stone")
    tied = Runtime.open(store_root, choice_margin=0.0).ask(question, llm=llm)
    best = tied.candidates[0]["s_final"]
    assert llm.choices == [c["name"] for c in tied.candidates if c["s_final"] == best]
    assert 1 < len(llm.choices) < len(tied.candidates)
    llm = ChoosingLLM("Ben Stone")
    one = Runtime.open(store_root, choice_candidates=1).ask(question, llm=llm)
    assert llm.calls == 0 and one.llm_calls == 0 and not one.fallback
    assert one.answers == [one.candidates[0]["name"]] and one.tokens["prompt"] == 0
    assert "choice_margin" in one.message


def test_a_forced_choice_reply_outside_the_candidates_falls_back_flagged(rt, rt_free):
    plain = rt.ask("Who directed the sequel of The Long Road?")
    answer = rt.ask("Who directed the sequel of The Long Road?", llm=FakeLLM("Nobody Known"))
    assert answer.fallback and answer.answers == plain.answers
    assert re.search(r"'Nobody Known' is none of the \d candidates", answer.fallback_reason)
    free = rt_free.ask("Who directed the sequel of The Long Road?", llm=FakeLLM("Nobody Known"))
    assert free.answers == ["Nobody Known"] and not free.fallback


def test_the_linker_built_from_the_builds_folded_forms_is_the_one_folded_at_open(tmp_path):
    """Publish folds every name, key and alias once (reports/linker_forms.parquet); the index
    a runtime builds from that file equals the one it builds by folding the entities itself."""
    import pyarrow.parquet as pq

    from lokg.runtime.linker import LINKER_FORMS_FILE, folded_forms, surface_forms

    names = ["The Long Road", "Ada Brook", "Ben Stone", "  "]
    keys = ["m.road", "m.ada", "m.ben", "m.blank"]
    aliases = [["Long Road, The"], None, ["B. Stone", ""], []]
    forms = surface_forms(names, keys, aliases)
    degree = np.array([3, 1, 2, 0])
    ids, folded = folded_forms(forms)
    assert "" not in folded and len(ids) == len(folded) < len(forms)
    from_file = Linker(zip(ids, folded), degree, folded=True)
    at_open = Linker(forms, degree)
    assert from_file._index == at_open._index and len(from_file) == len(at_open)
    assert from_file.max_span_words == at_open.max_span_words

    store_forms = folded_forms(surface_forms([e[1] for e in ENTITIES], [e[0] for e in ENTITIES],
                                             [e[2] for e in ENTITIES]))
    path = tmp_path / "forms.parquet"
    # one extra folded form, so that the test sees the file is what the runtime reads
    pq.write_table(pa.table({"id": [*store_forms[0], 4], "form": [*store_forms[1], "zz top"]}),
                   path)
    with_file = Runtime.open(make_store(tmp_path / "s", extra_files={LINKER_FORMS_FILE: path}).root)
    without = Runtime.open(make_store(tmp_path / "t").root)
    assert with_file.linker._index == {**without.linker._index, "zz top": (4,)}
    assert with_file.link("who directed the sequel of a. brook ?") == \
        without.link("who directed the sequel of a. brook ?") != []
