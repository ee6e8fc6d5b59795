"""The search loop: the model's turns sent upstream one after another, its searches run between
them, until it answers, calls a function of the client's, or runs out of turns or tokens.

The client sees one answer: the text and thinking of every turn as they stream, and at the end
the client's own function calls, if any. The search calls, their results and the conversation
the model and the proxy keep between turns stay here (events say what was searched).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from proxy import jsonio
from proxy.config import ToolSearchSettings
from proxy.errors import ProxyError, UpstreamError
from proxy.pipeline.decision import SearchCall
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.search_space import LAST_TURN, SEARCH_FUNCTION, run_search
from proxy.pipeline.services import Services
from proxy.retrieval.follow_up import history_rule
from proxy.retrieval.history import earlier_turns
from proxy.toolloop.function import (
    CallError,
    object_arguments,
    proxy_queries,
    read_queries,
    search_function,
    unknown_function,
)
from proxy.toolloop.turn import Call, Shown, Turn, completion_chunk
from proxy.toolloop.written import may_be_call, written_calls
from proxy.upstream.relay import error_message, translate_client_error
from proxy.upstream.sse import event_json, sse_events

ROUTE = "/v1/chat/completions"
CALLS_PER_TURN = 8
"""Calls run from one turn; a model that makes more is told to put its queries in one call (a
turn of a thousand calls would otherwise be a thousand searches)."""
# Left out of every turn's body and set per turn.
PER_TURN = ("messages", "tools", "tool_choice", "stream", "stream_options")


@dataclass(frozen=True)
class Text:
    """Text or thinking of a turn, for the client now; `turn` says which turn it came from."""

    shown: Shown
    turn: int


@dataclass(frozen=True)
class Searching:
    """A search call the model made, about to run (`number`: its place among all of them)."""

    number: int
    queries: list[str]


@dataclass(frozen=True)
class Searched:
    """A search call run: the passages the model got back (as `file_search_call` results)."""

    number: int
    queries: list[str]
    results: list[dict[str, Any]]


@dataclass
class Answer:
    """How the loop ended: the last turn's finish, the client's own calls, all turns' usage."""

    finish_reason: str | None
    calls: list[Call] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    id: str | None = None
    model: str | None = None
    created: int | None = None


Event = Text | Searching | Searched | Answer
Send = Callable[[dict[str, Any]], Awaitable[aiohttp.ClientResponse]]


def turn_refused(status: int, number: int, message: str) -> ProxyError:
    """The upstream refused one of the search loop's turns: its own status and words, and what
    to do (its own log says why; one search instead of the loop goes without those turns)."""
    return ProxyError(
        f"the upstream answered {status} to turn {number} of the search loop: {message}; its "
        "log says why: ask again, or search once instead (enrich.search: once, X-Enrich-Search: "
        "once)",
        status=status,
        type="upstream_error",
        code="upstream_error",
    )


