"""Searching the files of vector stores: each file's passages ranked by the retriever, then one
ranking across files by score, with attribute filters and a score threshold."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proxy.documents.model import ParsedDocument
from proxy.stores.chunking import Variants, reference
from proxy.stores.filters import Filter, matches
from proxy.stores.records import FileRecord

if TYPE_CHECKING:
    from proxy.retrieval.chunking import Chunk
    from proxy.retrieval.history import SearchText
    from proxy.retrieval.scored import Scored

Load = Callable[[FileRecord, str], Awaitable[ParsedDocument]]
"""The parsed document of a store file, keyed for its chunking (when its passages are not
stored here: another replica indexed it, or the passages folder was cleared)."""


@dataclass(frozen=True)
class StoreHit:
    """A passage a store search found, in its file, with the score it was ranked by."""

    file: FileRecord
    scored: Scored

    @property
    def chunk(self) -> Chunk:
        return self.scored.chunk

    @property
    def score(self) -> float:
        return score_of(self.scored)

    def found(self) -> dict[str, Any]:
        """As a Responses `file_search_call` reports it in its `results`."""
        return {
            "file_id": self.file.id,
            "filename": self.file.filename,
            "score": self.score,
            "text": self.chunk.text,
            "attributes": self.file.attributes,
        }

    def result(self) -> dict[str, Any]:
        """As the search route answers it (`vector_store.search_results.page` data)."""
        return {
            "file_id": self.file.id,
            "filename": self.file.filename,
            "score": self.score,
            "attributes": self.file.attributes,
            "content": [{"type": "text", "text": self.chunk.text}],
        }


def score_of(scored: Scored) -> float:
    """The reranker's relevance when one is configured, else the cosine (what the affinity
    threshold of chat retrieval compares too)."""
    return scored.rerank if scored.rerank is not None else scored.dense


def searchable(files: Sequence[FileRecord], rule: Filter | None) -> list[FileRecord]:
    """The completed files whose attributes pass the filter."""
    return [
        record
        for record in files
        if record.status == "completed"
        and record.sha256
        and (rule is None or matches(rule, record.attributes))
    ]


def by_file(hits: Sequence[StoreHit]) -> list[tuple[FileRecord, list[Scored]]]:
    """The hits grouped by file, files in the order of their best hit, each file's in rank
    order (how the passage budget takes them: file by file, rank by rank)."""
    groups: dict[tuple[str, str], tuple[FileRecord, list[Scored]]] = {}
    for hit in hits:
        key = (hit.file.store_id, hit.file.id)
        groups.setdefault(key, (hit.file, []))[1].append(hit.scored)
    return list(groups.values())


def best_hits(
    found: Sequence[tuple[FileRecord, Scored]], threshold: float, limit: int
) -> list[StoreHit]:
    """One ranking across files: each passage once (its best score over the queries), scores
    at or below the threshold dropped, best first, at most `limit`."""
    best: dict[tuple[str, str, int], StoreHit] = {}
    for record, scored in found:
        hit = StoreHit(record, scored)
        key = (record.store_id, record.id, scored.chunk.index)
        if hit.score > threshold and (key not in best or best[key].score < hit.score):
            best[key] = hit
    ordered = sorted(
        best.values(), key=lambda h: (-h.score, h.file.created, h.file.id, h.chunk.index)
    )
    return ordered[:limit]


async def search_files(
    variants: Variants,
    files: Sequence[FileRecord],
    queries: Sequence[str],
    depth: int,
    load: Load,
    also: Sequence[SearchText] = (),
    carried: dict[str, list[str]] | None = None,
) -> list[tuple[FileRecord, Scored]]:
    """Every file's best `depth` passages for each query, by the retriever of its chunking;
    each query ranked with `also` too (a follow-up's conversation), as attached files are, the
    words carried into each file's search written into `carried`."""
    groups: dict[tuple[int, int], list[FileRecord]] = {}
    for record in files:
        groups.setdefault(variants.sizes(record.chunking), []).append(record)
    found: list[tuple[FileRecord, Scored]] = []
    for records in groups.values():
        retriever = variants.for_chunking(records[0].chunking)
        keys = [variants.key(record.sha256, record.chunking) for record in records]
        by_key = dict(zip(keys, records, strict=True))

        async def resolve(
            document: ParsedDocument, by_key: dict[str, FileRecord] = by_key
        ) -> ParsedDocument:
            return await load(by_key[document.sha256], document.sha256)

        documents = [
            reference(record.filename, key, record.kind)
            for record, key in zip(records, keys, strict=True)
        ]
        for query in queries:
            ranked, _ = await retriever.search(
                documents, query, depth, resolve=resolve, also=also, carried=carried
            )
            for record, hits in zip(records, ranked, strict=True):
                found.extend((record, hit) for hit in hits)
    return found
