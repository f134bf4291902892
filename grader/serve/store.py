"""The course server's store: one SQLite file in the course's folder (COURSE/grader.sqlite, WAL).

It holds every upload (its bytes, as received: nothing is re-read from a path a student
controls), each upload's state (queued -> grading -> done, or replaced by a newer one of the same
student's), its result.json and reports, the phase events a watcher reads, the tokens (only their
sha256) and the queue's memory of whom it served last.

An upload is committed (synchronous=FULL) before the server answers 2xx, so a `kill -9` at any
moment loses no acknowledged upload; a result is stored in the same transaction that marks its
upload done, so an upload has at most one result; uploads a dead worker left `grading` go back to
`queued` when the next worker starts (requeue_stale) and are graded, each before its student's
newer uploads: every acknowledged upload is graded once, unless a newer one of the same student's
replaced it before its grade began. Every write is one short transaction
(BEGIN IMMEDIATE): the server and the worker, two processes, share the file.

The fair queue (claim_wave): at most one grade in flight per student; the students whose turn
came least recently first (round robin), each one's oldest queued upload (a newer upload
replaces the queued one whose grade never began: accept).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from grader.core.errors import UsageError
from grader.core.outcomes import Outcome
from grader.serve.grades import DONE, GRADING, QUEUED, REPLACED, StoredGrade, best, outcome_word, rank, summary

STORE_NAME = "grader.sqlite"
INSTRUCTOR = "@instructor"      # the identifier `grader serve tokens` prints beside the instructor's token
HOUR_S = 3600.0
ALIAS = re.compile(r"[\w -]{2,24}")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (hash TEXT PRIMARY KEY, student TEXT NOT NULL, instructor INTEGER NOT NULL,
                                   issued REAL NOT NULL, revoked REAL);
CREATE INDEX IF NOT EXISTS tokens_student ON tokens(student);
CREATE TABLE IF NOT EXISTS uploads (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, student TEXT NOT NULL, name TEXT NOT NULL,
    data BLOB NOT NULL, sha256 TEXT NOT NULL, received REAL NOT NULL, late INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL, tries INTEGER NOT NULL DEFAULT 0, claimed REAL, finished REAL,
    status TEXT, correct INTEGER, fraction REAL, tier TEXT, result TEXT, report_md TEXT, report_html TEXT);
CREATE INDEX IF NOT EXISTS uploads_state ON uploads(state, student);
CREATE INDEX IF NOT EXISTS uploads_student ON uploads(student, seq);
CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT, upload TEXT NOT NULL,
                                   student TEXT NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS events_upload ON events(upload, seq);
CREATE TABLE IF NOT EXISTS served (student TEXT PRIMARY KEY, turn INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS aliases (student TEXT PRIMARY KEY, alias TEXT UNIQUE NOT NULL COLLATE NOCASE);
"""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class Rules:
    """What the instructor set for uploads (`grader serve` options)."""

    per_hour: int | None = None       # uploads a student may make in any hour (None: no cap)
    max_bytes: int = 256 * 1024       # an upload's size limit (413 above it)
    deadline: float | None = None     # seconds since the epoch (None: none)
    late: str = "keep"                # after the deadline: "keep" (marked late) or "refuse"


@dataclass(frozen=True)
class Accepted:
    id: str
    place: int                        # 1: the next to be graded
    late: bool
    replaced: tuple[str, ...] = ()    # the student's queued uploads this one replaced


@dataclass(frozen=True)
class Refused:
    status: int                       # the HTTP status: 400 (empty), 413, 429, 403
    message: str                      # what to do about it
    retry_after_s: int | None = None  # 429: when the next upload is accepted


@dataclass(frozen=True)
class Claimed:
    """An upload the worker took to grade: its bytes as stored."""

    id: str
    student: str
    name: str
    data: bytes
    sha256: str
    tries: int                         # this grade included


