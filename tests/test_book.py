"""The book (`make book`): the executed chapters as a static site, opened from disk in headless Chromium.

Every page (the landing page and one per chapter, found by name in notebooks/) loads from file://
with no console error, no failed request and no request off the disk; every relative link and
anchor resolves; the same from a static web server; chapter 03's stepper advances on a click (diagram, narration and hit rate change)
with no kernel; chapter 02 shows its plots and diagrams.

Where it fits `make test`: the book's tools are not part of the test set-up (they are pinned in
.ci/book/requirements.txt and installed by `make book`), so without them these tests skip,
saying so, and cost nothing. With them, the site is built into a temporary folder, reusing
`make book`'s execution cache (.ci/book/_build/jupyter_cache): after a `make book`, only
chapters whose code changed since are executed again. ``NANO_ENGINE_BOOK_HTML=.ci/book/_build/html``
checks an already built site instead. Screenshots of the landing page and of chapter 03's stepper
after three steps are left in the tests' temporary folders (``book-index.png``, ``book-stepper.png``).
"""

import importlib.util
import os
import re
import socket
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from test_browser import CHROMIUM_ARGS, chromium  # noqa: F401  (the same Chromium, or the same skip)

pytestmark = [pytest.mark.browser, pytest.mark.notebook, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
BUILD_TIMEOUT_S = 1500  # an empty execution cache runs every chapter (each under 2 minutes on CPU)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The built site: the one named by NANO_ENGINE_BOOK_HTML, else a fresh build (skip without the tools)."""
    given = os.environ.get("NANO_ENGINE_BOOK_HTML")
    if given:
        path = Path(given).resolve()
        assert (path / "index.html").is_file(), f"NANO_ENGINE_BOOK_HTML={given} holds no index.html (run `make book`)"
        return path
    missing = [m for m in ("sphinx", "myst_nb", "sphinx_book_theme") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"the book's tools are not installed ({', '.join(missing)}): `make book` installs "
                    ".ci/book/requirements.txt")
    out = tmp_path_factory.mktemp("book")
    start = time.monotonic()
    build = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-c", str(ROOT / ".ci" / "book"),
         "-d", str(out / "doctrees"), str(ROOT / "notebooks"), str(out / "html")],
        cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert build.returncode == 0, f"the book did not build:\n{build.stdout[-3000:]}\n{build.stderr[-5000:]}"
    print(f"book built in {time.monotonic() - start:.0f} s")
    return out / "html"


