"""What retrieval's stages hand on: what is searched (`query`) and what was found (`retrieve`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.documents.model import ParsedDocument
from proxy.guard.neutralise import GuardReport
from proxy.retrieval.budget import Passage
from proxy.retrieval.function_words import query_language
from proxy.retrieval.history import SearchText
from proxy.retrieval.scored import Scored
from proxy.retrieval.sentence_windows import WindowShape
from proxy.retrieval.standalone import StandaloneQuestion
from proxy.retrieval.translation import Translation


@dataclass
class Translations:
    """The question's language, and its translations asked so far (by language; None where
    none was made) with the calls they took, bounded by `retrieval.max_translations`."""

    language: str | None
    done: dict[str, Translation | None] = field(default_factory=dict)
    calls: int = 0

    @classmethod
    def of(cls, question: str) -> Translations:
        return cls(query_language(question) if question.strip() else None)


@dataclass(frozen=True)
class Searches:
    """What the `query` stage decided is searched: the documents (new and old, each once), the
    texts (the question first, then what its conversation gives and the standalone question),
    what became of rewriting a follow-up, and the question's translations (asked during the
    search, as each document's language calls for one)."""

    sources: list[ParsedDocument]
    texts: list[SearchText]
    standalone: StandaloneQuestion | None
    translations: Translations

    @property
    def also(self) -> list[SearchText]:
        """The texts searched beside the question."""
        return self.texts[1:]


@dataclass(frozen=True)
class Ranked:
    """What the `retrieve` stage found, for the passages to be chosen from and recorded: per
    source (the documents, then the vector stores' files), its hits best first, the threshold
    they are held to and those above it as guarded passages; and how the search went (its
    depth, the indexes' readiness, the words carried, the stores that failed)."""

    sources: list[ParsedDocument]
    ranked: list[list[Scored]]
    thresholds: list[float]
    candidates: list[list[Passage]]
    reports: dict[str, GuardReport]
    threshold: float  # the affinity threshold asked for, or the embedder's
    limit: int
    fill: str
    depth: int
    window: WindowShape
    embedder: str
    ranking: str
    # By file, as `RetrievalRecord` holds them (and `carried`: the words a `terms` text took).
    indexed: dict[str, int]
    indexing: dict[str, str]
    places: dict[str, str]
    store_down: dict[str, str]
    carried: dict[str, list[str]]
