"""What every evaluation method is built from: the opened runtimes, the counted reader, the
budget and the topic-entity mode (``EvalContext``), and the error a method raises.

Its own module so that ``methods`` (the registry of methods) and ``baselines`` both import it
without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lokg.common.datasets import Question
from lokg.evaluation.breakdown import map_hop
from lokg.runtime.config import DEFAULT_BUDGET, POLICIES
from lokg.runtime.errors import LokgError

ENTITY_MODES = ("gold", "link")


class MethodError(LokgError, ValueError):
    """A method cannot run as asked (unknown name, missing store or encoder)."""


def entity_modes(text: str) -> list[str]:
    """``gold``, ``link`` or several comma-separated (``gold,link``: each method runs in each
    mode), validated, in the order given."""
    modes = list(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    unknown = [m for m in modes if m not in ENTITY_MODES]
    if unknown or not modes:
        raise MethodError(f"--entities {text!r}: choose {', '.join(ENTITY_MODES)} or several "
                          "of them comma-separated (gold,link)")
    return modes


def relation_map(rt) -> dict[str, str]:
    """Relation name → canonical name of ``rt``'s store, as the relation_knowledge stage reads
    its relation_map (``common.store_names.StoreNames``); a store without that table (one not
    built by the pipeline) keeps every name."""
    if "relation_map" not in rt.build.manifest.get("tables", {}):
        return {}
    from lokg.common.store_names import StoreNames

    tables = ("entities", "relations", "relation_map")
    return StoreNames({t: str(rt.build.table_path(t)) for t in tables}).canonical


class CountingLLM:
    """An LLM backend that counts the calls made through it and the ones that failed."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.calls_model = bool(inner.calls_model)
        self.model = getattr(inner, "model", None)
        self.constrains_choices = bool(getattr(inner, "constrains_choices", False))
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.failed = 0
        self.errors: list[str] = []

    def complete(self, prompt: str, *, max_tokens: int, system: str = "", **options):
        from lokg.runtime.llm import LLMError

        if self.calls_model:
            self.calls += 1
        try:
            return self.inner.complete(prompt, max_tokens=max_tokens, system=system, **options)
        except LLMError as exc:
            self.failed += 1
            self.errors.append(f"{exc.kind}: {exc}")
            raise


@dataclass
class EvalContext:
    """What methods are built from: opened runtimes, the reader, the budget, the entity mode."""

    runtime: object  # runtime.query.Runtime
    llm: CountingLLM
    budget: int = DEFAULT_BUDGET
    entities: str = "gold"
    runtime_no_scos: object | None = None
    policy: str = "lokg"  # of the lokg methods (baselines and lokg-no-relknow: always lokg)
    _key_index: dict[int, dict[str, int]] = field(default_factory=dict, repr=False)
    _canonical: dict[int, dict[str, str]] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.entities not in ENTITY_MODES:
            raise MethodError(f"entities must be one of {', '.join(ENTITY_MODES)}; "
                              f"got {self.entities!r}")
        if self.policy not in POLICIES:
            raise MethodError(f"policy must be one of {', '.join(POLICIES)}; got {self.policy!r}")

    def topic_keys(self, rt, question: Question) -> tuple[list[str] | None, str | None]:
        """(keys to give the method or None to link from text, or a failing status)."""
        if self.entities != "gold" or not question.topic_entities:
            return None, None
        index = self._key_index.get(id(rt))
        if index is None:
            index = self._key_index[id(rt)] = {k: i for i, k in enumerate(rt.keys)}
        if any(k not in index for k in question.topic_entities):
            return None, "topic_not_in_store"
        return list(question.topic_entities), None

    def gold_chain(self, rt, question: Question) -> list[str] | None:
        """The question's gold relation path in ``rt``'s relation names (None: it has none):
        each hop through the store's relation_map (evaluation.breakdown.map_hop)."""
        if not question.path:
            return None
        canonical = self._canonical.get(id(rt))
        if canonical is None:
            canonical = self._canonical[id(rt)] = relation_map(rt)
        return [map_hop(hop, canonical) for hop in question.path]

    def topic_ids(self, rt, question: Question) -> tuple[list[int], list[dict], str | None]:
        """Topic entity ids, their link records, and a failing status (None when found)."""
        keys, status = self.topic_keys(rt, question)
        if status is not None:
            return [], [], status
        if keys is not None:
            index = self._key_index[id(rt)]
            ids = [index[k] for k in keys]
            links = [{"id": i, "key": rt.keys[i], "name": rt.names[i], "method": "given"}
                     for i in ids]
        else:
            found = rt.link(question.question)
            ids = list(dict.fromkeys(link.id for link in found))
            links = [{**link.to_dict(), "key": rt.keys[link.id], "name": rt.names[link.id]}
                     for link in found]
        return ids, links, None if ids else "no_entity"