class Links(HTMLParser):
    """The href / src values and the element ids of one page."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        for name in ("href", "src"):
            if a.get(name) and not (tag == "a" and name == "src"):
                self.targets.append(a[name])


def parse(page: Path) -> Links:
    links = Links()
    links.feed(page.read_text(encoding="utf-8"))
    return links


def test_every_chapter_has_a_page_linked_from_the_landing_page(site):
    assert CHAPTERS, "no chapter notebooks found"
    hrefs = parse(site / "index.html").targets
    for name in CHAPTERS:
        assert (site / f"{name}.html").is_file(), f"{name} has no page"
        assert f"{name}.html" in hrefs, f"the landing page does not link {name}"


def test_every_internal_link_resolves(site):
    pages = sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts)
    ids = {page: parse(page).ids for page in pages}
    broken = []
    for page in pages:
        for target in parse(page).targets:
            parts = urlsplit(target)
            if parts.scheme in ("http", "https", "mailto", "data", "javascript") or parts.netloc:
                continue
            file = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not file.exists():
                broken.append(f"{page.relative_to(site)}: {target} (no such file)")
            elif parts.fragment and file.suffix == ".html" and unquote(parts.fragment) not in ids.get(file, set()):
                broken.append(f"{page.relative_to(site)}: {target} (no such anchor)")
    assert not broken, "\n".join(broken[:30])


def test_no_live_widget_and_no_remote_script(site):
    """Widgets became static HTML; nothing is loaded from a CDN; the real code links are links."""
    for page in [site / "index.html", *(site / f"{name}.html" for name in CHAPTERS)]:
        text = page.read_text(encoding="utf-8")
        assert "application/vnd.jupyter.widget-view+json" not in text, f"{page.name}: a live widget has no view here"
        assert not re.search(r"[HV]Box\(children=", text), f"{page.name}: a widget rendered as its text repr"
        remote = re.findall(r"<(?:script|link|img)[^>]+(?:src|href)=\"(https?:[^\"]+)\"", text)
        assert not remote, f"{page.name} loads {remote}"
    read = (site / "03_radix_tree.html").read_text(encoding="utf-8")
    assert re.search(r'href="https://github.com/sgl-project/sglang/blob/v[\d.]+/python/sglang/srt/mem_cache/radix_cache.py"',
                     read), "chapter 03's Read the real code does not link radix_cache.py"


@pytest.fixture
def browser(chromium):  # noqa: F811
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, timeout=30_000)
        try:
            yield b
        finally:
            b.close()


class Watched:
    """A page whose console errors, page errors, failed requests and off-disk requests are recorded."""

    def __init__(self, browser) -> None:
        self.page = browser.new_page(viewport={"width": 1300, "height": 1000})
        self.problems: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"))
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: self.problems.append(f"failed: {r.url} {r.failure}"))
        self.page.on("response", lambda r: r.status >= 400 and self.problems.append(f"{r.status}: {r.url}"))
        self.page.on("request", lambda r: r.url.startswith(("file:", "data:", "about:", "blob:", self.local))
                     or self.problems.append(f"off the disk: {r.url}"))

    local = "file:"  # or the address of the static server the page comes from

    def open(self, file: Path | str) -> None:
        self.page.goto(file if isinstance(file, str) else file.as_uri(), wait_until="load", timeout=60_000)
        self.page.wait_for_timeout(300)  # late scripts (theme, search) have run

    def close(self) -> None:
        self.page.close()


@pytest.mark.parametrize("name", ["index", *CHAPTERS])
def test_page_loads_with_no_error(site, browser, name, tmp_path):
    watched = Watched(browser)
    try:
        watched.open(site / f"{name}.html")
        assert watched.page.locator("h1").count() >= 1
        if name == "index":
            watched.page.screenshot(path=str(tmp_path / "book-index.png"), full_page=False)
            assert all(watched.page.locator(f'a[href="{c}.html"]').count() for c in CHAPTERS)
        else:
            assert watched.page.locator(".cell_output").count() > 0, f"{name}: no executed output"
        assert not watched.problems, "\n".join(watched.problems)
    finally:
        watched.close()


def test_served_by_a_static_server(site, browser):
    """The same pages from a plain static web server (Python's, on 127.0.0.1): nothing missing."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "-d", str(site)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    watched = Watched(browser)
    watched.local = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "the static server did not start"
                time.sleep(0.2)
        for name in ["index", *CHAPTERS, "search"]:
            watched.open(f"{watched.local}{name}.html")
        assert not watched.problems, "\n".join(watched.problems)
    finally:
        watched.close()
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


VISIBLE = ".nano-stepper-frame:not([hidden])"


def visible(page, stepper, part: str) -> str:
    return stepper.locator(f"{VISIBLE} .nano-stepper-{part}").inner_html()


def test_chapter_03_stepper_steps_without_a_kernel(site, browser, tmp_path):
    watched = Watched(browser)
    try:
        watched.open(site / "03_radix_tree.html")
        page = watched.page
        stepper = page.locator(".nano-stepper-static").first
        stepper.scroll_into_view_if_needed()
        frames = stepper.locator(".nano-stepper-frame").count()
        assert frames > 4, f"the stepper has {frames} frames"
        assert stepper.locator(VISIBLE).count() == 1
        assert stepper.locator(".nano-stepper-back").is_disabled()
        start = {part: visible(page, stepper, part) for part in ("narration", "diagram", "hit-rate")}
        assert "step 0 /" in start["narration"] and "no lookup yet" in start["hit-rate"]
        seen = [start]
        for i in range(1, 4):
            stepper.locator(".nano-stepper-step").click()
            now = {part: visible(page, stepper, part) for part in ("narration", "diagram", "hit-rate")}
            assert f"step {i} /" in now["narration"] and now["narration"] != seen[-1]["narration"]
            seen.append(now)
        assert any(s["diagram"] != start["diagram"] for s in seen[1:]), "three steps never changed the diagram"
        rate = seen[-1]["hit-rate"]
        assert "hit rate so far:" in rate and rate != start["hit-rate"], rate
        percent = re.search(r"\((\d+)%\)", stepper.locator(f"{VISIBLE} .nano-stepper-hit-rate").inner_text()).group(1)
        width = stepper.locator(f"{VISIBLE} .nano-hit-rate-fill").evaluate("e => e.style.width")
        assert abs(float(width.rstrip("%")) - float(percent)) < 0.51  # the bar is the rate
        assert int(stepper.locator(".nano-stepper-slider").input_value()) == 3
        stepper.screenshot(path=str(tmp_path / "book-stepper.png"))

        stepper.locator(".nano-stepper-back").click()  # Back shows frame 2 again
        assert visible(page, stepper, "narration") == seen[2]["narration"]
        stepper.locator(".nano-stepper-slider").evaluate(
            "(e, n) => { e.value = n; e.dispatchEvent(new Event('input')); }", frames - 1)
        assert f"step {frames - 1} / {frames - 1}" in visible(page, stepper, "narration")
        assert stepper.locator(".nano-stepper-step").is_disabled()
        stepper.locator(".nano-stepper-reset").click()
        assert visible(page, stepper, "narration") == start["narration"]
        assert not watched.problems, "\n".join(watched.problems)
    finally:
        watched.close()


def test_chapter_02_shows_its_plots_diagrams_and_stepper(site, browser):
    watched = Watched(browser)
    try:
        watched.open(site / "02_prefix_cache_hashed_blocks.html")
        page = watched.page
        plots = page.locator(".cell_output img")
        assert plots.count() >= 1, "chapter 02 shows no plot"
        for i in range(plots.count()):
            plots.nth(i).scroll_into_view_if_needed()
            assert plots.nth(i).evaluate("e => e.complete && e.naturalWidth > 0"), f"plot {i} did not load"
        diagrams = page.locator(".cell_output svg g.node")
        assert diagrams.count() >= 3, "chapter 02 shows no Graphviz diagram"
        stepper = page.locator(".nano-stepper-static").first
        before = visible(page, stepper, "narration")
        stepper.locator(".nano-stepper-step").click()
        assert visible(page, stepper, "narration") != before
        assert not watched.problems, "\n".join(watched.problems)
    finally:
        watched.close()
