"""LLM backends against a real loopback HTTP server that plays an OpenAI-compatible endpoint.

Every timing bound here is the client's own promise (``max_call_seconds``) plus a little slack
for a busy machine; timeouts are tenths of a second so the whole file runs in a few seconds.
"""

from __future__ import annotations

import json
import time

import pytest

from lokg.runtime.llm import (
    BACKENDS,
    LLM,
    Completion,
    LLMConfigError,
    LLMError,
    available_backends,
    make_llm,
    register_backend,
)
from lokg.runtime.llm.none import NoLLM
from lokg.runtime.llm.openai import ENV_API_KEY, ENV_BASE_URL, ENV_MODEL, OpenAICompatible
from lokg.runtime.tokens import count_tokens
from lokg.testing.http_fakes import ok_body
from lokg.testing.serving import free_port

SLACK = 0.5  # seconds of scheduling slack on a loaded 2-core machine
SECRET = "sk-test-0123456789abcdef"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in (ENV_BASE_URL, ENV_MODEL, ENV_API_KEY):
        monkeypatch.delenv(var, raising=False)


def client(server_or_url, **options) -> OpenAICompatible:
    url = server_or_url if isinstance(server_or_url, str) else server_or_url.url
    settings = dict(model="test-model", timeout=1.0, retries=2, backoff=0.01, max_backoff=0.05,
                    seed=0)
    settings.update(options)
    return OpenAICompatible(base_url=url, **settings)


# --------------------------------------------------------------------------------------------
# successful calls


def test_answer_with_usage(server):
    server.script = [("json", 200, ok_body("Paris\nLyon", model="served-model"))]
    llm = client(server)
    out = llm.complete("Knowledge:\nQuestion: capital?", max_tokens=16, system="Be brief.")
    assert isinstance(out, Completion)
    assert out.text == "Paris\nLyon"
    assert (out.prompt_tokens, out.completion_tokens) == (42, 3)
    assert out.usage_from_server and out.attempts == 1 and out.model == "served-model"
    assert out.finish_reason == "stop" and out.latency_ms > 0
    (request,) = server.requests
    assert request["path"] == "/v1/chat/completions"
    body = request["body"]
    assert body["model"] == "test-model" and body["max_tokens"] == 16
    assert body["temperature"] == 0 and body["stream"] is False
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Knowledge:\nQuestion: capital?"},
    ]
    assert request["headers"]["Content-Type"] == "application/json"
    assert "Authorization" not in request["headers"]
    assert json.loads(json.dumps(out.to_dict()))["attempts"] == 1


def test_usage_absent_is_counted_with_cl100k(server):
    server.script = [("json", 200, ok_body("Barack Obama", usage=False))]
    out = client(server).complete("Who was president?", max_tokens=8, system="Answer.")
    assert not out.usage_from_server
    assert out.prompt_tokens == count_tokens("Answer.") + count_tokens("Who was president?")
    assert out.completion_tokens == count_tokens("Barack Obama")


def test_partial_or_invalid_usage_is_counted(server):
    body = ok_body("Paris")
    body["usage"] = {"prompt_tokens": 7, "completion_tokens": "many"}
    server.script = [("json", 200, body)]
    out = client(server).complete("q", max_tokens=8)
    assert out.prompt_tokens == 7 and out.completion_tokens == count_tokens("Paris")
    assert not out.usage_from_server


def test_legacy_text_choice_and_null_content(server):
    server.script = [("json", 200, {"choices": [{"text": "Rome"}]}),
                     ("json", 200, {"choices": [{"message": {"content": None}}]})]
    llm = client(server)
    assert llm.complete("q", max_tokens=4).text == "Rome"
    empty = llm.complete("q", max_tokens=4)
    assert empty.text == "" and empty.model == "test-model"


def test_no_system_message_when_empty(server):
    server.script = [("json", 200, ok_body())]
    client(server).complete("just the user", max_tokens=4)
    assert server.requests[0]["body"]["messages"] == [{"role": "user", "content": "just the user"}]


