"""Which kind of server the upstream is, from what it answers: each kind's probes, in the
registry's order (proxy.upstream.kinds), then the model list for hosted APIs.

Each probe asks for an endpoint only that kind serves and checks the fields only it sends
(cited from each server's source or documentation beside its signature, in the kind's module).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog

from proxy.config import UpstreamKind
from proxy.errors import ProxyError, UpstreamTimeout
from proxy.logs import probe_failed
from proxy.upstream.client import UpstreamClient
from proxy.upstream.facts import Detection
from proxy.upstream.kinds import PROFILES
from proxy.upstream.kinds.profile import Body, Probe, as_dict

log = structlog.get_logger(__name__)


def all_probes() -> list[Probe]:
    """Every kind's probes, in the order the proxy asks them."""
    return [probe for profile in PROFILES.values() for probe in profile.probes]


# Read the registry (proxy/upstream/kinds/__init__.py) to know how the proxy tells servers
# apart, in the order it asks.
PROBES: list[Probe] = all_probes()


def listing_kind(body: Body) -> UpstreamKind | None:
    """The kind whose `/v1/models` list this is, for kinds known by it (hosted APIs that state
    their models' windows), in the registry's order."""
    data = as_dict(body).get("data")
    if not isinstance(data, list):
        return None
    cards = [card for card in data if isinstance(card, dict)]
    for profile in PROFILES.values():
        if profile.lists is not None and profile.lists(cards):
            return profile.kind
    return None


async def _ask(upstream: UpstreamClient, probe: Probe) -> tuple[int, Body]:
    if probe.method == "GET":
        return await upstream.get_json(probe.path)
    return await upstream.post_json(probe.path, probe.payload)


async def detect_kind(
    upstream: UpstreamClient,
    probes: Sequence[Probe] | None = None,
    timeout_s: float | None = None,
) -> tuple[Detection, int]:
    """The upstream's kind and how many requests finding it took. Never raises: a failed
    probe gives `other`, uncertain, so that the next request asks again. `timeout_s` bounds
    all the probes together: an upstream that holds them open without an answer gives `other`,
    uncertain and `timed_out`."""
    asked = 0
    refused = False
    asking = ""
    try:
        async with asyncio.timeout(timeout_s):
            for probe in all_probes() if probes is None else probes:
                asking = probe.name
                status, body = await _ask(upstream, probe)
                asked += 1
                refused = refused or status in (401, 403)
                if status == 200 and probe.matches(body):
                    return Detection(probe.kind, probe.name, True, probe.version(body)), asked
            asking = "GET /v1/models"
            status, listing = await upstream.get_json("/v1/models")
            asked += 1
    except TimeoutError:
        log.warning("upstream probes unanswered", waiting_for=asking, seconds=timeout_s)
        return Detection(
            "other",
            f"unknown: {asking} was not answered in {timeout_s:g} s (upstream.probe_timeout_s)",
            certain=False,
            timed_out=True,
        ), asked + 1
    except ProxyError as error:
        probe_failed(log, "upstream probe failed", error.code, error.message)
        unreached = error.code in ("upstream_unreachable", "upstream_timeout")
        detection = Detection(
            "other",
            f"probe failed: {error.message}",
            False,
            failure=error if unreached else None,
            timed_out=isinstance(error, UpstreamTimeout),
        )
        return detection, asked
    refused = refused or status in (401, 403)
    kind = listing_kind(listing) if status == 200 else None
    if kind is not None:
        return Detection(kind, "GET /v1/models (context lengths in the list)"), asked
    if refused:
        return Detection("other", "probes refused for want of a key", certain=False), asked
    return Detection("other", "no probe matched"), asked
