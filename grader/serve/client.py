"""`grader submit FILE --server URL`: a grade on the course's server, from a machine without a GPU.

The standard library only (urllib; the event stream read line by line), so it starts fast: the
file's bytes go up as a multipart form, its place in the queue and each phase come back as
server-sent events, and the result.json the server stored comes back as the Result a local grade
returns (result_from_json), for the same report, files and exit code.

The token: GRADER_TOKEN, else the first line of ~/.config/grader/token ($XDG_CONFIG_HOME/grader/token
where XDG_CONFIG_HOME is set).
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable

from grader.core.errors import GraderError, InfrastructureError, UsageError
from grader.core.handin import read_file
from grader.core.results import Result, result_from_json

TOKEN_ENV = "GRADER_TOKEN"
CONNECT_TIMEOUT_S = 30.0
WAIT_S = 3600.0                # the longest a grade is waited for (the queue and the grade together)
RECONNECT_S = 120.0            # how long a server that went away after it took the upload is waited for
RECONNECT_PAUSE_S = 1.0        # between two tries to reach it again


class ServerUnreachable(InfrastructureError):
    """The server did not answer (wrong URL, down, a network between)."""

class ServerRefused(UsageError):
    """The server answered and would not take or show the upload: the message says what to do."""
    def __init__(self, message: str, status: int, retry_after_s: int | None = None):
        super().__init__(message)
        self.status, self.retry_after_s = status, retry_after_s


def token_file() -> Path:
    """Where a student may keep their token: $XDG_CONFIG_HOME/grader/token, else ~/.config/grader/token."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "grader" / "token"


