"""BM25 over one document's passages (bm25s): terms stemmed in the document's language."""

from __future__ import annotations

import functools
import json
import re
import shutil
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import Stemmer

from proxy.retrieval.function_words import detect_language, function_word, stopwords
from proxy.retrieval.fusion import reciprocal_rank_fusion

# A word broken at the end of a line ("imple-\nmentation") is one word.
_LINE_BREAK_HYPHEN = re.compile(r"(?<=\w)-\n(?=\w)")
_WORD = re.compile(r"\w+")
# Scripts written without spaces: Han, kana, Hangul. Their runs become overlapping character
# pairs, the usual unit for BM25 when no segmenter is at hand.
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")


def normalise(text: str) -> str:
    """NFKC (PDF ligatures such as 'ﬁ' become 'fi'), hyphenated line breaks joined, casefolded."""
    return _LINE_BREAK_HYPHEN.sub("", unicodedata.normalize("NFKC", text)).casefold()


def words(text: str) -> list[str]:
    """The text's words in order; runs of unspaced scripts as character pairs."""
    text = normalise(text)
    if not _UNSPACED.search(text):  # the common case, ~8x faster than looking at every word
        return _WORD.findall(text)
    found: list[str] = []
    for match in _WORD.finditer(text):
        word = match.group()
        last = 0
        for run in _UNSPACED.finditer(word):
            if run.start() > last:
                found.append(word[last : run.start()])
            chars = run.group()
            found.extend(
                [chars] if len(chars) == 1 else [chars[i : i + 2] for i in range(len(chars) - 1)]
            )
            last = run.end()
        if last < len(word):
            found.append(word[last:])
    return found


@functools.cache
def _stemmer(language: str) -> Any:
    return Stemmer.Stemmer(language)


SUBWORD = 4
"""Characters in a subword term: long enough to mean something, short enough that a word's
inflections, derivations and compounds share some with it ("стол" in "настольными")."""


def subword_terms(text: str, language: str) -> list[str]:
    """Index terms below the word: each word's overlapping runs of `SUBWORD` characters, its
    edges marked, stopwords left out; a short word is one term."""
    stop = stopwords(language)
    found: list[str] = []
    for word in words(text):
        if word not in stop:
            found.extend(_pieces(word))
    return found


@functools.lru_cache(maxsize=65_536)
def _pieces(word: str) -> tuple[str, ...]:
    # Cached: a book says its words many times (a third less time for a novel's passages).
    marked = f"#{word}#"
    if len(marked) <= SUBWORD:
        return (marked,)
    return tuple(marked[i : i + SUBWORD] for i in range(len(marked) - SUBWORD + 1))


def terms(text: str, language: str) -> list[str]:
    """Index terms: words without the language's stopwords, stemmed by its Snowball stemmer."""
    stop = stopwords(language)
    kept = [word for word in words(text) if word not in stop]
    stemmed: list[str] = _stemmer(language).stemWords(kept)
    return stemmed


def question_terms(text: str, language: str) -> list[str]:
    """A question's terms without its function words (`what`, `does`): only what it asks about."""
    kept = [word for word in words(text) if not function_word(word, language)]
    stemmed: list[str] = _stemmer(language).stemWords(kept)
    return stemmed


@dataclass
class LexicalIndex:
    """BM25 scores of one document's passages for a query's terms."""

    language: str
    size: int
    model: bm25s.BM25
    subwords: bm25s.BM25
    """The same passages by their words' character runs (`subword_terms`)."""

    @classmethod
    def build(cls, texts: list[str]) -> LexicalIndex:
        language = detect_language(texts)
        return cls(
            language,
            len(texts),
            _bm25([terms(text, language) for text in texts]),
            _bm25([subword_terms(text, language) for text in texts]),
        )

    def search(self, query: str, limit: int) -> list[tuple[int, float]]:
        """Up to `limit` (passage index, score) pairs with a score above 0, best first."""
        return self._search(self.model, terms(query, self.language), limit)

    def search_subwords(self, query: str, limit: int) -> list[tuple[int, float]]:
        """As `search`, by the character runs of the query's words (`subword_terms`)."""
        return self._search(self.subwords, subword_terms(query, self.language), limit)

    def frequency(self, word: str) -> int:
        """In how many passages the word's index term occurs (0: none, or a stopword)."""
        found = terms(word, self.language)
        if len(found) != 1:
            return 0
        term = self.model.vocab_dict.get(found[0])
        pointers = self.model.scores["indptr"]
        if term is None or term + 1 >= len(pointers):
            return 0
        return int(pointers[term + 1] - pointers[term])

    def ranked(self, query: str, limit: int) -> tuple[list[int], dict[int, float]]:
        """Passages by the query's words, whole and in pieces, best first, and the BM25
        scores of those holding a whole word. The two rankings are fused by reciprocal rank:
        the pieces find a word's other forms and the compounds it is part of ("Kurve" in
        "Jordankurve", "столом" beside "настольными"), which stemmed words miss; fused, not
        summed, so that English, which stemming serves, keeps its order (docs/retrieval.md)."""
        whole = self.search(query, limit)
        pieces = [i for i, _ in self.search_subwords(query, limit)]
        fused = reciprocal_rank_fusion([[i for i, _ in whole], pieces])
        return [i for i, _ in fused][:limit], dict(whole)

    def _search(
        self, model: bm25s.BM25, query_terms: list[str], limit: int
    ) -> list[tuple[int, float]]:
        if not query_terms or limit < 1 or not self.size:
            return []
        scores = np.asarray(model.get_scores(query_terms), dtype=np.float32)
        limit = min(limit, len(scores))
        best = np.argpartition(-scores, limit - 1)[:limit]
        ranked = best[np.argsort(-scores[best], kind="stable")]
        return [(int(i), float(scores[i])) for i in ranked if scores[i] > 0]

    def save(self, path: Path) -> None:
        """Written to a temporary folder and renamed: readers see a whole index or none."""
        partial = path.with_name(path.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        self.model.save(str(partial), show_progress=False)
        self.subwords.save(str(partial / "subwords"), show_progress=False)
        (partial / "lexical.json").write_text(
            json.dumps({"language": self.language, "size": self.size})
        )
        shutil.rmtree(path, ignore_errors=True)
        partial.rename(path)

    @classmethod
    def load(cls, path: Path) -> LexicalIndex | None:
        """The index saved in `path`, or None if there is none (or only a broken one)."""
        try:
            about = json.loads((path / "lexical.json").read_text())
            model = bm25s.BM25.load(str(path), show_progress=False, verbosity=0)
            subwords = bm25s.BM25.load(str(path / "subwords"), show_progress=False, verbosity=0)
        except (OSError, ValueError, KeyError):
            return None
        return cls(str(about["language"]), int(about["size"]), model, subwords)


def _bm25(passages_terms: list[list[str]]) -> bm25s.BM25:
    model = bm25s.BM25()
    # bm25s cannot index an empty corpus or an empty passage; "" stands for no term.
    model.index([found or [""] for found in passages_terms], show_progress=False)
    return model
