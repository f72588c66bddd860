"""Several stores behind one service (`lokg serve --store NAME=ROOT …`): per-store routes,
per-store tokens on every route (the audit page's calls included), per-store metrics, the page's
store select, and hot reload of one store under load leaving the other untouched."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.load import republish, run_load
from lokg.runtime.serve_access import load_tokens
from lokg.runtime.serve_service import ServeSettings
from lokg.runtime.serve_stores import parse_stores
from lokg.runtime.server import create_app, serve_command
from lokg.testing.cli import assert_clean_error
from lokg.testing.serving import QUESTION, Client, serving, wait_for
from lokg.testing.stores import make_store

TOKENS = {"token-a": ["a"], "token-b": ["b"], "token-ops": "*"}
ASK = {"question": QUESTION, "llm": "none"}
#: Every per-store route, with a body that route accepts; `test_every_store_route_is_covered`
#: fails when the app gains a per-store route this list does not name.
STORE_ROUTES = [("POST", "/v1/stores/{name}/ask", ASK),
                ("POST", "/v1/stores/{name}/ask/batch", {"requests": [ASK]}),
                ("GET", "/v1/stores/{name}/readyz", None)]

#: The other routes, each checked below (the unnamed asks, the list, metrics, schema; open:
#: health, the readiness summary and the page).
OTHER_ROUTES = {"/v1/ask", "/v1/ask/batch", "/v1/stores", "/metrics", "/openapi.json",
                "/healthz", "/readyz", "/", "/static/{name}"}


def metric_lines(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> dict[str, Path]:
    found = {}
    for name in ("a", "b"):
        base = tmp_path_factory.mktemp(f"store-{name}")
        make_store(base, build_id=f"{name}1")
        found[name] = base / "store"
    return found


@pytest.fixture(scope="module")
def tokens_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tokens") / "tokens.json"
    path.write_text(json.dumps(TOKENS))
    return path


@pytest.fixture(scope="module")
def guarded(roots, tokens_file):
    """Two stores behind one service, each team's token reading only its own."""
    with serving(roots, tokens_file=str(tokens_file), llm_backends=("none",), poll=0.2) as c:
        c.token = None
        yield c


def called(client: Client, method: str, path: str, payload, token: str | None):
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return client.call(method, path, payload, headers)


# ------------------------------------------------------------------------------ access

@pytest.mark.parametrize("method, route, payload", STORE_ROUTES)
def test_a_token_reads_its_store_and_no_other_on_every_route(guarded, method, route, payload):
    for token, own, other in (("token-a", "a", "b"), ("token-b", "b", "a")):
        status, head, body = called(guarded, method, route.format(name=own), payload, token)
        assert status == 200, body
        status, _, body = called(guarded, method, route.format(name=other), payload, token)
        assert status == 403 and body["detail"] == f"this token may not read store {other!r}"
        assert "build_id" not in json.dumps(body)
    for name in ("a", "b"):
        assert called(guarded, method, route.format(name=name), payload, "token-ops")[0] == 200
        for token in (None, "not-a-token"):
            status, head, _ = called(guarded, method, route.format(name=name), payload, token)
            assert status == 401 and head["www-authenticate"] == "Bearer"


def test_every_store_route_is_covered(roots):
    app = create_app(ServeSettings(store="", stores=tuple((n, str(r)) for n, r in
                                                          roots.items())))
    served = {(m, r.path) for r in app.routes for m in getattr(r, "methods", ()) - {"HEAD"}}
    assert {r for r in served if r[1].startswith("/v1/stores/")} == \
        {(m, r) for m, r, _ in STORE_ROUTES}
    assert {r for _, r in served if not r.startswith("/v1/stores/")} == OTHER_ROUTES


def test_the_store_list_metrics_and_unnamed_routes_respect_the_tokens(guarded):
    status, _, body = called(guarded, "GET", "/v1/stores", None, "token-a")
    assert status == 200 and body["several"] and [s["name"] for s in body["stores"]] == ["a"]
    assert body["stores"][0]["build_id"] == "a1"
    listed = called(guarded, "GET", "/v1/stores", None, "token-ops")[2]["stores"]
    assert [s["name"] for s in listed] == ["a", "b"]
    assert called(guarded, "GET", "/v1/stores", None, None)[0] == 401
    assert called(guarded, "GET", "/metrics", None, "token-a")[0] == 403
    assert called(guarded, "GET", "/metrics", None, "token-ops")[0] == 200
    assert called(guarded, "GET", "/openapi.json", None, "token-b")[0] == 200
    status, _, body = called(guarded, "POST", "/v1/ask", ASK, "token-a")
    assert status == 400 and "/v1/stores/<name>/ask" in body["detail"]
    assert called(guarded, "POST", "/v1/ask", ASK, None)[0] == 401
    status, _, body = called(guarded, "POST", "/v1/ask/batch", {"requests": [ASK]}, "token-b")
    assert status == 400 and "name one" in body["detail"]
    assert called(guarded, "POST", "/v1/ask/batch", {"requests": [ASK]}, None)[0] == 401
    status, _, body = called(guarded, "GET", "/readyz", None, None)  # open: counts, no names
    assert status == 200 and body["ready"] and body["ready_stores"] == 2
    assert "a1" not in json.dumps(body) and "b1" not in json.dumps(body)


@pytest.mark.parametrize("token", ["token-a", "token-ops"])
def test_an_unknown_store_is_a_404_with_one_line(guarded, token):
    for method, route, payload in STORE_ROUTES:
        status, _, body = called(guarded, method, route.format(name="nope"), payload, token)
        assert status == 404 and "no store 'nope'" in body["detail"]
        assert "\n" not in body["detail"]


# ------------------------------------------------------------------------------ answers, metrics

