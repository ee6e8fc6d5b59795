"""Stage: who writes the searches — the model, calling the proxy's search function in a loop,
or the proxy, once for the last user message — from what was asked and what the upstream can."""

from __future__ import annotations

from typing import Any

from proxy.config import UpstreamKind
from proxy.errors import BadRequest
from proxy.pipeline.decision import SearchesRecord
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_search import ModelSearch
from proxy.pipeline.search_space import SEARCH_FUNCTION
from proxy.pipeline.services import Services
from proxy.upstream.facts import Fact
from proxy.upstream.kinds import profile

ONCE_BY_DEFAULT = (
    "Chat Completions are searched once for the last user message; the model writes its own "
    'searches with "enrich": {"search": "tool"} or X-Enrich-Search: tool'
)
NO_TOOLS_HERE: dict[str, str] = {
    "native": "the upstream speaks the Responses API itself (upstream.responses: native)",
    "text": "the model is sent a rendered prompt (models.<name>.adapter: text), which has no tools",
}


def choose_search_mode(
    asked: str,
    tool_asked: bool,
    tool_choice: Any,
    tools: Fact[bool | None],
    no_tools_here: str | None,
    model: str | None,
) -> tuple[str, str]:
    """(`tool` | `once` | `off`, why). `tool_asked`: a Responses file_search tool came;
    `no_tools_here`: why this route cannot carry tools, if it cannot."""
    if asked == "once":
        return "once", "enrich.search: once"
    if asked == "auto" and not tool_asked:
        return "once", ONCE_BY_DEFAULT
    if tool_choice == "none":
        return "off", "tool_choice none: the model may call no function, so it searches nothing"
    if no_tools_here is not None:
        return "once", f"searched once: {no_tools_here}"
    source = tools.source or "nothing said"
    if tools.value is True:
        return "tool", f"the model writes the searches: its server parses tool calls ({source})"
    name = f"models.{model or '<name>'}.tools"
    if tools.value is False:
        return (
            "once",
            f"searched once: the upstream does not parse the model's tool calls ({source})",
        )
    return "once", (
        f"searched once: whether the upstream parses the model's tool calls is unknown ({source}); "
        f"{name}: true says it does"
    )


def _no_tools_here(exchange: Exchange, services: Services, kind: UpstreamKind) -> str | None:
    if exchange.fixed_route:
        return NO_TOOLS_HERE["native"]
    if services.settings.model_settings(exchange.model).adapter == "text":
        return NO_TOOLS_HERE["text"]
    return profile(kind).no_search_loop or None


def _refuse_clashes(body: dict[str, Any]) -> None:
    """A function of the client's named like the search function, or several answers at once,
    cannot go with a search loop: a 400 saying what to change."""
    for index, tool in enumerate(body.get("tools") or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("name") == SEARCH_FUNCTION:
            raise BadRequest(
                f"tools[{index}]: a function of yours is named {SEARCH_FUNCTION!r}, the name of "
                "the proxy's search function: rename it, or search once (enrich.search: once)",
                param=f"tools[{index}].function.name",
                code="invalid_value",
            )
    count = body.get("n")
    if isinstance(count, int) and not isinstance(count, bool) and count > 1:
        raise BadRequest(
            "n > 1 cannot go with searches the model decides on (one answer per search loop):"
            " ask for one, or search once (enrich.search: once)",
            param="n",
            code="invalid_value",
        )


async def choose_search(exchange: Exchange, services: Services) -> None:
    asked = exchange.options.search
    tool_asked = exchange.file_search is not None
    if asked == "auto" and not tool_asked:
        return  # a request that asked nothing of searches is searched as ever, unrecorded
    something = bool(exchange.new_refs or exchange.old_refs or exchange.store_search is not None)
    tools: Fact[bool | None] = Fact(None, False, "")
    no_tools_here = None
    wanted = asked == "tool" or (asked == "auto" and tool_asked)
    if wanted and something:
        tools = (await services.abilities.of(exchange.model)).tools
        kind = (await services.introspection.facts(exchange.model)).kind.kind
        no_tools_here = _no_tools_here(exchange, services, kind)
    if not something:
        mode, reason = "once", "nothing to search: no files and no vector stores"
    else:
        mode, reason = choose_search_mode(
            asked,
            tool_asked,
            exchange.body.get("tool_choice"),
            tools,
            no_tools_here,
            exchange.model,
        )
    record = exchange.decision.searches = SearchesRecord(mode=mode, asked=asked, reason=reason)
    exchange.response_headers["X-Enrich-Search"] = mode
    if mode == "off":
        exchange.store_search = None  # the model may not search them
        exchange.decision.vector_stores = []
    elif mode == "tool":
        _refuse_clashes(exchange.body)
        exchange.model_search = ModelSearch(record)