# --------------------------------------------------------------------------------------------
# retries


def test_503_then_200_retries_once(server):
    server.script = [("json", 503, {"error": {"message": "loading model"}}),
                     ("json", 200, ok_body("Paris"))]
    out = client(server).complete("q", max_tokens=4)
    assert out.text == "Paris" and out.attempts == 2 and len(server.requests) == 2


def test_connection_dropped_then_200_retries(server):
    server.script = [("close",), ("json", 200, ok_body("Paris"))]
    out = client(server).complete("q", max_tokens=4)
    assert out.attempts == 2 and out.text == "Paris"


def test_truncated_body_is_a_connection_error_and_retried(server):
    server.script = [("truncate",), ("json", 200, ok_body("Paris"))]
    out = client(server).complete("q", max_tokens=4)
    assert out.attempts == 2 and out.text == "Paris"


def test_429_backs_off_before_retrying(server):
    server.script = [("json", 429, {"error": {"message": "slow down"}}),
                     ("json", 200, ok_body())]
    llm = client(server, backoff=0.2, max_backoff=1.0, jitter=0.0)
    out = llm.complete("q", max_tokens=4)
    assert out.attempts == 2
    gap = server.requests[1]["time"] - server.requests[0]["time"]
    assert gap >= 0.2 - 0.01


def test_429_retry_after_is_honoured(server):
    server.script = [("json", 429, {"error": "rate limited"}, {"Retry-After": "0.3"}),
                     ("json", 200, ok_body())]
    out = client(server, backoff=0.01, max_backoff=1.0).complete("q", max_tokens=4)
    assert out.attempts == 2
    assert server.requests[1]["time"] - server.requests[0]["time"] >= 0.3 - 0.01


def test_429_retry_after_beyond_max_backoff_gives_up_at_once(server):
    server.script = [("json", 429, {"error": "come back tomorrow"}, {"Retry-After": "3600"})]
    started = time.monotonic()
    with pytest.raises(LLMError) as info:
        client(server, max_backoff=1.0).complete("q", max_tokens=4)
    assert time.monotonic() - started < SLACK
    err = info.value
    assert err.status == 429 and err.attempts == 1 and len(server.requests) == 1
    assert "3600" in str(err) and "max_backoff" in str(err)


def test_5xx_exhausts_retries(server):
    server.script = [("json", 500, {"error": {"message": "boom"}})]
    with pytest.raises(LLMError) as info:
        client(server, retries=3).complete("q", max_tokens=4)
    assert info.value.kind == "http" and info.value.status == 500
    assert info.value.attempts == 4 and len(server.requests) == 4
    assert "boom" in str(info.value)


def test_400_is_not_retried(server):
    server.script = [("json", 400, {"error": {"message": "max_tokens too large"}})]
    with pytest.raises(LLMError) as info:
        client(server).complete("q", max_tokens=4)
    err = info.value
    assert err.kind == "http" and err.status == 400 and err.attempts == 1
    assert not err.retryable and len(server.requests) == 1
    assert "max_tokens too large" in str(err)


def test_redirect_is_not_followed(server):
    server.script = [("raw", 301, b"", {"Location": "https://elsewhere/v1"})]
    with pytest.raises(LLMError, match="redirect") as info:
        client(server).complete("q", max_tokens=4)
    assert info.value.attempts == 1


# --------------------------------------------------------------------------------------------
# bounded failures


def test_connection_refused_fails_within_the_deadline():
    llm = client(f"http://127.0.0.1:{free_port()}/v1", timeout=0.2, retries=2)
    started = time.monotonic()
    with pytest.raises(LLMError) as info:
        llm.complete("q", max_tokens=4)
    elapsed = time.monotonic() - started
    assert info.value.kind == "connect" and info.value.attempts == 3
    assert "refused" in str(info.value)
    assert elapsed <= llm.max_call_seconds + SLACK