class Store:
    """The store, opened by one process (the server, the worker, a command). Thread-safe: one
    connection, its writes serialised by a lock; reads go through a second connection (WAL: a read
    never waits for a write)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.path = self.folder / STORE_NAME
        if not self.folder.is_dir():
            raise UsageError(f"{self.folder}: no such course folder (create it, or name the folder that holds "
                             f"{STORE_NAME})")
        private_files(self.path)
        self._lock = threading.Lock()
        self._db = self._connect()
        self._db.executescript(_SCHEMA)
        self._read = self._connect()
        self._read_lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")      # committed means on disk: an acknowledged upload survives
        db.execute("PRAGMA busy_timeout=30000")
        db.row_factory = sqlite3.Row
        return db

    def close(self) -> None:
        self._db.close()
        self._read.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._read_lock:
            return self._read.execute(sql, args).fetchall()

    # --- settings ---------------------------------------------------------------------------------

    def setting(self, key: str, make=None) -> str | None:
        """A stored setting; with make, made (make()) and stored the first time it is asked for."""
        rows = self.query("SELECT value FROM settings WHERE key = ?", (key,))
        if rows or make is None:
            return rows[0]["value"] if rows else None
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO settings VALUES (?, ?)", (key, make()))
        return self.query("SELECT value FROM settings WHERE key = ?", (key,))[0]["value"]

    def set_setting(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (key, value))

    # --- tokens -----------------------------------------------------------------------------------

    def issue(self, student: str, *, instructor: bool = False) -> str:
        """A new token for student (32 random bytes), replacing any earlier one of theirs; only its
        sha256 is stored."""
        if not student or "/" in student or student in (".", "..") or any(ord(c) < 32 for c in student):
            raise UsageError(f"{student!r} cannot be a student's identifier (no '/', no control characters)")
        token = secrets.token_urlsafe(32)
        with self.transaction() as db:
            db.execute("UPDATE tokens SET revoked = ? WHERE student = ? AND revoked IS NULL", (time.time(), student))
            db.execute("INSERT INTO tokens VALUES (?, ?, ?, ?, NULL)", (token_hash(token), student, int(instructor),
                                                                       time.time()))
        return token

    def revoke(self, student: str) -> int:
        """Revoke every live token of student; how many there were."""
        with self.transaction() as db:
            return db.execute("UPDATE tokens SET revoked = ? WHERE student = ? AND revoked IS NULL",
                              (time.time(), student)).rowcount

    def who(self, token: str) -> tuple[str, bool] | None:
        """(student, is the instructor) for a live token, else None."""
        rows = self.query("SELECT student, instructor FROM tokens WHERE hash = ? AND revoked IS NULL",
                          (token_hash(token),))
        return (rows[0]["student"], bool(rows[0]["instructor"])) if rows else None

    def revocations(self) -> int:
        """How many tokens were ever revoked (a change: a token just stopped working)."""
        return self.query("SELECT COUNT(*) AS n FROM tokens WHERE revoked IS NOT NULL")[0]["n"]

    def students(self) -> list[str]:
        """Every student ever given a token (the instructor not among them), sorted."""
        return [r["student"] for r in self.query("SELECT DISTINCT student FROM tokens WHERE instructor = 0 "
                                                 "ORDER BY student")]

    # --- uploads ----------------------------------------------------------------------------------

    def accept(self, student: str, name: str, data: bytes, rules: Rules, *, now: float | None = None) -> Accepted | Refused:
        """Take a student's upload into the queue, or refuse it (size, deadline, hourly cap), in one
        transaction; it replaces the student's queued one. Committed before this returns."""
        now = time.time() if now is None else now
        if not data:
            return Refused(400, "the file is empty: send the kernel's .cu file")
        if len(data) > rules.max_bytes:
            return Refused(413, f"the upload is {len(data)} bytes; this course takes at most {rules.max_bytes} (a "
                           "kernel's .cu file, not a build or an archive)")
        late = rules.deadline is not None and now > rules.deadline
        if late and rules.late == "refuse":
            return Refused(403, f"the deadline ({time.strftime('%Y-%m-%d %H:%M:%S %Z', time.localtime(rules.deadline))})"
                           " has passed and this course takes no late uploads: ask the instructor")
        upload_id = secrets.token_urlsafe(12)
        with self.transaction() as db:
            if rules.per_hour is not None:
                recent = [r[0] for r in db.execute("SELECT received FROM uploads WHERE student = ? AND received > ? "
                                                   "ORDER BY received", (student, now - HOUR_S))]
                if len(recent) >= rules.per_hour:
                    wait = max(1, int(recent[-rules.per_hour] + HOUR_S - now + 0.999))
                    return Refused(429, f"{len(recent)} uploads in the last hour, the course's cap is "
                                   f"{rules.per_hour}: upload again in {wait} s", wait)
            # the queued one that never began grading: one that began (and was cut short by a restart, or
            # failed by the machine) is graded all the same, ahead of this one
            replaced = [r[0] for r in db.execute("SELECT id FROM uploads WHERE student = ? AND state = ? AND "
                                                 "claimed IS NULL", (student, QUEUED))]
            db.execute("UPDATE uploads SET state = ?, finished = ? WHERE student = ? AND state = ? AND claimed IS NULL",
                       (REPLACED, now, student, QUEUED))
            for old in replaced:
                _event(db, old, student, "done", {"state": REPLACED, "by": upload_id})
            db.execute("INSERT INTO uploads (id, student, name, data, sha256, received, late, state) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (upload_id, student, name, data, hashlib.sha256(data).hexdigest(), now, int(late), QUEUED))
            place = _place(db, upload_id)
            _event(db, upload_id, student, "phase", {"phase": QUEUED, "place": place})
        return Accepted(upload_id, place, late, tuple(replaced))

    def claim_wave(self, limit: int | None = None, *, now: float | None = None) -> list[Claimed]:
        """The next uploads to grade, at most one per student and none of a student with a grade in
        flight, the student served least recently first, marked `grading` (and each student's turn
        taken) in one transaction; at most limit of them (None: every claimable one)."""
        now = time.time() if now is None else now
        if not self.query("SELECT 1 FROM uploads WHERE state = ? LIMIT 1", (QUEUED,)):
            return []                         # an idle worker's look takes no write lock
        with self.transaction() as db:
            rows = db.execute(_CLAIMABLE).fetchall()
            chosen, seen = [], set()
            for r in rows:
                if r["student"] not in seen:
                    seen.add(r["student"])
                    chosen.append(r)
            chosen = chosen[:limit] if limit is not None else chosen
            turn = db.execute("SELECT COALESCE(MAX(turn), 0) FROM served").fetchone()[0]
            for r in chosen:
                turn += 1
                db.execute("UPDATE uploads SET state = ?, claimed = ?, tries = tries + 1 WHERE id = ?",
                           (GRADING, now, r["id"]))
                db.execute("INSERT OR REPLACE INTO served VALUES (?, ?)", (r["student"], turn))
            return [Claimed(r["id"], r["student"], r["name"], r["data"], r["sha256"], r["tries"] + 1) for r in chosen]

    def requeue_stale(self) -> list[str]:
        """Uploads a dead worker left `grading`, queued again (their grades were not stored): each is
        graded, before any newer upload of the same student's (the queue takes a student's oldest)."""
        with self.transaction() as db:
            rows = db.execute("SELECT id, student FROM uploads WHERE state = ?", (GRADING,)).fetchall()
            db.execute("UPDATE uploads SET state = ?, tries = MAX(tries - 1, 0) WHERE state = ?", (QUEUED, GRADING))
            for r in rows:
                _event(db, r["id"], r["student"], "phase", {"phase": QUEUED, "place": _place(db, r["id"]),
                                                            "again": "the grading worker restarted"})
        return [r["id"] for r in rows]

    def retry(self, upload_id: str, why: str) -> bool:
        """A grade the machine failed, queued again (graded before the student's newer upload, as
        after a restart); False where it was not in flight."""
        with self.transaction() as db:
            row = db.execute("SELECT student FROM uploads WHERE id = ? AND state = ?", (upload_id, GRADING)).fetchone()
            if row is None:
                return False
            db.execute("UPDATE uploads SET state = ? WHERE id = ?", (QUEUED, upload_id))
            _event(db, upload_id, row["student"], "phase", {"phase": QUEUED, "place": _place(db, upload_id),
                                                            "again": why})
        return True

    def finish(self, upload_id: str, grade: StoredGrade) -> bool:
        """Store an upload's grade (its result.json text, as a local grade writes it, its reports and
        its outcome's columns, all made from the Result in memory: grades.StoredGrade) and mark it
        done, in one transaction; False (nothing stored) where it was not in flight."""
        with self.transaction() as db:
            row = db.execute("SELECT student FROM uploads WHERE id = ? AND state = ?", (upload_id, GRADING)).fetchone()
            if row is None:
                return False
            db.execute("UPDATE uploads SET state = ?, finished = ?, status = ?, correct = ?, fraction = ?, tier = ?, "
                       "result = ?, report_md = ?, report_html = ? WHERE id = ?",
                       (DONE, time.time(), grade.status, None if grade.correct is None else int(grade.correct),
                        grade.fraction, grade.tier, grade.result, grade.report_md, grade.report_html, upload_id))
            rows = db.execute(f"SELECT {_COLUMNS} FROM uploads WHERE student = ?", (row["student"],)).fetchall()
            top = best(rows)
            _event(db, upload_id, row["student"], "done", {**summary(grade), "best": outcome_word(top) if top else None,
                                                           "best_fraction": top["fraction"] if top else None})
        return True

    def add_event(self, upload_id: str, kind: str, data: dict) -> None:
        with self.transaction() as db:
            row = db.execute("SELECT student FROM uploads WHERE id = ?", (upload_id,)).fetchone()
            if row is not None:
                _event(db, upload_id, row["student"], kind, data)

    # --- the leaderboard ----------------------------------------------------------------------------

    def set_alias(self, student: str, alias: str) -> str:
        """The alias student chose for the leaderboard ("" removes them from it); "" when it was
        taken, else a sentence saying what is wrong with it."""
        alias = " ".join(alias.split())
        with self.transaction() as db:
            if not alias:
                db.execute("DELETE FROM aliases WHERE student = ?", (student,))
                return ""
            if not ALIAS.fullmatch(alias):
                return "an alias is 2 to 24 letters, digits, spaces, '_' or '-'"
            taken = db.execute("SELECT student FROM aliases WHERE alias = ?", (alias,)).fetchone()
            if taken is not None and taken["student"] != student:
                return f"{alias!r} is someone else's alias: choose another"
            db.execute("INSERT OR REPLACE INTO aliases VALUES (?, ?)", (student, alias))
        return ""

    def alias(self, student: str) -> str:
        rows = self.query("SELECT alias FROM aliases WHERE student = ?", (student,))
        return rows[0]["alias"] if rows else ""

    def leaderboard(self) -> list[dict]:
        """Each student who chose an alias, by their best grade (rank), the best first: alias,
        outcome, fraction. No identifier leaves the store."""
        board = []
        for r in self.query("SELECT student, alias FROM aliases"):
            top = best(self.attempts(r["student"]))
            if top is not None and top["status"] == Outcome.GRADED and top["correct"]:
                board.append((rank(top), {"alias": r["alias"], "outcome": outcome_word(top), "fraction": top["fraction"]}))
        return [row for _rank, row in sorted(board, key=lambda x: x[0], reverse=True)]

    # --- reading ----------------------------------------------------------------------------------

    def upload(self, upload_id: str, student: str | None = None) -> sqlite3.Row | None:
        """An upload's row (without its bytes); with student, only where it is that student's."""
        rows = self.query(f"SELECT {_COLUMNS} FROM uploads WHERE id = ?" + (" AND student = ?" if student else ""),
                          (upload_id, student) if student else (upload_id,))
        return rows[0] if rows else None

    def place(self, upload_id: str) -> int | None:
        with self._read_lock:
            row = self._read.execute("SELECT state FROM uploads WHERE id = ?", (upload_id,)).fetchone()
            return _place(self._read, upload_id) if row is not None and row["state"] == QUEUED else None

    def attempts(self, student: str) -> list[sqlite3.Row]:
        """A student's uploads, the newest first (without their bytes)."""
        return self.query(f"SELECT {_COLUMNS} FROM uploads WHERE student = ? ORDER BY seq DESC", (student,))

    def all_uploads(self) -> list[sqlite3.Row]:
        return self.query(f"SELECT {_COLUMNS} FROM uploads ORDER BY seq")

    def report_html(self, upload_id: str) -> str:
        return self.query("SELECT report_html FROM uploads WHERE id = ?", (upload_id,))[0]["report_html"]

    def data(self, upload_id: str) -> bytes:
        return bytes(self.query("SELECT data FROM uploads WHERE id = ?", (upload_id,))[0]["data"])

    def events(self, *, after: int = 0, upload: str | None = None, limit: int = 1000) -> list[sqlite3.Row]:
        """Events after seq `after` (of one upload, or all), oldest first."""
        if upload is not None:
            return self.query("SELECT * FROM events WHERE upload = ? AND seq > ? ORDER BY seq LIMIT ?",
                              (upload, after, limit))
        return self.query("SELECT * FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit))

    def last_event(self) -> int:
        return self.query("SELECT COALESCE(MAX(seq), 0) AS s FROM events")[0]["s"]


_COLUMNS = ("seq, id, student, name, sha256, received, late, state, tries, claimed, finished, status, correct, "
            "fraction, tier, result")

# Queued uploads of students with nothing in flight, in the queue's order: the student whose turn
# came least recently first (never served: first of all), then the oldest upload.
_CLAIMABLE = f"""
SELECT u.id, u.student, u.name, u.data, u.sha256, u.tries FROM uploads u LEFT JOIN served s ON s.student = u.student
WHERE u.state = '{QUEUED}' AND NOT EXISTS (SELECT 1 FROM uploads g WHERE g.student = u.student AND g.state = '{GRADING}')
ORDER BY COALESCE(s.turn, 0), u.seq"""


def _place(db: sqlite3.Connection, upload_id: str) -> int:
    """Where a queued upload stands: 1 + the queued uploads the queue takes before it (students
    served less recently; then older uploads)."""
    row = db.execute("SELECT u.seq, COALESCE(s.turn, 0) AS turn FROM uploads u LEFT JOIN served s "
                     "ON s.student = u.student WHERE u.id = ?", (upload_id,)).fetchone()
    ahead = db.execute("SELECT COUNT(*) FROM uploads u LEFT JOIN served s ON s.student = u.student "
                       "WHERE u.state = ? AND (COALESCE(s.turn, 0) < ? OR (COALESCE(s.turn, 0) = ? AND u.seq < ?))",
                       (QUEUED, row["turn"], row["turn"], row["seq"])).fetchone()[0]
    return ahead + 1


def _event(db: sqlite3.Connection, upload_id: str, student: str, kind: str, data: dict) -> None:
    db.execute("INSERT INTO events (upload, student, kind, data, at) VALUES (?, ?, ?, ?, ?)",
               (upload_id, student, kind, json.dumps(data), time.time()))


# SQLite's journal files beside the store: made by SQLite with the store's own mode (so 0600 too).
JOURNALS = ("-wal", "-shm", "-journal")


def private_files(path: Path) -> None:
    """The store (made here where it is new) and its journal files readable and writable by the
    grader's user alone (0600), whatever the umask: it holds every student's source and result, the
    token hashes and the CSRF secret. SQLite makes its -wal and -shm with the store's mode."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(fd).st_uid == os.geteuid():    # another user's store: theirs to keep private
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for suffix in JOURNALS:
        try:
            os.chmod(f"{path}{suffix}", 0o600)
        except (FileNotFoundError, PermissionError):
            pass


def open_store(folder: Path) -> Store:
    return Store(Path(folder))
