"""The course server's store (grader/serve/store.py), driven directly: the fair queue's choice,
replacement, the hourly cap, the size limit, the deadline, a restart's requeue, tokens stored
hashed. No grading here (tests/test_serve_http.py drives a real server)."""

import json

import pytest

from grader.serve.store import DONE, GRADING, QUEUED, REPLACED, Accepted, Refused, Rules, Store, StoredGrade, best

SRC = b"__global__ void k() {}\n"


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path)
    yield s
    s.close()


def done(status="graded", correct=True, fraction=None, tier=None) -> StoredGrade:
    text = json.dumps({"schema": "grader.result/2", "status": status, "correct": correct, "fraction": fraction,
                       "tier": tier})
    return StoredGrade(text, "# r", "<p>r</p>", status, correct, fraction, tier)


def finish(store, upload_id, **doc):
    assert store.finish(upload_id, done(**doc))


def test_one_grade_in_flight_per_student_and_the_least_recently_served_first(store):
    a1 = store.accept("ann", "k.cu", SRC, Rules(), now=1.0)
    b1 = store.accept("bob", "k.cu", SRC, Rules(), now=2.0)
    assert [a1.place, b1.place] == [1, 2]
    assert [c.id for c in store.claim_wave(limit=1, now=3.0)] == [a1.id]
    a2 = store.accept("ann", "k.cu", SRC + b"//2", Rules(), now=4.0)       # ann's first is in flight
    assert [c.student for c in store.claim_wave(now=5.0)] == ["bob"]       # not ann's second: one in flight each
    assert store.claim_wave(now=5.5) == []
    finish(store, a1.id)
    cy = store.accept("cy", "k.cu", SRC, Rules(), now=6.0)
    # cy was never served, ann was served before bob: cy, then ann (bob has one in flight)
    assert [c.id for c in store.claim_wave(now=7.0)] == [cy.id, a2.id]
    finish(store, a2.id)
    finish(store, cy.id)
    b2, a3 = store.accept("bob", "k.cu", SRC, Rules(), now=8.0), store.accept("ann", "k.cu", SRC, Rules(), now=9.0)
    assert [c.student for c in store.claim_wave(now=10.0)] == ["ann"]      # bob's first is still in flight
    assert store.place(b2.id) == 1 and store.upload(a3.id)["state"] == GRADING


def test_a_newer_upload_replaces_the_queued_one_and_its_watchers_hear_so(store):
    first = store.accept("ann", "a.cu", SRC, Rules(), now=1.0)
    second = store.accept("ann", "b.cu", SRC + b"//b", Rules(), now=2.0)
    assert isinstance(second, Accepted) and second.replaced == (first.id,)
    assert store.upload(first.id)["state"] == REPLACED
    last = store.events(upload=first.id)[-1]
    assert last["kind"] == "done" and json.loads(last["data"]) == {"state": REPLACED, "by": second.id}
    assert [(c.id, c.name) for c in store.claim_wave(now=3.0)] == [(second.id, "b.cu")]


def test_the_hourly_cap_answers_429_with_when_to_retry(store):
    rules = Rules(per_hour=2)
    assert isinstance(store.accept("ann", "k.cu", SRC, rules, now=1000.0), Accepted)
    assert isinstance(store.accept("ann", "k.cu", SRC, rules, now=1100.0), Accepted)
    refused = store.accept("ann", "k.cu", SRC, rules, now=1200.0)
    assert isinstance(refused, Refused) and refused.status == 429
    assert refused.retry_after_s == 3600 - 200                 # the first of the hour leaves it at 4600
    assert isinstance(store.accept("bob", "k.cu", SRC, rules, now=1200.0), Accepted)      # per student
    assert isinstance(store.accept("ann", "k.cu", SRC, rules, now=4601.0), Accepted)