def test_hanging_server_times_out_within_the_bound(server):
    server.script = [("hang", 5.0)]
    llm = client(server, timeout=0.2, retries=1, backoff=0.01, max_backoff=0.05)
    assert llm.max_call_seconds == pytest.approx(0.2 * 2 + 0.05)
    started = time.monotonic()
    with pytest.raises(LLMError) as info:
        llm.complete("q", max_tokens=4)
    elapsed = time.monotonic() - started
    assert info.value.kind == "timeout" and info.value.attempts == 2
    assert 0.4 - 0.02 <= elapsed <= llm.max_call_seconds + SLACK


def test_trickling_server_is_cut_by_the_watchdog(server):
    server.script = [("trickle", 0.02)]  # a byte every 20 ms: socket timeouts never fire
    llm = client(server, timeout=0.25, retries=1, backoff=0.01, max_backoff=0.05)
    started = time.monotonic()
    with pytest.raises(LLMError) as info:
        llm.complete("q", max_tokens=4)
    elapsed = time.monotonic() - started
    assert info.value.kind == "timeout" and info.value.attempts == 2
    assert elapsed <= llm.max_call_seconds + SLACK


def test_total_deadline_caps_the_call(server):
    server.script = [("hang", 5.0)]
    llm = client(server, timeout=0.2, retries=10, deadline=0.3)
    assert llm.max_call_seconds == 0.3
    started = time.monotonic()
    with pytest.raises(LLMError):
        llm.complete("q", max_tokens=4)
    assert time.monotonic() - started <= 0.3 + SLACK
    assert len(server.requests) <= 2


@pytest.mark.parametrize("body, why", [
    (b"<html>Not Found</html>", "not JSON"),
    (b"", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b"{}", "no choices"),
    (b'{"choices": []}', "no choices"),
    (b'{"choices": ["x"]}', "not an object"),
    (b'{"choices": [{"index": 0}]}', "neither a message nor a text"),
    (b'{"choices": [{"message": {"content": 5}}]}', "not text"),
    (b'{"error": {"message": "model not loaded"}}', "error object"),
    (b"[" * 100_000, "not JSON"),
])
def test_garbage_is_an_error_without_retry(server, body, why):
    server.script = [("raw", 200, body)]
    with pytest.raises(LLMError, match=why) as info:
        client(server).complete("q", max_tokens=4)
    assert info.value.kind == "malformed" and info.value.attempts == 1
    assert len(server.requests) == 1


def test_oversized_response_is_refused(server):
    server.script = [("json", 200, ok_body("x" * 5000))]
    with pytest.raises(LLMError, match="exceeds"):
        client(server, max_response_bytes=1000).complete("q", max_tokens=4)
    assert len(server.requests) == 1


# --------------------------------------------------------------------------------------------
# configuration and the key


def test_authorization_header_only_with_a_key(server, monkeypatch):
    server.script = [("json", 200, ok_body())]
    client(server).complete("q", max_tokens=4)
    client(server, api_key="").complete("q", max_tokens=4)  # empty = unset
    client(server, api_key=SECRET).complete("q", max_tokens=4)
    monkeypatch.setenv(ENV_API_KEY, "sk-from-env-xyz")
    client(server).complete("q", max_tokens=4)
    auth = [r["headers"].get("Authorization") for r in server.requests]
    assert auth == [None, None, f"Bearer {SECRET}", "Bearer sk-from-env-xyz"]


def test_key_never_leaks_into_repr_or_errors(server, caplog):
    server.script = [("json", 503, {"error": {"message": f"bad key {SECRET}"}}),
                     ("json", 401, {"error": {"message": f"invalid key {SECRET}"}})]
    llm = client(server, api_key=SECRET)
    assert SECRET not in repr(llm)
    with caplog.at_level("DEBUG", logger="lokg.llm"), pytest.raises(LLMError) as info:
        llm.complete("q", max_tokens=4)
    assert info.value.status == 401 and SECRET not in str(info.value)
    assert "***" in str(info.value)
    assert SECRET not in caplog.text and "retrying" in caplog.text


