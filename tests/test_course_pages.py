"""The course server's pages as its people read them: the student's page says what to fix next, the
instructor's who needs help; both rendered on the server (Starlette's TestClient, in process: what
a reader without JavaScript, or curl, gets), and drawn by headless Chromium at 1280x800 with
screenshots (GRADER_SCREENSHOTS names a folder to keep them in; else the test's own). The class is
graded once, for real, on the emulator by the server's own worker (serve/worker.run).

ann: missing_brace.cu (a compile error), then draft.cu replaced by empty.cu before its grade
(rejected: no kernel), then guard_stops_short.cu (incorrect: a guard one short, line 13); bob:
float4_launcher.cu (correct, on the emulator: no GPU here); cy: bob's kernel with its names, spacing and
a comment changed (copied.cu, a similar pair with bob's); dee: nothing handed in.
"""

import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import SUBMISSIONS
from similarity_cases import disguise

from grader.serve import worker
from grader.serve.store import Rules, Store

EXERCISE = "bias_gelu_fused"
NO_GPU = "checked for correctness only (no GPU on this server)"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """(folder, tokens by student, upload ids by name): the class above, graded."""
    folder = tmp_path_factory.mktemp("course")
    store = Store(folder)
    store.set_setting("exercise", EXERCISE)
    people = {s: store.issue(s) for s in ("ann", "bob", "cy", "dee")}
    people["@instructor"] = store.issue("@instructor", instructor=True)
    ids = {}
    for student, name in (("ann", "missing_brace.cu"), ("bob", "float4_launcher.cu")):
        ids[name] = store.accept(student, name, (SUBMISSIONS / name).read_bytes(), Rules()).id
    copied = disguise((SUBMISSIONS / "float4_launcher.cu").read_text(), 1, reorder=False, renumber=False)
    ids["copied.cu"] = store.accept("cy", "copied.cu", copied.encode(), Rules()).id     # still correct
    worker.run(folder, worker.Grading(EXERCISE, "emulator"), once=True)        # the first wave
    first = store.accept("ann", "draft.cu", b"// a draft\n", Rules())
    second = store.accept("ann", "empty.cu", b"// nothing here yet\n", Rules())
    assert second.replaced == (first.id,)
    worker.run(folder, worker.Grading(EXERCISE, "emulator"), once=True)        # empty.cu: rejected
    ids["guard_stops_short.cu"] = store.accept("ann", "guard_stops_short.cu",
                                               (SUBMISSIONS / "guard_stops_short.cu").read_bytes(), Rules()).id
    worker.run(folder, worker.Grading(EXERCISE, "emulator"), once=True)
    store.close()
    return folder, people, ids


def client(folder: Path):
    from starlette.testclient import TestClient

    from grader.serve.app import create_app
    from grader.serve.course import Settings

    return TestClient(create_app(Settings(folder, EXERCISE, "emulator", worker=False)))


def get(c, path: str, token: str | None):
    return c.get(path, headers={"Authorization": f"Bearer {token}"} if token else {})


def text_of(html: str) -> str:
    """A page's words as a reader without a browser's script sees them (tags dropped, entities read)."""
    import html as h

    return " ".join(h.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"(?s)<(script|style)\b.*?</\1>", "", html))).split())


def test_the_students_page_says_what_to_fix_next_without_javascript(graded):
    folder, people, ids = graded
    with client(folder) as c:
        html = get(c, "/", people["ann"]).text
        words = text_of(html)
        # the latest grade first: its outcome, cause, line of the student's own file, and the fix
        latest = text_of(html.split('id="latest"', 1)[1].split("</section>", 1)[0])
        assert "incorrect" in latest and "guard_stops_short at line 13 of guard_stops_short.cu" in latest, latest
        assert "Fix: Valid columns run 0 to cols - 1: compare with < cols." in latest
        assert "rejected -> incorrect" in latest                   # what changed, as `grader history` says it
        assert f'href="/submissions/{ids["guard_stops_short.cu"]}/report"' in html
        # every attempt's row: the compile error's line and its fix too, and the replaced one said apart
        assert "compile error at line 8 of missing_brace.cu" in words
        assert "Fix this error first" in words and "replaced by a newer upload" in words
        assert "first grade" in words
        # dates: one form, a <time> in UTC the script shows in local time; no other date in the page
        stamps = re.findall(r'<time datetime="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)">(\d{4}-\d\d-\d\d \d\d:\d\d) UTC</time>', html)
        assert len(stamps) == 5 and all(iso[:10] == shown[:10] for iso, shown in stamps)
        assert not re.search(r"\d+/\d+/\d{4}|\d\d:\d\d:\d\d(?!Z)", words)
        # a correct kernel on a server without a GPU says so, in place of a fraction
        assert NO_GPU in text_of(get(c, "/", people["bob"]).text)
        # the report is the student's own file's, never the staging folder's
        owner = {"float4_launcher.cu": "bob", "copied.cu": "cy"}
        for name, upload in ids.items():
            token = people[owner.get(name, "ann")]
            report = get(c, f"/submissions/{upload}/report", token).text
            assert ".grader-serve" not in report and "wave-" not in report
            assert f"<code>{name}</code>" in report, name
            status = get(c, f"/api/submissions/{upload}", token).json()       # NaN in a result: not a 500
            assert status["result"]["submission"]["path"] == name
        assert ".grader-serve" not in html