def test_size_and_deadline(store):
    big = store.accept("ann", "k.cu", b"x" * 2049, Rules(max_bytes=2048))
    assert isinstance(big, Refused) and big.status == 413
    late = store.accept("ann", "k.cu", SRC, Rules(deadline=100.0), now=101.0)
    assert isinstance(late, Accepted) and late.late and store.upload(late.id)["late"] == 1
    refused = store.accept("bob", "k.cu", SRC, Rules(deadline=100.0, late="refuse"), now=101.0)
    assert isinstance(refused, Refused) and refused.status == 403 and "deadline" in refused.message
    assert store.upload(store.accept("cy", "k.cu", SRC, Rules(deadline=100.0), now=99.0).id)["late"] == 0


def test_a_restart_queues_again_what_was_in_flight_and_stores_one_result(store, tmp_path):
    a = store.accept("ann", "k.cu", SRC, Rules())
    (claimed,) = store.claim_wave()
    assert claimed.data == SRC and claimed.tries == 1
    again = Store(tmp_path)                       # the next worker, after this one died mid-grade
    assert again.requeue_stale() == [a.id] and again.upload(a.id)["state"] == QUEUED
    assert not store.finish(a.id, done())   # the dead one's late result
    (reclaimed,) = again.claim_wave()
    assert reclaimed.id == a.id and reclaimed.tries == 1
    finish(again, a.id)
    assert not again.finish(a.id, done())   # stored once
    assert [e["kind"] for e in again.events(upload=a.id)].count("done") == 1
    assert again.upload(a.id)["state"] == DONE


def test_the_best_grade_is_the_highest_tier_then_fraction(store):
    ids = [store.accept(f"s{i}", "k.cu", SRC, Rules()).id for i in range(4)]
    store.claim_wave()
    finish(store, ids[0], correct=True, fraction=0.9, tier="silver")
    finish(store, ids[1], correct=True, fraction=0.7, tier="gold")
    finish(store, ids[2], status="compile_error", correct=None)
    finish(store, ids[3], status="infrastructure_error", correct=None)
    rows = [store.upload(i) for i in ids]
    assert best(rows)["id"] == ids[1]
    said = json.loads(store.events(upload=ids[1])[-1]["data"])
    assert said["best"] == "gold" and said["best_fraction"] == 0.7
    assert best(rows[2:3])["id"] == ids[2] and best(rows[3:]) is None


def test_tokens_are_stored_hashed_and_revocable(store, tmp_path):
    token = store.issue("ann")
    boss = store.issue("@instructor", instructor=True)
    assert store.who(token) == ("ann", False) and store.who(boss) == ("@instructor", True)
    assert store.who(token + "x") is None
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("grader.sqlite*"))
    assert token.encode() not in raw and boss.encode() not in raw
    again = Store(tmp_path)
    newer = again.issue("ann")                  # a new token replaces the old one
    assert again.who(token) is None and again.who(newer) == ("ann", False)
    assert again.revoke("ann") == 1 and again.who(newer) is None
    with pytest.raises(Exception, match="identifier"):
        again.issue("../etc")
    again.close()


def test_the_leaderboard_shows_chosen_aliases_only_best_first(store):
    ids = {s: store.accept(s, "k.cu", SRC, Rules()).id for s in ("ann", "bob", "cy", "dee")}
    store.claim_wave()
    finish(store, ids["ann"], correct=True, fraction=0.8, tier="silver")
    finish(store, ids["bob"], correct=True, fraction=0.95, tier="gold")
    finish(store, ids["cy"], correct=False)
    finish(store, ids["dee"], correct=True, fraction=0.99, tier="gold")
    assert store.set_alias("ann", "  fast  ann ") == "" and store.alias("ann") == "fast ann"
    assert store.set_alias("bob", "Fast Ann") != ""                # taken (letter case aside)
    assert store.set_alias("bob", "<script>") != ""                # not an alias
    assert store.set_alias("bob", "b0b") == "" and store.set_alias("cy", "cy") == ""
    assert [(r["alias"], r["outcome"]) for r in store.leaderboard()] == [("b0b", "gold"), ("fast ann", "silver")]
    assert store.set_alias("bob", "") == "" and [r["alias"] for r in store.leaderboard()] == ["fast ann"]


