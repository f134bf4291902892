"""A running course server's state and what its handlers (app.py) share: the settings, the store,
who asks (a bearer token, or the page's cookie) and the page's CSRF token, the pages' rendering,
an upload's bounded form, the event streams (fed by fanout.Fanout), the class's rows.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, StreamingResponse

from grader.batch.similarity import similarity_of
from grader.exercises import load_exercise
from grader.report.files import RESULT_CHARS, bounded_result
from grader.serve import views
from grader.serve.export import chosen
from grader.serve.fanout import DROPPED, RECHECK, Fanout
from grader.serve.store import (
    DONE,
    INSTRUCTOR,
    QUEUED,
    Accepted,
    Rules,
    Store,
    best,
    outcome_word,
    token_hash,
)

COOKIE = "grader_session"
KEEPALIVE_S = 15.0          # a comment line on a quiet event stream, so proxies keep it open
FORM_OVERHEAD = 16 * 1024   # a multipart body's bytes beyond its file's (boundaries, headers, fields)
SMALL_FORM = 8 * 1024       # the token form's, the alias form's and the sign-out's bodies at most
BODY_TIMEOUT_S = 60.0       # a request's body arrives whole within this, else 408 (a client that stalls)
MAX_NAME = 128              # an upload's file name, as kept and shown: its last part, printable, at most this
STREAMS_PER_PERSON = 128    # event streams one token may hold open at once (beyond: 429), of the server's 8192 connections

PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; "
            "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
STALE_FORM = "this form is stale or was not sent from the course's page: reload the page"


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


def unauthorised() -> JSONResponse:
    return JSONResponse({"error": "no valid token: send `Authorization: Bearer TOKEN` with the token your "
                                  "instructor gave you (GRADER_TOKEN for `grader submit --server`)"}, 401,
                        headers={"WWW-Authenticate": "Bearer"})


def not_found() -> JSONResponse:
    return JSONResponse({"error": "no such submission"}, 404)


class BodyTimeout(Exception):
    """A request's body did not arrive whole within BODY_TIMEOUT_S (the app answers 408)."""


def clean_name(name: str) -> str:
    """An upload's file name as kept and shown: its last part (no folders, no '..'), printable
    characters only (no NUL, CR, LF), at most MAX_NAME of them; kernel.cu where nothing is left."""
    base = "".join(c for c in name.replace("\\", "/").rsplit("/", 1)[-1] if c.isprintable()).strip()[:MAX_NAME]
    if base[:1] in ("=", "+", "-", "@"):       # never a formula where the export's CSV files name the file
        base = "_" + base[1:]
    return base if base.strip(".") else "kernel.cu"


def sse(r) -> str:
    return f"id: {r['seq']}\nevent: {r['kind']}\ndata: {r['data']}\n\n"


