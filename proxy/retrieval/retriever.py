"""The retrieval edge as the pipeline sees it: each document's passages ranked for a query."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from proxy.disk import DiskRoom
from proxy.documents.model import ParsedDocument
from proxy.retrieval.chunking import CHUNKER_VERSION, Chunk, chunk_document
from proxy.retrieval.document_ranking import (
    RANKINGS,
    carried_texts,
    no_cosines,
    overview_first,
    rank_passages,
    with_neighbours,
)
from proxy.retrieval.embeddings import Embedder
from proxy.retrieval.function_words import detect_language, query_language
from proxy.retrieval.history import SearchText
from proxy.retrieval.index import VectorIndex
from proxy.retrieval.indexing import STORE_DOWN, Indexer
from proxy.retrieval.lease import Leases
from proxy.retrieval.new_document import BY_WORDS, NewDocuments, Status
from proxy.retrieval.overview import OverviewRouter
from proxy.retrieval.passages import DocumentPassages, PassagesMissing, PassageStore
from proxy.retrieval.place_finder import Found, find_place
from proxy.retrieval.place_ranking import PLACE_EMBEDDED, described, place_first, place_order
from proxy.retrieval.places import parse_place
from proxy.retrieval.rerank import Reranker
from proxy.retrieval.scored import Scored
from proxy.retrieval.sentence_windows import WindowShape, windows
from proxy.retrieval.space import Space
from proxy.retrieval.translation import Translate, Translation

NO_WINDOW = WindowShape()

Resolve = Callable[[ParsedDocument], Awaitable[ParsedDocument]]


@dataclass
class Retriever:
    """Finds each document's passages closest to a query; indexes new documents on the way."""

    index: VectorIndex
    embedder: Embedder
    chunk_tokens: int
    chunk_overlap: int
    count_tokens: Callable[[str], int]
    ranking: str = "hybrid"
    new_document_candidates: int = 16
    candidate_s: float = 0.0
    """A new document's question ranks by meaning as many lexical candidates as its embedder
    embeds in this long (the proxy: CANDIDATE_S); 0: new_document_candidates exactly."""
    places: bool = True
    """Whether a question naming a place ("in chapter 3", "Table 2") gets that place first."""
    whole_document_s: float = 0.0
    """A new document whose embedding would take at most this long is embedded whole before
    its first answer; a larger one is answered from its candidates (0: only documents no
    larger than the candidates; the proxy's setting is `retrieval.whole_document_s`)."""
    reranker: Reranker | None = None
    rerank_top_n: int = 20
    passages_dir: Path | None = None  # None: passages kept in memory only
    languages: frozenset[str] | None = None
    """The languages the embedder reads (None: any): text in others is ranked by its words."""
    count_unread: Callable[[str], int] = field(default=lambda text: characters_as_tokens(text))
    """Sizes passages of a language the embedder does not read (wiring: cl100k tokens)."""
    leases: Leases | None = None
    background: bool = True
    overview_affinity: float | None = None
    """A question this close to an overview question (proxy.retrieval.overview) gets each
    document's opening and conclusion first; None: never (an embedder not calibrated for it)."""
    multilingual: Embedder | None = None
    """Embeds the documents in the languages the embedder does not keep (and the questions
    about them), in `multilingual_index`; None: those it does not read are ranked by their
    words."""
    multilingual_index: VectorIndex | None = None
    multilingual_overview_affinity: float | None = None
    """The multilingual embedder's `overview_affinity`, for a question in a language the
    embedder does not read (its translation, if any, is the embedder's); None: never."""
    own_documents: frozenset[str] | None = None
    """With a multilingual embedder: the languages of the documents the embedder keeps (the
    rest go to the multilingual one); None: those it reads. MiniLM half reads German, enough
    for a German question about an English text, but e5 ranks German documents better."""
    disk: DiskRoom | None = None
    """The data folder's disk: passages are not written below its reserve."""
    indexer: Indexer = field(init=False)
    store: PassageStore = field(init=False)
    router: OverviewRouter | None = field(init=False)
    second_router: OverviewRouter | None = field(init=False)
    primary: Space = field(init=False)
    second: Space | None = field(init=False)

    def __post_init__(self) -> None:
        if self.ranking not in RANKINGS:
            raise ValueError(f"unknown ranking {self.ranking!r} (expected one of {RANKINGS})")
        least = self.overview_affinity
        self.router = None if least is None else OverviewRouter(least)
        self.store = PassageStore(
            self.passages_dir, self.chunking_settings, self.chunks_of, self.disk
        )
        self.indexer = Indexer(self.index, self.embedder, self.settings, leases=self.leases)
        self.primary = Space(self.embedder, self.index, self.indexer, self.settings)
        self.second = None
        self.second_router = None
        keeps_all = self.languages is None and self.own_documents is None
        if self.multilingual is not None and not keeps_all:
            from proxy.retrieval.multilingual import on_scale

            index = self.multilingual_index or self.index.sibling(self.multilingual)
            self.multilingual_index = index
            settings = f"{self.chunking_settings};embedder={self.multilingual.fingerprint}"
            self.second = Space(
                self.multilingual,
                index,
                Indexer(index, self.multilingual, settings, leases=self.leases),
                settings,
                on_scale(self.multilingual.default_threshold, self.embedder.default_threshold),
            )
            least = self.multilingual_overview_affinity
            if self.router is not None and least is not None:
                self.second_router = OverviewRouter(least)

    @property
    def chunking_settings(self) -> str:
        # Which languages are sized in the embedder's tokens changes where passages end.
        read = "any" if self.languages is None else ",".join(sorted(self.languages))
        return (
            f"chunker={CHUNKER_VERSION};tokens={self.chunk_tokens};overlap={self.chunk_overlap}"
            f";reads={read}"
        )

    @property
    def settings(self) -> str:
        """Everything a stored vector depends on: a change indexes documents again."""
        fingerprint = getattr(self.embedder, "fingerprint", self.embedder.name)
        return f"{self.chunking_settings};embedder={fingerprint}"

    def reads(self, language: str | None) -> bool:
        """Whether the embedder reads text in `language` (an unknown one: assumed so)."""
        return self.languages is None or language is None or language in self.languages

    def primary_ready(self) -> bool:
        """Whether the embedder can embed now: an in-process model whose files are missing
        (not fetched: proxy.retrieval.minilm_files) cannot, and documents are then ranked by
        the multilingual model or their words rather than the request failing."""
        unavailable = getattr(self.embedder, "unavailable", None)
        return unavailable is None or unavailable() is None

    def space_for(self, language: str | None) -> Space | None:
        """Whose vectors rank a document in `language`: the multilingual embedder's for the
        languages the embedder does not keep, else the embedder's where it reads the language,
        else none (ranked by its words). A language not told apart stays with the embedder."""
        if self.second is not None and language is not None:
            own = self.languages if self.own_documents is None else self.own_documents
            if own is not None and language not in own:
                return self.second
        return self.primary if self.reads(language) else None

    def vectors_space(self, document: ParsedDocument) -> Space:
        """The space a document's passages are embedded in, told from its text's language
        before any passage is made (what an index of it will hold): as `_space_of` chooses,
        the embedder's own while its model is missing and nothing stands in for it."""
        language = detect_language([page.text for page in document.pages])
        space = self.space_for(language) or self.primary
        if space is self.primary and not self.primary_ready() and self.second is not None:
            return self.second
        return space

    async def _space_of(self, document: ParsedDocument) -> tuple[Space | None, DocumentPassages]:
        passages = await self.store.open(document)
        # A document ranked by its words alone is indexed by the embedder all the same (it
        # always was; a later setting may read its language).
        space: Space | None = self.space_for(passages.lexical.language) or self.primary
        if space is self.primary and not self.primary_ready():
            # The model is not on disk yet: the multilingual one's index, else none for now
            # (a search indexes it once the model is there).
            space = self.second
        return space, passages

    def counter(self, language: str) -> Callable[[str], int]:
        """Passages are sized in the embedder's tokens where it reads the language; elsewhere
        in a chat model's tokens (cl100k), which is what they cost in the budget (MiniLM spells
        Cyrillic almost letter by letter: 250 of its tokens hold two Russian sentences)."""
        return self.count_tokens if self.reads(language) else self.count_unread

    def chunks_of(self, document: ParsedDocument) -> list[Chunk]:
        language = detect_language([page.text for page in document.pages])
        return chunk_document(
            document,
            chunk_tokens=self.chunk_tokens,
            overlap=self.chunk_overlap,
            count_tokens=self.counter(language),
        )

    async def ensure_indexed(self, document: ParsedDocument) -> bool:
        """Index the whole document now (tools and tests); False if it already was."""
        space, passages = await self._space_of(document)
        if space is None or await space.index.is_indexed(document.sha256, space.settings):
            return False
        await space.indexer.complete_now(document, passages)
        return True

    async def index_document(self, document: ParsedDocument) -> bool:
        """Index the whole document at the background's pace, waiting for it: True once it is
        indexed, False while another proxy holds its lease (ask again later)."""
        space, passages = await self._space_of(document)
        if space is None:
            return True
        try:
            if await space.index.is_indexed(document.sha256, space.settings):
                return True
        except STORE_DOWN:
            pass  # the indexing run waits for the store to answer again
        return await space.indexer.complete(document, passages)

    async def passages(self, document: ParsedDocument) -> DocumentPassages:
        """The document's passages (made now if need be); raises PassagesMissing for a document
        given by reference whose passages are not stored here."""
        return await self.store.open(document)

    def with_chunking(self, chunk_tokens: int, chunk_overlap: int) -> Retriever:
        """The same index, embedder and leases with other passage sizes (a vector store file's
        static chunking). Its documents must be keyed apart: see proxy.stores.chunking."""
        return replace(self, chunk_tokens=chunk_tokens, chunk_overlap=chunk_overlap)

    async def close_indexing(self) -> None:
        """Stop background indexing and write pending passages; the index stays open."""
        await self.store.flush()
        await self.indexer.close()
        if self.second is not None:
            await self.second.indexer.close()

    @property
    def new_documents(self) -> NewDocuments:
        """How a document not yet indexed in full is ranked, as the settings stand now."""
        return NewDocuments(
            self.new_document_candidates, self.candidate_s, self.whole_document_s, self.background
        )

    async def search(
        self,
        documents: list[ParsedDocument],
        query: str,
        depth: int,
        status: Status = lambda line: None,
        *,
        neighbours: int = 0,
        window: WindowShape = NO_WINDOW,
        resolve: Resolve | None = None,
        translate: Translate | None = None,
        also: Sequence[SearchText] = (),
        store_down: dict[str, str] | None = None,
        carried: dict[str, list[str]] | None = None,
        indexing: dict[str, str] | None = None,
        places: dict[str, str] | None = None,
    ) -> tuple[list[list[Scored]], dict[str, int]]:
        """Each document's best `depth` passages for the query, best first, and how much of
        each document's dense index was ready (percent) when it was searched. With
        `neighbours`, each passage comes joined with that many passages before and after it
        (a passage already inside a better one's neighbourhood is not repeated); with a
        `window`, with the whole sentences before and after it within the window's tokens,
        windows that meet merged. A document given by reference only (no pages) whose passages
        are not stored here is replaced by `resolve(document)`, the document itself. With
        `translate`, a document in another language than the query is also searched with the
        query translated into its language, both rankings fused. Each text of `also` (the
        question in its conversation: proxy.retrieval.history) is ranked too, its rankings fused
        at its weight; it neither decides a question about the whole document nor picks a new
        document's candidates, which are the question's own. A `terms` text is ranked by words
        alone, with the carried words rarest in each document (written into `carried`, by
        document name). With `store_down`, a document whose vectors cannot be read or stored
        (the vector store is down or full) is ranked by its words alone, as one in a language
        the embedder does not read, and named there with the reason; without it, that failure
        is raised.
        `indexing`, if given, gets how each document was ranked by meaning (INDEXING); `places`
        what each document gave for the place the question names, if it names one."""
        embeddings: dict[tuple[str, str], list[float]] = {}
        ranked: list[list[Scored]] = []
        ready: dict[str, int] = {}
        place = parse_place(query) if self.places else None
        for document in documents:
            document, passages = await self._open(document, resolve)
            where = find_place(place, passages.chunks, query, passages.text) if place else None
            if place is not None and places is not None:
                places[document.name] = described(place, where)
            language = passages.lexical.language
            queries = [(query, query_language(query, prefer=language))]
            if translate is not None:
                translation: Translation | None = await translate(language)
                if translation is not None and translation.text:
                    queries.append((translation.text, language))
            found, ready[document.name], how = await self._rank_document(
                document, passages, queries, also, where, embeddings, status, carried, store_down
            )
            if indexing is not None:
                indexing[document.name] = how
            if await self._about_the_whole(queries, embeddings):
                found = overview_first(passages, found)
            count = self.counter(language)
            if neighbours:
                found = with_neighbours(passages, found, neighbours)
            else:
                # Even without a window: passages cut inside a paragraph overlap their
                # neighbours, and two hits side by side are one place (shown once, merged).
                found = self._windowed(passages, found[:depth], window, count)
            reranked = await self._rerank(query, found[:depth])
            # A reranker orders hits by relevance; the overview and place passages stay first.
            ranked.append(sorted(reranked, key=lambda item: not (item.place or item.overview)))
        return ranked, ready

    async def _rank_document(
        self,
        document: ParsedDocument,
        passages: DocumentPassages,
        queries: list[tuple[str, str | None]],
        also: Sequence[SearchText],
        where: Found | None,
        embeddings: dict[tuple[str, str], list[float]],
        status: Status,
        carried: dict[str, list[str]] | None,
        store_down: dict[str, str] | None,
    ) -> tuple[list[Scored], int, str]:
        """One document's passages ranked for the question (and its translation) and the
        texts of `also`, the place's passages first; with how much of its dense index was
        ready (percent) and how it was ranked by meaning (INDEXING)."""
        language = passages.lexical.language
        words = [text for text, _ in queries]
        by_words = [
            (found, extra.weight)
            for extra, found in carried_texts(also, passages, carried, document.name)
        ]
        ranked_also = [(extra.text, extra.weight) for extra in also if extra.source != "terms"]
        searched = [(text, lang, 1.0) for text, lang in queries] + [
            (text, query_language(text, prefer=language), weight) for text, weight in ranked_also
        ]
        weighted = [(text, weight) for text, _, weight in searched]
        read = [(text, weight) for text, lang, weight in searched if self.reads(lang)]
        space = self.space_for(language)
        if space is self.primary and not self.primary_ready():
            # Its model is not on disk (yet): the multilingual model (shipped in its wheel)
            # ranks it meanwhile, else its words alone.
            space = self.second
        if space is None:
            # Its cosines would be noise: ranked by its words (and its translation's).
            return self._by_words(passages, weighted, by_words, where, words), 100, BY_WORDS
        # Only the queries in a language the embedder reads are embedded (all of them if none
        # is, as before translations); the multilingual one reads them all.
        meant = (read or weighted) if space is self.primary else weighted
        vectors = [(await space.embedded(text, embeddings), weight) for text, weight in meant]
        plain = [vector for vector, _ in vectors]
        # A new document's candidates include the place's best passages by their words.
        nearby = place_order(passages, where.passages, words, []) if where else []
        try:
            dense, ready, how = await self.new_documents.scorer(
                space, document, passages, words, status, nearby[:PLACE_EMBEDDED]
            )
        except STORE_DOWN as error:
            if store_down is None:
                raise
            # Its words still rank it: the question is answered, not refused.
            store_down[document.name] = error.message
            status(f"Vector store unavailable: ranking {document.name} by its words...")
            ready = space.indexer.progress(passages).percent
            return self._by_words(passages, weighted, by_words, where, words), ready, BY_WORDS
        scorer = space.on_scale(dense)
        found = rank_passages(passages, weighted, scorer, vectors, by_words, self.ranking)
        if where is not None:
            found = place_first(passages, found, where.passages, words, scorer, plain)
        if space is not self.primary:
            found = [replace(item, multilingual=True) for item in found]
        return found, ready, how

    @staticmethod
    def _by_words(
        passages: DocumentPassages,
        weighted: list[tuple[str, float]],
        by_words: list[tuple[str, float]],
        where: Found | None,
        words: list[str],
    ) -> list[Scored]:
        """The passages ranked by their words alone (no cosine lends them a score), the
        place's first."""
        found = rank_passages(passages, weighted, no_cosines, [], by_words)
        if where is not None:
            found = place_first(passages, found, where.passages, words, no_cosines, [])
        return [replace(item, by_meaning=False) for item in found]

    async def _about_the_whole(
        self, queries: list[tuple[str, str | None]], embeddings: dict[tuple[str, str], list[float]]
    ) -> bool:
        """Whether the question is about a document as a whole: told by the embedder from the
        texts it reads (the question, or its translation), else by the multilingual one from
        the others (a Russian question about a Russian document)."""
        if self.router is None:
            return False
        read = [text for text, language in queries if self.reads(language)]
        if not self.primary_ready():
            read = []  # the embedder cannot tell it now; the multilingual one may
        elif await self.router.routes(read, lambda text: self.primary.embedded(text, embeddings)):
            return True
        second, router = self.second, self.second_router
        if read or second is None or router is None:
            return False
        unread = [text for text, _ in queries]
        return await router.routes(unread, lambda text: second.embedded(text, embeddings))

    async def _open(
        self, document: ParsedDocument, resolve: Resolve | None
    ) -> tuple[ParsedDocument, DocumentPassages]:
        try:
            return document, await self.store.open(document)
        except PassagesMissing:
            if resolve is None:
                raise
        document = await resolve(document)
        return document, await self.store.open(document)

    def _windowed(
        self,
        passages: DocumentPassages,
        found: list[Scored],
        window: WindowShape,
        count: Callable[[str], int],
    ) -> list[Scored]:
        shown = windows(
            passages.chunks,
            passages.text,
            [item.chunk for item in found],
            window,
            count,
            self.chunk_tokens,
        )
        return [replace(found[rank], chunk=chunk) for rank, chunk in shown]

    async def _rerank(self, query: str, found: list[Scored]) -> list[Scored]:
        """The reranker's order for the first `rerank_top_n`; the rest keep theirs after them."""
        if self.reranker is None or not found:
            return found
        head, tail = found[: self.rerank_top_n], found[self.rerank_top_n :]
        scores = await self.reranker.scores(query, [item.chunk.shown for item in head])
        # Only the score is new: how the passage was found (by meaning or not, as an overview
        # passage) still decides what the threshold does with it.
        rescored = [replace(item, rerank=score) for item, score in zip(head, scores, strict=True)]
        rescored.sort(key=lambda item: -(item.rerank or 0.0))
        return rescored + tail

    async def close(self) -> None:
        await self.close_indexing()
        # The multilingual index shares the main one's client: it closes first.
        spaces = [self.primary] if self.second is None else [self.second, self.primary]
        for space in spaces:
            await space.index.close()
        if self.reranker is not None:
            await self.reranker.close()
        for space in spaces:
            close = getattr(space.embedder, "close", None)
            if close is not None:
                await close()


def characters_as_tokens(text: str) -> int:
    """About as many tokens as a chat model's tokenizer makes of this text (4 characters a
    token): the measure when no tokenizer is at hand."""
    return (len(text) + 3) // 4