def test_a_machine_fault_is_graded_again_a_bounded_number_of_times_then_shown_as_the_machines(store, tmp_path):
    """The worker's end of a grade (worker._keep): an infrastructure_error is queued again until
    MAX_TRIES grades were made, then stored as the result (the machine's fault, said so)."""
    from grader.batch.grading import Graded
    from grader.batch.inputs import Entry
    from grader.core.outcomes import Outcome
    from grader.core.results import Result
    from grader.exercises import load_exercise
    from grader.report.files import Rendered
    from grader.serve import worker

    up = store.accept("ann", "k.cu", SRC, Rules())
    r = Result(exercise="bias_gelu_fused", submission={"path": "k.cu", "sha256": None}, backend="emulator",
               status=Outcome.GRADED, grader_version="t")
    r.stop(Outcome.INFRASTRUCTURE_ERROR, "no space left on device")
    documents = Rendered(r, load_exercise("bias_gelu_fused"))
    for attempt in range(1, worker.MAX_TRIES + 1):
        (claimed,) = store.claim_wave()
        assert claimed.tries == attempt
        worker._keep(store, Graded(Entry(up.id, None), r, documents=documents), claimed, documents)
        state = store.upload(up.id)["state"]
        assert state == (QUEUED if attempt < worker.MAX_TRIES else DONE), (attempt, state)
    assert store.upload(up.id)["status"] == "infrastructure_error"
    agains = [json.loads(e["data"]).get("again", "") for e in store.events(upload=up.id) if e["kind"] == "phase"]
    assert sum("no space left on device" in a for a in agains) == worker.MAX_TRIES - 1


@pytest.mark.slow
def test_with_slurm_a_wave_is_graded_by_a_job_array_and_stored(tmp_path):
    """`grader serve --slurm`: the worker grades a wave as `grader batch --slurm` grades a class
    (here submitit's local executor, as tests/test_slurm.py drives the batch's)."""
    from conftest import SUBMISSIONS
    from grader.batch.cluster import SlurmOptions
    from grader.serve import worker

    store = Store(tmp_path)
    up = store.accept("ann", "mine.cu", (SUBMISSIONS / "compile_error.cu").read_bytes(), Rules())
    worker.run(tmp_path, worker.Grading("bias_gelu_fused", "emulator", slurm=SlurmOptions(cluster="local", tasks=1,
                                                                                         gres=None)), once=True)
    row = store.upload(up.id)
    assert row["state"] == DONE and row["status"] == "compile_error"
    doc = json.loads(row["result"])
    assert doc["status"] == "compile_error" and doc["submission"]["path"].endswith("/mine.cu")    # its own name
    phases = [json.loads(e["data"]).get("phase") for e in store.events(upload=up.id)]
    assert phases[:2] == ["queued", "cluster"] and store.events(upload=up.id)[-1]["kind"] == "done"
    assert not list((tmp_path / ".grader-serve").glob("wave-*"))          # the wave's staging is gone
    store.close()


def test_a_course_folder_serves_one_exercise(tmp_path):
    from click.testing import CliRunner

    from grader.cli import cli

    Store(tmp_path).set_setting("exercise", "bias_gelu_fused")
    r = CliRunner().invoke(cli, ["serve", str(tmp_path), "--exercise", "rope_half_split"])
    assert r.exit_code == 2 and "is the course of bias_gelu_fused" in r.output


def test_an_upload_whose_grade_never_comes_back_is_at_last_the_machines(store):
    """No upload stays `grading`: a grade that returned nothing (a Slurm task that died) is queued
    again, and after MAX_TRIES stored as an infrastructure_error saying why."""
    from grader.batch.request import ClassRequest
    from grader.exercises import load_exercise
    from grader.serve import worker

    up = store.accept("ann", "k.cu", SRC, Rules())
    request = ClassRequest(store.folder, load_exercise("bias_gelu_fused"), "emulator")
    for attempt in range(worker.MAX_TRIES):
        (claimed,) = store.claim_wave()
        worker._not_graded(store, claimed, request, "its Slurm task did not finish")
    row = store.upload(up.id)
    doc = json.loads(row["result"])
    assert row["state"] == DONE and doc["status"] == "infrastructure_error"
    assert "after 3 tries: its Slurm task did not finish" in doc["message"] and doc["submission"]["path"] == "k.cu"


