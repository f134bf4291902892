"""JUnit XML: one testsuite per submission, one testcase per check, for CI dashboards.

A failing check is a <failure> whose message is the first mismatch; a check that did not
run is <skipped>; a submission that was not graded is one <error> testcase. The tier, the
fraction and GB/s are properties of the suite, and the tier a testcase of its own.
Built with ElementTree, never by joining strings.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from grader.core.outcomes import Outcome, Tier
from grader.core.results import CaseResult, Result
from grader.platforms.scoring import first_line


def _mismatch(c: CaseResult) -> str:
    if c.first_mismatch:
        m = c.first_mismatch
        return (f"first bad element {m.get('at', '')}: got {m.get('got')!r}, want {m.get('want')!r}; "
                f"{c.bad} of {c.total} wrong" + (f" ({c.unwritten} never written)" if c.unwritten else ""))
    return c.note or "failed"


def testsuite(result: Result, name: str | None = None) -> ET.Element:
    suite = ET.Element("testsuite", name=name or result.submission.get("path", "submission"),
                       time=f"{result.seconds:.3f}")
    props = ET.SubElement(suite, "properties")
    for key, value in (("exercise", result.exercise), ("backend", result.backend), ("status", result.status),
                       ("correct", result.correct), ("tier", result.tier), ("fraction", result.fraction),
                       ("fraction_ci", result.fraction_ci), ("gbps", result.gbps),
                       ("grader_version", result.grader_version), ("sha256", result.submission.get("sha256"))):
        ET.SubElement(props, "property", name=key, value="" if value is None else str(value))
    classname = result.exercise
    cases = failures = errors = skipped = 0
    if result.status != Outcome.GRADED:
        tc = ET.SubElement(suite, "testcase", classname=classname, name="build, screening and run", time="0")
        err = ET.SubElement(tc, "error", message=first_line(result.message)[:500],
                            type=Outcome(result.status).text)
        err.text = result.message
        cases, errors = 1, 1
    else:
        for c in result.cases:
            cases += 1
            tc = ET.SubElement(suite, "testcase", classname=f"{classname}.{c.kind}", name=c.name, time="0")
            if c.passed is None:
                ET.SubElement(tc, "skipped", message=c.note or "not run")
                skipped += 1
            elif c.passed is False:
                fail = ET.SubElement(tc, "failure", message=_mismatch(c)[:500], type="mismatch")
                fail.text = "\n".join([_mismatch(c)] + [f"{d.code}: {d.message}. {d.advice}" for d in result.diagnosis])
                failures += 1
        cases += 1
        tc = ET.SubElement(suite, "testcase", classname=f"{classname}.performance", name="tier", time="0")
        if not result.correct:
            ET.SubElement(tc, "skipped", message="only a correct kernel gets a tier")
            skipped += 1
        elif result.tier is None:
            ET.SubElement(tc, "skipped", message="tiers are graded only on a GPU")
            skipped += 1
        elif result.tier != Tier.GOLD:
            ET.SubElement(tc, "failure", type="tier",
                          message=f"{result.tier}: {result.fraction:.3f} of the copy floor").text = result.feedback
            failures += 1
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    return suite


def document(suites: list[ET.Element]) -> bytes:
    root = ET.Element("testsuites", name="grader")
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(sum(int(s.get(key, "0")) for s in suites)))
    root.extend(suites)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
