"""The prompt texts (docs/strategy.md, docs/retrieval.md), verbatim as the upstream gets them.

The expected texts are literals written out here, never built with the product's
own prompt functions: a sentence changed or lost there fails here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai

from tests.fakes.upstream import FakeUpstream
from tests.pipeline.test_enrich import text_part

CHAT = "/v1/chat/completions"
KEEPER = "The lighthouse keeper fed the cats every morning with fresh sardines."
BAKERY = "The bakery on the corner sells sourdough bread to the cats at dawn."


def chat(base: str, content: list[dict[str, Any]], enrich: dict[str, Any] | None = None) -> None:
    client = openai.OpenAI(base_url=base + "/v1", api_key="k", max_retries=0)
    client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": content}],  # type: ignore[list-item]
        extra_body={"enrich": enrich} if enrich else None,
    )


def sent_prompt(upstream: FakeUpstream) -> str:
    """The text of the last user message as the upstream received it."""
    content = upstream.last_to(CHAT).json["messages"][-1]["content"]
    assert isinstance(content, list) and len(content) == 1, content
    assert content[0]["type"] == "text"
    return str(content[0]["text"])


def test_full_content_prompt(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    base = make_proxy()
    chat(
        base,
        [
            {"type": "text", "text": "What is in it?"},
            text_part("a.txt", "First file."),
            text_part("b.md", "Second file."),
        ],
    )
    assert sent_prompt(upstream) == (
        "This is a Enriched Context Generation scenario.\n"
        "\n"
        "The following content was found in the files provided by the user.\n"
        "\n"
        "** a.txt full content **\n"
        "\n"
        "First file.\n"
        "\n"
        "** end of a.txt **\n"
        "\n"
        "** b.md full content **\n"
        "\n"
        "Second file.\n"
        "\n"
        "** end of b.md **\n"
        "\n"
        "Based on the content above, please provide a response to the user query.\n"
        "\n"
        "User query: What is in it?"
    )


def test_citations_prompt(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    # One passage from each file (retrieval_limit 1): files take turns, numbered in order.
    base = make_proxy(retrieval={"chunk_tokens": 20, "chunk_overlap": 0})
    chat(
        base,
        [
            {"type": "text", "text": "Who feeds the cats?"},
            text_part("keeper.txt", KEEPER),
            text_part("bakery.txt", BAKERY),
        ],
        {"strategy": "retrieval", "retrieval_limit": 1, "affinity_threshold": 0.1},
    )
    assert sent_prompt(upstream) == (
        "The following citations were found in the files provided by the user:\n"
        "\n"
        'Citation 1: "The lighthouse keeper fed the cats every morning with fresh sardines."\n'
        "\n"
        'Citation 2: "The bakery on the corner sells sourdough bread to the cats at dawn."\n'
        "\n"
        "Use the citations above to respond to the user query, only if they are relevant. "
        "Otherwise, respond to the best of your ability without them.\n"
        "\n"
        "User Query:\n"
        "\n"
        "Who feeds the cats?"
    )


def test_no_citations_prompt(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    base = make_proxy(retrieval={"chunk_tokens": 20, "chunk_overlap": 0})
    chat(
        base,
        [{"type": "text", "text": "Who feeds the cats?"}, text_part("keeper.txt", KEEPER)],
        {"strategy": "retrieval", "affinity_threshold": 1.0},
    )
    assert sent_prompt(upstream) == (
        "Important: No citations were found in the user files for the user query. "
        "In less than one sentence, inform the user of this. "
        "Then respond to the query to the best of your ability.\n"
        "\n"
        "User Query:\n"
        "\n"
        "Who feeds the cats?"
    )
