"""What an index of one document takes on disk, against what its owner is charged for it.

Indexes a text (the shared corpus's Shakespeare, else a generated one) with each chunk size
and vector size given, each into a fresh passage store and embedded Chroma (vectors are random
unit vectors of that size: the bytes do not depend on what they point at), closes the index so
that everything is on disk, and prints per index: passages, bytes of their text (what was
charged before), bytes on disk (Chroma, passage store) and what proxy.stores.footprint charges
now — which must never be below what is on disk.

    python bench/index_footprint.py [--chars 400000] [--tokens 64 250 1000] [--dims 64 384 1536]
        [--text FILE | --corpus PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import add_corpus_option, find_corpus
from proxy.documents.model import Page, ParsedDocument
from proxy.logs import configure_logging
from proxy.retrieval.index import VectorIndex
from proxy.retrieval.retriever import Retriever
from proxy.stores.footprint import index_footprint

SHAKESPEARE = Path("text") / "tinyshakespeare.txt"


class RandomEmbedder:
    """Unit vectors of `dims` dimensions; about four characters a token."""

    default_threshold = 0.1

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.name = self.fingerprint = f"random-{dims}"

    def count_tokens(self, text: str) -> int:
        return max(1, len(text) // 4)

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = np.random.default_rng(len(texts)).standard_normal((len(texts), self.dims))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors.astype(np.float32).tolist()  # type: ignore[no-any-return]

    async def embed_query(self, text: str) -> list[float]:
        return (await self.embed_documents([text]))[0]


def on_disk(folder: Path) -> int:
    return sum(path.stat().st_blocks * 512 for path in folder.rglob("*") if path.is_file())


def source_text(path: Path | None, chars: int) -> str:
    if path is not None and path.exists():
        return path.read_text()[:chars]
    line = "The keeper climbed the steps of the lighthouse and wrote the tide in the log. "
    return (line * (chars // len(line) + 1))[:chars]


async def one_index(root: Path, text: str, tokens: int, dims: int) -> tuple[int, int, int, int]:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    pages = tuple(Page(n + 1, text[i : i + 3000]) for n, i in enumerate(range(0, len(text), 3000)))
    document = ParsedDocument(
        "book.txt", hashlib.sha256(text.encode()).hexdigest(), "text", "plain", pages
    )
    embedder = RandomEmbedder(dims)
    index = VectorIndex.embedded(root / "chroma", embedder)
    retriever = Retriever(
        index=index,
        embedder=embedder,
        chunk_tokens=tokens,
        chunk_overlap=tokens // 8,
        count_tokens=embedder.count_tokens,
        passages_dir=root / "passages",
        background=False,
    )
    empty = on_disk(root)
    passages = await retriever.passages(document)
    await retriever.ensure_indexed(document)
    await retriever.close_indexing()
    await index.close()
    texts = [chunk.text for chunk in passages.chunks]
    written = on_disk(root) - empty
    return len(texts), sum(len(t.encode()) for t in texts), written, index_footprint(texts, dims)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=400_000)
    parser.add_argument("--tokens", type=int, nargs="+", default=[64, 250, 1000])
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 384, 1536])
    parser.add_argument("--text", type=Path, help="a plain-text document (default: the corpus's)")
    add_corpus_option(parser)
    args = parser.parse_args()
    if args.text is None:
        corpus = find_corpus(args.corpus, required=False)
        args.text = corpus / SHAKESPEARE if corpus else None
    configure_logging(level="warning")
    text = source_text(args.text, args.chars)
    print(f"one document of {len(text.encode()):,} bytes; chunk overlap an eighth")
    print(
        f"{'dims':>5} {'tokens':>6} {'passages':>8} {'text (old charge)':>18} "
        f"{'on disk':>11} {'charged now':>12} {'disk/text':>9} {'charged/disk':>12}"
    )
    with tempfile.TemporaryDirectory() as folder:
        for dims in args.dims:
            for tokens in args.tokens:
                count, text_bytes, written, charged = await one_index(
                    Path(folder) / "index", text, tokens, dims
                )
                print(
                    f"{dims:>5} {tokens:>6} {count:>8} {text_bytes:>18,} {written:>11,}"
                    f" {charged:>12,} {written / text_bytes:>9.1f} {charged / written:>12.2f}"
                )


if __name__ == "__main__":
    asyncio.run(main())
