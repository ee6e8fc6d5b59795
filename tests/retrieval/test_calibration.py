"""Calibrates MiniLM's affinity threshold: answering passages vs. unrelated questions."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from proxy.retrieval.chunking import chunk_document
from proxy.retrieval.embeddings import DefaultEmbedder
from proxy.retrieval.index import VectorIndex
from tests.retrieval.support import corpus_document

# (corpus file, question, a phrase of the answering passage, its page)
ANSWERABLE = [
    ("pdf/pdkids.pdf", "What did the bogles do to the Moon to hide her light?",
     "bury her in the mud", 4),
    ("pdf/pdkids.pdf", "When Jefferson's house burned, what did the slave say had been rescued?",
     "save your fiddle", 15),
    ("pdf/pdkids.pdf", "How was Frederick Douglass dressed when he ran away?", "sailor style", 21),
    ("pdf/pdkids.pdf", "What material do beavers use to build their dams?", "chiefly of mud", 25),
    ("pdf/pdkids.pdf", "What did the boys in the workhouse get to eat?", "thin gruel", 33),
    ("pdf/pdkids.pdf", "How did Fagin train the boys to steal handkerchiefs?", "snuff-box", 36),
    ("pdf/pdkids.pdf", "What is the meaning of the river name Wailuku?", "destroying water", 46),
    ("pdf/pdkids.pdf", "What are the spirits of the Yellow River called?", "Dai Wang", 48),
    ("pdf/tracemonkey.pdf", "How much faster did the JIT make some benchmarks?",
     "speedups of 10x", 1),
    ("pdf/tracemonkey.pdf", "How are JavaScript numbers represented inside traces?",
     "two representations for numbers", 5),
    ("pdf/tracemonkey.pdf", "How does the VM avoid repeatedly recording traces that fail?",
     "tried and failed", 6),
    ("pdf/tracemonkey.pdf", "Which optimizations run while the trace is being recorded?",
     "optimizations are performed as the trace is recorded", 8),
    ("text/readability-README.md", "How do I install the library?", "npm install @mozilla", 1),
    ("text/readability-README.md", "What is the default character threshold for an article?",
     "default 500", 2),
    ("text/readability-README.md", "How can I get a DOM document in Node.js?", "jsdom", 4),
    ("text/readability-README.md", "How do I protect against script injection from the output?",
     "DOMPurify", 5),
]  # fmt: skip

UNRELATED = [
    "What is the capital of Australia?",
    "How do I change a flat tyre on a bicycle?",
    "What is the recommended dose of ibuprofen for adults?",
    "Who won the football World Cup in 2018?",
    "Give me a recipe for chocolate chip cookies.",
    "How do I configure a VLAN on a network switch?",
    "What is the exchange rate between the euro and the yen?",
    "How do I renew my passport?",
    "What causes the northern lights?",
    "Which stocks should I invest in this year?",
]


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.slow
async def test_minilm_threshold_separates_answers_from_noise(
    corpus_dir: Path, tmp_path: Path
) -> None:
    embedder = DefaultEmbedder()
    index = VectorIndex.embedded(tmp_path / "store", embedder)
    docs = {name: corpus_document(corpus_dir / name) for name in sorted({c[0] for c in ANSWERABLE})}
    for doc in docs.values():
        await index.ensure_indexed(
            doc, functools.partial(chunk_document, doc, count_tokens=embedder.count_tokens)
        )
    answers: list[float] = []
    in_top3 = 0
    print("\nscore  rank  page  question")
    for name, question, phrase, page in ANSWERABLE:
        hits = await index.search(docs[name].sha256, await embedder.embed_query(question), 500)
        rank, hit = next((i, h) for i, h in enumerate(hits, 1) if phrase in squash(h.text))
        assert hit.page_start <= page <= hit.page_end
        in_top3 += any(h.page_start <= page <= h.page_end for h in hits[:3])
        answers.append(hit.score)
        print(f"{hit.score:.3f}  {rank:4d}  {page:4d}  {question}")
    noise: list[float] = []
    print("best score per document for unrelated questions")
    for question in UNRELATED:
        query = await embedder.embed_query(question)
        best = [(await index.search(doc.sha256, query, 1))[0].score for doc in docs.values()]
        noise.extend(best)
        print("  ".join(f"{score:.3f}" for score in best), f"  {question}")
    await index.close()
    print(f"answers {min(answers):.3f}–{max(answers):.3f}, noise {min(noise):.3f}–{max(noise):.3f}")
    print(f"answer page in the top 3: {in_top3}/{len(ANSWERABLE)}")
    threshold = embedder.default_threshold
    assert min(answers) > threshold
    # MiniLM cannot separate them fully: a few unrelated questions still find something.
    assert sum(score > threshold for score in noise) <= len(noise) // 5
