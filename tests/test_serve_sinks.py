"""The course server's store is a sink of a grade (docs/architecture.md, "A grade's sinks"): the
worker stores each grade's documents from memory (no report folder written and read back, one
Result.to_json a grade), the upload's bytes are hashed once (when it is accepted), the stored result
names the file by the name it was uploaded under, and a status request and `grader submit --server`
hand on the stored text as it is."""

import ast
import builtins
import hashlib
import http.server
import json
import pathlib
import threading
from pathlib import Path

import grader.grade.pipeline
from grader.batch.grading import class_machine
from grader.batch.request import ClassRequest
from grader.core.outcomes import Outcome
from grader.core.results import CaseResult, Result
from grader.exercises import load_exercise
from grader.serve import worker
from grader.serve.store import DONE, Rules, Store

ROOT = Path(__file__).resolve().parent.parent
EXERCISE = "bias_gelu_fused"
GRADE_FILES = ("result.json", "report.md", "report.html")
UPLOADS = {"ann": ("mine.cu", b"// ann's kernel\n"), "bob": ("kernel v2.cu", b"// bob's kernel\n"),
           "cy": ("k.cu", b"// cy's\n" * 40)}


def _fake_grade(request, *, inputs=None, progress=None):
    """pipeline.grade stood in for: a compile error naming the file as the grade was given it (its
    held path), and a correct grade for the others."""
    path = request.path
    r = Result(exercise=request.rubric.exercise, submission={"path": str(path), "sha256": request.source.sha256},
               backend="emulator", status=Outcome.GRADED, grader_version="t", correct=True, seconds=0.1,
               cases=[CaseResult("c", [1, 1], "random", 0, True, total=1, max_abs_error=0.0, max_rel_error=0.0)])
    if path.name == "mine.cu":
        r.stop(Outcome.COMPILE_ERROR, f"{path}:3:1: error: expected ';' before '}}' token")
    return r


