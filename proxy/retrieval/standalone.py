"""Whether a follow-up needs its conversation to be searched, and what became of asking the model
for it (pure; the prompts are proxy.retrieval.standalone_prompts, what of the answer is kept
proxy.retrieval.standalone_answer, the call proxy.retrieval.rewriter)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.retrieval.function_words import LANGUAGES, function_word, query_language, stopwords
from proxy.retrieval.history import SearchText, Turn
from proxy.retrieval.referring import CLITIC, CONTINUING, REFERRING
from proxy.retrieval.translation import Endpoint

_WORD = re.compile(r"\w+")

# English and German words that say nothing of a question's subject beyond their function words
# (proxy.retrieval.function_words, which own_words leaves out in every language): "get", "use",
# "thing", "eigentlich".
_ASKING_WORDS = """
    what who whom whose which when where why how did does do done doing has have had having
    can could would should shall may might must me my we our you your am were been being from
    about after again all any because before below between both during each few more most over
    some than too under until very out off only own just many much here whether while yet ever
    every within without upon onto toward towards per via get gets got make makes made use
    used using want need tell say says said mean means happen happens happened work works
    thing things way ways kind bit anything something everything someone anyone still really
    actually exactly now ok okay please then there yes
    wann wer wen wem wessen warum wieso weshalb wozu woher wohin womit wurde wurden worden gibt
    gab können konnte müssen sollen darf steht stehen eigentlich überhaupt genau denn bitte
    kann man mal gut
"""
_ASKING = frozenset(_ASKING_WORDS.split())
_STOPWORDS = frozenset(word for language in LANGUAGES for word in stopwords(language))
MIN_OWN_WORDS = 3
"""A follow-up with fewer words of its own (not asking words, not pointing back) than this is
too short to be searched alone ("And Rhino?", "What happens to the brother?")."""


@dataclass(frozen=True)
class Leaning:
    """Whether a follow-up needs its conversation to be understood, and what says so."""

    needed: bool
    why: str


def own_words(question: str) -> list[str]:
    """The question's words that could name its subject: none of the asking words, stopwords or
    words pointing back, nor the function words of its language (of any, when its language is
    not told: "comment" asks in French, names a remark in English), no numbers alone, at least
    three letters (two for a Cyrillic word)."""
    language = query_language(question)
    found = []
    for word in _WORD.findall(unicodedata.normalize("NFKC", question).casefold()):
        if word in REFERRING or word in _ASKING or word in _STOPWORDS or word.isdigit():
            continue
        if function_word(word, language):
            continue
        if len(word) >= 3 or (len(word) == 2 and not word.isascii()):
            found.append(word)
    return found


def leans_on_history(question: str, earlier: Sequence[Turn]) -> Leaning:
    """Whether `question` needs the conversation before it: there is an earlier user question,
    and the follow-up points back (a pronoun, "the other one"), opens like the rest of a
    sentence ("And for calls?"), or has too few words of its own to be searched alone."""
    if not any(turn.role == "user" for turn in earlier):
        return Leaning(False, "no earlier question")
    words = _WORD.findall(unicodedata.normalize("NFKC", question).casefold())
    if not words:
        return Leaning(False, "no words")
    pointing = [word for word in words if word in REFERRING]
    if pointing:
        return Leaning(True, f"points back ({pointing[0]!r})")
    clitic = CLITIC.search(question)
    if clitic:
        # The match ends inside the verb ("¿Cómo lo c"): the record names the verb whole.
        verb = _WORD.match(question, clitic.end())
        said = (clitic.group() + (verb.group() if verb else "")).strip(" ¿")
        return Leaning(True, f"points back ({said!r})")
    opening = CONTINUING.match(question)
    if opening:
        return Leaning(True, f"continues the last question ({opening.group().strip()!r})")
    own = own_words(question)
    if len(own) < MIN_OWN_WORDS:
        return Leaning(True, f"{len(own)} word{'' if len(own) == 1 else 's'} of its own")
    return Leaning(False, "self-contained")


FOLLOW_UP_WORDS = 80
"""A longer follow-up is no question to rewrite: it is searched as it is."""


# What happened, one of these: the header `X-Enrich-Rewrite` says it, the record says why.
REWRITTEN = "rewritten"
NOT_NEEDED = "not needed"
NOT_INSTRUCT = "not instruction-tuned"
TIMED_OUT = "timed out"
FAILED = "failed"
REFUSED_OUTCOME = "refused"
UNCHANGED = "unchanged"
REJECTED = "rejected"
OFF = "off"


@dataclass(frozen=True)
class StandaloneQuestion:
    """What became of rewriting a follow-up: `outcome` (rewritten, not needed, not
    instruction-tuned, timed out, failed, refused, unchanged, rejected, off), why, and the
    question searched (only when rewritten)."""

    outcome: str
    why: str
    text: str | None = None
    weight: float = 0.0
    model: str | None = None
    server: str = "upstream"
    endpoint: Endpoint | None = None
    seconds: float | None = None
    cached: bool = False
    neutralised: int = 0

    @property
    def search(self) -> SearchText | None:
        if self.outcome != REWRITTEN or not self.text or self.weight <= 0:
            return None
        return SearchText(self.text, self.weight, "rewrite")

    def record(self) -> dict[str, Any]:
        found: dict[str, Any] = {"outcome": self.outcome, "why": self.why}
        if self.endpoint is not None:
            found |= {"model": self.model, "server": self.server, "endpoint": self.endpoint}
        if self.seconds is not None:
            found["seconds"] = round(self.seconds, 3)
        if self.text is not None:
            found |= {"text": self.text, "weight": round(self.weight, 4)}
        if self.cached:
            found["cached"] = True
        if self.neutralised:
            found["neutralised"] = self.neutralised
        return found