class Course:
    """The course being served: its settings, store, secret (for the CSRF tokens), fan-out and
    pages, and the helpers every handler uses."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.store = Store(settings.folder)
        self.store.set_setting("exercise", settings.exercise)
        self.secret = self.store.setting("secret", make=lambda: os.urandom(32).hex()).encode()
        self.fanout = Fanout(self.store)
        self.templates = Environment(loader=PackageLoader("grader.serve", "templates"),
                                     autoescape=select_autoescape(default=True, default_for_string=True))
        self._rows_after: dict[int, dict] = {}
        self._streams: dict[str, int] = {}          # open event streams, by token hash
        self._similar = None                         # (the uploads compared, their Similarity)
        self.rubric = load_exercise(settings.exercise)

    # --- who asks ---------------------------------------------------------------------------------

    @staticmethod
    def session_token(request: Request, *, bearer_only: bool = False) -> str | None:
        """The bearer token, else (not bearer_only) the page's cookie: never a query string's. The
        cookie counts only where the request is not another site's (Fetch Metadata: a cross-site
        or same-site subresource or POST carries no session; a link followed from elsewhere does)
        and only where it is sent once (two cookies of its name: one was set by someone else)."""
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        if bearer_only:
            return None
        site = request.headers.get("sec-fetch-site", "")
        if site in ("cross-site", "same-site") and not (
                request.method in ("GET", "HEAD") and request.headers.get("sec-fetch-mode") == "navigate"):
            return None
        sent = {c.split("=", 1)[1].strip() for c in request.headers.get("cookie", "").split(";")
                if c.strip().startswith(COOKIE + "=")}
        return sent.pop() if len(sent) == 1 else None

    @staticmethod
    def same_origin(request: Request) -> bool:
        """Whether a form's POST came from this server's own pages: its Origin (else its Referer)
        names this host, and Fetch Metadata, where sent, says same-origin. A client that sends
        neither (curl, a script) passes here; the CSRF token still binds it to a session."""
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return False
        origin = request.headers.get("origin") or request.headers.get("referer")
        if origin is None:
            return True
        if origin == "null":            # a browser's own page that withheld its origin: Fetch Metadata said same-origin
            return site is not None
        try:
            netloc = urlsplit(origin).netloc.lower()
        except ValueError:
            return False
        return bool(netloc) and netloc == request.headers.get("host", "").lower()

    def who(self, request: Request, *, bearer_only: bool = False) -> tuple[str, bool] | None:
        """(student, is the instructor) of the request's token, None without a live one."""
        token = self.session_token(request, bearer_only=bearer_only)
        return self.store.who(token) if token else None

    def csrf(self, request: Request) -> str:
        """The page's form token: an HMAC of the session's token under the store's secret."""
        token = self.session_token(request) or ""
        return hmac.new(self.secret, token_hash(token).encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, request: Request, form) -> bool:
        """The form's CSRF token is this session's (compared in constant time) and the POST came
        from this server's own page."""
        return (self.session_token(request) is not None and self.same_origin(request)
                and hmac.compare_digest(str(form.get("csrf", "")), self.csrf(request)))

    def visible(self, upload_id: str, person: tuple[str, bool]):
        """The upload's row where the person may see it (a student: their own), else None."""
        student, instructor = person
        return self.store.upload(upload_id, None if instructor else student)

    @staticmethod
    def origin(request: Request) -> str:
        """This server's URL as the reader reached it (for the `grader submit --server` line)."""
        return f"{request.url.scheme}://{request.url.netloc}"

    def page(self, name: str, status: int = 200, **context) -> HTMLResponse:
        html = self.templates.get_template(name).render(exercise=self.settings.exercise, **context)
        # same-origin: the page's own forms send their Origin (no-referrer would make it "null"), no other site
        # learns the page's address
        return HTMLResponse(html, status, headers={"Content-Security-Policy": PAGE_CSP, "X-Frame-Options": "DENY",
                                                    "Referrer-Policy": "same-origin", "Cache-Control": "no-store"})

    # --- uploads ----------------------------------------------------------------------------------

    async def bounded_form(self, request: Request, limit: int | None = None):
        """The form (multipart or urlencoded), its body read at most to limit bytes (None: the
        upload's size limit and a form's overhead); None where the body is longer."""
        rules = self.settings.rules
        limit = rules.max_bytes + FORM_OVERHEAD if limit is None else limit
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            return None
        body = bytearray()
        try:
            async with asyncio.timeout(BODY_TIMEOUT_S):
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > limit:
                        return None
        except TimeoutError:
            raise BodyTimeout() from None
        done = False

        async def receive():
            nonlocal done
            if done:
                return {"type": "http.disconnect"}
            done = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        return await Request(request.scope, receive).form(max_files=1, max_fields=8, max_part_size=rules.max_bytes + 1)

    async def take_upload(self, request: Request, student: str, *, check_csrf: bool = False) -> JSONResponse:
        """The upload of a multipart form's `file`, accepted into the queue or refused; with
        check_csrf (the page's form), its CSRF token checked before anything is kept."""
        rules, exercise = self.settings.rules, self.settings.exercise
        try:
            form = await self.bounded_form(request)
        except BodyTimeout:
            raise
        except Exception as exc:  # noqa: BLE001 - a malformed body is the sender's: said, not raised
            return JSONResponse({"error": f"not a multipart form with a field `file` ({exc})"}, 400)
        if form is None:
            return JSONResponse({"error": f"the upload is larger than this course takes ({rules.max_bytes} bytes): "
                                          "send the kernel's .cu file only"}, 413)
        if check_csrf and not self.csrf_ok(request, form):
            return JSONResponse({"error": STALE_FORM}, 403)
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            return JSONResponse({"error": "no file: send the kernel as the multipart field `file`"}, 400)
        asked = form.get("exercise")
        if asked and asked != exercise:
            return JSONResponse({"error": f"this server grades {exercise}, not {asked}: leave out --exercise, or "
                                          "submit to the server of that exercise"}, 400)
        data = await upload.read()
        got = await asyncio.to_thread(self.store.accept, student, clean_name(upload.filename or ""), data, rules)
        if not isinstance(got, Accepted):
            headers = {"Retry-After": str(got.retry_after_s)} if got.retry_after_s is not None else None
            return JSONResponse({"error": got.message}, got.status, headers=headers)
        return JSONResponse({"id": got.id, "place": got.place, "late": got.late, "replaced": list(got.replaced)}, 202)

    def status_json(self, row) -> str:
        """GET /api/submissions/{id}'s body: the upload's state, its place while queued, and once graded
        its result, the stored result.json text as it is (never parsed and written again). That text
        is JSON as result.json writes it: a value never written (the poison) or a wrong infinity reads
        NaN or Infinity there, which Python's json (`grader submit --server`'s) reads."""
        doc = {"id": row["id"], "student": row["student"], "file": row["name"], "state": row["state"],
               "late": bool(row["late"]), "received": row["received"], "tries": row["tries"]}
        if row["state"] == QUEUED:
            doc["place"] = self.store.place(row["id"])
        head = json.dumps(doc)
        if row["state"] != DONE:
            return head
        result = row["result"]
        if len(result) > RESULT_CHARS:                  # one stored before results were bounded
            result = json.dumps(bounded_result(json.loads(result)))
        return f'{head[:-1]}, "result": {result}}}'

    # --- event streams ----------------------------------------------------------------------------

    def stream(self, upload: str | None, request: Request) -> StreamingResponse | JSONResponse:
        """Server-sent events: an upload's (what it had so far, then each new one, ending with its
        done event), or, upload None, the class's rows as its grades go (the instructor's page).
        The stream ends as soon as the request's token is revoked, and when its reader falls
        fanout.WATCHER_QUEUE events behind; a token holding STREAMS_PER_PERSON open already gets 429."""
        token = self.session_token(request) or ""
        if self._streams.get(token_hash(token), 0) >= STREAMS_PER_PERSON:
            return JSONResponse({"error": f"{STREAMS_PER_PERSON} event streams are open with this token already: "
                                          "close some (tabs, watchers) and try again"}, 429, headers={"Retry-After": "10"})
        return StreamingResponse(self._counted(token, self._events(upload, token, self.store.who(token))),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-store",
                                                                          "X-Accel-Buffering": "no"})

    async def _counted(self, token: str, events):
        """A stream's events, counted among its token's open streams while it runs."""
        key = token_hash(token)
        self._streams[key] = self._streams.get(key, 0) + 1
        try:
            async for chunk in events:
                yield chunk
        finally:
            await events.aclose()
            self._streams[key] -= 1
            if not self._streams[key]:
                del self._streams[key]

    async def _events(self, upload: str | None, token: str = "", person=None):
        q = self.fanout.watch(upload)
        try:
            sent = self.fanout.cursor if upload is None else 0
            if upload is None:
                yield ": watching the class\n\n"
            for r in self.store.events(upload=upload) if upload is not None else ():
                sent = r["seq"]
                yield sse(r)
                if r["kind"] == "done":
                    return
            while True:
                try:
                    r = await asyncio.wait_for(q.get(), KEEPALIVE_S)
                except asyncio.TimeoutError:
                    yield ": still here\n\n"
                    continue
                if r is DROPPED:
                    return
                if r is RECHECK:
                    if self.store.who(token) != person:
                        return
                    continue
                if r["seq"] <= sent:
                    continue
                sent = r["seq"]
                if upload is None:          # the class page: the student's row, at each step of a grade
                    yield f"event: student\ndata: {json.dumps(self.class_row_after(r))}\n\n"
                    continue
                yield sse(r)
                if r["kind"] == "done":
                    return
        finally:
            self.fanout.unwatch(upload, q)

    # --- the class and a student's page -----------------------------------------------------------

    def class_row(self, student: str) -> dict:
        return views.class_row(self.store.attempts(student), student)

    def class_row_after(self, event) -> dict:
        """A student's row as of an event, made once for every class page watching."""
        if event["seq"] not in self._rows_after:
            if len(self._rows_after) > 1000:
                self._rows_after.clear()
            self._rows_after[event["seq"]] = self.class_row(event["student"])
        return self._rows_after[event["seq"]]

    def class_rows(self) -> list[dict]:
        students = sorted(set(self.store.students()) | {r["student"] for r in self.store.all_uploads()})
        return [self.class_row(s) for s in students]

    def class_page(self, request: Request) -> HTMLResponse:
        """The instructor's page: who needs help (each student's latest outcome and cause, the class's
        counts by cause) and who copied (the similarity pairs, where the detector is here)."""
        rows = self.class_rows()
        causes: dict[str, int] = {}
        for r in rows:
            if r["latest"] not in ("-", "queued", "grading"):
                key = r["cause"] or r["latest"]
                causes[key] = causes.get(key, 0) + 1
        return self.page("class.html.j2", rows=rows, csrf=self.csrf(request), leaderboard=self.settings.leaderboard,
                         causes=sorted(causes.items(), key=lambda kv: (-kv[1], kv[0])), now=views.utc(time.time()),
                         similarity=self.similar_pairs())

    def similar_pairs(self):
        """The class's similar pairs (batch/similarity.similarity_of, the exercise's own code set aside)
        among each student's upload that counts (export.chosen: the latest graded), best first;
        worked out again only when one of those uploads changed."""
        latest = {student: row["id"] for student, row in chosen(self.store, include_late=True).items()
                  if student != INSTRUCTOR}
        key = tuple(sorted(latest.items()))
        if self._similar is None or self._similar[0] != key:
            sources = [(student, self.store.data(upload)) for student, upload in key]
            self._similar = (key, similarity_of(sources, rubric=self.rubric))
        return self._similar[1]

    def student_page(self, request: Request, student: str, *, own: bool, alias_problem: str = "",
                     status: int = 200) -> HTMLResponse:
        rows = self.store.attempts(student)
        top = best(rows)
        attempts = views.attempts(rows)
        board = self.settings.leaderboard
        latest = next((a for a in attempts if a["state"] == DONE), None)
        return self.page("student.html.j2", status, alias_problem=alias_problem, student=student, own=own,
                         attempts=attempts, latest=latest, csrf=self.csrf(request), leaderboard=board,
                         alias=self.store.alias(student) if board else "",
                         best=(outcome_word(top) if top is not None else None),
                         best_fraction=(f"{top['fraction']:.3f}" if top is not None and top["fraction"] is not None
                                        else ""))
