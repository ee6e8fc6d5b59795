"""A follow-up's history texts as the retriever ranks them: carried words by words alone, each
text at its weight."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio

from proxy.retrieval.history import HistoryRule, SearchText, Turn, search_texts
from proxy.retrieval.index import VectorIndex
from proxy.retrieval.retriever import Retriever
from tests.retrieval.support import CountingEmbedder, HashEmbedder, text_document
from tests.retrieval.test_retriever import Make


@pytest_asyncio.fixture
async def make(tmp_path: Path) -> AsyncIterator[Make]:
    opened: list[Retriever] = []

    def build(**fields: Any) -> Retriever:
        embedder = CountingEmbedder(HashEmbedder())
        fields.setdefault("chunk_tokens", 14)
        retriever = Retriever(
            index=VectorIndex.embedded(tmp_path / "chroma", embedder),
            embedder=embedder,
            count_tokens=embedder.count_tokens,
            chunk_overlap=0,
            passages_dir=tmp_path / "passages",
            **fields,
        )
        opened.append(retriever)
        return retriever

    yield build
    for retriever in opened:
        await retriever.close()


PAGES = [
    "The easy interface runs one transfer at a time and blocks until it is done.",
    "Cookies are kept in a jar file between runs, one cookie a line.",
    "XFERINFOFUNCTION is called often during a transfer with its progress counters.",
    "Proxies are set with the proxy option, tunnels with the tunnel option.",
    "Progress meters show how much is left: return nonzero to stop early.",
    "Timeouts limit how long a transfer may take in whole seconds.",
]


async def test_carried_words_rank_by_words_alone_rarest_in_the_document(make: Make) -> None:
    doc = text_document(PAGES, name="faq.txt")
    retriever = make(new_document_candidates=100)
    embedder = retriever.embedder
    assert isinstance(embedder, CountingEmbedder)
    question = "What is it for?"
    alone, _ = await retriever.search([doc], question, 2)
    assert all("XFERINFOFUNCTION" not in item.chunk.text for item in alone[0])
    carried = ("Use", "the", "XFERINFOFUNCTION", "callback", "transfer")
    terms = SearchText(question, 1.0, "terms", carried, pick=1)
    chosen: dict[str, list[str]] = {}
    ranked, _ = await retriever.search([doc], question, 2, also=[terms], carried=chosen)
    assert "XFERINFOFUNCTION" in ranked[0][0].chunk.text
    assert chosen == {"faq.txt": ["XFERINFOFUNCTION"]}  # the rarest it holds ("Use": none)
    # Ranked by words only: the question and its carried words are never embedded.
    assert not any("XFERINFOFUNCTION" in text for text in embedder.queries)
    # No carried word the document holds: nothing more is searched.
    chosen.clear()
    absent = SearchText(question, 1.0, "terms", ("zebra",), pick=2)
    await retriever.search([doc], question, 2, also=[absent], carried=chosen)
    assert chosen == {}


async def test_a_topic_shift_keeps_its_own_passage_first_against_its_conversation(
    make: Make,
) -> None:
    # Ten entries on stopping a transfer, each holding three of the earlier question's rare
    # words, and one on cookie jars: the question in its conversation ranks the cookie entry
    # last, the question alone first. Its own rankings must outweigh the conversation's at the
    # default weights (and would not at eight times the conversation's weight).
    rare = [f"knob{n}" for n in range(30)]
    knobs = [" ".join(rare[3 * n : 3 * n + 3]) for n in range(10)]
    pages = [f"Stop a running transfer from the callback: abort with {k}." for k in knobs]
    pages.insert(5, "Cookie jar format: Netscape lines.")
    doc = text_document(pages, name="faq.txt")
    retriever = make(new_document_candidates=100)
    earlier = [
        Turn("user", f"How do I stop a running transfer from the callback? {' '.join(rare)}"),
        Turn("assistant", "Return an error from the callback."),
    ]
    question = "Cookie jar format?"
    texts = search_texts(question, earlier, HistoryRule())
    assert [(text.source, text.weight) for text in texts] == [
        ("question", 1.0),
        ("conversation", 1.0),
        ("terms", 1.0),
    ]
    ranked, _ = await retriever.search([doc], question, 3, also=texts[1:])
    assert ranked[0][0].chunk.text.startswith("Cookie jar format")
    # The conversation's own ranking puts the cookie entry last: weighed eight times, it wins.
    heavy = [SearchText(texts[1].text, 8.0, "conversation")]
    outweighed, _ = await retriever.search([doc], question, 3, also=heavy)
    assert not outweighed[0][0].chunk.text.startswith("Cookie jar format")
