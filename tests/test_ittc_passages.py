"""ITTC's passage items: the knapsack buys a passage when it carries more per token than its
triples, never exceeds B, never pays twice for a triple a passage holds (ittc/passages.py)."""

from __future__ import annotations

import random

import pytest

from lokg.runtime import ittc
from lokg.runtime.ittc import KnowledgeTriple, Passage, encode
from lokg.runtime.ittc.passages import PASSAGE_VALUE, passage_line
from lokg.runtime.tokens import count_tokens

ORDER = ("s", "r", "o")
SENTENCE = "Alice was born in Paris, the capital of France."
FILLER = " She later studied painting in Lyon and moved to Rome in 1990."


def triples() -> list[KnowledgeTriple]:
    return [KnowledgeTriple("Alice", "born in", "Paris", rank=0, tail_entropy=2.0, focus=True,
                            subject_description="a painter born in the nineteenth century"),
            KnowledgeTriple("Paris", "capital of", "France", rank=1, tail_entropy=1.0),
            KnowledgeTriple("Rome", "capital of", "Italy", rank=2, tail_entropy=1.0)]


def alice(rank: int = 0, filler: int = 3) -> Passage:
    """A passage holding triples 0 and 1 in its first sentence (and their chunk)."""
    return Passage("c-alice", "d-alice", "Alice", SENTENCE + FILLER * filler,
                   sentences=(("s1", SENTENCE),),
                   covers=(frozenset({0, 1}), frozenset({0, 1})), rank=rank)


def emitted(enc: ittc.Encoding) -> tuple[list[str | None], list[str | None]]:
    return [p.granularity for p in enc.passages], [t.granularity for t in enc.triples]


def test_a_passage_with_more_value_per_token_than_its_triples_is_bought_and_covers_them():
    enc = encode(triples(), 40, ORDER, passages=[alice()])
    passages, lines = emitted(enc)
    assert passages == ["sentences"]
    assert lines[:2] == [None, None]  # held by the passage: not on their own lines
    assert [t.covered_by for t in enc.triples[:2]] == [0, 0]
    assert enc.text.startswith(passage_line("Alice", SENTENCE))
    assert enc.passages[0].covers == (0, 1)
    assert enc.tokens == count_tokens(enc.text) <= 40


def test_a_passage_worth_less_per_token_than_the_triples_is_left_out():
    cheap = Passage("c", "d", "Alice", SENTENCE + FILLER * 30, rank=200)  # far down the ranking
    enc = encode(triples(), 60, ORDER, passages=[cheap])
    assert emitted(enc)[0] == [None]
    assert all(g is not None for g in emitted(enc)[1])
    assert enc.passages[0].value == 0.0 and enc.passages[0].values[2] < 1e-3 * PASSAGE_VALUE


def test_the_whole_passage_when_the_budget_allows_it_and_its_triples_are_not_paid_twice():
    enc = encode(triples(), 300, ORDER, passages=[alice()], dp_max_budget=4096)
    assert emitted(enc)[0] == ["passage"]
    lines = "".join(t.line for t in enc.triples)
    assert "Alice" not in lines and "Rome | capital of | Italy" in lines
    assert enc.tokens == enc.passages[0].cost + sum(t.cost for t in enc.triples)


@pytest.mark.parametrize("dp_max_budget", [4096, 1])  # exact DP, then greedy on every budget
def test_never_over_budget_and_never_paid_twice(dp_max_budget):
    rng = random.Random(7)
    for _ in range(60):
        ts = [KnowledgeTriple(f"E{rng.randrange(9)}", "r" * rng.randrange(1, 6), f"F{i}",
                              rank=i, tail_entropy=rng.random() * 3, focus=rng.random() < .3)
              for i in range(rng.randrange(0, 8))]
        ps = [Passage(f"c{j}", "d", f"T{j}", " ".join(["word"] * rng.randrange(1, 60)),
                      sentences=(("s", "word word"),) if rng.random() < .5 else (),
                      covers=(frozenset(rng.sample(range(len(ts)), min(2, len(ts)))),
                              frozenset(range(len(ts))) if rng.random() < .3 else frozenset()),
                      rank=j) for j in range(rng.randrange(1, 5))]
        budget = rng.randrange(1, 160)
        enc = encode(ts, budget, ORDER, passages=ps, dp_max_budget=dp_max_budget)
        assert enc.tokens == count_tokens(enc.text) <= budget
        chosen = [p for p in enc.passages if p.granularity]
        held = {i for p in chosen for i in ps[p.index].covers[
            ittc.passages.OPTIONS.index(p.granularity) - 1]}
        assert not held & {t.index for t in enc.triples if t.granularity}
        assert enc.total_value == pytest.approx(
            sum(p.value for p in chosen) + sum(t.value for t in enc.triples))