def token_from_environment() -> str | None:
    """GRADER_TOKEN, else the first line of token_file(), else None."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return token
    try:
        first = token_file().read_text(encoding="utf-8").strip().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    return first[0].strip() if first and first[0].strip() else None


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def server_url(server: str) -> str:
    """The course server's URL as --server gives it, checked before a token goes anywhere: its scheme
    is said (a bare host:port would send the token over plain http), and plain http goes only to this
    machine (127.0.0.1, ::1, localhost); anything else is https. UsageError saying the fix."""
    parsed = urllib.parse.urlsplit(server.strip())
    if "@" in parsed.netloc or "\\" in parsed.netloc:
        # the check would read the host after the '@' while urllib connects to the whole netloc
        # ('http://evil.example\\@127.0.0.1' goes to evil.example): a course server has no user info
        raise UsageError(f"--server {server}: a course server's URL has no user name or '@' before its host: give "
                         "it as your instructor wrote it, e.g. https://gpu.example.edu (the token goes in GRADER_TOKEN)")
    if "://" not in server or not parsed.hostname:
        raise UsageError(f"--server {server}: give the server's URL with its scheme, e.g. https://{server.strip('/')} "
                         "(your instructor's URL; http:// only for a server on this machine)")
    if parsed.scheme == "https":
        return server.strip().rstrip("/")
    if parsed.scheme != "http":
        raise UsageError(f"--server {server}: the course server's URL starts with https:// (or http:// for a server "
                         "on this machine)")
    if not _loopback(parsed.hostname):
        raise UsageError(f"--server {server}: plain http would send your token unencrypted across the network: use "
                         f"https://{parsed.netloc}{parsed.path.rstrip('/')} (http:// only for a server on this machine)")
    return server.strip().rstrip("/")


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url(server: str, path: str) -> str:
    return server_url(server) + path


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed: urllib would send the Authorization header on to wherever it points,
    plain http or another host included."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, f"the server redirected to {newurl}: use that URL as "
                                     "--server if it is your course's (with https://)", headers, fp)


_OPENER = urllib.request.build_opener(_NoRedirect)


def _refusal(exc: urllib.error.HTTPError, server: str) -> GraderError:
    """What an HTTP error from the server means, and what to do."""
    try:
        said = json.loads(exc.read().decode("utf-8", "replace")).get("error", "")
    except (ValueError, AttributeError, OSError):
        said = ""
    if exc.code == 401:
        return ServerRefused(f"{server} did not accept the token: set {TOKEN_ENV} to the token your instructor gave "
                             f"you (or put it in {token_file()}); a revoked token no longer works", 401)
    if exc.code == 429:
        wait = exc.headers.get("Retry-After")
        return ServerRefused(f"{server}: {said or 'too many uploads this hour'} (submit again in {wait or 'a while'} s; "
                             "the cap is the course's)", 429, int(wait) if wait and wait.isdigit() else None)
    if exc.code == 413:
        return ServerRefused(f"{server}: {said or 'the file is larger than the course takes'}", 413)
    if exc.code == 403:
        return ServerRefused(f"{server}: {said or 'refused'}", 403)
    if exc.code == 404:
        return ServerRefused(f"{server}: no such submission, or not yours ({said or 'not found'})", 404)
    if exc.code >= 500:
        return ServerUnreachable(f"{server} failed to answer (HTTP {exc.code}: {said or exc.reason}); try again "
                                 "later, or tell the instructor")
    return ServerRefused(f"{server}: HTTP {exc.code}: {said or exc.reason}", exc.code)


def _open(request: urllib.request.Request, server: str, timeout: float):
    try:
        return _OPENER.open(request, timeout=timeout)     # noqa: S310 - the URL is the student's server (server_url)
    except urllib.error.HTTPError as exc:
        raise _refusal(exc, server) from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        raise ServerUnreachable(f"cannot reach the course server at {server} ({why}): check the URL "
                                "(--server) and that the server is running") from None


def _multipart(file_name: str, data: bytes, fields: dict[str, str]) -> tuple[bytes, str]:
    boundary = "grader-" + secrets.token_hex(12)
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    safe = file_name.replace('"', "_").replace("\r", "_").replace("\n", "_")
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{safe}"\r\n'
                 "Content-Type: text/plain\r\n\r\n".encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def _events(response):
    """(event, data) of a server-sent event stream, read line by line."""
    kind, data = "message", []
    for raw in response:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                yield kind, "\n".join(data)
            kind, data = "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


def _said(event: dict) -> str | None:
    """A phase event as a short progress line."""
    phase = event.get("phase")
    if phase == "queued":
        place = event.get("place")
        again = f" again ({event['again']})" if event.get("again") else ""
        return f"queued{again}: {_ordinal(place)} in line" if isinstance(place, int) else f"queued{again}"
    if phase == "cluster":
        return "sent to the cluster (Slurm)"
    return str(phase) if phase else None


def submit_remote(file: Path, *, server: str, token: str, exercise: str | None,
                  progress: Callable[[str], None] | None) -> Result:
    """Upload file's bytes to the course server, report its place and phases through progress, and
    return the Result the server stored, as it stored it (its result.json, which names the file by
    the name it was uploaded under, file's own). GraderError subclasses where it cannot:
    ServerUnreachable (no answer), ServerRefused (401 token, 429 cap, 413 size, 403 deadline)."""
    server = server_url(server)                      # UsageError: no scheme, or plain http beyond this machine
    source = read_file(Path(file))                   # UsageError: missing, a folder, a link
    say = progress or (lambda _line: None)
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    body, kind = _multipart(Path(file).name, source.data, {"exercise": exercise} if exercise else {})
    upload = urllib.request.Request(_url(server, "/api/submissions"), data=body, method="POST",
                                    headers={**headers, "Content-Type": kind})
    with _open(upload, server, CONNECT_TIMEOUT_S) as response:
        accepted = json.loads(response.read().decode("utf-8"))
    upload_id = accepted["id"]
    if accepted.get("late"):
        say("after the deadline: kept and marked late")
    doc = _wait(server, upload_id, headers, say)
    return result_from_json(doc["result"])


def fetch_later(server: str, upload_id: str) -> str:
    """How a student sees an upload's result without this command: the course's page, or its status."""
    status = _url(server, "/api/submissions/" + urllib.parse.quote(upload_id))
    return (f"its result will be on the course's page ({_url(server, '/')}), or run "
            f"`curl -H \"Authorization: Bearer $GRADER_TOKEN\" {status}`")


def _wait(server: str, upload_id: str, headers: dict, say: Callable[[str], None]) -> dict:
    """The upload's status document once graded: its progress stream followed, and, where the server
    goes away after it took the upload (a restart), reconnected to for RECONNECT_S; then
    ServerUnreachable saying the upload was received and will be graded, and where its result
    will be (fetch_later)."""
    said_last, lost_since = None, None
    quoted = urllib.parse.quote(upload_id)
    while True:
        try:
            events = urllib.request.Request(_url(server, f"/api/submissions/{quoted}/events"),
                                            headers={**headers, "Accept": "text/event-stream"})
            with _open(events, server, WAIT_S) as stream:
                if lost_since is not None:
                    say("the server is back")
                    lost_since = None
                for kind, data in _events(stream):
                    try:
                        event = json.loads(data)
                    except ValueError:
                        continue
                    if kind == "done":
                        if event.get("state") == "replaced":
                            raise ServerRefused(f"{server}: this upload was replaced by a newer one of yours before "
                                                "it was graded (the newer one is graded instead)", 409)
                        break
                    line = _said(event) if kind == "phase" else None
                    if line and line != said_last:
                        say(line)
                        said_last = line
            status = urllib.request.Request(_url(server, f"/api/submissions/{quoted}"), headers=headers)
            with _open(status, server, CONNECT_TIMEOUT_S) as response:
                doc = json.loads(response.read().decode("utf-8"))
            if "result" in doc:
                return doc
        except (ServerUnreachable, http.client.HTTPException, OSError):
            if lost_since is None:
                lost_since = time.monotonic()
                say(f"lost the server; your upload {upload_id} was received and will be graded: waiting up to "
                    f"{RECONNECT_S:.0f} s for the server to come back")
            elif time.monotonic() - lost_since > RECONNECT_S:
                raise ServerUnreachable(f"{server} stopped answering after it received your upload {upload_id}: the "
                                        f"upload is kept and will be graded when the server is back; "
                                        f"{fetch_later(server, upload_id)}") from None
        time.sleep(RECONNECT_PAUSE_S)