def test_the_sign_in_page_names_this_servers_own_url(graded):
    folder, _people, _ids = graded
    with client(folder) as c:
        html = c.get("/").text
    assert "--server http://testserver</code>" in html and "--server URL" not in html


def test_the_instructors_page_says_who_needs_help(graded):
    folder, people, ids = graded
    with client(folder) as c:
        html = get(c, "/", people["@instructor"]).text
    rows = {m.group(1): text_of(m.group(2)) for m in re.finditer(r'<tr data-student="([^"]+)">(.*?)</tr>', html, re.DOTALL)}
    # ann: her latest outcome and its cause with its line; 3 graded, the replaced upload counted apart
    assert rows["ann"].startswith("ann incorrect guard_stops_short (line 13) incorrect"), rows["ann"]
    assert "3 (+1 replaced before grading)" in rows["ann"]
    assert re.search(r"\b(just now|\d+ min ago) \( ?\d{4}-\d\d-\d\d \d\d:\d\d UTC ?\)", rows["ann"]), rows["ann"]   # since the last upload
    assert rows["bob"].startswith("bob correct") and " 1 " in rows["bob"] and "replaced" not in rows["bob"]
    assert rows["cy"].startswith("cy correct") and rows["dee"].startswith("dee - ")
    assert f'href="/submissions/{ids["guard_stops_short.cu"]}/report"' in html and 'href="/students/ann"' in html
    counts = text_of(html.split('id="causes"', 1)[1].split("</p>", 1)[0])
    assert "1 guard_stops_short" in counts and "2 correct" in counts
    # who copied: bob and cy's kernels, side by side, with links to both histories
    pairs = html.split('id="pairs"', 1)[1].split("</table>", 1)[0]
    assert re.search(r'<tr><td>[01]\.\d\d</td><td><a href="/students/bob">bob</a> and <a href="/students/cy">cy</a>',
                     pairs), pairs[:500]
    assert "ann" not in pairs and 'class="sides"' in pairs


# --- in Chromium, at 1280x800 ------------------------------------------------------------------------

def screenshots_folder(tmp_path: Path) -> Path:
    keep = os.environ.get("GRADER_SCREENSHOTS")
    folder = Path(keep) if keep else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def first_screen(page, to: Path) -> dict:
    """The page at 1280x800: a screenshot of its first screen into `to`, and where its parts sit."""
    import base64

    page.browser.send("Emulation.setDeviceMetricsOverride", page.session, width=1280, height=800,
                      deviceScaleFactor=1, mobile=False)
    shot = page.browser.send("Page.captureScreenshot", page.session, format="png",
                             clip={"x": 0, "y": 0, "width": 1280, "height": 800, "scale": 1})
    to.write_bytes(base64.b64decode(shot["data"]))
    return page.js("""(function () {
      function bottom(sel) { var e = document.querySelector(sel); return e ? Math.round(e.getBoundingClientRect().bottom) : null; }
      function text(sel) { var e = document.querySelector(sel); return e ? e.innerText : null; }
      return {latest: text('#latest'), latestBottom: bottom('#latest .fix') || bottom('#latest .speed'),
              times: Array.from(document.querySelectorAll('time')).map(function (t) { return t.innerText; }),
              scroll: document.documentElement.scrollWidth, causes: text('#causes'), similarity: text('#similarity'),
              ann: text('#class tr[data-student=ann]')};
    })()""")


@pytest.mark.slow
def test_the_pages_in_chromium_at_1280x800_with_screenshots(graded, tmp_path):
    from test_serve_http import CHROMIUM, Browser, Server

    if CHROMIUM is None:
        if os.environ.get("CI"):
            raise RuntimeError("CI needs headless Chromium (apt-get install chromium)")
        pytest.skip("no Chromium here (apt-get install chromium)")
    folder, people, _ids = graded
    work = tmp_path / "course"
    shutil.copytree(folder, work, ignore=shutil.ignore_patterns(".grader-worker.lock"))
    server = Server(work)
    server.start()
    shots = screenshots_folder(tmp_path)
    browser = Browser(tmp_path / "profile")
    try:
        seen = {}
        for who, name in (("ann", "student-incorrect.png"), ("bob", "student-correct-emulator.png"),
                          ("@instructor", "instructor.png")):
            page = browser.page(server.url + "/")
            page.sign_in(people[who])
            page.until("document.readyState === 'complete' && !!document.querySelector('#attempts, #class')")
            page.until("Array.from(document.querySelectorAll('time')).every(function (t) { return t.title; })")
            seen[who] = first_screen(page, shots / name)
    finally:
        browser.close()
        server.stop()
    ann, bob, teacher = seen["ann"], seen["bob"], seen["@instructor"]
    # the student's first screen: the latest attempt's cause, its line and the fix
    assert "guard_stops_short at line 13 of guard_stops_short.cu" in ann["latest"] and "Fix:" in ann["latest"]
    assert ann["latestBottom"] is not None and ann["latestBottom"] <= 800
    assert NO_GPU in bob["latest"] and bob["latestBottom"] <= 800
    # dates localised by the script, in one form (no zone word left: the reader's own time)
    for page in seen.values():
        assert page["times"] and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", t) for t in page["times"]), page["times"]
        assert page["scroll"] <= 1280
    assert "guard_stops_short (line 13)" in teacher["ann"] and "1 guard_stops_short" in teacher["causes"]
    assert "bob and cy" in teacher["similarity"]
    assert all((shots / n).stat().st_size > 10_000 for n in ("student-incorrect.png", "student-correct-emulator.png",
                                                              "instructor.png"))