def test_the_naive_rule_emits_every_passage_whole_and_the_triples_they_do_not_hold():
    enc = encode(triples(), 4096, ORDER, passages=[alice()])
    assert enc.mode == "naive" and emitted(enc) == (["passage"], [None, None, "verbose"])
    assert enc.naive_tokens == enc.tokens


def test_without_passages_the_encoding_is_the_triples_alone():
    plain, offered = encode(triples(), 20, ORDER), encode(triples(), 20, ORDER, passages=())
    assert plain.text == offered.text and offered.passages == ()


def test_an_offered_passage_cites_the_sentences_its_line_holds():
    from lokg.runtime.passage_items import passage_records

    enc = encode(triples(), 40, ORDER, passages=[alice()])
    records, citations = passage_records(enc)
    assert [r["granularity"] for r in records] == ["sentences"]
    assert records[0]["chunk_id"] == "c-alice" and records[0]["covers"] == 2
    assert [(c["chunk_id"], c["sentence_id"], c["sentence"], c["basis"]) for c in citations] \
        == [("c-alice", "s1", SENTENCE, "passage")]


@pytest.mark.parametrize("share, chosen", [(None, ["passage", None]),
                                           (0.9, ["sentences", "sentences"])])
def test_sentences_holding_most_of_the_match_buy_two_passages_where_one_fits_whole(share, chosen):
    """``share``: the sentences' value share (the question's match they hold); None: their
    token share, which buys the whole first chunk over the sentences of two."""
    def offered(rank: int) -> Passage:
        return Passage(f"c{rank}", "d", f"T{rank}", SENTENCE + FILLER * 3,
                       sentences=(("s", SENTENCE),), rank=rank, share=share)

    ps = [offered(0), offered(1)]
    whole, part = (count_tokens(passage_line("T0", t)) for t in (SENTENCE + FILLER * 3,
                                                                  SENTENCE))
    assert 2 * part <= whole  # the budget fits both sentences options or the first whole
    enc = encode([], whole + 2, ORDER, passages=ps, dp_max_budget=4096)
    assert emitted(enc)[0] == chosen
    values = enc.passages[0].values
    assert values[1] == pytest.approx(values[2] * (share or part / whole))


@pytest.mark.parametrize("match, kept", [([0.2, 0.9, 0.3], ["b"]), ([0.5, 0.1, 0.5], ["a", "c"]),
                                         ([0.4, 0.4, 0.4], ["a", "b"]), ([0.7], ["a"])])
def test_the_best_sentences_are_the_fewest_best_matches_that_hold_the_share(match, kept):
    import numpy as np

    from lokg.runtime.passage_items import SENTENCE_SHARE, SENTENCE_TEMPERATURE, best_sentences

    sentences = tuple((sid, f"sentence {sid}") for sid in "abc"[:len(match)])
    chosen, share = best_sentences(sentences, np.array(match))
    assert [sid for sid, _ in chosen] == kept  # in text order
    weights = np.exp(np.array(match) / SENTENCE_TEMPERATURE)
    assert share == pytest.approx(sum(weights["abc".index(s)] for s in kept) / weights.sum())
    assert share >= SENTENCE_SHARE


@pytest.mark.parametrize("above, rest, expected", [
    (0.01, [0.5] * 4, True), (-0.01, [0.5] * 4, False),
    (0.01, [0.5] * 4 + [-1.0], True),  # only the next RUNNERS_UP count
    (0.01, [0.4, 0.6, 0.5, 0.5], True), (-0.01, [0.4, 0.6, 0.5, 0.5], False),
    (0.01, [], True)])
def test_a_match_is_concentrated_when_the_best_chunk_stands_above_the_next_ones(above, rest,
                                                                                expected):
    import numpy as np

    from lokg.runtime.passage_items import CONCENTRATION_GAP, RUNNERS_UP, match_gap

    assert RUNNERS_UP == 4
    best = float(np.mean(rest[:4])) + CONCENTRATION_GAP + above if rest else 0.5
    for cosines in ([best, *rest], [*rest, best]):  # the best, wherever the ranking put it
        assert (match_gap(np.array(cosines)) >= CONCENTRATION_GAP) is expected
