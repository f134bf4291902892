"""A real course server (`grader serve`: uvicorn in a subprocess on 127.0.0.1, a real SQLite file,
its grading worker on the emulator) driven over HTTP: tokens that see only their own uploads; the
cap and the size limit; the result.json a local grade writes, from `submit_remote`; a `kill -9` of
the server mid-grade and a restart losing nothing and grading nothing twice; tokens never in the
server's log; the pages in headless Chromium (the token form, an upload with live progress, the
instructor's live table), driven through the DevTools protocol over a pipe.

Each server is stopped by its process id in the fixture's finalizer, and runs under `timeout` so
that it ends by itself if a test run is killed. Grades are few and cheap (compile_error.cu builds
in about 2 s; one correct kernel)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import SUBMISSIONS, Launched, free_port

pytestmark = pytest.mark.slow

EXERCISE = "bias_gelu_fused"
CHEAP = SUBMISSIONS / "compile_error.cu"
CORRECT = SUBMISSIONS / "float4_launcher.cu"
class Server:
    def __init__(self, folder: Path, *options: str):
        self.folder, self.options, self.port = folder, options, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "server.log"
        self.launched = self.proc = None

    def start(self) -> "Server":
        self.launched = Launched([sys.executable, "-m", "grader", "serve", str(self.folder), "--exercise", EXERCISE,
                                  "--backend", "emulator", "--port", str(self.port), *self.options],
                                 port=self.port, log=self.log)
        self.proc = self.launched.proc
        return self

    def pid(self) -> int:
        return self.launched.pid()

    def stop(self) -> None:
        if self.launched is not None:
            self.launched.stop()


def tokens(folder: Path, *students: str) -> dict[str, str]:
    roster = folder / "roster.csv"
    roster.write_text("identifier\n" + "\n".join(students) + "\n")
    out = subprocess.run([sys.executable, "-m", "grader", "serve", "tokens", str(roster), "--folder", str(folder)],
                         capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    assert lines[0] == "identifier,token"
    return dict(line.split(",", 1) for line in lines[1:])


def call(server: Server, path: str, token: str | None, *, data: bytes | None = None, headers=None):
    """(status, headers, JSON body) of one request."""
    h = dict(headers or {})
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(server.url + path, data=data, headers=h, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, json.loads(exc.read() or b"{}")


def upload(server: Server, token: str, file: Path = CHEAP, data: bytes | None = None):
    from grader.serve.client import _multipart

    body, kind = _multipart(file.name, data if data is not None else file.read_bytes(), {})
    return call(server, "/api/submissions", token, data=body, headers={"Content-Type": kind})


def wait_done(server: Server, token: str, upload_id: str, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, _h, doc = call(server, f"/api/submissions/{upload_id}", token)
        assert status == 200, doc
        if doc["state"] == "done":
            return doc
        time.sleep(0.3)
    raise AssertionError(f"{upload_id} not graded in {timeout} s: {doc}\n" + server.log.read_text()[-3000:])


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    folder = tmp_path_factory.mktemp("course")
    people = tokens(folder, "ann", "bob", "cy", "dee")
    server = Server(folder, "--per-hour", "3", "--max-kb", "64", "--leaderboard").start()
    yield server, people
    server.stop()


def test_each_students_token_sees_only_their_own_uploads(course):
    server, people = course
    status, _h, ann = upload(server, people["ann"])
    assert status == 202 and len(ann["id"]) >= 16
    _s, _h, ann2 = upload(server, people["bob"])
    assert ann2["id"] != ann["id"]
    for path in (f"/api/submissions/{ann['id']}", f"/api/submissions/{ann['id']}/events"):
        assert call(server, path, people["bob"])[0] == 404          # another's id: as if it did not exist
        assert call(server, path, None)[0] == 401
        assert call(server, path, "not-a-token")[0] == 401
    other = ann["id"][:-1] + ("y" if ann["id"].endswith("x") else "x")       # an id one letter off, never ann's own
    assert call(server, "/api/submissions/" + other, people["ann"])[0] == 404
    doc = wait_done(server, people["ann"], ann["id"])
    assert doc["result"]["status"] == "compile_error" and doc["student"] == "ann"
    assert call(server, f"/api/submissions/{ann['id']}", people["@instructor"])[0] == 200     # the instructor sees all
    assert call(server, "/api/class", people["ann"])[0] == 403
    assert call(server, f"/submissions/{ann['id']}/report", people["bob"])[0] == 404


def test_the_hourly_cap_and_the_size_limit(course):
    server, people = course
    codes = [upload(server, people["cy"])[0] for _ in range(3)]
    status, headers, doc = upload(server, people["cy"])
    assert codes == [202, 202, 202] and status == 429
    assert 3500 < int(headers["Retry-After"]) <= 3600 and "upload again in" in doc["error"]
    status, _h, doc = upload(server, people["dee"], data=b"/*" + b"x" * 70 * 1024 + b"*/")
    assert status == 413 and "65536" in doc["error"]


def test_no_token_reaches_the_servers_log(course):
    server, people = course
    call(server, "/api/class", people["@instructor"])
    call(server, "/api/submissions/nope", people["ann"])
    log = server.log.read_text()
    assert '"GET /api/class HTTP/1.1" 200' in log           # the access log is on
    assert not any(t in log for t in people.values())


def comparable(doc: dict) -> dict:
    """A result.json minus what differs from one run of the same file to the next: the wall times
    (seconds, phases, the build's times, the sandbox's set-up times: its keys in _ms and _s), the
    memory measured (the sandbox's keys in _mib, and host_memory_how, which says the cap it set from
    what the child held), the emulator's threads (the cores shared among the
    grades in flight then: sandbox.emulator_threads, and the CPU seconds the child's limit allows for
    them: sandbox.limits.cpu), and where the file lay (submission.path)."""
    doc = json.loads(json.dumps(doc))
    doc.pop("seconds"), doc.pop("phases")
    doc["submission"].pop("path")
    for key in ("seconds", "cached", "compile_s", "link_s"):
        (doc.get("build") or {}).pop(key, None)
    sandbox = doc.get("sandbox") or {}
    for key in [k for k in sandbox if k.endswith(("_ms", "_s", "_mib")) or k == "emulator_threads"]:
        sandbox.pop(key)
    (sandbox.get("limits") or {}).pop("cpu", None)
    sandbox.pop("host_memory_how", None)
    return doc


def differences(a, b, at: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{at}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{at}[{i}]")]
    return [] if a == b else [f"{at}: {a!r} != {b!r}"]


def test_submit_remote_returns_the_result_json_a_local_grade_writes(course, tmp_path):
    from grader.exercises import load_exercise
    from grader.grade.pipeline import grade_submission
    from grader.serve.client import ServerRefused, submit_remote

    server, people = course
    said = []
    remote = submit_remote(CORRECT, server=server.url, token=people["bob"], exercise=None, progress=said.append)
    assert said[0].startswith("queued: ") and said[0].endswith(" in line")
    assert "building" in said and "checking" in said
    stored = server.folder / "grader.sqlite"
    import sqlite3

    with sqlite3.connect(stored) as db:
        (text,) = db.execute("SELECT result FROM uploads WHERE student = 'bob' AND state = 'done' "
                             "ORDER BY seq DESC LIMIT 1").fetchone()
    stored_doc, remote_doc = json.loads(text), remote.to_json()
    assert stored_doc["submission"]["path"] == CORRECT.name        # the name it was uploaded under, no staging path
    assert remote_doc == stored_doc                                # as the server stored it, nothing renamed
    local = grade_submission(CORRECT, rubric=load_exercise(EXERCISE), backend="emulator")
    mine, theirs = comparable(remote.to_json()), comparable(local.to_json())
    assert remote.correct and mine == theirs, differences(mine, theirs)
    with pytest.raises(ServerRefused, match="GRADER_TOKEN"):
        submit_remote(CHEAP, server=server.url, token="wrong", exercise=None, progress=None)


def test_submit_remote_says_how_to_fix_an_unreachable_server():
    from grader.serve.client import ServerUnreachable, submit_remote

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerUnreachable, match=f"cannot reach the course server at {url}"):
        submit_remote(CHEAP, server=url, token="t", exercise=None, progress=None)


def test_kill_9_mid_grade_then_a_restart_grades_every_upload_once(tmp_path):
    people = tokens(tmp_path, "s1", "s2", "s3")
    server = Server(tmp_path, "--jobs", "1").start()
    try:
        ids = {s: upload(server, people[s])[2]["id"] for s in ("s1", "s2", "s3")}
        first = wait_done(server, people["s1"], ids["s1"])        # one stored; then kill while the next grades
        deadline = time.monotonic() + 60
        while call(server, f"/api/submissions/{ids['s2']}", people["s2"])[2]["state"] != "grading":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        worker = int((tmp_path / ".grader-worker.lock").read_text().split()[1])
        os.kill(server.pid(), signal.SIGKILL)
        deadline = time.monotonic() + 60                                    # a hang's guard
        while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not Path(f"/proc/{worker}").exists(), "the grading worker outlived the server"
        server.proc.wait(timeout=10)
        server.start()
        docs = {s: wait_done(server, people[s], i) for s, i in ids.items()}
    finally:
        server.stop()
    assert docs["s1"]["result"] == first["result"]               # not graded again
    import sqlite3

    with sqlite3.connect(tmp_path / "grader.sqlite") as db:
        rows = db.execute("SELECT state, tries, finished FROM uploads ORDER BY seq").fetchall()
        done_events = db.execute("SELECT upload, COUNT(*) FROM events WHERE kind = 'done' GROUP BY upload").fetchall()
    assert [r[0] for r in rows] == ["done"] * 3
    assert rows[0][2] == first_finished(tmp_path, ids["s1"]) and all(n == 1 for _u, n in done_events)
    assert len(done_events) == 3


def test_kill_9_with_an_upload_in_flight_and_another_queued_grades_both_in_order(tmp_path):
    """ann's first upload is being graded, her second waits behind it, and `grader submit --server`
    waits on the first: `kill -9` of the server, then a restart. Both are graded, the first before
    the second, each once; the waiting client says the upload was received and will be graded, and
    ends with the first one's grade (not "cannot reach the course server ... check the URL")."""
    people = tokens(tmp_path, "ann")
    server = Server(tmp_path, "--jobs", "1").start()
    env = {**os.environ, "GRADER_TOKEN": people["ann"], "COLUMNS": "80"}
    waiting = subprocess.Popen([sys.executable, "-m", "grader", "submit", str(CORRECT), "--server", server.url,
                                "--report-dir", str(tmp_path / "report")], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:                         # the client's upload, once it is being graded
            rows = _uploads(tmp_path)
            if rows and rows[0][1] == "grading":
                break
            assert time.monotonic() < deadline and waiting.poll() is None, waiting.stdout and rows
            time.sleep(0.05)
        first = rows[0][0]
        status, _h, queued = upload(server, people["ann"], CHEAP)
        assert status == 202 and queued["replaced"] == []
        os.kill(server.pid(), signal.SIGKILL)
        server.proc.wait(timeout=10)
        server.start()
        out, _ = waiting.communicate(timeout=300)
        docs = {i: wait_done(server, people["ann"], i) for i in (first, queued["id"])}
    finally:
        if waiting.poll() is None:
            waiting.kill()
        server.stop()
    assert waiting.returncode == 0, out                                     # float4_launcher.cu: correct
    said = " ".join(out.split())
    assert f"your upload {first} was received and will be graded" in said, out
    assert "the server is back" in said and "queued again (the grading worker restarted)" in said
    assert "check the URL" not in out
    assert docs[first]["result"]["correct"] is True and docs[queued["id"]]["result"]["status"] == "compile_error"
    rows = _uploads(tmp_path)
    assert [r[1] for r in rows] == ["done", "done"] and rows[0][2] < rows[1][2]      # the first graded first
    import sqlite3

    with sqlite3.connect(tmp_path / "grader.sqlite") as db:
        done = db.execute("SELECT upload, COUNT(*) FROM events WHERE kind = 'done' GROUP BY upload").fetchall()
    assert sorted(n for _u, n in done) == [1, 1]


def _uploads(folder: Path) -> list[tuple]:
    """(id, state, finished) of every upload, the oldest first."""
    import sqlite3

    with sqlite3.connect(folder / "grader.sqlite", timeout=30) as db:
        return db.execute("SELECT id, state, finished FROM uploads ORDER BY seq").fetchall()


def first_finished(folder: Path, upload_id: str) -> float:
    import sqlite3

    with sqlite3.connect(folder / "grader.sqlite") as db:
        return db.execute("SELECT finished FROM uploads WHERE id = ?", (upload_id,)).fetchone()[0]


def test_export_writes_the_batchs_class_files(course, tmp_path):
    server, people = course
    wait_done(server, people["ann"], upload(server, people["ann"])[2]["id"])
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "grader", "serve", "export", str(server.folder), "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for name in ("gradebook.csv", "summary.csv", "class.html", "insights.json", "junit.xml"):
        assert (out / name).is_file(), name
    rows = (out / "gradebook.csv").read_text().splitlines()
    assert rows[0].startswith("student,points") and any(r.startswith("ann,") and "compile_error" in r for r in rows)
    assert any(r.startswith("dee,0,") and "missing" in r for r in rows)       # a token, no upload
    assert json.loads((out / "ann" / "result.json").read_text())["status"] == "compile_error"
    # the same class report, live, for the instructor only; each student's link leads to the report that counts
    page = urllib.request.Request(server.url + "/class/", headers={"Authorization": f"Bearer {people['@instructor']}"})
    with urllib.request.urlopen(page, timeout=60) as r:
        html = r.read().decode()
    assert 'href="ann/report.html"' in html and "dee" in html
    report = urllib.request.Request(server.url + "/class/ann/report.html",
                                    headers={"Authorization": f"Bearer {people['@instructor']}"})
    with urllib.request.urlopen(report, timeout=60) as r:
        assert "sandbox" in r.headers["Content-Security-Policy"] and b"compile" in r.read()
    for path in ("/class/", "/class/ann/report.html"):
        req = urllib.request.Request(server.url + path, headers={"Authorization": f"Bearer {people['ann']}"})
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(req, timeout=60)


# --- the pages, in headless Chromium ----------------------------------------------------------------

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


class Browser:
    """Headless Chromium driven through the DevTools protocol over a pipe (--remote-debugging-pipe:
    it reads commands on fd 3 and answers on fd 4, each message JSON ended by a NUL)."""

    def __init__(self, profile: Path):
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()

        def fds():
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)

        self.proc = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                                      f"--user-data-dir={profile}", "about:blank"], pass_fds=(3, 4),
                                     preexec_fn=fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self.n, self.buffer = 0, b""

    def send(self, method: str, session: str | None = None, **params):
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self.buffer:
                chunk = os.read(self.from_r, 1 << 16)
                assert chunk, "Chromium ended"
                self.buffer += chunk
            raw, self.buffer = self.buffer.split(b"\0", 1)
            got = json.loads(raw)
            if got.get("id") == self.n:
                assert "error" not in got, got
                return got["result"]

    def page(self, url: str) -> "Page":
        context = self.send("Target.createBrowserContext")["browserContextId"]     # its own cookies
        target = self.send("Target.createTarget", url=url, browserContextId=context)["targetId"]
        return Page(self, self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"])

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


class Page:
    def __init__(self, browser: Browser, session: str):
        self.browser, self.session = browser, session

    def js(self, expression: str):
        got = self.browser.send("Runtime.evaluate", self.session, expression=expression, returnByValue=True,
                                awaitPromise=True)
        assert "exceptionDetails" not in got, got
        return got["result"].get("value")

    def until(self, expression: str, timeout: float = 60, every: float = 0.05, seen: list | None = None,
              done=bool):
        """The expression's value once done(value) (by default: truthy), polled every `every` s;
        seen: each distinct value on the way."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = self.js(expression)
            except AssertionError:         # the page is between documents
                value = None
            if seen is not None and value and (not seen or seen[-1] != value):
                seen.append(value)
            if done(value):
                return value
            time.sleep(every)
        raise AssertionError(f"never true: {expression}")

    def sign_in(self, token: str) -> None:
        self.until("document.readyState === 'complete' && !!document.querySelector('#login')")
        self.js(f"document.querySelector('#login input[name=token]').value = {json.dumps(token)}; "
                "document.querySelector('#login').submit(); true")


# Every change of the first row's data-state from now on, after the state it has now.
RECORD_STATES = ("(function(){var r = document.querySelector('#attempts tbody tr'); window.states = [r.getAttribute('data-state')];"
                 "new MutationObserver(function(){ window.states.push(r.getAttribute('data-state')); })"
                 ".observe(r, {attributes: true, attributeFilter: ['data-state']}); return true;})()")


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="no Chromium here (apt-get install chromium)")
def test_a_row_the_server_renders_grading_never_goes_back_in_line_but_a_restart_puts_it_there(tmp_path):
    """An upload's event stream replays its events from the first ("queued"), so a page the server
    rendered after the worker took the upload (its row "grading") met a "queued" that put the row
    back in line (the live test above saw grading, queued, building). Only the server's own "again"
    (a restarted worker) may. No grading worker here: the store's calls move the upload."""
    from test_serve_attacks import Attacked, api_upload, issue

    from grader.serve.store import Store

    people = issue(tmp_path, "ann")
    server = Attacked(tmp_path)
    browser = Browser(tmp_path / "profile")
    store = Store(tmp_path)
    try:
        upload_id = api_upload(server, people["ann"]).json()["id"]
        assert [c.id for c in store.claim_wave()] == [upload_id]          # the worker took it: grading
        page = browser.page(f"http://{server.host}/")
        page.sign_in(people["ann"])
        page.until("document.readyState === 'complete' && !!document.querySelector('#attempts tbody tr[data-id]')")
        page.js(RECORD_STATES)
        store.add_event(upload_id, "phase", {"phase": "building"})         # after the replayed "queued", on one stream
        page.until("document.querySelector('#attempts tbody tr').getAttribute('data-state')", timeout=60,
                   done=lambda v: v == "building")
        states = page.js("window.states")
        assert states[0] == "grading" and "queued" not in states, states
        assert store.requeue_stale() == [upload_id]                          # the worker restarted: back in line
        page.until("document.querySelector('#attempts tbody tr').getAttribute('data-state')", timeout=60,
                   done=lambda v: v == "queued")
    finally:
        store.close()
        browser.close()
        server.stop()


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="no Chromium here (apt-get install chromium)")
def test_the_pages_upload_show_live_progress_and_update_the_instructors_table(tmp_path):
    people = tokens(tmp_path, "ann", "bob")
    server = Server(tmp_path).start()
    browser = Browser(tmp_path / "profile")
    try:
        teacher = browser.page(server.url + "/")
        teacher.sign_in(people["@instructor"])
        teacher.until("!!document.querySelector('#class') && document.readyState === 'complete'")
        student = browser.page(server.url + "/")
        student.sign_in(people["ann"])
        student.until("!!document.querySelector('#upload') && document.readyState === 'complete'")
        assert student.js("document.cookie") == ""                          # HttpOnly: no script reads it
        source = json.dumps(CHEAP.read_text())
        student.js("window.stayed = 1; var dt = new DataTransfer(); "
                   f"dt.items.add(new File([{source}], 'mine.cu')); "
                   "document.querySelector('#upload input[type=file]').files = dt.files; "
                   "document.querySelector('#upload').requestSubmit(); true")
        phases: list = []
        state = "(function(){var r = document.querySelector('#attempts tbody tr'); return r && r.getAttribute('data-state');})()"
        student.until(state, timeout=240, seen=phases, done=lambda v: v == "done")
        assert student.js("window.stayed") == 1                              # no reload: the same page
        # in line, or already taken when the page was fetched again; then forward only (never back in line:
        # neither a page fetched before an event nor the stream's replay of the upload's first "queued")
        order = ["queued", "grading", "building", "checking", "done"]
        assert phases[0] in ("queued", "grading") and "building" in phases and phases[-1] == "done", phases
        assert [order.index(p) for p in phases] == sorted(order.index(p) for p in phases), phases
        row = student.js("(function(){var r = document.querySelector('#attempts tbody tr'); return ["
                         "r.cells[1].innerText, r.cells[2].innerText, !!r.querySelector('a[href*=report]')];})()")
        assert row == ["mine.cu", "compile_error", True]
        assert student.js("document.querySelector('#live').innerText") == "mine.cu: compile_error"
        assert student.js("document.querySelector('#best').innerText") == "compile_error"     # best so far, live
        # the instructor's table heard it without a reload
        teacher.until("(function(){var r = document.querySelector('#class tr[data-student=ann]'); "
                      "return r && r.getAttribute('data-updated') === '1' && r.cells[1].innerText === 'compile_error';})()",
                      timeout=30)
        # a stale or forged form is refused: the CSRF token is checked
        assert student.js("fetch('/upload', {method: 'POST', body: (function(){var f = new FormData(); "
                          "f.append('csrf', 'forged'); f.append('file', new File(['x'], 'x.cu')); return f;})(), "
                          "headers: {'Accept': 'application/json'}}).then(function(r){return r.status;})") == 403
    finally:
        browser.close()
        server.stop()