class _Reads:
    """Every file named result.json, report.md or report.html opened for reading while it is on."""

    def __init__(self, monkeypatch):
        self.seen: list[str] = []
        real_open, real_path_open = builtins.open, pathlib.Path.open

        def spy_open(file, mode="r", *args, **kwargs):
            self._note(file, mode)
            return real_open(file, mode, *args, **kwargs)

        def spy_path_open(path, mode="r", *args, **kwargs):
            self._note(path, mode)
            return real_path_open(path, mode, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", spy_open)
        monkeypatch.setattr(pathlib.Path, "open", spy_path_open)

    def _note(self, file, mode) -> None:
        if isinstance(file, (str, Path)) and Path(file).name in GRADE_FILES and "r" in mode:
            self.seen.append(str(file))


class _Hashes:
    """How many times each upload's bytes are hashed (hashlib.sha256 of them, or an update with them)."""

    def __init__(self, monkeypatch, uploads: list[bytes]):
        self.count = {data: 0 for data in uploads}
        real, counts = hashlib.sha256, self.count

        class Counting:
            def __init__(self, data=b"", **kwargs):
                self._h = real(data, **kwargs)
                self._seen(data)

            def _seen(self, data):
                if bytes(data) in counts:
                    counts[bytes(data)] += 1

            def update(self, data):
                self._seen(data)
                self._h.update(data)

            def __getattr__(self, name):
                return getattr(self._h, name)

        monkeypatch.setattr(hashlib, "sha256", Counting)


def test_the_worker_stores_each_grade_from_memory_serialised_once_and_hashed_once(tmp_path, monkeypatch):
    """A wave of three uploads graded by the worker: no result.json or report is opened, each Result
    is serialised once, each upload's bytes are hashed once (when accepted), and each stored result
    names the file by its uploaded name, never the worker's staging folder."""
    monkeypatch.setattr(grader.grade.pipeline, "grade", _fake_grade)
    hashes = _Hashes(monkeypatch, [data for _name, data in UPLOADS.values()])
    store = Store(tmp_path)
    ids = {student: store.accept(student, name, data, Rules()).id for student, (name, data) in UPLOADS.items()}
    machine, request = class_machine(ClassRequest(tmp_path, load_exercise(EXERCISE), "emulator", jobs=2))
    serialised = []
    to_json = Result.to_json
    monkeypatch.setattr(Result, "to_json", lambda self: serialised.append(self) or to_json(self))
    reads = _Reads(monkeypatch)
    worker.grade_wave(store, store.claim_wave(), request=request, machine=machine)
    monkeypatch.undo()

    assert reads.seen == []                                          # nothing read back from a folder
    assert len(serialised) == len(UPLOADS)                           # one to_json a grade
    assert set(hashes.count.values()) == {1}, hashes.count           # one sha256 an upload
    for student, (name, data) in UPLOADS.items():
        row = store.upload(ids[student])
        doc = json.loads(row["result"])
        assert row["state"] == DONE and doc["submission"] == {"path": name, "sha256": hashlib.sha256(data).hexdigest()}
        for text in (row["result"], store.report_html(ids[student])):
            assert ".grader-serve" not in text and "wave-" not in text
    mine = store.upload(ids["ann"])
    assert (mine["status"], mine["correct"]) == (Outcome.COMPILE_ERROR, None)
    assert json.loads(mine["result"])["message"].startswith("mine.cu:3:1: error")
    assert [(r["status"], r["correct"]) for r in map(store.upload, (ids["bob"], ids["cy"]))] == \
        [(Outcome.GRADED, 1), (Outcome.GRADED, 1)]
    store.close()


_GRADE_FILE_READS = ("read_text", "read_bytes", "open", "is_file", "exists")


def _reads_of_grade_files(tree: ast.AST) -> list[str]:
    """Each `X / "result.json"` (or report.md, report.html) and open("...result.json") in tree: a
    grade's file named in a folder, which only a read back needs in serve/."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant) \
                and node.right.value in GRADE_FILES:
            found.append(f"line {node.lineno}: / {node.right.value!r}")
        elif isinstance(node, ast.Call) and _reading(node.func) and any(
                isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.endswith(GRADE_FILES)
                for c in ast.walk(node)):
            found.append(f"line {node.lineno}: {ast.unparse(node)[:60]}")
    return found


def _reading(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id == "open") or \
        (isinstance(func, ast.Attribute) and func.attr in _GRADE_FILE_READS)


def test_no_module_of_serve_reads_a_grade_back_from_a_folder():
    """serve/ names no grade's file in a folder to read (the check finds the shapes a read back takes,
    and not a file written from a variable or a route's URL)."""
    found = {path.name: _reads_of_grade_files(ast.parse(path.read_text()))
             for path in sorted((ROOT / "grader" / "serve").glob("*.py"))}
    assert {name: lines for name, lines in found.items() if lines} == {}
    shapes = ['(folder / "result.json").read_text()', 'open(folder + "/report.md")',
              'x = [p for p in ps if (p / "report.html").is_file()]', 'Path("out/result.json").read_bytes()']
    assert all(_reads_of_grade_files(ast.parse(code)) for code in shapes)
    assert not _reads_of_grade_files(ast.parse('names = ("result.json",)\nfor n in names: (out / n).write_text(t)'))
    assert not _reads_of_grade_files(ast.parse('Route("/class/{student}/report.html", class_student_report)'))


def test_a_status_request_serves_the_stored_result_text_as_it_is(tmp_path, monkeypatch):
    """GET /api/submissions/{id}: the stored result.json text is in the body byte for byte (never
    parsed and written again), and the body is JSON whose result is that document."""
    from grader.report.files import Rendered
    from grader.serve import course as course_module
    from grader.serve.course import Course, Settings
    from grader.serve.grades import StoredGrade

    course = Course(Settings(tmp_path, EXERCISE, worker=False))
    up = course.store.accept("ann", "mine.cu", b"// k\n", Rules())
    course.store.claim_wave()
    r = Result(exercise=EXERCISE, submission={"path": "mine.cu", "sha256": "0" * 64}, backend="emulator",
               status=Outcome.COMPILE_ERROR, grader_version="t", message="mine.cu:1:1: error: nan is NaN")
    r.fraction = float("nan")                                 # a value result.json writes as NaN
    stored = StoredGrade.of(Rendered(r, load_exercise(EXERCISE)))
    assert course.store.finish(up.id, stored)

    def no_parse(*_a, **_k):
        raise AssertionError("the stored result was parsed again")

    monkeypatch.setattr(course_module.json, "loads", no_parse)
    body = course.status_json(course.store.upload(up.id))
    monkeypatch.undo()
    assert stored.result in body
    doc = json.loads(body)
    assert doc["state"] == DONE and doc["file"] == "mine.cu" and doc["result"]["message"] == r.message
    course.store.close()


def test_submit_server_returns_the_stored_result_as_it_is(tmp_path):
    """`grader submit --server`'s Result is the stored document, unrenamed: a file of another folder
    (or a name inside the message) is not rewritten into the server's result."""
    from grader.serve.client import submit_remote

    stored = Result(exercise=EXERCISE, submission={"path": "kernel.cu", "sha256": "1" * 64}, backend="emulator",
                    status=Outcome.COMPILE_ERROR, grader_version="t",
                    message="kernel.cu:2:1: error: my_kernel.cu and kernel.cu differ").to_json()

    class Course(http.server.BaseHTTPRequestHandler):
        def _send(self, body: bytes, kind: str = "application/json", status: int = 200):
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self._send(json.dumps({"id": "u1", "place": 1, "late": False}).encode(), status=202)

        def do_GET(self):
            if self.path.endswith("/events"):
                self._send(b'event: done\ndata: {"state": "done"}\n\n', "text/event-stream")
            else:
                self._send(json.dumps({"id": "u1", "state": "done", "result": stored}).encode())

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Course)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    mine = tmp_path / "src" / "kernel.cu"
    mine.parent.mkdir()
    mine.write_text("__global__ void k() {}\n")
    try:
        got = submit_remote(mine, server=f"http://127.0.0.1:{httpd.server_address[1]}", token="t", exercise=None,
                            progress=None)
    finally:
        httpd.shutdown()
    assert got.to_json() == stored


