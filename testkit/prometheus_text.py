"""A strict reader of the Prometheus text exposition format 0.0.4, for tests.

Checks the line grammar (HELP, TYPE, samples), that each family's TYPE comes before its
samples, that sample names belong to their family (``_bucket``/``_sum``/``_count`` for
histograms) and that histogram buckets are cumulative and end with ``+Inf`` = count.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'  # name="escaped value"
LABEL = r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"'
LABELS = rf"{PAIR}(?:,{PAIR})*,?"
VALUE = r"[-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|Inf)|NaN"
HELP_LINE = re.compile(rf"# HELP ({NAME}) (.*)")
TYPE_LINE = re.compile(rf"# TYPE ({NAME}) (counter|gauge|histogram|summary|untyped)")
SAMPLE_LINE = re.compile(rf"({NAME})(?:\{{({LABELS})?\}})? ({VALUE})(?: -?[0-9]+)?")

Labels = frozenset[tuple[str, str]]


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


@dataclass
class Family:
    name: str
    type: str = "untyped"
    help: str = ""
    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)


class Metrics:
    """Parsed exposition text: families by name, and lookups for tests."""

    def __init__(self, families: dict[str, Family]) -> None:
        self.families = families

    def value(self, name: str, **labels: str) -> float | None:
        """The sample ``name`` with exactly these labels (None if absent)."""
        for family in self.families.values():
            found = family.samples.get((name, frozenset(labels.items())))
            if found is not None:
                return found
        return None

    def total(self, name: str) -> float:
        """The sum of every sample named ``name`` (all label values)."""
        return sum(
            value
            for family in self.families.values()
            for (sample, _), value in family.samples.items()
            if sample == name
        )


def parse(text: str) -> Metrics:
    """Parse ``text``; raise AssertionError on the first line that breaks the format."""
    assert text.endswith("\n"), "the exposition ends with a newline"
    families: dict[str, Family] = {}
    current: Family | None = None
    for number, line in enumerate(text.splitlines(), 1):
        where = f"line {number}: {line!r}"
        if not line:
            continue
        if line.startswith("#"):
            if m := HELP_LINE.fullmatch(line):
                current = families.setdefault(m.group(1), Family(m.group(1)))
                current.help = m.group(2)
            elif m := TYPE_LINE.fullmatch(line):
                family = families.setdefault(m.group(1), Family(m.group(1)))
                assert not family.samples, f"TYPE after samples, {where}"
                family.type = m.group(2)
                current = family
            elif line.startswith(("# HELP", "# TYPE")):
                raise AssertionError(f"malformed comment, {where}")
            continue
        m = SAMPLE_LINE.fullmatch(line)
        assert m, f"malformed sample, {where}"
        name, labels_text, value_text = m.group(1), m.group(2) or "", m.group(3)
        labels = [(k, _unescape(v)) for k, v in re.findall(LABEL, labels_text)]
        assert len({k for k, _ in labels}) == len(labels), f"duplicate label, {where}"
        assert current is not None, f"sample before any TYPE, {where}"
        allowed = {current.name}
        if current.type == "histogram":
            allowed = {f"{current.name}_bucket", f"{current.name}_sum", f"{current.name}_count"}
        assert name in allowed, f"sample outside its family {current.name}, {where}"
        key = (name, frozenset(labels))
        assert key not in current.samples, f"duplicate sample, {where}"
        current.samples[key] = float(value_text.replace("Inf", "inf"))
    for family in families.values():
        if family.type == "histogram":
            _check_histogram(family)
    return Metrics(families)


def _check_histogram(family: Family) -> None:
    series: dict[Labels, list[tuple[float, float]]] = {}
    for (name, labels), value in family.samples.items():
        if name.endswith("_bucket"):
            le = dict(labels)["le"]
            rest = frozenset(p for p in labels if p[0] != "le")
            series.setdefault(rest, []).append((float(le.replace("Inf", "inf")), value))
    for rest, buckets in series.items():
        buckets.sort()
        counts = [c for _, c in buckets]
        assert counts == sorted(counts), f"{family.name}: buckets not cumulative"
        assert math.isinf(buckets[-1][0]), f"{family.name}: no +Inf bucket"
        count = family.samples[(f"{family.name}_count", rest)]
        assert buckets[-1][1] == count, f"{family.name}: +Inf bucket != count"
        assert (f"{family.name}_sum", rest) in family.samples