def test_settings_from_the_environment(server, monkeypatch):
    server.script = [("json", 200, ok_body())]
    monkeypatch.setenv(ENV_BASE_URL, server.url + "/")
    monkeypatch.setenv(ENV_MODEL, "env-model")
    llm = make_llm("openai", timeout=1.0)
    assert llm.url == server.url + "/chat/completions"
    llm.complete("q", max_tokens=4)
    assert server.requests[0]["body"]["model"] == "env-model"
    # a full endpoint URL is accepted as the base URL too
    assert client(server.url + "/chat/completions").url == server.url + "/chat/completions"


@pytest.mark.parametrize("options, match", [
    ({"model": "m"}, ENV_BASE_URL),
    ({"base_url": "http://127.0.0.1:1/v1"}, ENV_MODEL),
    ({"base_url": "ftp://host/v1", "model": "m"}, "http"),
    ({"base_url": "http:///v1", "model": "m"}, "http"),
    ({"base_url": "http://127.0.0.1:99999/v1", "model": "m"}, "port"),
    ({"base_url": "http://u:p@host/v1", "model": "m"}, "credentials"),
    ({"base_url": "http://h/v1", "model": "m", "timeout": 0}, "timeout"),
    ({"base_url": "http://h/v1", "model": "m", "timeout": float("inf")}, "timeout"),
    ({"base_url": "http://h/v1", "model": "m", "retries": -1}, "retries"),
    ({"base_url": "http://h/v1", "model": "m", "retries": 1000}, "retries"),
    ({"base_url": "http://h/v1", "model": "m", "jitter": 2}, "jitter"),
    ({"base_url": "http://h/v1", "model": "m", "backoff": "soon"}, "backoff"),
])
def test_bad_configuration_is_a_clear_error(options, match):
    with pytest.raises(LLMConfigError, match=match) as info:
        OpenAICompatible(**options)
    assert isinstance(info.value, LLMError) and isinstance(info.value, ValueError)


def test_bad_max_tokens(server):
    llm = client(server)
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(LLMConfigError, match="max_tokens"):
            llm.complete("q", max_tokens=bad)
    assert server.requests == []


def test_jitter_is_seeded_and_bounded():
    a = client("http://127.0.0.1:1/v1", backoff=0.1, max_backoff=0.5, jitter=0.5, seed=7)
    b = client("http://127.0.0.1:1/v1", backoff=0.1, max_backoff=0.5, jitter=0.5, seed=7)
    delays = [a.retry_delay(i) for i in range(6)]
    assert delays == [b.retry_delay(i) for i in range(6)]
    for i, d in enumerate(delays):
        assert min(0.5, 0.1 * 2 ** i) <= d <= 0.5
    assert a.retry_delay(0, retry_after=0.4) >= 0.4
    assert a.retry_delay(0, retry_after=0.6) is None


# --------------------------------------------------------------------------------------------
# none and the factory


def test_no_llm_makes_no_call():
    llm = make_llm("none")
    assert isinstance(llm, NoLLM) and isinstance(llm, LLM)
    assert llm.name == "none" and llm.calls_model is False
    out = llm.complete("anything", max_tokens=4)
    assert out.text == "" and out.attempts == 0 and out.prompt_tokens == 0


def test_factory_names_and_errors(server):
    assert {"openai", "none"} <= set(available_backends())
    llm = make_llm(" OpenAI ", base_url=server.url, model="m")
    assert isinstance(llm, OpenAICompatible) and isinstance(llm, LLM) and llm.calls_model
    with pytest.raises(LLMConfigError, match="unknown LLM backend 'gpt'.*none.*openai"):
        make_llm("gpt")
    with pytest.raises(LLMConfigError, match="bad options"):
        make_llm("none", model="x")
    with pytest.raises(LLMConfigError, match="bad options"):
        make_llm("openai", base_url=server.url, model="m", colour="blue")


