"""Reading a ``/metrics`` answer in tests and benches, with prometheus_client's parser.

``parse(text).value("parley_errors_total", kind="llm")`` is one sample (None if absent);
``parse(text).total('parley_bot_pauses_total{outcome="resumed"}')`` the sum of the
samples that carry those labels (0 if none does).
"""

from __future__ import annotations

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


class Scrape:
    """Parsed exposition text: families by name (counters without ``_total``, as the
    library names them) and lookups by sample name."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = {family.name: family for family in families}

    def samples(self) -> list[Sample]:
        return [sample for family in self.families.values() for sample in family.samples]

    def family_of(self, sample_name: str) -> Metric | None:
        """The family that holds samples named ``sample_name`` (None if none does)."""
        for family in self.families.values():
            if any(sample.name == sample_name for sample in family.samples):
                return family
        return None

    def value(self, name: str, **labels: str) -> float | None:
        """The sample ``name`` with exactly these labels (None if absent)."""
        for sample in self.samples():
            if sample.name == name and sample.labels == labels:
                return sample.value
        return None

    def total(self, selector: str) -> float:
        """The sum of the samples a selector matches, 0 when none does: ``name`` matches
        every label set, ``name{a="x"}`` those whose label ``a`` is ``x``."""
        name, wanted = _parse_selector(selector)
        return sum(
            sample.value
            for sample in self.samples()
            if sample.name == name and wanted.items() <= sample.labels.items()
        )


def parse(text: str) -> Scrape:
    """Parse ``text`` (ValueError if it is not the Prometheus text format)."""
    return Scrape(list(text_string_to_metric_families(text)))


def _parse_selector(selector: str) -> tuple[str, dict[str, str]]:
    # A selector is a sample line without its value: let the parser read it as one.
    (family,) = text_string_to_metric_families(f"{selector} 0\n")
    (sample,) = family.samples
    return sample.name, dict(sample.labels)
