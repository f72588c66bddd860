"""The audit page `lokg serve` serves at /: its files (fast), and the page in a real headless
browser (slow; Debian's chromium and chromium-driver through selenium, `infra/setup.sh
--browser`): load, ask, see the answer, its path and the triples, with nothing fetched from
outside the service and no markup taken from an answer.

``LOKG_SCREENSHOT=docs/web-page.png`` makes the browser test save the README's screenshot."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from lokg.runtime.server import WEB_FILES
from lokg.testing.serving import QUESTION, serving
from lokg.testing.stores import make_store

#: An XML namespace name in app.js (createElementNS), not a resource anything fetches.
SVG_NAMESPACE = "http://www.w3.org/2000/svg"
CHROMIUM = os.environ.get("LOKG_CHROMIUM") or shutil.which("chromium")
CHROMEDRIVER = os.environ.get("LOKG_CHROMEDRIVER") or shutil.which("chromedriver")
MARKUP = '<img src="/x" onerror="window.pwned = 1">'


@pytest.fixture(scope="module")
def page_client(tmp_path_factory):
    root = tmp_path_factory.mktemp("web")
    make_store(root, build_id="b1")
    with serving(root / "store", llm_backends=("none",), poll=0.2) as client:
        yield client


# ------------------------------------------------------------------------------ fast

def test_root_serves_the_page_and_its_assets_with_their_types(page_client):
    status, head, html = page_client.call("GET", "/")
    assert status == 200 and head["content-type"] == "text/html; charset=utf-8"
    assert '<form id="ask"' in html and 'id="question"' in html
    assert "default-src 'self'" in head["content-security-policy"]
    for name, kind in WEB_FILES.items():
        if name == "index.html":
            continue
        assert f'"/static/{name}"' in html
        status, head, _ = page_client.raw("GET", f"/static/{name}")
        assert status == 200 and head["content-type"] == kind
        assert head["x-content-type-options"] == "nosniff"
    for bad in ("/static/index.html", "/static/nope.js", "/static/..%2Fserver.py"):
        assert page_client.raw("GET", bad)[0] == 404


def test_the_page_names_no_external_url():
    from importlib import resources
    for name in WEB_FILES:
        text = (resources.files("runtime") / "web" / name).read_text()
        urls = set(re.findall(r"https?://[^\s\"'`)]+", text)) - {SVG_NAMESPACE}
        urls |= set(re.findall(r"""(?:src=|href=|url\()["']?//[^\s"')]+""", text))  # //host
        assert not urls, f"{name} names {sorted(urls)}"


def test_the_page_is_open_without_the_token_but_asks_are_not(tmp_path):
    make_store(tmp_path, build_id="b1")
    with serving(tmp_path / "store", llm_backends=("none",), token="t0k") as client:
        client.token = None
        assert client.raw("GET", "/")[0] == 200
        assert client.raw("GET", "/static/app.js")[0] == 200
        assert client.ask()[0] == 401


# ------------------------------------------------------------------------------ browser

@pytest.fixture(scope="module")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (infra/setup.sh --browser)")
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("chromium and chromedriver are not installed (infra/setup.sh --browser)")
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never download a driver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1200,900", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def ask_in_page(driver, question: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait
    field = driver.find_element("id", "question")
    field.clear()
    field.send_keys(question)
    driver.execute_script("document.getElementById('result').hidden = true")
    driver.find_element("id", "submit").click()
    WebDriverWait(driver, 30).until(
        lambda d: d.find_element("id", "result").is_displayed()
        or d.find_element("id", "error").is_displayed())
    assert not driver.find_element("id", "error").is_displayed(), \
        driver.find_element("id", "error").text


def fetched_urls(driver) -> list[str]:
    return driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".concat(performance.getEntriesByType('navigation').map(e => e.name))")


@pytest.mark.slow
def test_browser_asks_and_shows_the_answer_path_and_triples(browser, page_client):
    base = f"http://127.0.0.1:{page_client.port}"
    browser.get(base + "/")
    ask_in_page(browser, QUESTION)
    find = browser.find_element
    assert "The Long Road II" in find("id", "answers").text
    assert find("id", "path").text == "retrieval"
    assert "policy lokg" in find("id", "path-detail").text
    rows = browser.find_elements("css selector", "#triples tbody tr")
    assert rows and "film.film.sequel" in rows[0].text and "verbose" in rows[0].text
    assert "knowledge" in find("id", "token-text").text and "2048" in find("id", "token-text").text
    assert browser.find_elements("css selector", "#graph svg .node.answer")
    assert browser.find_elements("css selector", "#graph svg .node.topic")
    assert not find("id", "citations-card").is_displayed()  # no citations in this store
    assert "total" in find("id", "timings").text
    assert "build: b1" in find("id", "build").text
    urls = fetched_urls(browser)
    assert any(u.endswith("/v1/ask") for u in urls)
    assert all(u.startswith(base + "/") for u in urls), urls
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    if os.environ.get("LOKG_SCREENSHOT"):  # the viewport, 1200 x 900 (the README's image)
        browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": 1200, "height": 900, "deviceScaleFactor": 1, "mobile": False})
        browser.save_screenshot(os.environ["LOKG_SCREENSHOT"])
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@pytest.mark.slow
def test_browser_renders_citations_and_never_markup_from_an_answer(browser, page_client):
    base = f"http://127.0.0.1:{page_client.port}"
    browser.get(base + "/")
    ask_in_page(browser, f"{MARKUP} Who directed the sequel of The Long Road?")
    browser.execute_script(
        "const a = JSON.parse(document.getElementById('raw').textContent);"
        "a.answers = [arguments[0]]; a.triples[0].s = arguments[0];"
        "a.citations = [{triple: arguments[0], title: 'Doc', doc_id: 'd1', chunk_id: 2,"
        " sentence_id: 3, sentence: arguments[0], score: 0.5}];"
        "show(a);", MARKUP)
    assert browser.find_element("id", "citations-card").is_displayed()
    cells = browser.find_elements("css selector", "#citations tbody td")
    assert cells[0].text == MARKUP and "Doc [d1 / 2 / 3]" in cells[1].text
    assert browser.find_element("id", "answers").text == MARKUP
    assert not browser.find_elements("css selector", "img")
    assert browser.execute_script("return window.pwned") is None
    assert all(u.startswith(base + "/") for u in fetched_urls(browser))


@pytest.mark.slow
def test_browser_shows_a_derived_answer_and_an_empty_one(browser, page_client):
    """The other outcomes the page must read: a route answer derived from the graph (its facts
    carry no granularity or line) and an answer with nothing read."""
    browser.get(f"http://127.0.0.1:{page_client.port}/")
    ask_in_page(browser, QUESTION)
    show = ("const a = JSON.parse(document.getElementById('raw').textContent);"
            "Object.assign(a, arguments[0]); show(a);")
    browser.execute_script(show, {
        "route": {"source": "derived", "chain": ["film.film.sequel"], "reason": "gate passed"},
        "triples": [{"s": "The Long Road", "r": "film.film.sequel", "o": "The Long Road II",
                     "granularity": None, "cost": 0, "line": ""}]})
    assert browser.find_element("id", "path").text == "derived"
    assert "chain film.film.sequel" in browser.find_element("id", "path-detail").text
    row = browser.find_element("css selector", "#triples tbody tr").text
    assert "derived" in row and "The Long Road | film.film.sequel | The Long Road II" in row
    browser.execute_script(show, {"answers": [], "triples": [], "status": "no_entity",
                                  "route": None, "timings": {"link": 0.1, "total": 0.2}})
    assert browser.find_element("id", "path").text == "nothing (no_entity)"
    assert "no triples read" in browser.find_element("id", "graph").text
    assert not browser.find_elements("css selector", "#triples tbody tr")
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
