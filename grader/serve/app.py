"""The course server's ASGI app (Starlette under uvicorn): the HTTP API and the web pages (each
handler here; what they share is course.py's Course), and the keeper of the grading worker (a
process of its own: worker.py).

Who asks: `Authorization: Bearer TOKEN` (the API, `grader submit --server`), or, for the pages,
the same token in an HttpOnly, SameSite=Strict cookie set by the token form. A student sees only
their own uploads (another's id answers 404, as an id that does not exist does); the instructor
sees every one. The page's forms carry a CSRF token (course.Course.csrf), checked on every form
POST; the API's POST takes a bearer token only, which a browser never sends on its own.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
from importlib.resources import files
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from grader.serve import connections as connections_module
from grader.serve.course import COOKIE, SMALL_FORM, STALE_FORM, BodyTimeout, Course, Settings, not_found, unauthorised
from grader.serve.export import chosen, export_class
from grader.serve.store import DONE, INSTRUCTOR

WORKER_RESTART_S = 1.0      # the wait before a dead worker is started again
CONNECTIONS = connections_module.CONNECTIONS   # uvicorn's limit_concurrency (fewer where file descriptors are): beyond, 503

# A stored report is the grader's own HTML, but it quotes a student's source and output: no script
# runs in it, nothing loads from elsewhere, and it is sandboxed (an origin of its own).
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; sandbox; frame-ancestors 'self'"
# The class report (the batch's class.html, made from the store): its own inline script sorts the
# table, allowed by its hash (class_csp), and no other script; nothing loads from elsewhere.
CLASS_CSP = ("default-src 'none'; script-src {scripts}; style-src 'unsafe-inline'; img-src data:; "
             "frame-ancestors 'none'; form-action 'none'; base-uri 'none'")


@functools.cache
def class_csp() -> str:
    """CLASS_CSP allowing the inline scripts of the batch's class.html template by their sha256
    (those that hold no template expression: the same bytes in every class.html), so that a
    script that reached the page any other way (a student's name or file, were one ever left
    unescaped) does not run in the instructor's session."""
    template = (files("grader") / "templates" / "class.html.j2").read_text(encoding="utf-8")
    hashes = [base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
              for body in re.findall(r"<script>(.*?)</script>", template, re.S) if "{{" not in body and "{%" not in body]
    return CLASS_CSP.format(scripts=" ".join(f"'sha256-{h}'" for h in hashes) or "'none'")
