"""BM25 over one document's passages (bm25s): terms stemmed in the document's language."""

from __future__ import annotations

import functools
import json
import re
import shutil
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s
import bm25s.stopwords
import numpy as np
import Stemmer

from proxy.retrieval.fusion import reciprocal_rank_fusion

# Languages told apart by their stopwords, each with its Snowball stemmer.
_STOPWORDS: dict[str, tuple[str, ...]] = {
    "english": bm25s.stopwords.STOPWORDS_EN,
    "german": bm25s.stopwords.STOPWORDS_GERMAN,
    "french": bm25s.stopwords.STOPWORDS_FRENCH,
    "spanish": bm25s.stopwords.STOPWORDS_SPANISH,
    "italian": bm25s.stopwords.STOPWORDS_ITALIAN,
    "portuguese": bm25s.stopwords.STOPWORDS_PORTUGUESE,
    "dutch": bm25s.stopwords.STOPWORDS_DUTCH,
    "russian": bm25s.stopwords.STOPWORDS_RUSSIAN,
    "swedish": bm25s.stopwords.STOPWORDS_SWEDISH,
    "danish": bm25s.stopwords.STOPWORDS_DANISH,
    "norwegian": bm25s.stopwords.STOPWORDS_NORWEGIAN,
    "turkish": bm25s.stopwords.STOPWORDS_TURKISH,
}
LANGUAGES = tuple(_STOPWORDS)
"""The languages the index tells apart and stems (Snowball's names)."""
_SAMPLE_WORDS = 20_000

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


def detect_language(texts: list[str]) -> str:
    """The language whose stopwords are most frequent in the first words; English if none."""
    sample: list[str] = []
    for text in texts:
        sample.extend(_WORD.findall(text.casefold()))
        if len(sample) >= _SAMPLE_WORDS:
            break
    counts = Counter(sample)
    hits = {lang: sum(counts[w] for w in set(stop)) for lang, stop in _STOPWORDS.items()}
    best = max(hits, key=lambda lang: hits[lang])
    return best if hits[best] else "english"


# bm25s's English list has 33 words, the others hundreds: telling a short English question from
# another language needs English's other function words too (question words first).
_FUNCTION_WORDS = {
    "english": """what who whom whose which when where why how did does do done doing has have had
    having can could would should shall may might must i me my we our you your he him his she her
    its they them those am were been being from about above after again against all any because
    before below between both during each few more most other over same so some than too under
    until up very down out off only own just also many much here whether while yet ever every
    within without upon onto toward towards per via vs""",
    "german": """wann wo wie was wer wen wem wessen warum wieso weshalb welche welcher welches
    welchen wurde wurden wird werden worden gibt gab kann können konnte muss müssen soll sollen
    darf steht stehen ist sind war waren hat haben hatte""",
    "french": """comment pourquoi quand où combien quel quelle quels quelles quoi lequel laquelle
    lesquels lesquelles peut peux pouvez pouvons peuvent pourrait pourrais pourriez faut
    faudrait dois doit devez doivent devrait devrais faire fais fait font sais savoir veux veut
    voulez voudrais vraiment exactement encore déjà juste donc alors puis aussi très trop
    beaucoup peu quelque chose choses cela ceci ici""",
    "spanish": """cómo cuándo dónde adónde qué cuál cuáles quién quiénes cuánto cuánta cuántos
    cuántas porqué puedo puede puedes pueden podemos podría debo debe deben debería tengo tiene
    tienen tener hay hace hacer hago necesito sé saber quiero quiere realmente exactamente
    todavía ya solo sólo también entonces luego bien muy mucho poco algo cosa cosas""",
    "italian": """come quando dove perché cosa chi quale quali quanto quanta quanti quante posso
    può possono potrei devo deve devono dovrei serve servono bisogna faccio fare fa sapere
    voglio vorrei davvero esattamente ancora già solo anche allora poi bene molto poco
    qualcosa proprio""",
    "portuguese": """como quando onde porque porquê quê qual quais quem quanto quanta quantos
    quantas posso pode podem poderia devo deve devem deveria preciso tenho tem têm ter faço
    fazer faz sei saber quero queria realmente exatamente ainda já só também então depois bem
    muito pouco algo coisa""",
    "dutch": """hoe wanneer waar waarom wat wie welk welke hoeveel kan kun kunt kunnen kon zou
    zouden moet moeten mag mogen wil willen doe doet doen heb hebt heeft hebben echt precies
    nog alleen ook dan goed veel iets""",
    "russian": """почему зачем когда где куда откуда как какой какая какое какие сколько что кто
    чем чего ли можно нужно надо могу может можете могут должен должна должно должны хочу
    хочет хотите делать сделать делает вообще именно действительно точно ещё еще уже просто
    тоже также потом тогда вместо разве""",
    "swedish": """hur när var varför vad vem vilken vilket vilka kan kunna kunde ska skulle
    måste får vill göra gör gjorde har hade verkligen exakt fortfarande redan bara också
    sedan""",
    "danish": """hvordan hvornår hvor hvorfor hvad hvem hvilken hvilket hvilke kan kunne skal
    skulle må vil gøre gør har havde virkelig præcis stadig allerede bare også""",
    "norwegian": """hvordan når hvor hvorfor hva hvem hvilken hvilket hvilke kan kunne skal
    skulle må vil gjøre gjør har hadde virkelig nøyaktig fortsatt allerede bare også""",
    "turkish": """nasıl neden niçin niye ne zaman nerede nereye nereden hangi kim kaç mı mi mu mü
    var yok yapmak yapabilir gerçekten tam hâlâ zaten sadece ayrıca sonra""",
}
"""Words that tell a short question's language, beside each language's stopwords: asking
words, auxiliaries and modal verbs, and the adverbs questions fill with ("exactement",
"todavía"), which never name what a question is about."""
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")
_LATIN = re.compile(r"[a-zà-ÿ]")


def query_language(text: str, prefer: str | None = None) -> str | None:
    """The language of a question, or None when its few words do not tell: Cyrillic words are
    Russian; Latin ones are the language whose stopwords they hold most of (one language alone,
    or `prefer` among those tied)."""
    found = _WORD.findall(text.casefold())
    cyrillic = sum(1 for word in found if _CYRILLIC.search(word))
    latin = sum(1 for word in found if _LATIN.search(word))
    if cyrillic > latin:
        return "russian"
    hits = {
        language: sum(1 for word in found if word in _detection_words(language))
        for language in _STOPWORDS
        if language != "russian"
    }
    best = max(hits.values(), default=0)
    leaders = [language for language, count in hits.items() if count == best]
    if best and prefer in leaders:
        return prefer
    return leaders[0] if best and len(leaders) == 1 else None


def function_word(word: str, language: str | None = None) -> bool:
    """Whether the word is one of the language's stopwords or function words (of any language
    told apart, when None)."""
    if language is None:
        return any(word.casefold() in _detection_words(known) for known in _STOPWORDS)
    return word.casefold() in _detection_words(language)


@functools.cache
def _detection_words(language: str) -> frozenset[str]:
    words = stopwords(language)
    return words | frozenset(_FUNCTION_WORDS.get(language, "").split())


@functools.cache
def _stemmer(language: str) -> Any:
    return Stemmer.Stemmer(language)


@functools.cache
def stopwords(language: str) -> frozenset[str]:
    """The language's stopwords (bm25s's lists; none for a language the index does not know)."""
    return frozenset(_STOPWORDS.get(language, ()))


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
    asking = _detection_words(language)
    kept = [word for word in words(text) if word not in asking]
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