def test_each_store_answers_from_its_own_build_and_is_counted_apart(roots):
    with serving(roots, llm_backends=("none",), poll=0.2) as c:
        for name in ("a", "b"):
            status, head, body = c.call("POST", f"/v1/stores/{name}/ask", ASK)
            assert status == 200 and body["build_id"] == head["x-lokg-build"] == f"{name}1"
            assert c.call("GET", f"/v1/stores/{name}/readyz")[2]["build_id"] == f"{name}1"
        for i in range(50):  # made-up store names add no series
            assert c.call("POST", f"/v1/stores/x{i}/ask", ASK)[0] == 404
        text = c.call("GET", "/metrics")[2]
    assert 'lokg_build_info{store="a",build_id="a1"} 1' in text
    assert 'lokg_build_info{store="b",build_id="b1"} 1' in text
    assert any('store="a",status=' in line for line in metric_lines(text, "lokg_answers_total"))
    requests = metric_lines(text, "lokg_http_requests_total")
    assert any('route="/v1/stores/{name}/ask",store="b",method="POST",status="200"' in line
               for line in requests)
    assert not any("x1" in line for line in text.splitlines())
    stores = {line.split('store="')[1].split('"')[0] for line in requests if 'store="' in line}
    assert stores == {"a", "b"}


def test_a_single_store_keeps_its_routes_and_metrics(roots):
    with serving(roots["a"], llm_backends=("none",), poll=0.2) as c:
        assert c.ask(llm="none")[2]["build_id"] == "a1"
        assert c.call("POST", "/v1/stores/default/ask", ASK)[2]["build_id"] == "a1"
        assert c.call("GET", "/v1/stores")[2] == {
            "several": False, "stores": [{"name": "default", "ready": True, "build_id": "a1"}]}
        text = c.call("GET", "/metrics")[2]
    assert 'lokg_build_info{build_id="a1"} 1' in text and 'store="' not in text


def test_hot_reload_of_one_store_under_load_leaves_the_other_untouched(tmp_path):
    roots = {}
    for name in ("a", "b"):
        make_store(tmp_path / name, build_id=f"{name}1")
        roots[name] = tmp_path / name / "store"
    reports = {}
    with serving(roots, llm_backends=("none",), poll=0.05) as c:
        url = f"http://127.0.0.1:{c.port}"

        def load(name: str, **publishing) -> None:
            reports[name] = run_load(url, [QUESTION], requests=300, concurrency=3,
                                     options={"llm": "none"}, path=f"/v1/stores/{name}/ask",
                                     **publishing)

        other = threading.Thread(target=load, args=("b",))
        other.start()
        load("a", publish=lambda: republish(roots["a"], "a2"), publish_after=100)
        other.join(timeout=120)
        text = c.call("GET", "/metrics")[2]
    assert reports["a"]["errors"] == reports["b"]["errors"] == 0, reports
    assert set(reports["a"]["builds"]) == {"a1", "a2"} and reports["a"]["published"]["flaps"] == 0
    assert reports["b"]["builds"] == {"b1": 300}
    assert 'lokg_build_reloads_total{store="b",result="ok"} 1' in text
    assert 'lokg_build_reloads_total{store="a",result="ok"} 2' in text


# ------------------------------------------------------------------------------ the page

def test_the_page_chooses_a_store_and_calls_its_routes(guarded):
    script = guarded.raw("GET", "/static/app.js")[2].decode()
    page = guarded.raw("GET", "/")[2].decode()
    assert 'id="store"' in page and '"/v1/stores"' in script
    assert '"/v1/stores/" + encodeURIComponent($("store").value) + route' in script
    assert 'storeRoute("/ask")' in script and 'storeRoute("/readyz")' in script


# ------------------------------------------------------------------------------ configuration

def test_store_options_parse_one_root_or_named_roots():
    assert parse_stores(["/srv/s"]) == ("/srv/s", ())
    assert parse_stores(["a=/srv/a", "b=s3://bk/b"]) == (None, (("a", "/srv/a"),
                                                                ("b", "s3://bk/b")))
    assert parse_stores(["./x=y"]) == ("./x=y", ())
    with pytest.raises(ValueError, match="NAME=ROOT"):
        parse_stores(["a=/srv/a", "/srv/b"])
    with pytest.raises(ValueError, match="more than once"):
        parse_stores(["a=/srv/a", "a=/srv/b"])


@pytest.mark.parametrize("content, message", [
    ("{", "not valid JSON"), ("[]", "JSON object"), ('{"t": ["zz"]}', "unknown store 'zz'"),
    ('{"t": "a"}', "list of store names"), ('{"has space": ["a"]}', "without spaces")])
def test_a_bad_tokens_file_is_one_line_naming_it_never_the_tokens(tmp_path, content, message):
    path = tmp_path / "tokens.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as err:
        load_tokens(str(path), ["a", "b"])
    assert str(path) in str(err.value) and "has space" not in str(err.value)


def test_serve_refuses_bad_store_options_and_tokens_files(roots, tmp_path):
    result = CliRunner().invoke(serve_command, ["--store", f"a={roots['a']}", "--store", "x"])
    assert_clean_error(result.output, result.exit_code, 2, "NAME=ROOT")
    result = CliRunner().invoke(serve_command, ["--store", f"a={roots['a']}", "--store",
                                                f"b={tmp_path / 'none'}"])
    assert_clean_error(result.output, result.exit_code, 1, "does not exist")
    bad = tmp_path / "tokens.json"
    bad.write_text('{"t": ["c"]}')
    result = CliRunner().invoke(serve_command, ["--store", f"a={roots['a']}",
                                                "--tokens-file", str(bad)])
    assert_clean_error(result.output, result.exit_code, 1, str(bad), "unknown store 'c'")
