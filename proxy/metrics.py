"""Prometheus metrics of one proxy process, on its own registry so apps don't share state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


@dataclass
class Metrics:
    """Requests, statuses, durations, upstream latency, in-flight requests and enrichment."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.requests = Counter(
            "proxy_requests_total",
            "Requests answered, by route kind, method and status.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "proxy_request_duration_seconds",
            "Time from request to the end of the response.",
            ["route"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.upstream_latency = Histogram(
            "proxy_upstream_latency_seconds",
            "Time from sending upstream to the upstream's response headers.",
            ["route"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "proxy_requests_in_flight", "Requests being handled now.", registry=self.registry
        )
        self.strategies = Counter(
            "proxy_enrich_strategy_total",
            "Chat requests by the enrichment strategy chosen.",
            ["strategy"],
            registry=self.registry,
        )
        self.prepare = Histogram(
            "proxy_enrich_prepare_seconds",
            "Time spent preparing a chat request before forwarding it.",
            buckets=BUCKETS,
            registry=self.registry,
        )

        # Labelled children looked up once: `.labels()` costs more than the update itself.
        self._children: dict[tuple[str, ...], tuple[Any, Any, Any]] = {}

    def observe_request(
        self, route: str, method: str, status: int, seconds: float, upstream_s: float | None
    ) -> None:
        key = (route, method, str(status))
        children = self._children.get(key)
        if children is None:
            children = (
                self.requests.labels(route, method, str(status)),
                self.duration.labels(route),
                self.upstream_latency.labels(route),
            )
            self._children[key] = children
        count, duration, upstream = children
        count.inc()
        duration.observe(seconds)
        if upstream_s is not None:
            upstream.observe(upstream_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
