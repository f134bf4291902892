"""Findings: what the compiled code shows about a kernel's speed, from the rubric's rules.

sass.py reads facts from each launched kernel; each rule of the rubric's `findings` section
is a set of conditions over those facts (per kernel, or over the launched kernels together)
with a message, advice, and a `measured` sentence that quotes this run's copies when the
run was timed on a GPU. On the emulator the findings stand in for the missing timing.
"""

from __future__ import annotations

import dataclasses
import operator

from grader.analysis.launches import launch_facts
from grader.analysis.sass import KernelCode
from grader.core.results import CountersSummary, FindingEntry, Launch, TimingResult
from grader.exercises.rubric import Condition, FindingRule, Rubric
from grader.exercises.schema import COUNTER_FACTS

_OPS = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">=": operator.ge, ">": operator.gt}
# Which costly instructions are the evidence for a fact.
_EVIDENCE = {"div64": "64-bit division", "double_ops": "double precision", "local_ops": "local memory",
             "spill_bytes": "local memory", "barriers": "barrier", "shared_ops": "shared memory",
             "global_loads": "global load", "max_load_bytes": "global load", "min_load_bytes": "global load",
             "global_stores": "global store", "max_store_bytes": "global store"}

# Launch facts of kernels together: the weakest launch speaks for them.
_LEAST = ("threads_per_block", "blocks", "blocks_per_sm", "occupancy", "gpu_fill", "achieved_occupancy_pct",
          "achieved_occupancy_ratio")
# Counter facts of kernels together: the worst one speaks for them (dram_over_model is the call's already).
_MOST = ("load_sectors_per_request", "store_sectors_per_request", "load_sector_excess", "store_sector_excess",
         "dram_pct", "l2_hit_pct", "dram_over_model")


def with_counters(kernels: list[KernelCode], counters: CountersSummary | None) -> list[KernelCode]:
    """The kernels with what the hardware counted for them (the facts of schema.COUNTER_FACTS; a
    kernel launched more than once in the call, its launches' mean), and each KernelCounters given
    its ideal sectors per request: a warp of 32 threads reading consecutively at the kernel's widest
    access touches 32 x width bytes, width 32-byte sectors (4 for floats, 16 for float4)."""
    if counters is None or not counters.kernels:
        return kernels
    out = []
    for k in kernels:
        mine = [c for c in counters.kernels if c.mangled == k.mangled]
        if not mine:
            out.append(k)
            continue
        facts = dict(k.facts)
        for side in ("load", "store"):
            width = facts.get(f"max_{side}_bytes") or 0
            ideal = float(width) if width else None
            values = [getattr(c, f"{side}_sectors_per_request") for c in mine]
            values = [v for v in values if v is not None]
            for c in mine:
                setattr(c, f"{side}_ideal", ideal)
            if values:
                facts[f"{side}_sectors_per_request"] = round(sum(values) / len(values), 2)
                if ideal:
                    facts[f"{side}_sector_excess"] = round(facts[f"{side}_sectors_per_request"] / ideal, 2)
        for name, field in (("achieved_occupancy_pct", "achieved_occupancy_pct"), ("dram_pct", "dram_pct"),
                            ("l2_hit_pct", "l2_hit_pct")):
            values = [getattr(c, field) for c in mine if getattr(c, field) is not None]
            if values:
                facts[name] = round(sum(values) / len(values), 1)
        theory = [c.theoretical_occupancy_pct for c in mine if c.theoretical_occupancy_pct]
        if theory and "achieved_occupancy_pct" in facts:
            facts["achieved_occupancy_ratio"] = round(facts["achieved_occupancy_pct"] / (sum(theory) / len(theory)), 2)
            facts["theoretical_occupancy_pct"] = round(sum(theory) / len(theory), 1)
        if counters.dram_over_model is not None:
            facts["dram_over_model"] = counters.dram_over_model
        out.append(dataclasses.replace(k, facts=facts))
    return out


def _holds(conditions: list[Condition], facts: dict) -> bool:
    """Every condition holds; a fact this kernel lacks (no launch seen, say) holds none."""
    return all(c.fact in facts and _OPS[c.op](facts[c.fact], c.value) for c in conditions)


def with_launches(kernels: list[KernelCode], launches: list[Launch], sms: int | None) -> list[KernelCode]:
    """The kernels with the facts of the launches the run saw (threads_per_block, blocks, occupancy...);
    where the run logged launches, the kernels it launched are the launched ones."""
    if not launches:
        return kernels
    seen = {lc.kernel for lc in launches}
    return [dataclasses.replace(k, launched=k.name in seen, facts={**k.facts, **launch_facts(launches, k.name, sms)})
            for k in kernels]