# Every answer, whatever its kind: never sniffed as another type, never sends the page's address on,
# never kept by a cache between (a student's status and result are theirs), unless it says otherwise.
COMMON_HEADERS = ((b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
                  (b"cache-control", b"no-store"))
CROSS_SITE = "this form was not sent from the course's own page (another site's forms cannot sign in or submit here)"


class CommonHeaders:
    """ASGI middleware: COMMON_HEADERS on every HTTP answer that does not set them itself."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def sending(message):
            if message["type"] == "http.response.start":
                have = {k.lower() for k, _v in message.get("headers", [])}
                message = {**message, "headers": list(message.get("headers", [])) +
                           [(k, v) for k, v in COMMON_HEADERS if k not in have]}
            await send(message)

        return await self.app(scope, receive, sending)


_TOKEN_LIKE = re.compile(r"[A-Za-z0-9_-]{40,}")       # a token (43 characters), never an upload's id (16)


def redacted(path: str) -> str:
    """A request's path as the access log writes it: no query string (a token pasted into one),
    nothing that could be a token (a run of 40 or more of a token's characters)."""
    path, query, _rest = path.partition("?")
    return _TOKEN_LIKE.sub("[redacted]", path) + ("?[redacted]" if query else "")


class RedactedAccessLog(logging.Filter):
    """uvicorn's access log (its record's args: client, method, path, version, status) with the
    path redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = args[:2] + (redacted(args[2]),) + args[3:]
        return True


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


def _course(request: Request) -> Course:
    return request.app.state.course


def _report(html: str, csp: str = REPORT_CSP) -> HTMLResponse:
    return HTMLResponse(html, headers={"Content-Security-Policy": csp, "X-Content-Type-Options": "nosniff",
                                       "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"})


# --- the API -----------------------------------------------------------------------------------------

async def api_submit(request: Request):
    course = _course(request)
    person = course.who(request, bearer_only=True)
    if person is None:
        return unauthorised()
    if person[1]:
        return JSONResponse({"error": "the instructor's token watches the class; submit with a student's"}, 403)
    return await course.take_upload(request, person[0])


def _upload(request: Request):
    """The row of the upload the path's id names, where the request's person may see it, else the
    answer they get: 401 without a live token, 404 where there is none or it is another student's."""
    course = _course(request)
    person = course.who(request)
    if person is None:
        return unauthorised()
    row = course.visible(request.path_params["id"], person)
    return row if row is not None else not_found()


async def api_status(request: Request):
    row = _upload(request)
    if isinstance(row, Response):
        return row
    # the stored result.json text as it is (NaN or Infinity included, which JSONResponse would refuse)
    return Response(_course(request).status_json(row), media_type="application/json")


async def api_events(request: Request):
    row = _upload(request)
    return row if isinstance(row, Response) else _course(request).stream(row["id"], request)


def _instructor(request: Request) -> Response | None:
    """None where the request is the instructor's, else the answer it gets."""
    person = _course(request).who(request)
    if person is None:
        return unauthorised()
    return None if person[1] else JSONResponse({"error": "the class is the instructor's"}, 403)


async def api_class(request: Request):
    course = _course(request)
    return _instructor(request) or JSONResponse({"exercise": course.settings.exercise, "students": course.class_rows()})


async def api_class_events(request: Request):
    return _instructor(request) or _course(request).stream(None, request)


# --- the pages ---------------------------------------------------------------------------------------

async def home(request: Request):
    course = _course(request)
    person = course.who(request)
    if person is None:
        doubled = request.headers.get("cookie", "").count(COOKIE + "=") > 1
        two = ("Your browser sent two sign-in cookies for this server (one may have been set by another site on "
               "this machine): clear this site's cookies, then sign in.")
        return course.page("login.html.j2", server=course.origin(request), error=two if doubled else "")
    if person[1]:
        return await asyncio.to_thread(course.class_page, request)      # the similarity: a class of 300 in ~1 s
    return course.student_page(request, person[0], own=True)


async def login(request: Request):
    course = _course(request)
    if not course.same_origin(request):           # login CSRF: another site signing a student in as someone else
        return JSONResponse({"error": CROSS_SITE}, 403)
    form = await course.bounded_form(request, SMALL_FORM) or {}
    token = str(form.get("token", "")).strip()
    if not token or course.store.who(token) is None:
        return course.page("login.html.j2", 401, server=course.origin(request),
                           error="That token is not valid here: paste the token your instructor gave you "
                                 "(revoked tokens no longer work).")
    response = RedirectResponse("/", 303)
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https",
                        max_age=30 * 24 * 3600, path="/")
    return response


async def logout(request: Request):
    course = _course(request)
    if not course.csrf_ok(request, await course.bounded_form(request, SMALL_FORM) or {}):
        return JSONResponse({"error": STALE_FORM}, 403)
    response = RedirectResponse("/", 303)
    response.delete_cookie(COOKIE)
    return response


async def web_upload(request: Request):
    course = _course(request)
    person = course.who(request)
    if person is None or person[1]:
        return unauthorised()
    response = await course.take_upload(request, person[0], check_csrf=True)
    if "application/json" in request.headers.get("accept", "") or response.status_code != 202:
        return response
    return RedirectResponse("/", 303)


async def leaderboard(request: Request):
    course = _course(request)
    if course.who(request) is None or not course.settings.leaderboard:
        return not_found()
    return course.page("leaderboard.html.j2", board=course.store.leaderboard())


async def set_alias(request: Request):
    course = _course(request)
    person = course.who(request)
    if person is None or person[1] or not course.settings.leaderboard:
        return not_found()
    form = await course.bounded_form(request, SMALL_FORM) or {}
    if not course.csrf_ok(request, form):
        return JSONResponse({"error": STALE_FORM}, 403)
    problem = await asyncio.to_thread(course.store.set_alias, person[0], str(form.get("alias", "")))
    if problem:
        return course.student_page(request, person[0], own=True, alias_problem=problem, status=400)
    return RedirectResponse("/", 303)


async def report(request: Request):
    row = _upload(request)
    if isinstance(row, Response):
        return row
    if row["state"] != DONE:
        return not_found()
    return _report(_course(request).store.report_html(row["id"]))


async def class_report(request: Request):
    """The batch's class.html (the table and the insights) for the class as it stands, written by
    export_class from the store; each student's link leads to the report of the upload that counts."""
    course = _course(request)
    if _instructor(request) is not None:
        return not_found()

    def made() -> str:
        with tempfile.TemporaryDirectory(prefix="grader-class-") as out:
            export_class(course.settings.folder, out=Path(out))
            return (Path(out) / "class.html").read_text(encoding="utf-8")

    return _report(await asyncio.to_thread(made), class_csp())


async def class_student_report(request: Request):
    course = _course(request)
    if _instructor(request) is not None:
        return not_found()
    row = chosen(course.store).get(request.path_params["student"])
    return _report(course.store.report_html(row["id"])) if row is not None else not_found()


async def student_history(request: Request):
    if _instructor(request) is not None:
        return not_found()
    return _course(request).student_page(request, request.path_params["student"], own=False)


async def script(_request: Request):
    return Response((files("grader.serve") / "templates" / "serve.js").read_text(encoding="utf-8"),
                    media_type="text/javascript", headers={"Cache-Control": "no-cache"})


ROUTES = [
    Route("/", home), Route("/login", login, methods=["POST"]), Route("/logout", logout, methods=["POST"]),
    Route("/upload", web_upload, methods=["POST"]), Route("/serve.js", script),
    Route("/submissions/{id}/report", report), Route("/students/{student:path}", student_history),
    Route("/leaderboard", leaderboard), Route("/alias", set_alias, methods=["POST"]),
    Route("/class/", class_report), Route("/class/{student}/report.html", class_student_report),
    Route("/api/submissions", api_submit, methods=["POST"]), Route("/api/submissions/{id}", api_status),
    Route("/api/submissions/{id}/events", api_events), Route("/api/class", api_class),
    Route("/api/class/events", api_class_events),
]


async def body_timeout(_request: Request, _exc: Exception):
    return JSONResponse({"error": "the request's body did not arrive in time: send it again"}, 408,
                        headers={"Connection": "close"})


def create_app(settings: Settings) -> Starlette:
    """The app: its routes, and, while it runs, the course (the store opened), the events' fan-out
    and the grading worker (settings.worker)."""

    @contextlib.asynccontextmanager
    async def lifespan(app):
        course = Course(settings)
        app.state.course = course
        tasks = [asyncio.create_task(course.fanout.run())]
        keeper = WorkerKeeper(settings) if settings.worker else None
        if keeper is not None:
            tasks.append(asyncio.create_task(keeper.run()))
        try:
            yield
        finally:
            for t in tasks:
                t.cancel()
            if keeper is not None:
                keeper.stop()
            course.store.close()

    app = Starlette(routes=ROUTES, lifespan=lifespan, exception_handlers={BodyTimeout: body_timeout})
    app.add_middleware(CommonHeaders)
    return app


def run_server(settings: Settings, *, host: str = "127.0.0.1", port: int = 8000, certfile: Path | None = None,
               keyfile: Path | None = None, connections: int = CONNECTIONS) -> None:
    """Serve the course until interrupted (uvicorn; TLS where certfile and keyfile are given).
    uvicorn's access log names the method, path and status, never a header: no token is logged
    (tokens travel only in the Authorization header, the cookie and the token form's body), and
    its path is redacted (RedactedAccessLog: no query string, nothing shaped like a token).
    Connections (serve/connections.py): a request's headers within HEADERS_S, at most PER_ADDRESS
    from one address but this machine's (the proxy's), and `connections` in all (503 beyond)."""
    config = uvicorn.Config(create_app(settings), host=host, port=port, ssl_certfile=str(certfile) if certfile else None,
                            ssl_keyfile=str(keyfile) if keyfile else None,
                            limit_concurrency=connections_module.connection_limit(connections),
                            http=connections_module.GuardedH11, access_log=True, server_header=False,
                            timeout_graceful_shutdown=5, log_level="info")
    logging.getLogger("uvicorn.access").addFilter(RedactedAccessLog())     # configured by Config: added after
    uvicorn.Server(config).run()


__all__ = ["INSTRUCTOR", "Settings", "create_app", "run_server"]