def added_usage(
    total: dict[str, Any] | None, usage: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Every turn's token counts added up: what the whole answer cost."""
    if not isinstance(usage, dict):
        return total
    total = dict(total or {})
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = int(total.get(key) or 0) + value
    return total


def first_choice(asked: Any, forced_search: bool) -> Any:
    """The first turn's tool_choice: the search function when the client forced file_search,
    `required` or a function the client named as asked; `auto` otherwise and after. (llama.cpp
    reads tool_choice as a string only and takes the object for `auto`; sent `required`, a
    model that writes its call as text went on writing blank lines to the token limit: the
    object, and the proxy's own search when no call comes, serve it better.)"""
    if forced_search:
        return {"type": "function", "function": {"name": SEARCH_FUNCTION}}
    if asked == "required" or isinstance(asked, dict):
        return asked
    return "auto"


def must_search(asked: Any, forced_search: bool, client_tools: list[Any]) -> bool:
    """Whether the first turn has to search: file_search forced, or `required` with no function
    of the client's beside the search (what else could it call?)."""
    return forced_search or (asked == "required" and not client_tools)


def client_names(body: dict[str, Any]) -> set[str]:
    names = set()
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return names


def turn_body(
    base: dict[str, Any],
    messages: list[dict[str, Any]],
    client_tools: list[Any],
    function: dict[str, Any],
    choice: Any,
    offer: bool,
) -> dict[str, Any]:
    """One turn's body: the request's own fields, the conversation so far, streamed with its
    usage; the search function beside the client's when the turn may call it."""
    body = {**base, "messages": messages, "stream": True}
    body["stream_options"] = {"include_usage": True}
    if offer:
        body["tools"] = [function, *client_tools]
        body["tool_choice"] = choice
    return body


def first_turn(exchange: Exchange, settings: ToolSearchSettings) -> dict[str, Any]:
    """The body the loop's first turn sends (what the preview shows)."""
    search = exchange.model_search
    assert search is not None
    body = exchange.body
    forced = exchange.file_search is not None and exchange.file_search.forced
    return turn_body(
        {k: v for k, v in body.items() if k not in PER_TURN},
        exchange.messages,
        list(body.get("tools") or []),
        search_function(search.scope(exchange.control_tokens), settings.queries_per_call),
        first_choice(body.get("tool_choice"), forced),
        offer=True,
    )


class SearchLoop:
    """Runs one request's loop; `events()` yields what the client is to see, in order."""

    def __init__(
        self,
        exchange: Exchange,
        services: Services,
        send: Send,
        settings: ToolSearchSettings | None = None,
    ) -> None:
        search = exchange.model_search
        assert search is not None
        self.exchange = exchange
        self.services = services
        self.send = send
        self.settings = settings or services.settings.tool_search
        self.record = search.record
        self.base = {k: v for k, v in exchange.body.items() if k not in PER_TURN}
        self.client_tools = list(exchange.body.get("tools") or [])
        self.client_names = client_names(exchange.body)
        self.messages = list(exchange.messages)
        self.function = search_function(
            search.scope(exchange.control_tokens), self.settings.queries_per_call
        )
        forced = exchange.file_search is not None and exchange.file_search.forced
        asked = exchange.body.get("tool_choice")
        self.choice = first_choice(asked, forced)
        self.must_search = must_search(asked, forced, self.client_tools)
        self.searches = 0
        self.first: Turn | None = None  # the first turn: its id, model and time name the answer

    def _body(self, offer: bool) -> dict[str, Any]:
        body = turn_body(
            self.base, self.messages, self.client_tools, self.function, self.choice, offer
        )
        if offer:
            self.choice = "auto"  # a forced or required first turn only
        return body

    async def _turn(self, body: dict[str, Any], number: int) -> AsyncIterator[Text | Turn]:
        """One turn: its text as it streams, then the whole turn."""
        response = await self.send(body)
        turn = Turn()
        if self.first is None:
            self.first = turn
        try:
            if response.status >= 400:
                raw = await response.read()
                try:
                    payload = jsonio.loads(raw)
                except ValueError:
                    payload = None
                message = error_message(payload) or raw.decode("utf-8", "replace")[:2000]
                raise turn_refused(response.status, number, message)
            if response.content_type != "text/event-stream":
                payload = jsonio.loads(await response.read())
                if not isinstance(payload, dict):
                    raise ValueError("not a JSON object")
                shown = turn.feed(completion_chunk(payload))
                if shown.content or shown.reasoning:
                    yield Text(shown, number)
            else:
                async for event in sse_events(response.content.iter_any()):
                    chunk = event_json(event)
                    if not isinstance(chunk, dict):
                        continue
                    if "error" in chunk and "choices" not in chunk:
                        # vLLM's way of failing once the stream has begun.
                        raise UpstreamError(
                            error_message(chunk) or "the upstream failed mid-stream",
                            code="upstream_error",
                        )
                    shown = turn.feed(chunk)
                    if shown.content or shown.reasoning:
                        yield Text(shown, number)
        except ValueError as error:
            raise UpstreamError(
                f"the upstream's answer is not a chat completion: {error}", code="bad_upstream"
            ) from error
        except (TimeoutError, aiohttp.ClientError) as error:
            failure = translate_client_error(error, self.services.upstream.base_url)
            if isinstance(error, aiohttp.ClientPayloadError):
                failure = UpstreamError(
                    f"upstream {self.services.upstream.base_url} broke off the stream in turn "
                    f"{number} of the search loop",
                    code="upstream_stream_broken",
                )
            raise failure from error
        finally:
            # Unread bytes close the connection: a client gone stops the upstream's generation.
            response.close() if not response.content.is_eof() else response.release()
        yield turn

    async def events(self) -> AsyncIterator[Event]:
        record = self.record
        usage: dict[str, Any] | None = None
        number = 0
        while True:
            number += 1
            offer = (
                not record.forced
                and number <= self.settings.rounds
                and record.tokens < self.settings.max_tokens
            )
            if not offer and not record.forced:
                record.forced = (
                    f"the model was still searching after {self.settings.rounds} turns "
                    "(tool_search.rounds)"
                    if number > self.settings.rounds
                    else f"the model wrote {record.tokens} tokens in its search turns "
                    f"(tool_search.max_tokens {self.settings.max_tokens})"
                )
                self._last_turn()
            turn = Turn()
            # Text that may be a search call written as text waits for the turn's end; so does
            # all of a turn that has to search: a server may answer instead (llama.cpp does).
            forcing = offer and number == 1 and self.must_search
            held: list[Text] = []
            deciding, written = offer, ""
            async for item in self._turn(self._body(offer), number):
                if isinstance(item, Turn):
                    turn = item
                elif forcing or (deciding and (held or item.shown.content)):
                    held.append(item)
                    written += item.shown.content
                    if not forcing and not may_be_call(written):
                        deciding = False
                        for text in held:
                            yield text
                        held = []
                else:
                    yield item
            record.rounds = number
            first = self.first or turn
            usage = added_usage(usage, turn.usage)
            calls = turn.ordered_calls() if offer else []
            if held and not calls and (turn.finish_reason != "length" or forcing):
                # A call written whole before the limit is one (a turn that has to search: a
                # model held to `required` may pad its call with blank lines to the limit).
                calls = written_calls(turn.content)
                if calls:
                    # The turn made these calls: its text was them (counted as such too).
                    record.written_calls += len(calls)
                    turn.calls = {call.index: call for call in calls}
                    turn.content, turn.finish_reason = "", "tool_calls"
                    held = []
            if forcing and not calls and self.exchange.query.strip():
                # The search the request forced, written by the proxy as the search without a
                # model reads the follow-up (`proxy_queries`); the answer made without it is
                # dropped.
                calls = [self._proxy_call()]
                record.searched_for_model = (
                    "the upstream answered without the search the request forced "
                    "(tool_choice): the proxy searched for the question"
                )
                turn.content, turn.finish_reason, held = "", "tool_calls", []
            for text in held:
                yield text
            empty = not calls and not turn.content.strip() and turn.finish_reason != "length"
            if empty and offer and self.searches:
                # Nothing for the user after searching (seen with a 1.5B model): asked once
                # more, without tools, told to answer from what it was given.
                record.forced = "the model answered nothing after its searches"
                self._last_turn()
                continue
            if turn.finish_reason == "length" or not calls:
                yield self._answer(turn, first, usage, [])
                return
            own = [call for call in calls if call.name in self.client_names]
            if own:
                searched = sum(call.name == SEARCH_FUNCTION for call in calls)
                record.stopped = (
                    f"the model called {', '.join(sorted({c.name for c in own}))} of the "
                    "client's functions: the answer goes back with the call"
                    + (f" ({searched} search call(s) of that turn not run)" if searched else "")
                )
                yield self._answer(turn, first, usage, own)
                return
            record.tokens += turn.written_tokens()
            self.messages.append(self._assistant(turn, calls))
            async for event in self._run_calls(calls, number):
                yield event

    async def _run_calls(self, calls: list[Call], number: int) -> AsyncIterator[Event]:
        for position, call in enumerate(calls):
            if position >= CALLS_PER_TURN:
                told = (
                    f"error: not run: at most {CALLS_PER_TURN} calls are run from one turn; "
                    f"give several queries in one {SEARCH_FUNCTION} call instead"
                )
                self._reply(call, told)
                self.record.calls.append(SearchCall(round=number, queries=[], error=told[7:]))
                continue
            if call.name != SEARCH_FUNCTION:
                self._reply(call, unknown_function(call.name))
                self.record.calls.append(
                    SearchCall(round=number, queries=[], error=f"unknown function {call.name!r}")
                )
                continue
            try:
                queries = read_queries(call.arguments, self.settings.queries_per_call)
            except CallError as error:
                self._reply(call, f"error: {error}")
                self.record.calls.append(SearchCall(round=number, queries=[], error=str(error)))
                continue
            self.searches += 1
            yield Searching(self.searches, queries.run)
            result = await run_search(self.exchange, self.services, queries.run, number)
            text = result.text
            if queries.dropped:
                text += (
                    f"\n\n(Only the first {len(queries.run)} queries were run: "
                    f"{queries.dropped} more were given.)"
                )
            self._reply(call, text)
            self.record.calls.append(result.record)
            yield Searched(self.searches, queries.run, result.results)
            await asyncio.sleep(0)  # a long run of searches still lets the loop breathe

    def _proxy_call(self) -> Call:
        """The forced search as the proxy writes it (`proxy_queries`, under the proxy's
        `retrieval.history`)."""
        messages = self.exchange.messages
        users = [at for at, message in enumerate(messages) if message.get("role") == "user"]
        earlier = earlier_turns(messages, users[-1] if users else None)
        rule = history_rule(self.services.settings.retrieval.history)
        queries = proxy_queries(self.exchange.query, earlier, rule)
        arguments = jsonio.dumps({"queries": queries}).decode()
        return Call(index=0, id="call_proxy_1", name=SEARCH_FUNCTION, arguments=arguments)

    def _assistant(self, turn: Turn, calls: list[Call]) -> dict[str, Any]:
        """The model's turn as the conversation keeps it: its calls, each with an id."""
        for position, call in enumerate(calls):
            call.id = call.id or f"call_{self.record.rounds}_{position}"
        text = turn.content if turn.content.strip() else None
        return {
            "role": "assistant",
            "content": text,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": object_arguments(call.arguments)},
                }
                for call in calls
            ],
        }

    def _reply(self, call: Call, text: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call.id, "content": text})

    def _last_turn(self) -> None:
        """The turn asked without tools: the model is told, after the last results."""
        last = self.messages[-1] if self.messages else None
        if last is not None and last.get("role") == "tool":
            self.messages[-1] = {**last, "content": f"{last['content']}\n\n{LAST_TURN}"}

    def _answer(
        self, turn: Turn, first: Turn, usage: dict[str, Any] | None, calls: list[Call]
    ) -> Answer:
        return Answer(
            finish_reason="tool_calls" if calls else turn.finish_reason or "stop",
            calls=calls,
            usage=usage,
            id=first.id,
            model=first.model or turn.model,
            created=first.created,
        )