def _combined(kernels: list[KernelCode]) -> dict:
    """Facts of the launched kernels together: counts add up, widths are the widest."""
    facts: dict = {}
    for k in kernels:
        for key, value in k.facts.items():
            if key.startswith("max_") or key == "registers" or key in _MOST:
                facts[key] = max(facts.get(key, 0), value)
            elif key.startswith("min_") or key in _LEAST:
                facts[key] = min(facts[key], value) if facts.get(key) else value
            else:
                facts[key] = facts.get(key, 0) + value
    return facts


def _counted(facts: dict) -> list[str]:
    """What Nsight Compute counted, in one line, as a counter finding's evidence."""
    parts = []
    if "load_sectors_per_request" in facts:
        ideal = facts.get("max_load_bytes")
        parts.append(f"{facts['load_sectors_per_request']:g} sectors per load request"
                     + (f" (ideal {ideal:g})" if ideal else ""))
    if "store_sectors_per_request" in facts:
        ideal = facts.get("max_store_bytes")
        parts.append(f"{facts['store_sectors_per_request']:g} per store request" + (f" (ideal {ideal:g})" if ideal else ""))
    if "dram_over_model" in facts:
        parts.append(f"DRAM bytes {facts['dram_over_model']:g}x the byte model's")
    if "achieved_occupancy_pct" in facts:
        parts.append(f"achieved occupancy {facts['achieved_occupancy_pct']:g}%"
                     + (f" of {facts['theoretical_occupancy_pct']:g}% possible" if "theoretical_occupancy_pct" in facts else ""))
    if "dram_pct" in facts:
        parts.append(f"{facts['dram_pct']:g}% of DRAM peak")
    return ["Nsight Compute: " + ", ".join(parts)] if parts else []


def _evidence(rule: FindingRule, kernels: list[KernelCode], facts: dict) -> tuple[str, int | None, list[str]]:
    if rule.when[0].fact in COUNTER_FACTS:      # the hardware's counters are the evidence
        return "the counters", None, _counted(facts)
    label = _EVIDENCE.get(rule.when[0].fact)
    if label is None:            # a launch fact: the launch is the evidence
        shown = (f"{facts.get('blocks', '?')} blocks of {facts.get('threads_per_block', '?')} threads, "
                 f"{facts.get('blocks_per_sm', '?')} blocks per SM")
        return "the launch", None, [shown]
    wanted_width = f"{facts.get('max_load_bytes')}-byte" if "load" in label else ""
    picks = [(what, ins) for k in kernels for what, ins in k.costly
             if label in what and (not wanted_width or what.startswith(wanted_width))]
    lines = [f"line {ins.line}: {ins.text}" if ins.line else ins.text for _, ins in picks[:3]]
    if not picks:
        return "?", None, lines
    first = next((ins for _, ins in picks if ins.line), picks[0][1])
    return first.opcode, first.line, lines


class _Blank(dict):
    def __missing__(self, key: str) -> str:
        return "?"


def explain(kernels: list[KernelCode], rubric: Rubric, timing: TimingResult | None, gpu: str) -> list[FindingEntry]:
    launched = [k for k in kernels if k.launched] or kernels
    measured = {}
    if timing is not None:
        measured = {c.kind: c.gbps / timing.floor_gbps for c in timing.copies}
        measured.update(gpu=gpu or "GPU", fraction=timing.fraction)
    found = []
    for rule in rubric.findings:
        groups = [[k] for k in launched] if rule.scope == "kernel" else [launched]
        for group in groups:
            facts = group[0].facts if rule.scope == "kernel" else _combined(group)
            if not _holds(rule.when, facts):
                continue
            op, line, evidence = _evidence(rule, group, facts)
            names = ", ".join(k.name for k in group)
            values = _Blank(facts, kernel=names, evidence=op, line=line if line else "?",
                            where=f", line {line}" if line else "")
            message = " ".join(rule.message.format_map(values).split())
            if rule.measured and measured:
                try:
                    message += " " + " ".join(rule.measured.format_map({**values, **measured}).split())
                except (KeyError, ValueError):
                    pass
            found.append(FindingEntry(rule.code, names, message, " ".join(rule.advice.split()), evidence,
                                      "counters" if rule.when[0].fact in COUNTER_FACTS else "code"))
    return found
