"""The course server's ASGI app (Starlette under uvicorn): the HTTP API, the web pages, the events'
fan-out, and the keeper of the grading worker (a process of its own: worker.py).

Who asks: `Authorization: Bearer TOKEN` (the API, `grader submit --server`), or, for the pages,
the same token in an HttpOnly, SameSite=Strict cookie set by the token form. A student sees only
their own uploads (another's id answers 404, as an id that does not exist does); the instructor
sees every one. The page's upload form carries a CSRF token (an HMAC of the session's token under
the store's secret), checked on every form POST; the API's POST takes a bearer token only, which
a browser never sends on its own.

The fan-out: one task reads the store's new events every FANOUT_S and puts each into the queues of
the connections watching its upload (and the instructor's class page), so many watchers cost one
query a tick, not one each.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from grader.serve.store import DONE, INSTRUCTOR, QUEUED, Accepted, Rules, Store, best, outcome_word, token_hash

COOKIE = "grader_session"
FANOUT_S = 0.1              # how often the fan-out reads new events
KEEPALIVE_S = 15.0          # a comment line on a quiet event stream, so proxies keep it open
WORKER_RESTART_S = 1.0      # the wait before a dead worker is started again
FORM_OVERHEAD = 16 * 1024   # a multipart body's bytes beyond its file's (boundaries, headers, fields)
SMALL_FORM = 8 * 1024       # the token form's, the alias form's and the sign-out's bodies at most

PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; "
            "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
# A stored report is the grader's own HTML, but it quotes a student's source and output: no script
# runs in it, nothing loads from elsewhere, and it is sandboxed (an origin of its own).
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; sandbox; frame-ancestors 'self'"
# The class report (the batch's class.html, made from the store): its own inline script sorts the
# table; nothing loads from elsewhere.
CLASS_CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'"


@dataclass(frozen=True)
class Settings:
    """What `grader serve` was asked."""

    folder: Path
    exercise: str
    backend: str = "auto"
    jobs: int | None = None
    rules: Rules = field(default_factory=Rules)
    worker: bool = True                # start (and keep) the grading worker
    leaderboard: bool = False          # the best fractions under the aliases students choose (/leaderboard)
    slurm: object | None = None        # batch/cluster.SlurmOptions: each wave graded by a Slurm job array


class Fanout:
    """New events from the store, to the queues watching them (one reader for every watcher)."""

    def __init__(self, store: Store):
        self.store = store
        self.cursor = store.last_event()
        self.uploads: dict[str, set[asyncio.Queue]] = {}
        self.everyone: set[asyncio.Queue] = set()        # the instructor's class pages

    def watch(self, upload: str | None) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue()
        (self.everyone if upload is None else self.uploads.setdefault(upload, set())).add(q)
        return q

    def unwatch(self, upload: str | None, q: asyncio.Queue) -> None:
        if upload is None:
            self.everyone.discard(q)
            return
        watchers = self.uploads.get(upload)
        if watchers is not None:
            watchers.discard(q)
            if not watchers:
                del self.uploads[upload]

    def tick(self) -> None:
        rows = self.store.events(after=self.cursor, limit=10000)
        for r in rows:
            self.cursor = r["seq"]
            for q in self.uploads.get(r["upload"], ()):
                q.put_nowait(r)
            for q in self.everyone:
                q.put_nowait(r)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(FANOUT_S)
            if self.uploads or self.everyone:
                self.tick()
            else:
                self.cursor = self.store.last_event()


class WorkerKeeper:
    """The grading worker: started, started again when it dies, ended with the server."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def command(self) -> list[str]:
        s = self.settings
        return [sys.executable, "-m", "grader.serve.worker", str(s.folder), "--exercise", s.exercise, "--backend",
                s.backend, "--parent", str(os.getpid())] + (["--jobs", str(s.jobs)] if s.jobs else []) + (
                ["--slurm", json.dumps(dataclasses.asdict(s.slurm))] if s.slurm is not None else [])

    def start(self) -> None:
        # Its own session: a Ctrl-C at the server's terminal stops the server, which then ends it.
        self.proc = subprocess.Popen(self.command(), start_new_session=True, stdin=subprocess.DEVNULL)
        self.starts += 1

    async def run(self) -> None:
        self.start()
        while True:
            await asyncio.sleep(0.5)
            if self.proc is not None and self.proc.poll() is not None:
                print(f"grader serve: the grading worker ended (exit {self.proc.returncode}); starting it again",
                      file=sys.stderr, flush=True)
                await asyncio.sleep(WORKER_RESTART_S)
                self.start()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)          # it ends its grades' children
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def create_app(settings: Settings) -> Starlette:
    from jinja2 import Environment, PackageLoader, select_autoescape

    state: dict = {}
    templates = Environment(loader=PackageLoader("grader.serve", "templates"), autoescape=select_autoescape(default=True,
                            default_for_string=True, enabled_extensions=("html", "j2")))

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        store = Store(settings.folder)
        store.set_setting("exercise", settings.exercise)
        state["store"] = store
        state["secret"] = store.setting("secret", make=lambda: os.urandom(32).hex()).encode()
        state["fanout"] = Fanout(store)
        tasks = [asyncio.create_task(state["fanout"].run())]
        keeper = WorkerKeeper(settings) if settings.worker else None
        state["keeper"] = keeper
        if keeper is not None:
            tasks.append(asyncio.create_task(keeper.run()))
        try:
            yield
        finally:
            for t in tasks:
                t.cancel()
            if keeper is not None:
                keeper.stop()
            store.close()

    def store() -> Store:
        return state["store"]

    # --- who asks -----------------------------------------------------------------------------------

    def session_token(request: Request) -> str | None:
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        return request.cookies.get(COOKIE)

    def who(request: Request, *, bearer_only: bool = False) -> tuple[str, bool] | None:
        auth = request.headers.get("authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else (None if bearer_only else
                                                                              request.cookies.get(COOKIE))
        return store().who(token) if token else None

    def csrf(request: Request) -> str:
        token = session_token(request) or ""
        return hmac.new(state["secret"], token_hash(token).encode(), hashlib.sha256).hexdigest()

    def unauthorised() -> JSONResponse:
        return JSONResponse({"error": "no valid token: send `Authorization: Bearer TOKEN` with the token your "
                                      "instructor gave you (GRADER_TOKEN for `grader submit --server`)"}, 401,
                            headers={"WWW-Authenticate": "Bearer"})

    def not_found() -> JSONResponse:
        return JSONResponse({"error": "no such submission"}, 404)

    def visible(upload_id: str, person: tuple[str, bool]):
        student, instructor = person
        return store().upload(upload_id, None if instructor else student)

    def page(name: str, status: int = 200, **context) -> HTMLResponse:
        html = templates.get_template(name).render(exercise=settings.exercise, **context)
        return HTMLResponse(html, status, headers={"Content-Security-Policy": PAGE_CSP, "X-Frame-Options": "DENY",
                                                    "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"})

    # --- uploads ------------------------------------------------------------------------------------

    async def bounded_form(request: Request, limit: int | None = None):
        """The form (multipart or urlencoded), its body read at most to limit bytes (None: the
        upload's size limit and a form's overhead); None where the body is longer."""
        limit = settings.rules.max_bytes + FORM_OVERHEAD if limit is None else limit
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            return None
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                return None
        done = False

        async def receive():
            nonlocal done
            if done:
                return {"type": "http.disconnect"}
            done = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        return await Request(request.scope, receive).form(max_files=1, max_fields=8,
                                                          max_part_size=settings.rules.max_bytes + 1)

    async def take_upload(request: Request, student: str, *, check_csrf: bool = False) -> JSONResponse:
        """The upload of a multipart form's `file`, accepted into the queue or refused; with
        check_csrf (the page's form), its CSRF token checked before anything is kept."""
        too_big = JSONResponse({"error": f"the upload is larger than this course takes ({settings.rules.max_bytes} "
                                         "bytes): send the kernel's .cu file only"}, 413)
        try:
            form = await bounded_form(request)
        except Exception as exc:  # noqa: BLE001 - a malformed body is the sender's: said, not raised
            return JSONResponse({"error": f"not a multipart form with a field `file` ({exc})"}, 400)
        if form is None:
            return too_big
        if check_csrf and not hmac.compare_digest(str(form.get("csrf", "")), csrf(request)):
            return JSONResponse({"error": "this form is stale or was not sent from the course's page: reload the "
                                          "page"}, 403)
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            return JSONResponse({"error": "no file: send the kernel as the multipart field `file`"}, 400)
        exercise = form.get("exercise")
        if exercise and exercise != settings.exercise:
            return JSONResponse({"error": f"this server grades {settings.exercise}, not {exercise}: leave out "
                                          "--exercise, or submit to the server of that exercise"}, 400)
        data = await upload.read()
        got = await asyncio.to_thread(store().accept, student, upload.filename or "kernel.cu", data, settings.rules)
        if not isinstance(got, Accepted):
            headers = {"Retry-After": str(got.retry_after_s)} if got.retry_after_s is not None else None
            return JSONResponse({"error": got.message}, got.status, headers=headers)
        return JSONResponse({"id": got.id, "place": got.place, "late": got.late, "replaced": list(got.replaced)},
                            202)

    async def api_submit(request: Request):
        person = who(request, bearer_only=True)
        if person is None:
            return unauthorised()
        if person[1]:
            return JSONResponse({"error": "the instructor's token watches the class; submit with a student's"}, 403)
        return await take_upload(request, person[0])

    async def api_status(request: Request):
        person = who(request)
        if person is None:
            return unauthorised()
        row = visible(request.path_params["id"], person)
        if row is None:
            return not_found()
        return JSONResponse(status_doc(row))

    def status_doc(row) -> dict:
        doc = {"id": row["id"], "student": row["student"], "file": row["name"], "state": row["state"],
               "late": bool(row["late"]), "received": row["received"], "tries": row["tries"]}
        if row["state"] == QUEUED:
            doc["place"] = store().place(row["id"])
        if row["state"] == DONE:
            doc["result"] = json.loads(row["result"])
        return doc

    async def api_events(request: Request):
        person = who(request)
        if person is None:
            return unauthorised()
        row = visible(request.path_params["id"], person)
        if row is None:
            return not_found()
        return stream(row["id"])

    def stream(upload: str | None) -> StreamingResponse:
        fanout: Fanout = state["fanout"]

        async def events():
            q = fanout.watch(upload)
            try:
                sent = 0
                if upload is not None:
                    for r in store().events(upload=upload):
                        sent = r["seq"]
                        yield sse(r)
                        if r["kind"] == "done":
                            return
                else:
                    sent = fanout.cursor
                    yield ": watching the class\n\n"
                while True:
                    try:
                        r = await asyncio.wait_for(q.get(), KEEPALIVE_S)
                    except asyncio.TimeoutError:
                        yield ": still here\n\n"
                        continue
                    if r["seq"] <= sent:
                        continue
                    sent = r["seq"]
                    if upload is None:          # the class page: the student's row, at each step of a grade
                        yield f"event: student\ndata: {json.dumps(class_row_after(r))}\n\n"
                        continue
                    yield sse(r)
                    if r["kind"] == "done":
                        return
            finally:
                fanout.unwatch(upload, q)

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    def sse(r) -> str:
        return f"id: {r['seq']}\nevent: {r['kind']}\ndata: {r['data']}\n\n"

    # --- the class ----------------------------------------------------------------------------------

    def class_row(student: str) -> dict:
        rows = store().attempts(student)
        top = best(rows)
        latest = rows[0] if rows else None
        return {"student": student, "attempts": len(rows),
                "best": outcome_word(top) if top is not None else "-",
                "fraction": top["fraction"] if top is not None and top["correct"] else None,
                "tier": top["tier"] if top is not None and top["correct"] else None,
                "latest": (outcome_word(latest) if latest["state"] == DONE else latest["state"]) if latest else "-",
                "late": any(r["late"] for r in rows)}

    rows_after: dict[int, dict] = {}

    def class_row_after(event) -> dict:
        """A student's row as of an event, made once for every class page watching."""
        if event["seq"] not in rows_after:
            if len(rows_after) > 1000:
                rows_after.clear()
            rows_after[event["seq"]] = class_row(event["student"])
        return rows_after[event["seq"]]

    def class_rows() -> list[dict]:
        students = sorted(set(store().students()) | {r["student"] for r in store().all_uploads()})
        return [class_row(s) for s in students]

    async def api_class(request: Request):
        person = who(request)
        if person is None:
            return unauthorised()
        if not person[1]:
            return JSONResponse({"error": "the class is the instructor's"}, 403)
        return JSONResponse({"exercise": settings.exercise, "students": class_rows()})

    async def api_class_events(request: Request):
        person = who(request)
        if person is None:
            return unauthorised()
        if not person[1]:
            return JSONResponse({"error": "the class is the instructor's"}, 403)
        return stream(None)

    # --- pages --------------------------------------------------------------------------------------

    async def home(request: Request):
        person = who(request)
        if person is None:
            return page("login.html.j2")
        if person[1]:
            return page("class.html.j2", rows=class_rows(), csrf=csrf(request), leaderboard=settings.leaderboard)
        return student_page(request, person[0], own=True)

    def student_page(request: Request, student: str, *, own: bool, alias_problem: str = "",
                     status: int = 200) -> HTMLResponse:
        rows = store().attempts(student)
        top = best(rows)
        attempts = [{"id": r["id"], "file": r["name"], "state": r["state"], "late": bool(r["late"]),
                     "when": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["received"])),
                     "outcome": outcome_word(r) if r["state"] == DONE else r["state"],
                     "fraction": f"{r['fraction']:.3f}" if r["fraction"] is not None else "",
                     "tier": r["tier"] or ""} for r in rows]
        return page("student.html.j2", status, alias_problem=alias_problem, student=student, own=own, attempts=attempts, csrf=csrf(request),
                    leaderboard=settings.leaderboard, alias=store().alias(student) if settings.leaderboard else "",
                    best=(outcome_word(top) if top is not None else None),
                    best_fraction=(f"{top['fraction']:.3f}" if top is not None and top["fraction"] is not None else ""))

    async def login(request: Request):
        form = await bounded_form(request, SMALL_FORM) or {}
        token = str(form.get("token", "")).strip()
        if not token or store().who(token) is None:
            return page("login.html.j2", 401, error="That token is not valid here: paste the token your instructor "
                                                    "gave you (revoked tokens no longer work).")
        response = RedirectResponse("/", 303)
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https",
                            max_age=30 * 24 * 3600)
        return response

    async def logout(request: Request):
        form = await bounded_form(request, SMALL_FORM) or {}
        if not hmac.compare_digest(str(form.get("csrf", "")), csrf(request)):
            return JSONResponse({"error": "this form is stale: reload the page"}, 403)
        response = RedirectResponse("/", 303)
        response.delete_cookie(COOKIE)
        return response

    async def web_upload(request: Request):
        person = who(request)
        if person is None or person[1]:
            return unauthorised()
        response = await take_upload(request, person[0], check_csrf=True)
        if "application/json" in request.headers.get("accept", "") or response.status_code != 202:
            return response
        return RedirectResponse("/", 303)

    async def leaderboard(request: Request):
        person = who(request)
        if person is None or not settings.leaderboard:
            return not_found()
        return page("leaderboard.html.j2", board=store().leaderboard())

    async def set_alias(request: Request):
        person = who(request)
        if person is None or person[1] or not settings.leaderboard:
            return not_found()
        form = await bounded_form(request, SMALL_FORM) or {}
        if not hmac.compare_digest(str(form.get("csrf", "")), csrf(request)):
            return JSONResponse({"error": "this form is stale or was not sent from the course's page: reload the "
                                          "page"}, 403)
        problem = await asyncio.to_thread(store().set_alias, person[0], str(form.get("alias", "")))
        if problem:
            return student_page(request, person[0], own=True, alias_problem=problem, status=400)
        return RedirectResponse("/", 303)

    async def report(request: Request):
        person = who(request)
        if person is None:
            return unauthorised()
        row = visible(request.path_params["id"], person)
        if row is None or row["state"] != DONE:
            return not_found()
        html = store().query("SELECT report_html FROM uploads WHERE id = ?", (row["id"],))[0]["report_html"]
        return HTMLResponse(html, headers={"Content-Security-Policy": REPORT_CSP, "X-Content-Type-Options": "nosniff",
                                           "Referrer-Policy": "no-referrer"})

    async def class_report(request: Request):
        """The batch's class.html (the table and the insights) for the class as it stands, written by
        export_class from the store; each student's link leads to the report of the upload it counts."""
        person = who(request)
        if person is None or not person[1]:
            return not_found()

        def made() -> str:
            import tempfile

            from grader.serve.export import export_class

            with tempfile.TemporaryDirectory(prefix="grader-class-") as out:
                export_class(settings.folder, out=Path(out))
                return (Path(out) / "class.html").read_text(encoding="utf-8")

        return HTMLResponse(await asyncio.to_thread(made), headers={"Content-Security-Policy": CLASS_CSP,
                                                                     "Cache-Control": "no-store"})

    async def class_student_report(request: Request):
        person = who(request)
        if person is None or not person[1]:
            return not_found()
        from grader.serve.export import chosen

        row = chosen(store()).get(request.path_params["student"])
        if row is None:
            return not_found()
        html = store().query("SELECT report_html FROM uploads WHERE id = ?", (row["id"],))[0]["report_html"]
        return HTMLResponse(html, headers={"Content-Security-Policy": REPORT_CSP, "X-Content-Type-Options": "nosniff"})

    async def student_history(request: Request):
        person = who(request)
        if person is None or not person[1]:
            return not_found()
        return student_page(request, request.path_params["student"], own=False)

    async def script(_request: Request):
        from importlib.resources import files

        return Response((files("grader.serve") / "templates" / "serve.js").read_text(encoding="utf-8"),
                        media_type="text/javascript", headers={"Cache-Control": "no-cache"})

    routes = [
        Route("/", home), Route("/login", login, methods=["POST"]), Route("/logout", logout, methods=["POST"]),
        Route("/upload", web_upload, methods=["POST"]), Route("/serve.js", script),
        Route("/submissions/{id}/report", report), Route("/students/{student:path}", student_history),
        Route("/leaderboard", leaderboard), Route("/alias", set_alias, methods=["POST"]),
        Route("/class/", class_report), Route("/class/{student}/report.html", class_student_report),
        Route("/api/submissions", api_submit, methods=["POST"]), Route("/api/submissions/{id}", api_status),
        Route("/api/submissions/{id}/events", api_events), Route("/api/class", api_class),
        Route("/api/class/events", api_class_events),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


__all__ = ["INSTRUCTOR", "Settings", "create_app"]


CONNECTIONS = 2048          # uvicorn's limit_concurrency: connections beyond it answer 503


def run_server(settings: Settings, *, host: str = "127.0.0.1", port: int = 8000, certfile: Path | None = None,
               keyfile: Path | None = None, connections: int = CONNECTIONS) -> None:
    """Serve the course until interrupted (uvicorn; TLS where certfile and keyfile are given).
    uvicorn's access log names the method, path and status, never a header: no token is logged
    (tokens travel only in the Authorization header, the cookie and the token form's body)."""
    import uvicorn

    uvicorn.run(create_app(settings), host=host, port=port, ssl_certfile=str(certfile) if certfile else None,
                ssl_keyfile=str(keyfile) if keyfile else None, limit_concurrency=connections, access_log=True,
                server_header=False, timeout_graceful_shutdown=5, log_level="info")
