"""The ``openai`` extraction backend against a real loopback server playing an OpenAI-compatible
endpoint (lokg.testing.http_fakes.FakeServer): parsing, validation, retries of malformed replies, usage
and the failures that quarantine one chunk."""

from __future__ import annotations

import json
import time

import pytest

from lokg.common.stage import StageError
from lokg.pipeline.config import DEFAULTS
from lokg.runtime.llm.openai import ENV_API_KEY
from lokg.testing.http_fakes import ok_body
from lokg.testing.serving import free_port
from lokg.text.extractors import ChunkExtractionError, make_extractor
from lokg.text.openai_extractor import (
    SYSTEM_PROMPT,
    MalformedReply,
    OpenAIExtractor,
    cost,
    parse_reply,
)

KEY_ENV = "LOKG_TEST_EXTRACT_KEY"
PASSAGE = "Lothair II was the son of Ermengarde of Tours. He was born in 835."
GOOD = {
    "entities": [
        {"name": "Lothair II", "type": "person", "description": "a Frankish king"},
        {"name": "Ermengarde of Tours", "type": "person", "description": "his mother"},
    ],
    "triples": [["Lothair II", "son of", "Ermengarde of Tours"], ["Lothair II", "born in", "835"]],
}


@pytest.fixture(autouse=True)
def no_keys(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(ENV_API_KEY, raising=False)


def extractor(url: str, **overrides) -> OpenAIExtractor:
    cfg = {**DEFAULTS["triple_extract"], "backend": "openai", "base_url": url,
           "model": "test-model", "api_key_env": KEY_ENV, "timeout_s": 5.0, **overrides}
    return OpenAIExtractor(cfg)


def reply(content) -> tuple:
    """A scripted 200 whose message content is ``content`` (an object is sent as JSON text)."""
    text = content if isinstance(content, str) else json.dumps(content)
    return ("json", 200, ok_body(text))


def test_good_reply_gives_entities_triples_and_usage(server, monkeypatch):
    monkeypatch.setenv(ENV_API_KEY, "sk-runtime-key-not-for-extraction")
    server.script = [reply(GOOD)]
    out = extractor(server.url, max_completion_tokens=700).extract(PASSAGE)
    assert out == {**GOOD, "usage": {"prompt_tokens": 42, "completion_tokens": 3}}
    (request,) = server.requests
    body = request["body"]
    assert body["model"] == "test-model" and body["max_tokens"] == 700
    assert body["temperature"] == 0
    system, user = body["messages"]
    assert system == {"role": "system", "content": SYSTEM_PROMPT}
    assert user["role"] == "user" and PASSAGE in user["content"]
    # the key variable named by api_key_env is unset: no key, not the runtime's LOKG_LLM_API_KEY
    assert "Authorization" not in request["headers"]


def test_api_key_comes_from_the_named_variable(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-extract-0123456789")
    server.script = [reply(GOOD)]
    extractor(server.url).extract(PASSAGE)
    assert server.requests[0]["headers"]["Authorization"] == "Bearer sk-extract-0123456789"


def test_fenced_reply_after_prose_is_parsed(server):
    server.script = [reply("Here is the graph:\n```json\n" + json.dumps(GOOD, indent=1)
                           + "\n```\nHope this helps.")]
    out = extractor(server.url).extract(PASSAGE)
    assert out["entities"] == GOOD["entities"] and out["triples"] == GOOD["triples"]


def test_non_json_reply_is_retried_with_the_reason_and_usage_summed(server):
    server.script = [reply("Sure! Lothair II was the son of ..."), reply(GOOD)]
    out = extractor(server.url).extract(PASSAGE)
    assert out["triples"] == GOOD["triples"]
    assert out["usage"] == {"prompt_tokens": 84, "completion_tokens": 6}
    first, second = (r["body"]["messages"][1]["content"] for r in server.requests)
    assert "unusable" not in first
    assert second.startswith(first) and "is not JSON" in second


def test_always_non_json_raises_naming_the_reason(server):
    server.script = [reply("I cannot do that.")]
    with pytest.raises(ChunkExtractionError) as caught:
        extractor(server.url, retries=2).extract(PASSAGE)
    message = str(caught.value)
    assert message.startswith("reply is not JSON after 3 attempts: Expecting value"), message
    assert len(server.requests) == 3
    assert caught.value.usage == {"prompt_tokens": 126, "completion_tokens": 9}


def test_malformed_items_are_dropped_and_whitespace_normalised(server):
    content = {
        "entities": [{"name": "  Lothair\n II "}, {"name": ""}, {"type": "person"}, "Tours",
                     {"name": "Tours", "type": 3, "description": " a  city "}],
        "triples": [["Lothair II", "born in", 835], ["Lothair II", "born in"], "Lothair",
                    ["Lothair II", "  son\n of ", " Ermengarde of Tours"], ["", "r", "x"],
                    [["Lothair II"], "r", "x"], ["Lothair II", "ruled", "Lotharingia"]],
    }
    server.script = [reply(content)]
    out = extractor(server.url).extract(PASSAGE)
    assert out["entities"] == [
        {"name": "Lothair II", "type": "", "description": ""},
        {"name": "Tours", "type": "", "description": "a city"},
    ]
    assert out["triples"] == [["Lothair II", "son of", "Ermengarde of Tours"],
                              ["Lothair II", "ruled", "Lotharingia"]]
    assert len(server.requests) == 1


@pytest.mark.parametrize("content, detail", [
    ([["a", "r", "b"]], "expected a JSON object, got a list"),
    ({"entities": "Lothair II", "triples": []}, '"entities" is a str, not a list'),
    ({"entities": [], "triples": [{"s": "a", "r": "b", "o": "c"}]},
     'none of the 1 "triples" is well-formed (the first: {"s": "a"'),
])
def test_reply_failing_validation_is_retried_then_raises(server, content, detail):
    server.script = [reply(content)]
    with pytest.raises(ChunkExtractionError) as caught:
        extractor(server.url, retries=1).extract(PASSAGE)
    assert str(caught.value).startswith(f"reply fails validation after 2 attempts: {detail}")
    assert len(server.requests) == 2


def test_missing_lists_are_empty():
    assert parse_reply('{"triples": [["a", "r", "b"]]}') == ([], [["a", "r", "b"]])
    assert parse_reply('{"entities": null, "triples": []}') == ([], [])
    with pytest.raises(MalformedReply, match="Expecting value"):
        parse_reply("```json\n```")


def test_a_truncated_reply_says_so(server):
    body = ok_body('{"entities": [{"name": "Lothair')
    body["choices"][0]["finish_reason"] = "length"
    server.script = [("json", 200, body)]
    with pytest.raises(ChunkExtractionError, match="cut at max_completion_tokens=64"):
        extractor(server.url, retries=0, max_completion_tokens=64).extract(PASSAGE)


def test_server_error_is_retried_by_the_client(server):
    server.script = [("json", 500, {"error": {"message": "overloaded"}}), reply(GOOD)]
    out = extractor(server.url).extract(PASSAGE)
    assert out["triples"] == GOOD["triples"] and len(server.requests) == 2
    assert out["usage"] == {"prompt_tokens": 42, "completion_tokens": 3}


def test_server_down_is_a_chunk_error_not_a_crash():
    started = time.monotonic()
    with pytest.raises(ChunkExtractionError) as caught:
        extractor(f"http://127.0.0.1:{free_port()}/v1", retries=1).extract(PASSAGE)
    assert str(caught.value).startswith("LLM unreachable: cannot connect"), str(caught.value)
    assert caught.value.usage == {"prompt_tokens": 0, "completion_tokens": 0}
    assert time.monotonic() - started < 5


def test_http_refusal_is_a_chunk_error_without_retries(server):
    server.script = [("json", 404, {"error": {"message": "model 'test-model' not found"}})]
    with pytest.raises(ChunkExtractionError,
                       match="LLM call failed: .*HTTP 404: model 'test-model'"):
        extractor(server.url).extract(PASSAGE)
    assert len(server.requests) == 1


def test_fingerprint_follows_what_changes_the_output():
    base = extractor("http://127.0.0.1:1/v1")
    assert base.fingerprint == extractor("http://10.0.0.2:8000/v1").fingerprint
    assert base.fingerprint != extractor("http://127.0.0.1:1/v1", model="other").fingerprint
    assert base.fingerprint != extractor("http://127.0.0.1:1/v1",
                                         max_completion_tokens=99).fingerprint
    assert base.fingerprint.startswith("openai-p1-")


def test_registry_builds_it_and_bad_urls_are_stage_errors():
    cfg = {**DEFAULTS["triple_extract"], "backend": "openai", "concurrency": 7}
    built = make_extractor(cfg)
    assert isinstance(built, OpenAIExtractor) and built.name == "openai"
    assert built.concurrency == 7
    with pytest.raises(StageError, match="triple_extract: base URL has an invalid port"):
        extractor("http://127.0.0.1:99999/v1")


def test_cost_is_per_million_tokens():
    cfg = {"prompt_price": 0.15, "completion_price": 0.6}
    assert cost({"prompt_tokens": 2_000_000, "completion_tokens": 500_000}, cfg) == \
        pytest.approx(0.6)
    assert cost({}, cfg) == 0.0
