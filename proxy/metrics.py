"""Prometheus metrics of one proxy process, on its own registry so apps don't share state."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from math import inf

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

# Why not prometheus_client's Counter/Histogram/Gauge for the per-request metrics: each update
# there takes a lock and checks its arguments (a histogram observation costs 2-4 µs), and a
# chat request makes seven of them. These are plain numbers, updated only on the event loop's
# thread, and turned into the same metric families (names, labels, buckets, `_created` series)
# when /metrics is scraped. Metrics updated rarely can use prometheus_client on `registry`.


def _bound_text(bound: float) -> str:
    """A bucket's `le` as Prometheus clients write it: `+Inf`, `0.001`, `1.0`."""
    return "+Inf" if bound == inf else repr(bound)


class CounterChild:
    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class HistogramChild:
    __slots__ = ("bounds", "counts", "created", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.total = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        # Buckets are upper bounds, inclusive (`le`): the first bound >= amount counts it.
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.total += amount


class Counter:
    """A counter with labels; `labels(...)` children are kept, so a lookup is one dict get."""

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...]) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, labelnames
        self.children: dict[tuple[str, ...], CounterChild] = {}

    def labels(self, *values: str) -> CounterChild:
        child = self.children.get(values)
        if child is None:
            child = self.children[values] = CounterChild()
        return child

    def collect(self) -> Iterator[Metric]:
        total = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in self.children.items():
            total.add_metric([str(v) for v in values], child.value, created=child.created)
        yield total


class Histogram:
    """A histogram, with or without labels (then `observe` goes to the one child)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: tuple[str, ...] = (),
        buckets: tuple[float, ...] = BUCKETS,
    ) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, labelnames
        self.bounds = (*(float(b) for b in buckets), inf)
        self.children: dict[tuple[str, ...], HistogramChild] = {}
        if not labelnames:
            self.children[()] = HistogramChild(self.bounds)

    def labels(self, *values: str) -> HistogramChild:
        child = self.children.get(values)
        if child is None:
            child = self.children[values] = HistogramChild(self.bounds)
        return child

    def observe(self, amount: float) -> None:
        self.children[()].observe(amount)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        created = GaugeMetricFamily(
            self.name + "_created", self.documentation, labels=self.labelnames
        )
        for values, child in self.children.items():
            cumulative, buckets = 0, []
            for bound, count in zip(self.bounds, child.counts, strict=True):
                cumulative += count
                buckets.append((_bound_text(bound), float(cumulative)))
            family.add_metric([str(v) for v in values], buckets, child.total)
            created.add_metric([str(v) for v in values], child.created)
        yield family
        yield created


class Gauge:
    """A number that goes up and down (requests in flight)."""

    def __init__(self, name: str, documentation: str) -> None:
        self.name, self.documentation = name, documentation
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(self.name, self.documentation, value=self.value)


@dataclass(eq=False)  # hashable by identity: the registry keeps it as a collector
class Metrics:
    """Requests, statuses, durations, upstream latency, in-flight requests and enrichment."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.requests = Counter(
            "proxy_requests",
            "Requests answered, by route kind, method and status.",
            ("route", "method", "status"),
        )
        self.duration = Histogram(
            "proxy_request_duration_seconds",
            "Time from request to the end of the response.",
            ("route",),
        )
        self.upstream_latency = Histogram(
            "proxy_upstream_latency_seconds",
            "Time from sending upstream to the upstream's response headers.",
            ("route",),
        )
        self.in_flight = Gauge("proxy_requests_in_flight", "Requests being handled now.")
        self.strategies = Counter(
            "proxy_enrich_strategy",
            "Chat requests by the enrichment strategy chosen.",
            ("strategy",),
        )
        self.prepare = Histogram(
            "proxy_enrich_prepare_seconds",
            "Time spent preparing a chat request before forwarding it.",
        )
        self.documents = Counter(
            "proxy_documents",
            "Documents read, by where their text came from: parsed here, this process's"
            " cache, or the cache shared with other replicas through the object store.",
            ("source",),
        )
        self.registry.register(self)

    def describe(self) -> list[Metric]:
        # Known without collecting: the registry asks, to check for duplicate names.
        return list(self.collect())

    def collect(self) -> Iterator[Metric]:
        for metric in (
            self.requests,
            self.duration,
            self.upstream_latency,
            self.in_flight,
            self.strategies,
            self.prepare,
            self.documents,
        ):
            yield from metric.collect()

    def observe_request(
        self, route: str, method: str, status: int, seconds: float, upstream_s: float | None
    ) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.duration.labels(route).observe(seconds)
        latency = self.upstream_latency.labels(route)  # listed from the route's first request on
        if upstream_s is not None:
            latency.observe(upstream_s)

    def render(self, detailed: bool = True) -> bytes:
        """The exposition text. Not `detailed`: documents read are one series, whatever their
        source, since where a document's text came from (parsed now, or cached because some
        key sent the same bytes before) is not for every scraper to see."""
        if detailed:
            return generate_latest(self.registry)
        return generate_latest(_Merged(self))


class _Merged:
    """The registry's metrics with `proxy_documents_total` summed over its sources."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        documents = self.metrics.documents
        for family in self.metrics.registry.collect():
            if family.name != documents.name:
                yield family
                continue
            merged = CounterMetricFamily(
                documents.name, documents.documentation, labels=("source",)
            )
            children = documents.children.values()
            if children:
                created = min(child.created for child in children)
                total = sum(child.value for child in children)
                merged.add_metric(["all"], total, created=created)
            yield merged
