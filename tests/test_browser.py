"""The reports as a browser draws them: headless Chromium (Debian's `chromium`; .ci/run installs it)
loads each report at 1280 px inside a probe page that measures it.

What is checked: the page renders; every mistake map and the attempts chart are drawn with a
size; nothing scrolls sideways at 1280 px; no traceback reaches a student; the class table
sorts when a heading is clicked and links each student's report.
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from grader.exercises import load_exercise
from grader.grade.pipeline import grade_submission
from grader.report.history import Attempt
from grader.report.files import write_reports

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
if CHROMIUM is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI needs headless Chromium for the report checks (apt-get install chromium)")
    pytest.skip("no Chromium here (apt-get install chromium)", allow_module_level=True)

PROBE = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="f" src="%s" style="width:1280px;height:900px;border:0"></iframe><pre id="out"></pre>
<script>
document.getElementById("f").onload = function () {
  var d = this.contentDocument, e = d.documentElement;
  var box = function (s) { var b = s.getBoundingClientRect(); return [Math.round(b.width), Math.round(b.height)]; };
  var sorted = null, t = d.querySelector("#students");
  if (t) {
    t.querySelectorAll("th")[3].click(); t.querySelectorAll("th")[3].click();     // fraction, highest first
    sorted = Array.from(t.tBodies[0].rows).map(function (r) { return r.cells[0].innerText; });
  }
  var shown = Array.from(d.querySelectorAll("svg.map")).map(function (s) {
    return s.checkVisibility ? s.checkVisibility() : true; });
  d.querySelectorAll("details").forEach(function (x) { x.open = true; });      // every map drawn, to measure its text
  var overflow = [];
  d.querySelectorAll("svg.map").forEach(function (s) {
    var w = s.width.baseVal.value;
    s.querySelectorAll("text").forEach(function (t) {
      var b = t.getBBox();
      if (b.x < -0.5 || b.x + b.width > w + 0.5) overflow.push(t.textContent + " (" + Math.round(b.x + b.width) + " > " + w + ")");
    });
  });
  document.getElementById("out").textContent = "RESULT " + JSON.stringify({
    scrollWidth: e.scrollWidth, clientWidth: e.clientWidth, title: d.title,
    maps: Array.from(d.querySelectorAll("svg.map")).map(box),
    shown: shown, overflow: overflow,
    attempts: Array.from(d.querySelectorAll("svg.attempts")).map(box),
    links: Array.from(d.querySelectorAll("#students a")).map(function (a) { return a.getAttribute("href"); }),
    insight_links: Array.from(d.querySelectorAll("#insights a")).map(function (a) { return a.getAttribute("href"); }),
    spread_rows: d.querySelectorAll("#spreads tr").length,
    sorted: sorted, traceback: /Traceback|File ".*", line/.test(d.body.innerText),
    headings: Array.from(d.querySelectorAll("h2")).map(function (h) {
      return [h.innerText, Math.round(h.getBoundingClientRect().top)]; })});
};
</script></body></html>"""


def measure(page: Path) -> dict:
    probe = page.with_name("probe.html")
    probe.write_text(PROBE % page.name)
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                          "--virtual-time-budget=5000", "--window-size=1300,1000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120)
    found = re.search(r"RESULT (\{.*\})", out.stdout)
    assert found, f"Chromium drew no result (exit {out.returncode}): {out.stderr[-1500:]}"
    return json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))


def test_a_failed_grades_report_draws_its_maps_and_chart_without_sideways_scroll(tmp_path):
    rubric = load_exercise("bias_gelu_fused")
    result = grade_submission("submissions/bias_gelu_fused/bias_by_row.cu", rubric=rubric, backend="emulator")
    tries = [Attempt("/k.cu", "a", t, "graded", True, f, None, "cuda") for t, f in ((1.0, 0.59), (2.0, 0.81))]
    write_reports(result, rubric, tmp_path, attempts=tries)
    got = measure(tmp_path / "report.html")
    assert got["scrollWidth"] <= got["clientWidth"] <= 1280, got
    assert len(got["maps"]) == len(result.maps) > 0
    assert all(w > 200 and h > 60 for w, h in got["maps"]), got["maps"]
    assert len(got["attempts"]) == 1 and got["attempts"][0][0] > 200 and got["attempts"][0][1] > 50
    assert not got["traceback"]