class _Drawn:
    """Stands in for exercises/pool.SharedStore: counts its draw (get) and its close."""

    made: list["_Drawn"] = []

    def __init__(self, rubric):
        self.got = self.closed = 0
        _Drawn.made.append(self)

    def get(self):
        self.got += 1
        return self

    def close(self):
        self.closed += 1


def test_each_wave_on_a_gpu_is_graded_on_private_cases_drawn_before_it_came(tmp_path, monkeypatch):
    """On a backend whose cases are private (a GPU's), the worker draws the next wave's class store
    while it waits (serve/worker.DrawnAhead), so a wave's first grade does not draw before its build
    (a lone upload on the H100 waited 2.5 s between "queued" and "building" for that): each wave gets
    a store already drawn, its own (a secret of its own), closed once the wave is done."""
    from types import SimpleNamespace

    from grader.serve import worker

    _Drawn.made = []
    monkeypatch.setattr(worker, "class_store", _Drawn)
    monkeypatch.setattr(worker, "class_machine",
                        lambda request: (SimpleNamespace(backend=SimpleNamespace(private_cases=True)), request))
    course = Store(tmp_path)
    course.accept("ann", "k.cu", SRC, Rules(), now=1.0)
    waves = []

    def grade_wave(store, wave, *, request, machine, shared=None):
        waves.append(([c.student for c in wave], shared, shared.got if shared else None, shared.closed if shared else None))
        if len(waves) == 1:                     # bob hands in while ann's wave is graded: a second wave
            store.accept("bob", "k.cu", SRC, Rules())
        for c in wave:
            finish(store, c.id)

    monkeypatch.setattr(worker, "grade_wave", grade_wave)
    worker.run(tmp_path, worker.Grading("bias_gelu_fused", "emulator"), once=True)
    assert [w[0] for w in waves] == [["ann"], ["bob"]]
    assert all(w[1] is not None and w[2] == 1 and w[3] == 0 for w in waves), waves     # drawn before, open during
    assert waves[0][1] is not waves[1][1]                                           # a store (a secret) a wave
    assert [d.closed for d in _Drawn.made[:2]] == [1, 1]                            # each closed after its wave
    assert len(_Drawn.made) == 3 and _Drawn.made[2].closed == 1     # the one drawn for no wave: closed at the end
    course.close()


def test_a_store_drawn_long_before_its_wave_is_drawn_again(monkeypatch):
    """The cache's sweep removes a run's folder an hour old: a store kept past DrawnAhead.KEEP_S (a
    server idle that long) is closed, and the wave draws its own."""
    from grader.serve import worker

    _Drawn.made = []
    monkeypatch.setattr(worker, "class_store", _Drawn)
    ahead = worker.DrawnAhead(rubric=None, private_cases=True)
    ahead.start()
    fresh = ahead.take()
    assert fresh is _Drawn.made[0] and fresh.closed == 0
    monkeypatch.setattr(worker.DrawnAhead, "KEEP_S", -1.0)         # every store is too old
    ahead.start()
    assert ahead.take() is None and _Drawn.made[1].closed == 1
    ahead.close()


def test_a_draw_ahead_that_fails_leaves_the_wave_to_draw_its_own(monkeypatch):
    from grader.serve import worker

    class Failing(_Drawn):
        def get(self):
            raise OSError("no space left on the cache's disk")

    monkeypatch.setattr(worker, "class_store", Failing)
    ahead = worker.DrawnAhead(rubric=None, private_cases=True)
    ahead.start()
    assert ahead.take() is None and Failing.made[-1].closed == 1
    public = worker.DrawnAhead(rubric=None, private_cases=False)       # the emulator's cases are public: no draw
    public.start()
    assert public.take() is None