def test_grader_submit_server_end_to_end_writes_the_servers_result_json(course, tmp_path):
    """`grader submit FILE --server URL` (GRADER_TOKEN): the exit code of the grade, and a
    result.json in its report folder that is the document the server stored."""
    server, people = course
    env = {**os.environ, "GRADER_TOKEN": people["dee"], "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-m", "grader", "submit", str(CHEAP), "--server", server.url,
                           "--report-dir", str(tmp_path / "r")], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 3, proc.stdout + proc.stderr                  # compile_error: not gradable
    assert "queued: " in proc.stderr and "building" in proc.stderr
    import sqlite3

    with sqlite3.connect(server.folder / "grader.sqlite") as db:
        (text,) = db.execute("SELECT result FROM uploads WHERE student = 'dee' AND state = 'done' "
                             "ORDER BY seq DESC LIMIT 1").fetchone()
    written, stored_doc = json.loads((tmp_path / "r" / "result.json").read_text()), json.loads(text)
    assert stored_doc["submission"]["path"] == CHEAP.name and ".grader-serve" not in text   # the upload's own name
    assert written == stored_doc                                    # the stored document, nothing renamed
    assert all(len(line) <= 80 for line in proc.stderr.splitlines() if line.startswith("grader: queued"))


def page_text(server: Server, path: str, token: str, data: dict | None = None) -> tuple[int, str]:
    req = urllib.request.Request(server.url + path, headers={"Authorization": f"Bearer {token}"},
                                 data=urllib.parse.urlencode(data).encode() if data is not None else None)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_an_alias_is_set_through_the_pages_form_and_its_csrf_token(course):
    import re

    server, people = course
    status, html = page_text(server, "/", people["bob"])
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', html).group(1)
    assert page_text(server, "/alias", people["bob"], {"csrf": "forged", "alias": "x1"})[0] == 403
    status, html = page_text(server, "/alias", people["bob"], {"csrf": token, "alias": "<b>bob</b>"})
    assert status == 400 and "an alias is" in html and "<b>bob</b>" not in html       # refused, and escaped
    assert page_text(server, "/alias", people["bob"], {"csrf": token, "alias": "quick bob"})[0] == 200   # redirected
    status, html = page_text(server, "/leaderboard", people["ann"])
    assert status == 200 and 'id="leaderboard"' in html
    rows = {r["student"]: r for r in call(server, "/api/class", people["@instructor"])[2]["students"]}
    correct = rows.get("bob", {}).get("best") in ("correct", "gold", "silver", "below")    # only a correct grade is on it
    assert ("quick bob" in html) == correct and "bob<" not in html.replace("quick bob", "")   # the alias, never the id
