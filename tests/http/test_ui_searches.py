"""GET /ui: a request's card lists the searches the model wrote, turn by turn, each query as the
model wrote it (as text, never as HTML) and how many passages it gave (in headless Chromium)."""

from __future__ import annotations

from typing import Any

from tests.fakes.browser import Browser
from tests.fakes.tool_calls import Call, Calls, Reply, Say, search, tool_results
from tests.fakes.upstream import FakeUpstream
from tests.stores.support import FAST
from tests.toolloop.support import CATS, Proxy, file_search_tool, last_decision, model, ready

HOSTILE = '<img src=x onerror="window.pwned=1">cats</b>'
KEEPER = "lighthouse keeper fed the cats"
QWEN = '{{"name": "file_search", "arguments": {"queries": ["' + KEEPER + '"]}}}}'
"""A call written as text that its server did not parse (tests/toolloop/test_written_calls.py)."""

ROUNDS = """[...document.querySelectorAll('[data-id=%s] .search-round')].map((round) => ({
  round: round.dataset.round,
  calls: [...round.querySelectorAll('.search-call')].map((call) => {
    const given = call.querySelector('.search-given');
    const error = call.querySelector('.search-error');
    return {
      queries: [...call.querySelectorAll('.search-query')].map((q) => q.textContent),
      given: given && Number(given.dataset.given),
      error: error && error.textContent,
    };
  }),
}))"""


def shown(searches: dict[str, Any]) -> list[dict[str, Any]]:
    """What the card should list: the decision record's calls, grouped by their turn."""
    rounds: dict[int, list[dict[str, Any]]] = {}
    for call in searches["calls"]:
        rounds.setdefault(call["round"], []).append(
            {
                "queries": call["queries"],
                "given": None if call["error"] else call["given"],
                "error": call["error"] or None,
            }
        )
    return [{"round": str(turn), "calls": calls} for turn, calls in rounds.items()]


async def card(browser: Browser, base: str, request_id: str) -> str:
    await browser.goto(base + "/ui")
    found = f"!!document.querySelector('[data-id={request_id}] .searches')"
    await browser.wait_for(found, "the card's searches")
    text: str = await browser.eval(
        f"document.querySelector('[data-id={request_id}] .searches').textContent"
    )
    return text


async def test_each_turn_lists_the_queries_the_model_wrote_and_what_they_gave(
    make_proxy: Proxy, upstream: FakeUpstream, browser: Browser
) -> None:
    def script(body: dict[str, object]) -> Reply:
        done = tool_results(body)  # type: ignore[arg-type]
        if not done:  # two calls in one turn: one the proxy cannot read, one search
            return Calls.of(Call("file_search", "{oops"), search(HOSTILE, "cats on the steps"))
        if len(done) == 2:
            return Calls.of(search(KEEPER))
        return Say("Sardines.")

    model(upstream, script)
    base = make_proxy(vector_stores=FAST)
    client, store_id, _ = ready(base)
    client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": CATS}],
        extra_body={"enrich": {"search": "tool", "vector_store_ids": [store_id]}},
        extra_headers={"X-Request-ID": "searched"},
    )
    searches = last_decision(base)["decision"]["searches"]
    assert [call["round"] for call in searches["calls"]] == [1, 1, 2]
    assert any(call["given"] for call in searches["calls"])  # the counts shown are not all 0

    text = await card(browser, base, "searched")
    assert text.startswith("searches (tool): the model writes the searches")
    assert "· 3 turns · " in text
    rounds = await browser.eval(ROUNDS % "searched")
    assert rounds == shown(searches)
    assert rounds[0]["calls"][1]["queries"] == [HOSTILE, "cats on the steps"]
    assert "not valid JSON" in rounds[0]["calls"][0]["error"]
    # The model's query is text on the page, never markup: no element made, no script run.
    assert await browser.eval("document.querySelector('[data-id=searched] img') === null")
    assert await browser.eval("window.pwned === undefined")
    assert browser.problems == []


async def test_a_responses_search_written_as_text_is_listed_and_counted(
    make_proxy: Proxy, upstream: FakeUpstream, browser: Browser
) -> None:
    def qwen(body: dict[str, Any]) -> Reply:
        return Say("They were fed sardines.") if tool_results(body) else Say(QWEN)

    model(upstream, qwen)
    base = make_proxy(vector_stores=FAST)
    client, store_id, _ = ready(base)
    client.responses.create(
        model="m",
        input=CATS,
        tools=file_search_tool(store_id),
        extra_headers={"X-Request-ID": "written"},
    )
    searches = last_decision(base)["decision"]["searches"]
    assert searches["written_calls"] == 1

    text = await card(browser, base, "written")
    assert "1 call written as text, read by the proxy" in text
    rounds = await browser.eval(ROUNDS % "written")
    assert rounds == shown(searches)
    assert rounds[0]["calls"][0]["queries"] == [KEEPER]
    assert browser.problems == []
