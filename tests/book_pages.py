"""The web edition, read in Chromium as a reader meets it (issue 39).

Not collected by the README's test command: the edition is built from the executed copies that command leaves, so
`.ci/run` runs the book's own command and then this file (`pytest tests/book_pages.py`) once the lessons and benches
have run (tests/conftest.py says when), beside the rest of the suite;
$SHAPELAB_BOOK points it at another build's site folder. Every page of the site's table of contents is served over
HTTP on 127.0.0.1 and loaded at 1280 x 800; the test checks that:
- no page logs a console error, no internal link or image is broken, and no widget placeholder is left;
- each lesson's page names the commit, the PyTorch release and the device of its outputs;
- under every prompt, what the run measured ("the run measured ...", printed by the reveal) is inside a closed
  fold; the first on each page is invisible until the reader opens its fold, and visible once opened; the claims ledger and the take-home cell are not folded;
- the search page finds each lesson by a word of its title, and "mark_unbacked";
- every lesson reads on a 390 px wide phone without a sideways scroll of the page.
Screenshots land in test-artifacts/screenshots/book-*.png (look at them).
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from chromium import browser  # noqa: F401 (the fixture the pages are read with)
from shapelab.tools import book

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("SHAPELAB_BOOK", ROOT / "build" / "book" / "_build" / "html"))
SHOTS = ROOT / "test-artifacts" / "screenshots"
LESSONS = [p.stem for p in book.lessons()]
LABS = [f"labs/{p.stem}" for p in sorted((ROOT / "labs").glob("*.ipynb"))]
PAGES = ["index", *LESSONS, *LABS, "instructor"]


@pytest.fixture(scope="module")
def site():
    if not (SITE / "index.html").exists():
        pytest.fail(f"no web edition at {SITE}: build it first with `python -m shapelab.tools.book` (after the tests)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "-b", "127.0.0.1", "-d", str(SITE)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    yield base
    server.terminate()
    server.wait(timeout=10)


@pytest.fixture(scope="module")
def reader(browser, site):  # noqa: F811
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.problems = []
    page.on("console", lambda m: m.type == "error" and page.problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: page.problems.append(f"page error: {e}"))
    yield page
    page.close()


def _open(page, site: str, name: str) -> None:
    page.problems.clear()
    page.goto(f"{site}/{name}.html")
    page.wait_for_load_state("load")


@pytest.mark.parametrize("name", PAGES)
def test_every_page_loads_clean_with_its_links_and_images(reader, site, name):
    _open(reader, site, name)
    assert reader.problems == [], f"{name}.html: {reader.problems}"
    body = reader.inner_text("body")
    for placeholder in ("Loading widget", "Error displaying widget", "widget-view+json"):
        assert placeholder not in body, f"{name}.html shows a widget placeholder: {placeholder!r}"
    broken_images = reader.eval_on_selector_all("img", "imgs => imgs.filter(i => !(i.complete && i.naturalWidth > 0))"
                                                                ".map(i => i.getAttribute('src'))")
    assert broken_images == [], f"{name}.html: images that did not load: {broken_images}"
    here = (SITE / f"{name}.html").parent
    for href in reader.eval_on_selector_all("a[href]", "as => as.map(a => a.getAttribute('href'))"):
        target = urllib.parse.urlsplit(href)
        if target.scheme or target.netloc or not target.path:
            continue  # another site, a mail address, or an anchor on this page
        assert (here / urllib.parse.unquote(target.path)).resolve().exists(), f"{name}.html: broken link {href!r}"


@pytest.mark.parametrize("name", LESSONS)
def test_a_lesson_page_folds_what_answers_its_prompts(reader, site, name):
    _open(reader, site, name)
    assert re.search(r"measured by the run of commit \S+ on PyTorch \d+\.\d+\.\d+\S*, device: \w+",
                     reader.inner_text("body")), f"{name}: the page does not name its commit, release and device"
    answers = reader.locator(".cell_output", has_text="the run measured")
    count = answers.count()
    prompts = reader.locator("blockquote", has_text=re.compile(r"Predict first|Post question")).count()
    assert (count > 0) == (prompts > 0), f"{name}: {prompts} prompts but {count} outputs that print what the run measured"
    hidden = answers.evaluate_all("els => els.map(e => !!e.closest('details.hide:not([open])'))")
    assert all(hidden), f"{name}: what the run measured is shown before its fold is opened: #{hidden.index(False)}"
    if count:  # a reader opens one: it shows (each fold is the same element of the theme)
        answer = answers.first
        assert not answer.is_visible(), f"{name}: what the run measured is visible before its fold is opened"
        answer.locator("xpath=ancestor::details[1]").locator("summary").first.click()
        answer.wait_for(state="visible", timeout=5_000)
    folded_in = reader.evaluate("""() => [...document.querySelectorAll('section > h2')]
        .filter(h => /Claims ledger|In your own code/.test(h.textContent))
        .map(h => [h.textContent.trim(), h.parentElement.querySelectorAll('details.hide').length])""")
    assert folded_in and all(n == 0 for _, n in folded_in), f"{name}: a ledger or take-home section is folded: {folded_in}"
    if name == LESSONS[0] or name.startswith("02_"):
        SHOTS.mkdir(parents=True, exist_ok=True)
        reader.screenshot(path=str(SHOTS / f"book-{name}.png"))


def test_search_finds_each_lesson(reader, site):
    for name in LESSONS:
        title = (SITE / f"{name}.html").read_text().split("<title>", 1)[1].split("</title>", 1)[0]
        word = max(re.findall(r"[A-Za-z_]{4,}", title.split("·", 1)[-1].split("—")[0]), key=len)
        reader.goto(f"{site}/search.html?q={urllib.parse.quote(word)}")
        hits = reader.locator("#search-results li a")
        reader.locator("#search-results").get_by_text(re.compile("Search finished|found")).first.wait_for(timeout=15_000)
        found = [hits.nth(i).get_attribute("href") for i in range(hits.count())]
        assert any(name in (h or "") for h in found), f"searching {word!r} does not find {name}: {found}"
    reader.goto(f"{site}/search.html?q=mark_unbacked")
    reader.locator("#search-results li").first.wait_for(timeout=15_000)
    SHOTS.mkdir(parents=True, exist_ok=True)
    reader.screenshot(path=str(SHOTS / "book-search.png"))


def test_every_lesson_reads_on_a_phone(browser, site):  # noqa: F811
    phone = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        for name in LESSONS:
            phone.goto(f"{site}/{name}.html")
            phone.wait_for_load_state("load")
            wide = phone.evaluate("document.scrollingElement.scrollWidth")
            assert wide <= 390, f"{name}: the page is {wide} px wide on a 390 px phone: it scrolls sideways"
            if name == LESSONS[1]:
                SHOTS.mkdir(parents=True, exist_ok=True)
                phone.screenshot(path=str(SHOTS / "book-phone.png"))
    finally:
        phone.close()