def test_the_export_writes_the_stored_documents_and_gradescope_from_the_stored_report(tmp_path):
    """`grader serve export`: each student's result.json and reports are the store's texts, and their
    Gradescope file's output is the stored report.md (not a report rendered again from the result)."""
    from grader.report.files import Rendered
    from grader.serve.export import export_class
    from grader.serve.grades import StoredGrade

    store = Store(tmp_path)
    store.set_setting("exercise", EXERCISE)
    up = store.accept("ann", "mine.cu", b"// k\n", Rules())
    store.claim_wave()
    r = Result(exercise=EXERCISE, submission={"path": "mine.cu", "sha256": "0" * 64}, backend="emulator",
               status=Outcome.COMPILE_ERROR, grader_version="t", message="mine.cu:1:1: error: expected ';'")
    stored = StoredGrade.of(Rendered(r, load_exercise(EXERCISE)))
    stored = StoredGrade(stored.result, stored.report_md + "\nthe stored report's own last line\n", stored.report_html,
                         stored.status, stored.correct, stored.fraction, stored.tier)
    assert store.finish(up.id, stored)
    store.close()
    out = tmp_path / "out"
    export_class(tmp_path, out=out)
    assert (out / "ann" / "result.json").read_text() == stored.result
    assert (out / "ann" / "report.md").read_text() == stored.report_md
    output = json.loads((out / "ann" / "gradescope.json").read_text())["output"]
    assert output.rstrip().endswith("the stored report's own last line")