def test_register_backend(monkeypatch):
    monkeypatch.setattr("lokg.runtime.llm.base.BACKENDS", dict(BACKENDS))

    class Echo(NoLLM):
        pass

    register_backend("echo", Echo)
    assert isinstance(make_llm("echo"), Echo)
    with pytest.raises(ValueError, match="already registered"):
        register_backend("echo", NoLLM)
    register_backend("echo", NoLLM, replace=True)
    assert type(make_llm("ECHO")) is NoLLM
    assert "local" in available_backends()  # the embedded default, imported lazily


def test_local_model_threads_come_from_the_environment(monkeypatch):
    from lokg.runtime.llm import local as local_llm

    monkeypatch.setenv(local_llm.ENV_THREADS, "1")
    assert local_llm.default_threads() == 1
    monkeypatch.setenv(local_llm.ENV_THREADS, "two")
    with pytest.raises(LLMConfigError, match="LOKG_LOCAL_THREADS='two'"):
        local_llm.default_threads()
    monkeypatch.delenv(local_llm.ENV_THREADS)
    assert 1 <= local_llm.default_threads() <= 4


def _local_engine_or_skip() -> str:
    from lokg.runtime.llm import local as local_llm

    try:
        return local_llm.engine_name()
    except LLMConfigError as exc:
        pytest.skip(str(exc))


def test_the_local_engine_comes_from_the_environment(monkeypatch):
    from lokg.runtime.llm import local as local_llm

    monkeypatch.setenv(local_llm.ENV_ENGINE, "vllm")
    with pytest.raises(LLMConfigError, match="LOKG_LOCAL_ENGINE='vllm'"):
        local_llm.engine_name()
    monkeypatch.setenv(local_llm.ENV_ENGINE, "llama_cpp")
    assert local_llm.engine_name() == "llama_cpp"


def test_the_choice_grammar_escapes_and_refuses_no_choice():
    from lokg.runtime.llm.local import _choice_grammar

    assert _choice_grammar(['a"b', "c\\d", "a\"b", ""]) == 'root ::= "a\\"b" | "c\\\\d"'
    with pytest.raises(LLMError, match="no non-empty choice"):
        _choice_grammar([""])


def test_the_local_model_stops_at_its_timeout():
    """The deadline is checked on every streamed token, through either binding's stream."""
    _local_engine_or_skip()
    from lokg.runtime.llm.local import LocalLlama

    with pytest.raises(LLMError, match="timeout") as err:
        LocalLlama(threads=1, timeout=1e-6).complete("Count to fifty.", max_tokens=64)
    assert err.value.kind == "timeout"


def test_the_local_models_grammar_allows_only_the_choices():
    """The real SmolLM2 through llama.cpp, a forced choice among awkward names (quotes,
    backslashes, non-ASCII): whatever it prefers, it writes exactly one of them."""
    _local_engine_or_skip()
    from lokg.runtime.llm.local import LocalLlama

    choices = ['Paris', 'Saint-Étienne', 'The "Big" Apple', 'C:\\Temp', 'Rome']
    reply = LocalLlama(threads=1).complete(
        "Knowledge:\nFrance | capital | Paris\nQuestion: What is the capital of France?",
        system="Reply with exactly one of: " + "; ".join(choices), max_tokens=16,
        choices=choices)
    assert reply.text in choices


def test_the_local_model_writes_the_feedback_json_shape_under_its_grammar():
    """runtime/feedback_llm.py's GBNF grammar through the real SmolLM2: the reply parses as
    the sub-question list whatever the model makes of the question (it cannot write prose)."""
    _local_engine_or_skip()
    from lokg.runtime.feedback_llm import GRAMMAR, SYSTEM, parse
    from lokg.runtime.llm.local import LocalLlama

    local = LocalLlama(threads=1)
    with pytest.raises(LLMError, match="not both"):
        local.complete("x", max_tokens=4, choices=["a"], grammar=GRAMMAR)
    reply = local.complete("Question: Who is the sibling of the performer of Decade?\n"
                           "Answer: Neil Young\nContext:\nDecade by Neil Young\nJSON:",
                           system=SYSTEM, max_tokens=256, grammar=GRAMMAR)
    assert parse(reply.text)[1] == ""
