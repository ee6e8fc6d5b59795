"""The index's twelve languages by their function words: which one a text is written in, and
which of its words never name what it is about."""

from __future__ import annotations

import functools
import re
from collections import Counter

import bm25s.stopwords

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
_WORD = re.compile(r"\w+")


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
    тоже также потом тогда вместо разве каком всё таки""",
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
def stopwords(language: str) -> frozenset[str]:
    """The language's stopwords (bm25s's lists; none for a language the index does not know)."""
    return frozenset(_STOPWORDS.get(language, ()))
