#!/usr/bin/env python3
"""The course server's figures (issue 63), on this machine: a real `grader serve` on 127.0.0.1.

1. upload to the first progress event (and to the first "building"), one upload at a time, each
   --gap seconds after the last one's grade (an idle server);
2. a burst of N uploads from N students until all are graded, against `grader batch` on the same
   N files (each file made unique, each run with a fresh build cache);
3. W clients watching progress (server-sent events) during a burst: a status request's 99th
   percentile and the server's CPU (its process, not the worker's) over the burst;
4. `kill -9` of the server mid-burst, a restart: every upload graded, none twice.

    python scripts/serve-bench.py --n 10 --watchers 500 --backend emulator --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.serve.client import _multipart  # noqa: E402
from grader.serve.store import Store  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
import benchmark  # noqa: E402


def _gpu_name() -> str | None:
    try:
        got = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return got.stdout.strip().splitlines()[0] if got.returncode == 0 and got.stdout.strip() else None


def rows(out: dict) -> list[list]:
    """The figures as docs/figures.md's rows (scripts/docs.py): [figure, measured, target, met (None: no target)]."""
    def span(values: list) -> str:
        values = [v for v in values if v is not None]
        return f"{min(values):g} to {max(values):g} ms" if values else "-"

    def met(value, test) -> bool | None:
        return None if value is None else bool(test(value))       # None: the figure was not measured

    first, building = out.get("upload_to_first_event_ms") or None, out.get("upload_to_building_ms", [])
    kill = out.get("kill9") or None
    n = out.get("n")
    return [
        ["upload to the first progress event", span(first or []), "< 200 ms", met(first, lambda v: max(v) < 200)],
        [f"upload to \"building\" (each {out.get('gap_s', 0):g} s after the last grade)", span(building), "", None],
        [f"a burst of {n} uploads until all are graded, against `grader batch`",
         f"{out.get('burst_server_s')} s against {out.get('burst_batch_s')} s ({out.get('burst_ratio')}x)", "<= 1.1x",
         met(out.get("burst_ratio"), lambda v: v <= 1.1)],
        [f"{out.get('watchers')} watchers during a burst: a status request's p99",
         f"{out.get('watch_status_p99_ms')} ms (p50 {out.get('watch_status_p50_ms')} ms)", "< 50 ms",
         met(out.get("watch_status_p99_ms"), lambda v: v < 50)],
        ["the server's CPU over that burst", f"{out.get('watch_server_cpu_cores')} cores", "< 1 core",
         met(out.get("watch_server_cpu_cores"), lambda v: v < 1)],
        ["`kill -9` mid-burst, then a restart", f"{(kill or {}).get('graded')} of {(kill or {}).get('uploads')} graded, "
         f"at most {(kill or {}).get('most_results_of_one')} result an upload", "every one graded, none twice",
         met(kill, lambda k: k.get("graded") == k.get("uploads") == n and k.get("most_results_of_one") == 1)],
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, folder: Path, args, env: dict):
        self.folder, self.args, self.env, self.port = folder, args, env, free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> "Server":
        self.proc = subprocess.Popen([sys.executable, "-m", "grader", "serve", str(self.folder), "--exercise",
                                      self.args.exercise, "--backend", self.args.backend, "--port", str(self.port)],
                                     stdout=open(self.folder / "server.log", "ab"), stderr=subprocess.STDOUT,
                                     env=self.env, start_new_session=True)
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise SystemExit("the server did not start: " + (self.folder / "server.log").read_text()[-2000:])

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)

    def cpu_s(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def post(server: Server, token: str, name: str, data: bytes) -> dict:
    body, kind = _multipart(name, data, {})
    req = urllib.request.Request(server.url + "/api/submissions", data=body, method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": kind})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def events(server: Server, token: str, upload: str, until: str = "done", on_event=None) -> None:
    req = urllib.request.Request(f"{server.url}/api/submissions/{upload}/events",
                                 headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        kind = None
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                data = json.loads(line[5:])
                if on_event:
                    on_event(kind, data)
                if kind == until or (until == "building" and data.get("phase") == "building") or kind == "done":
                    return


def unique(data: bytes, tag: str) -> bytes:
    return data + f"\n// {tag} {time.time_ns()}\n".encode()


def graded(folder: Path) -> tuple[int, int, int]:
    """(uploads done, uploads, the most done events of one upload)."""
    with sqlite3.connect(folder / "grader.sqlite") as db:
        done = db.execute("SELECT COUNT(*) FROM uploads WHERE state = 'done'").fetchone()[0]
        total = db.execute("SELECT COUNT(*) FROM uploads WHERE state != 'replaced'").fetchone()[0]
        most = db.execute("SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM events WHERE kind = 'done' "
                          "GROUP BY upload)").fetchone()[0]
    return done, total, most


def wait_all(folder: Path, n: int, timeout: float = 3600) -> float:
    t0 = time.monotonic()
    while graded(folder)[0] < n:
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"not all graded in {timeout} s: {graded(folder)}")
        time.sleep(0.1)
    return time.monotonic()


def course(work: Path, name: str, students: int) -> tuple[Path, list[str]]:
    folder = work / name
    folder.mkdir()
    store = Store(folder)
    toks = [store.issue(f"s{i:03d}") for i in range(students)]
    store.close()
    return folder, toks


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10, help="uploads in a burst (one per student)")
    ap.add_argument("--watchers", type=int, default=500)
    ap.add_argument("--file", type=Path, default=ROOT / "submissions" / "bias_gelu_fused" / "compile_error.cu")
    ap.add_argument("--exercise", default="bias_gelu_fused")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--gap", type=float, default=5.0,
                    help="seconds between one upload's grade and the next upload, in the latency figures (an idle server)")
    args = ap.parse_args()
    data = args.file.read_bytes()
    work = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    env = {**os.environ, "GRADER_CACHE_DIR": str(work / "cache-server")}
    # where it was measured: the commit and the device, as every figure says (scripts/benchmark.py's machine)
    where = benchmark.machine("cuda" if args.backend == "cuda" or (args.backend == "auto" and _gpu_name()) else "emulator")
    out: dict = {"kind": "serve", "machine": {**where, "host": platform.node(),
                                              "arch": platform.processor() or platform.machine()},
                 "backend": args.backend, "file": args.file.name, "n": args.n, "watchers": args.watchers,
                 "gap_s": args.gap}
    try:
        # 1. upload -> first event, and -> building (the server idle, one upload at a time)
        folder, toks = course(work, "latency", 5)
        server = Server(folder, args, env).start()
        time.sleep(3)                                   # the worker's start (its imports) is not an upload's
        first, building = [], []
        for i, tok in enumerate(toks):
            # An upload to an idle server: on a GPU the worker draws the next wave's private cases once
            # a wave is done (serve/worker.DrawnAhead), which an upload sent at once would wait for.
            time.sleep(args.gap)
            t0 = time.perf_counter()
            got = post(server, tok, "k.cu", unique(data, f"lat{i}"))
            stamps: dict = {}
            events(server, tok, got["id"], until="done", on_event=lambda k, d, s=stamps: (
                s.setdefault("first", time.perf_counter()),
                s.setdefault("building", time.perf_counter()) if d.get("phase") == "building" else None))
            first.append(stamps["first"] - t0)
            building.append(stamps["building"] - t0 if "building" in stamps else None)   # None: no build (JSON has no NaN)
        server.stop()
        out["upload_to_first_event_ms"] = [round(x * 1000, 1) for x in first]
        out["upload_to_building_ms"] = [round(x * 1000, 1) if x is not None else None for x in building]

        # 2. a burst of N against `grader batch` on the same files
        folder, toks = course(work, "burst", args.n)
        files = [unique(data, f"burst{i}") for i in range(args.n)]
        server = Server(folder, args, env).start()
        time.sleep(3)
        t0 = time.monotonic()
        threads = [threading.Thread(target=post, args=(server, tok, "k.cu", f)) for tok, f in zip(toks, files)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        out["burst_server_s"] = round(wait_all(folder, args.n) - t0, 2)
        server.stop()
        klass = work / "class"
        klass.mkdir()
        for i, f in enumerate(files):
            (klass / f"s{i:03d}.cu").write_bytes(f)
        # The batch on a cache of its own, warmed as the server's was (by one grade of another file):
        # each of the N files is new to both, the exercise's shared objects are built in both.
        batch_env = {**os.environ, "GRADER_CACHE_DIR": str(work / "cache-batch")}
        (work / "warm.cu").write_bytes(unique(data, "warm"))
        subprocess.run([sys.executable, "-m", "grader", "submit", str(work / "warm.cu"), "--exercise", args.exercise,
                        "--backend", args.backend, "--no-report"], capture_output=True, env=batch_env)
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "grader", "batch", str(klass), "--exercise", args.exercise, "--backend",
                        args.backend, "--report-dir", str(work / "batch-out")], check=False, capture_output=True,
                       env=batch_env)
        out["burst_batch_s"] = round(time.monotonic() - t0, 2)
        out["burst_ratio"] = round(out["burst_server_s"] / out["burst_batch_s"], 3)

        # 3. W watchers during a burst: a status request's p99, the server's CPU
        folder, toks = course(work, "watch", args.n)
        env3 = {**env, "GRADER_CACHE_DIR": str(work / "cache-watch")}
        server = Server(folder, args, env3).start()
        time.sleep(3)
        ids = [post(server, tok, "k.cu", unique(data, f"w{i}"))["id"] for i, tok in enumerate(toks)]
        watchers = [threading.Thread(target=events, args=(server, toks[i % args.n], ids[i % args.n]), daemon=True)
                    for i in range(args.watchers)]
        cpu0, t0 = server.cpu_s(), time.monotonic()
        [w.start() for w in watchers]
        latencies = []
        while graded(folder)[0] < args.n:
            i = len(latencies) % args.n
            req = urllib.request.Request(f"{server.url}/api/submissions/{ids[i]}",
                                         headers={"Authorization": f"Bearer {toks[i]}"})
            s = time.perf_counter()
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
            latencies.append(time.perf_counter() - s)
            time.sleep(0.02)
        wall = time.monotonic() - t0
        out["watch_status_requests"] = len(latencies)
        out["watch_status_p50_ms"] = round(statistics.median(latencies) * 1000, 2)
        out["watch_status_p99_ms"] = round(sorted(latencies)[max(0, int(len(latencies) * 0.99) - 1)] * 1000, 2)
        out["watch_server_cpu_cores"] = round((server.cpu_s() - cpu0) / wall, 3)
        for w in watchers:
            w.join(timeout=30)
        out["watchers_finished"] = sum(not w.is_alive() for w in watchers)
        server.stop()

        # 4. kill -9 mid-burst, restart: every upload graded once
        folder, toks = course(work, "kill", args.n)
        env4 = {**env, "GRADER_CACHE_DIR": str(work / "cache-kill")}
        server = Server(folder, args, env4).start()
        for i, tok in enumerate(toks):
            post(server, tok, "k.cu", unique(data, f"k{i}"))
        while graded(folder)[0] < max(1, args.n // 3):
            time.sleep(0.05)
        before = graded(folder)[0]
        server.kill9()
        time.sleep(1)
        server = Server(folder, args, env4).start()
        wait_all(folder, args.n)
        server.stop()
        done, total, most = graded(folder)
        out["kill9"] = {"done_before_kill": before, "graded": done, "uploads": total, "most_results_of_one": most}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["rows"] = rows(out)
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
