"""What of the model's answer is kept: the rewrite or the key words on its first line, cut, and
the key words put before the follow-up (pure)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from proxy.retrieval.history import Turn, first_words
from proxy.retrieval.standalone import own_words

_WORD = re.compile(r"\w+")

KEY_WORDS = 16
"""The key words are cut to this many words."""
MAX_WORDS = 60
MAX_CHARS = 400
"""The rewritten question is cut to this many words and characters."""
NOT_A_QUESTION = "the answer held no question"
REFUSED = "the model refused"
_THINKING = re.compile(r"<think>.*?</think>", re.S | re.IGNORECASE)
_OPEN_THINKING = re.compile(r"<think>", re.IGNORECASE)
_LABEL = re.compile(
    r"^\s*(?:\*\*)?(?:standalone question|rewritten question|last question|question|"
    r"frage|вопрос)\s*(?:\*\*)?\s*:\s*(?:\*\*)?\s*",
    re.IGNORECASE,
)
_REFUSAL = re.compile(
    r"^\s*(?:i'?m sorry|i am sorry|sorry|i can(?:no|')t|i cannot|i won't|as an ai|"
    r"unfortunately,? i)\b",
    re.IGNORECASE,
)


_QUESTION_END = re.compile(r"[?？][\"'`«»“”„*]*(?=\s|$)")
"""A question mark ending a sentence (not one inside a URL or code, "a?b=1"), with the quotes
or bold that close it ("**Why does it fail?** It lacks -L.")."""


@dataclass(frozen=True)
class Cleaned:
    """The rewritten question kept from a model's answer (None: nothing usable, `error` why)."""

    text: str | None
    error: str | None = None


def _first_line(raw: str, label: re.Pattern[str]) -> str | Cleaned:
    """The first line of a model's answer, its reasoning, `label` and quotes removed (the
    label may stand on a line of its own); a `Cleaned` with the error when there is none or
    the model refused."""
    text = _THINKING.sub("", raw)
    if _OPEN_THINKING.search(text):
        return Cleaned(None, "the answer stopped inside its reasoning")
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return Cleaned(None, NOT_A_QUESTION)
    line = label.sub("", lines[0]).strip()
    if not line and len(lines) > 1:
        line = lines[1].strip()
    line = line.strip("\"'`«»“”„*").strip()
    if _REFUSAL.match(line):
        return Cleaned(None, REFUSED)
    return line


def clean_rewrite(raw: str) -> Cleaned:
    """The question on the model's first line of answer (reasoning left out), its label and
    quotes removed, cut to MAX_WORDS words and MAX_CHARS characters."""
    line = _first_line(raw, _LABEL)
    if isinstance(line, Cleaned):
        return line
    # A small model may go on to answer after its question: the question ends at its mark.
    asked = _QUESTION_END.search(line)
    if asked is not None:
        line = line[: asked.end()].strip("\"'`«»“”„*").strip()
    line = first_words(line, MAX_WORDS)
    if len(line) > MAX_CHARS:
        line = line[:MAX_CHARS].rsplit(" ", 1)[0]
    if not _WORD.search(line):
        return Cleaned(None, NOT_A_QUESTION)
    return Cleaned(line)


_KEY_WORDS_LABEL = re.compile(
    r"^\s*(?:\*\*)?(?:key ?words|subject|topic|answer|schlüsselwörter|stichwörter|thema|"
    r"ключевые слова|тема)\s*(?:\*\*)?\s*:\s*(?:\*\*)?\s*",
    re.IGNORECASE,
)
NOT_FROM_THE_CONVERSATION = "the key words named are not the conversation's"


def clean_key_words(raw: str) -> Cleaned:
    """The key words on the model's first line of answer (reasoning left out), its label, quotes
    and closing stop removed, cut to KEY_WORDS words and MAX_CHARS characters."""
    line = _first_line(raw, _KEY_WORDS_LABEL)
    if isinstance(line, Cleaned):
        return line
    line = first_words(line, KEY_WORDS).rstrip(".!;:,").strip("\"'`«»“”„*").strip()
    if len(line) > MAX_CHARS:
        line = line[:MAX_CHARS].rsplit(" ", 1)[0]
    if not _WORD.search(line):
        return Cleaned(None, NOT_A_QUESTION)
    return Cleaned(line)


def _word_set(text: str) -> set[str]:
    return set(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


STEM_CHARS = 6
"""Words are matched by their first this many letters: a key word copied from the conversation
may come back inflected ("загрузочная" for "загрузочную", "features" for "feature")."""


def _stems(words: Iterable[str]) -> set[str]:
    return {word[:STEM_CHARS] for word in words}


def with_key_words(question: str, named_words: str, earlier: Sequence[Turn]) -> Cleaned:
    """The follow-up with the key words the model named before it ("garden pump, float switch:
    Does the switch protect it against frost?"), or why not. A key word (or phrase) the
    question holds already adds nothing; it was asked to copy them from the conversation, so
    one with no word said before the question is the model's own (an answer, a guess): both are
    left out."""
    said = _stems(_word_set(" ".join(turn.text for turn in earlier)))
    asked = _stems(_word_set(question))
    kept, foreign = [], 0
    for item in (part.strip() for part in named_words.split(",")):
        named = _stems(own_words(item))
        if not named or named <= asked:
            continue
        if named & said:
            kept.append(item)
        else:
            foreign += 1
    if not kept:
        return Cleaned(None, NOT_FROM_THE_CONVERSATION if foreign else "the question names them")
    return Cleaned(f"{', '.join(kept)}: {question.strip()}")


def searched_question(question: str, answer: str, earlier: Sequence[Turn], words: bool) -> Cleaned:
    """What is searched from the model's cleaned answer: the question with the key words before
    it (`words`), or the rewrite; else why not."""
    if words:
        return with_key_words(question, answer, earlier)
    return Cleaned(answer)
