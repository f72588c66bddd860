"""Questions of the synthetic KG: chains of base relations walked from a topic, every endpoint
an answer, worded by ``pipeline.synth_wording``; and the train/dev/test split by position.

Questions follow chains of base relations only (members[0]: never a synonym or an inverse
member), so a subject's answers are recomputable from that subject alone — or, for a hop walked
backwards (metaqa style), from a reverse index of that one relation.
"""

from __future__ import annotations

import numpy as np

from lokg.pipeline.synth_schema import Family
from lokg.pipeline.synth_wild import MARK, roughen
from lokg.pipeline.synth_wording import METAQA, render, variant_counts
from lokg.pipeline.synth_world import World
from lokg.runtime.relknow import INVERSE_PREFIX
#: A hop of a question chain: (family index, walked against the relation's direction).
Step = tuple[int, bool]


def _ends(fam: Family, inverse: bool) -> tuple[str, str]:
    """(start type, end type) of a hop along the family's base relation."""
    return (fam.obj, fam.subj) if inverse else (fam.subj, fam.obj)


def _connects(a: tuple[Family, bool], b: tuple[Family, bool]) -> bool:
    """Hop b can follow hop a: a ends on b's start type (and on the same half of the people)."""
    (fa, ia), (fb, ib) = a, b
    return (_ends(fa, ia)[1] == _ends(fb, ib)[0]
            and (fa.parity is None or fb.parity in (None, fa.parity)))


def _chains(families, steps: list[Step], hops: int) -> list[tuple[Step, ...]]:
    """Chains of ``hops`` steps that connect type to type, in a fixed order."""
    chains = [(s,) for s in steps]
    for _ in range(hops - 1):
        chains = [c + (s,) for c in chains for s in steps
                  if _connects((families[c[-1][0]], c[-1][1]), (families[s[0]], s[1]))]
    return chains


def _style_steps(families, style: str) -> list[Step]:
    """pathquestion: every base relation, forward (a subject's answers need only that subject);
    metaqa: the movie relations synth_wording.METAQA words, both ways."""
    if style == "pathquestion":
        return [(f, False) for f in range(len(families))]
    return [(f, inverse) for f, fam in enumerate(families) if fam.base in METAQA
            for inverse in (False, True)]


def split_of(index: int) -> str:
    """The split of the question at ``index`` (every 10th from the first is test, the one after
    it dev): the labelled questions a build may learn from and the ones it is judged on stay
    apart, and the first question — the demo's — is a test one."""
    return "test" if index % 10 == 0 else "dev" if index % 10 == 1 else "train"


def question_splits(questions: list[dict]) -> dict[str, list[dict]]:
    """Train/dev/test by position (:func:`split_of`)."""
    splits: dict[str, list[dict]] = {"train": [], "dev": [], "test": []}
    for i, q in enumerate(questions):
        split = split_of(i)
        splits[split].append({**q, "split": split})
    return splits

def _endpoints(world: World, chain: tuple[Step, ...], topic: int, max_answers: int,
               style: str) -> list[int] | None:
    """The chain's endpoints walked from the topic, ordered by mid; None refuses the question
    (no endpoint, more than ``max_answers``, or — pathquestion only — the topic among them;
    metaqa drops the topic instead: the films sharing X's director are not X)."""
    frontier = {topic}
    for f, inverse in chain:
        frontier = {o for x in frontier for o in world.walk(f, inverse, x)}
        if not frontier or len(frontier) > 10 * max_answers:
            break
    if style == "metaqa":
        frontier.discard(topic)
    elif topic in frontier:
        return None
    return sorted(frontier, key=world.mid) if 1 <= len(frontier) <= max_answers else None


def _record(world: World, names: dict[str, str], style: str, wording: str,
            chain: tuple[Step, ...], topic: int, answers: list[int], draws: list[float],
            index: int, extended: bool) -> dict:
    """One question record; ``draws`` pick the wording's template and phrases."""
    hops = [(world.families[f], inverse) for f, inverse in chain]
    steps = [(fam.base, fam.phrases, inverse) for fam, inverse in hops]
    choice = [int(u * n) for u, n in zip(draws, variant_counts(style, wording, steps))]
    topic_name = world.name(topic)
    noise = None
    if wording == "wild":  # its own generator: the questions stay those of the other wordings
        text, noise = roughen(render(style, wording, steps, MARK, choice), topic_name,
                              np.random.default_rng([world.seed, 0x3D, index]))
    else:
        text = render(style, wording, steps, topic_name, choice)
    record = {
        "id": f"synth-{index + 1:05d}",
        "question": text,
        "answers": [world.name(a) for a in answers],
        "answer_keys": [world.mid(a) for a in answers],
        "topic_entities": [world.mid(topic)],
        "topic_names": [topic_name],
        "path": [INVERSE_PREFIX * inverse + names[fam.base] for fam, inverse in hops],
        "hops": len(chain),
    }
    if extended:
        record.update(wording=wording, inverse=any(inverse for _, inverse in chain))
        if noise is not None:
            record["noise"] = noise
    return record


def draw_questions(world: World, n_questions: int, names: dict[str, str], *,
                   style: str = "pathquestion", hops: tuple[int, ...] = (2, 3),
                   max_answers: int = 5, test_wording: str = "train",
                   extended: bool = False) -> list[dict]:
    """Questions on random chains and topics whose answers are every endpoint of the chain;
    test questions (:func:`split_of`) in the ``test_wording``, the others in ``train``."""
    rng = np.random.default_rng([world.seed, 0x51])
    chains = {h: _chains(world.families, _style_steps(world.families, style), h) for h in hops}
    seen, out = set(), []
    attempts = 0
    while len(out) < n_questions and attempts < 50 * n_questions + 100:
        attempts += 1
        n_hops = hops[len(hops) - 1 - int(rng.random() * len(hops))]
        chain = chains[n_hops][int(rng.random() * len(chains[n_hops]))]
        start = _ends(world.families[chain[0][0]], chain[0][1])[0]
        topic = world.offset[start] + int(rng.random() * world.sizes[start])
        phrase_u, template_u = rng.random(n_hops), rng.random()
        answers = _endpoints(world, chain, topic, max_answers, style)
        if answers is None or (topic, chain) in seen:
            continue
        seen.add((topic, chain))
        wording = test_wording if split_of(len(out)) == "test" else "train"
        out.append(_record(world, names, style, wording, chain, topic, answers,
                           [template_u, *phrase_u], len(out), extended))
    return out
