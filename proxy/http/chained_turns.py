"""A native Responses turn chained to earlier ones (`previous_response_id`, `conversation`):
what the proxy kept of them, searched with, and kept again with the turn's own question and
answer (docs/responses.md, Chained turns)."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import structlog

from proxy.files.protocol import FileNotFound
from proxy.pipeline.document_report import warnings_header
from proxy.pipeline.exchange import Caller, Exchange
from proxy.pipeline.services import Services
from proxy.responses.chain import Chain, answer_text, extended, this_turn
from proxy.responses.owners import Kind, Owners

log = structlog.get_logger(__name__)
SWEEPS: set[asyncio.Task[int]] = set()
"""Sweeps of expired response records under way (held: a task nobody holds may be collected)."""


def _swept(task: asyncio.Task[int]) -> None:
    SWEEPS.discard(task)
    failure = None if task.cancelled() else task.exception()
    if failure is not None:
        log.warning("expired response records not swept", error=str(failure))
    elif not task.cancelled() and task.result():
        log.debug("expired response records swept", removed=task.result())


def chained_to(body: dict[str, Any]) -> tuple[Kind, str, str] | None:
    """The turns a request continues, as `(kind, id, param)` (after their owner was checked)."""
    previous = body.get("previous_response_id")
    if isinstance(previous, str):
        return "response", previous, "previous_response_id"
    conversation = body.get("conversation")
    ident = conversation.get("id") if isinstance(conversation, dict) else conversation
    return ("conversation", ident, "conversation") if isinstance(ident, str) else None


def chain_warnings(kind: str, earlier: Chain, gone: list[str]) -> list[str]:
    """The files of the earlier turns this one could not search again, one line each."""
    lines = []
    if earlier.not_kept:
        lines.append(
            f"{', '.join(earlier.not_kept)}: attached to an earlier turn of this {kind} by"
            " file_data or file_url; the proxy keeps only files uploaded to it, so this turn"
            " did not search them (attach them again, or upload them and attach them by"
            " file_id)"
        )
    if gone:
        lines.append(
            f"{', '.join(gone)}: attached to an earlier turn of this {kind}, deleted since;"
            " not searched"
        )
    return lines


class ChainedTurn:
    """One request's part in its chain: the earlier turns read before the pipeline runs, and
    this turn kept for the turns chained to it — its question once the upstream names the
    response, its answer once finished (before the last event goes out, so a client can chain
    at once). Blocking record reads and writes run off the event loop."""

    def __init__(
        self, services: Services, owners: Owners, caller: Caller, body: dict[str, Any]
    ) -> None:
        self.services = services
        self.owners = owners
        self.caller = caller
        keeps = services.settings.upstream.responses_chains
        self.chained = chained_to(body) if keeps else None
        # store: false — the upstream keeps nothing to chain to.
        self.keeping = keeps and body.get("store") is not False
        self.earlier = Chain()
        self.gone: list[str] = []
        self.turn = Chain()
        self.history: list[dict[str, Any]] = []

    async def read(self, messages: list[dict[str, Any]]) -> None:
        """The earlier turns, without the files deleted since (they would fail the turn);
        searched with only when the request asks something (not tool outputs alone)."""
        self.turn = this_turn(messages)
        if self.chained is None:
            return
        kind, ident, _ = self.chained
        self.earlier, self.gone = await asyncio.to_thread(self._earlier, kind, ident)
        if self.gone:
            self.earlier = self.earlier.without(set(self.gone))
        if any(message.get("role") == "user" for message in messages):
            self.history = self.earlier.messages

    def _earlier(self, kind: Kind, ident: str) -> tuple[Chain, list[str]]:
        """The chain kept of the earlier turns, and its file ids deleted since (blocking)."""
        earlier = self.owners.chain(kind, ident)
        gone = []
        for file_id in dict.fromkeys(earlier.file_ids):
            try:
                self.services.files.get(file_id, self.caller.scope)
            except FileNotFound:
                gone.append(file_id)
        return earlier, gone

    def origins(self, origins: list[int]) -> list[int]:
        """The input item each chat message came from, the earlier turns' from none (-1)."""
        return [-1] * len(self.history) + origins

    def note(self, exchange: Exchange) -> None:
        """What the turn was searched with, in the decision record (and the files it could
        not search again as warnings); the files' stored names for a turn naming them by id."""
        names = {ref.file_id: ref.name for ref in exchange.new_refs if ref.file_id}
        self.turn = self.turn.named(names)
        if self.chained is None:
            return
        kind, ident, param = self.chained
        exchange.decision.chain = {
            "from": param,
            "id": ident,
            "messages": len(self.history),
            "files": self.earlier.files if self.history else [],
            "not_kept": self.earlier.not_kept,
            "deleted": self.gone,
        }
        lines = chain_warnings(kind, self.earlier, self.gone)
        if lines:
            exchange.decision.warnings.extend(lines)
            header = warnings_header(exchange.decision.warnings)
            exchange.response_headers["X-Enrich-Warnings"] = header

    async def created(self, ident: str) -> None:
        """The upstream named the response: its owner, and the chain up to its question (a turn
        chained to an answer cut short has it), in one write; then, not waited for, expired
        records beside its own swept."""
        chain = extended(self.earlier, self.turn, "") if self.keeping else None
        await asyncio.to_thread(self.owners.record, "response", ident, self.caller.name, chain)
        sweep = asyncio.create_task(
            asyncio.to_thread(self.owners.sweep_beside, ident), context=contextvars.Context()
        )
        SWEEPS.add(sweep)
        sweep.add_done_callback(_swept)

    def _answered(self, ident: Any, answer: str) -> None:
        if isinstance(ident, str):
            chain = extended(self.earlier, self.turn, answer)
            self.owners.keep_chain("response", ident, lambda _: chain)
        if self.chained is not None and self.chained[0] == "conversation":
            turn = self.turn
            self.owners.keep_chain(
                "conversation", self.chained[1], lambda current: extended(current, turn, answer)
            )

    async def answered(self, response: dict[str, Any]) -> None:
        """The answer finished, as the model wrote it: kept with the response (and added to
        its conversation)."""
        if self.keeping:
            await asyncio.to_thread(self._answered, response.get("id"), answer_text(response))