@pytest.mark.parametrize("sample, first", [
    ("missing_bias.cu", ["What this means", "What to fix", "Where it went wrong"]),
    ("float4_launcher.cu", ["What this means"]),
    ("compile_error.cu", ["Why it was not graded"]),
])
def test_a_report_puts_what_to_do_next_first(tmp_path, sample, first):
    """Outcome, then the fix with the first wrong element, then the evidence (the first map drawn,
    the others folded), then speed and findings: for an incorrect grade the fix is on the first
    screen of a 1280 x 900 window (it sat about 6,700 px down, after 17 maps)."""
    rubric = load_exercise("bias_gelu_fused")
    result = grade_submission(f"submissions/bias_gelu_fused/{sample}", rubric=rubric, backend="emulator")
    write_reports(result, rubric, tmp_path)
    got = measure(tmp_path / "report.html")
    names = [h for h, _ in got["headings"]]
    assert names[:len(first)] == first, names
    assert got["overflow"] == [], got["overflow"]          # every caption and label inside its map, at every shape
    if "What to fix" in names:
        top = dict(got["headings"])["What to fix"]
        assert top < 900, got["headings"]
        assert names.index("What to fix") < names.index("What the compiled code shows"), names
        assert got["shown"][0] and got["maps"][0][0] > 200              # the first failing check's map, drawn
        assert len(got["shown"]) > 1 and not any(got["shown"][1:]), got["shown"]     # the rest folded until opened


def test_an_internal_error_shows_the_student_no_traceback(tmp_path):
    """A bug of the grader's own is an infrastructure error whose message carries a traceback for
    the report to the maintainers; the student's report says what happened, without it."""
    from grader.core.results import Result

    r = Result(exercise="bias_gelu_fused", submission={"path": "k.cu", "sha256": None}, backend="cuda",
               status="graded", grader_version="t")
    r.stop("infrastructure_error", "internal error in the grader (please report it): KeyError: 'x'\n"
           '  File "/grader/grade/pipeline.py", line 10, in _grade\n    x = d["x"]\n')
    write_reports(r, load_exercise("bias_gelu_fused"), tmp_path)
    got = measure(tmp_path / "report.html")
    assert not got["traceback"] and got["scrollWidth"] <= got["clientWidth"]


def test_the_class_page_sorts_by_fraction_and_links_each_students_report(tmp_path):
    from grader.batch.classreport import write_class_report
    from grader.batch.grading import Graded
    from grader.batch.inputs import Entry
    from grader.core.results import Result

    from grader.core.results import CountersSummary, FindingEntry, KernelCounters

    graded = []
    long = "`biasGeluFused` divides 64-bit integers (i % cols on size_t) by calling a division routine " * 3
    for who, fraction in (("ann", 0.59), ("bo", 0.95), ("cy", 0.77)):
        (tmp_path / who).mkdir()
        (tmp_path / who / "report.html").write_text("<html></html>")
        k = KernelCounters("biasGeluFused", "_Z", [1, 1, 1], [256, 1, 1], 40.0, 80.0, 3000.0 * fraction, 1 << 26, 4.0, 4.0)
        r = Result(exercise="e", submission={"path": who, "sha256": ""}, backend="cuda", status="graded",
                   grader_version="t", correct=True, tier="gold" if fraction > 0.9 else "below", fraction=fraction,
                   findings=[FindingEntry("div64", "biasGeluFused", long, "a", ["line 9: " + "X" * 150])]
                   if who != "bo" else [], counters=CountersSummary(kernels=[k]))
        graded.append(Graded(Entry(who, Path(who + ".cu")), r))
    write_class_report(graded, load_exercise("bias_gelu_fused"), tmp_path / "class.html")
    got = measure(tmp_path / "class.html")
    assert got["sorted"] == ["bo", "cy", "ann"]
    assert got["links"] == ["bo/report.html", "cy/report.html", "ann/report.html"]      # the rows, as sorted
    assert got["insight_links"] == ["ann/report.html"]            # the slowest student with the finding, linked
    assert got["spread_rows"] == 5                                # a heading and four counters
    assert {"What made the slow kernels slow", "What the hardware measured"} <= {h for h, _ in got["headings"]}
    assert got["scrollWidth"] <= got["clientWidth"]               # a long example line wraps
