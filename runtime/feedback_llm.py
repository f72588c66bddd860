"""Identify missing with an LLM: the prompt that compares the
question, the answer and the context it was given and lists the facts missing from the context as
sub-questions, in JSON. It runs only where ``query.feedback_llm`` names a backend (default off:
the default query path makes no call for feedback), after the answer, for an answer the
structural check already logs (runtime/feedback.py decides *whether* something is missing, the
LLM *what*). A valid reply replaces the record's structural bridges with the LLM's sub-questions
(``identified_by: llm``); a failed call or a malformed reply keeps the structural record, flagged
(``identified_by: structural`` and ``llm_problem``) — never an error.

The record then holds the LLM's sub-questions, which restate parts of the question: configuring
the LLM keeps that much of the question text in the log even without ``feedback_questions``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from lokg.runtime.llm.base import LLMError

#: Context lines shown to the LLM at most (the answer's knowledge, best first).
MAX_CONTEXT_LINES = 40
#: Sub-questions a reply may list, and the longest entity name and sub-question kept.
MAX_FACTS = 10
MAX_ENTITY_CHARS, MAX_QUESTION_CHARS = 200, 300
MAX_TOKENS = 256
#: The reply's JSON shape as a GBNF grammar, for a backend that takes one (``takes_grammar``:
#: the local llama.cpp model): up to 3 sub-questions, short strings, so that even a small model's
#: reply parses; other backends are asked in words and their reply validated the same way.
GRAMMAR = r"""root ::= "{\"missing\": [" (item (", " item (", " item)?)?)? "]}"
item ::= "{\"entity\": " str ", \"question\": " str "}"
str ::= "\"" [^"\\\x00-\x1f]{1,120} "\""
"""
SYSTEM = (
    "You check whether a context holds what a question needs. Compare the question, the "
    "answer given and the context. List the facts the context lacks to answer the question "
    "as sub-questions, each about one named entity. Reply with JSON only, exactly of the form "
    '{"missing": [{"entity": "<entity name>", "question": "<sub-question>"}]}; '
    'reply {"missing": []} when nothing is missing.')


def prompt(answer) -> str:
    """The user message: question, answer and the answer's context as "s r o" lines."""
    lines = [f"{t['s']} {t['r']} {t['o']}" for t in answer.triples[:MAX_CONTEXT_LINES]]
    return (f"Question: {answer.question}\nAnswer: {', '.join(answer.answers) or '(none)'}\n"
            "Context:\n" + ("\n".join(lines) or "(empty)") + "\nJSON:")


def parse(text: str) -> tuple[list[dict], str]:
    """The reply's sub-questions as bridge entries ({name, text}), or [] and why the reply is
    no valid list (the first ``{`` to the last ``}`` is read, so a fenced reply counts)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return [], "no JSON object in the reply"
    try:
        data = json.loads(text[start:end + 1])
    except ValueError as exc:
        return [], f"not JSON ({exc.__class__.__name__}: {exc})"
    items = data.get("missing") if isinstance(data, Mapping) else None
    if not isinstance(items, list):
        return [], "no list 'missing' in the reply"
    if len(items) > MAX_FACTS:
        return [], f"{len(items)} sub-questions (at most {MAX_FACTS})"
    out = []
    for item in items:
        entity = item.get("entity") if isinstance(item, Mapping) else None
        question = item.get("question") if isinstance(item, Mapping) else None
        if not (isinstance(entity, str) and entity.strip() and isinstance(question, str)
                and question.strip() and len(entity) <= MAX_ENTITY_CHARS
                and len(question) <= MAX_QUESTION_CHARS):
            return [], f"a sub-question without a short non-empty 'entity' and 'question': {item!r:.120}"
        entity, question = entity.strip(), question.strip()
        if entity.startswith("<") and entity.endswith(">"):
            return [], f"the reply copies the template's placeholder {entity!r}"
        text = question if entity.casefold() in question.casefold() else f"{entity} {question}"
        out.append({"name": entity, "text": text})
    return out, ""


def identified(record: dict, answer, llm) -> dict:
    """``record`` with the LLM's sub-questions as its bridges, or flagged as structural."""
    try:
        options = {"grammar": GRAMMAR} if getattr(llm, "takes_grammar", False) else {}
        reply = llm.complete(prompt(answer), system=SYSTEM, max_tokens=MAX_TOKENS, **options)
    except LLMError as exc:
        return {**record, "identified_by": "structural", "llm_problem": f"{exc.kind}: {exc}"}
    facts, problem = parse(reply.text)
    usage = {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens}
    if problem:
        return {**record, "identified_by": "structural", "llm_problem": problem,
                "llm_usage": usage}
    return {**record, "bridges": facts, "identified_by": "llm", "llm_usage": usage}
