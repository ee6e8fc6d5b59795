"""A follow-up rewritten as a standalone search question: whether it needs it, what the model is
shown, and what of its answer is kept (pure; the call is proxy.retrieval.rewriter)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import bm25s.stopwords

from proxy.retrieval.history import SearchText, Turn, first_words, last_words
from proxy.retrieval.translation import Endpoint

_WORD = re.compile(r"\w+")

# Words that point back into the conversation: pronouns, demonstratives, "the other one", "the
# last one", "so one" (German "so eine"), "davon". A question holding one leans on what came
# before; measured on the tuning half's follow-ups (docs/retrieval.md, Conversations).
_REFERRING_WORDS = """
    it its itself they them their theirs themselves he him his himself she her hers herself
    this that these those one ones other others another former latter same such
    second third last previous above earlier
    es er sie ihn ihm ihr ihre ihren ihrem ihrer sein seine seinen seinem seiner dies diese
    dieser dieses diesem diesen jene jener jenes davon dafür damit daraus darauf dabei dazu
    daran darüber darin dadurch dort so andere anderen anderer anderes anderem letzte letzten
    zweite zweiten selbe derselbe dieselbe dasselbe
    он она оно они его её ее их ему ей им него неё нее них нему ней ним это этот эта эти
    этого этой этом этим этих тот та те того той тем тех там туда такой такая такое такие
    другой другая другое другие другого второй вторая второе последний последняя последнее
    тоже также
"""
_REFERRING = frozenset(_REFERRING_WORDS.split())
# A question that opens like the rest of a sentence ("And Rhino?", "What about PAC?", "А если
# памяти меньше?") continues the one before it.
_CONTINUING = re.compile(
    r"^\s*(?:and|but|so|also|or|then|what about|how about|und|aber|also|oder|dann|"
    r"was ist mit|wie ist es mit|и|а|но|или|ну|так|тогда)\b",
    re.IGNORECASE,
)
# Asking words, auxiliaries and other words that say nothing of a question's subject, beside
# each language's stopwords (bm25s's lists are short: English's has 33 words).
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
    что кто как какой какая какие каком где когда почему зачем сколько ли можно нужно надо
    есть был была было были будет всё все всего-таки всё-таки всетаки
"""
_ASKING = frozenset(_ASKING_WORDS.split())
_STOPWORDS = frozenset(
    word
    for words in (
        bm25s.stopwords.STOPWORDS_EN,
        bm25s.stopwords.STOPWORDS_GERMAN,
        bm25s.stopwords.STOPWORDS_RUSSIAN,
        bm25s.stopwords.STOPWORDS_FRENCH,
        bm25s.stopwords.STOPWORDS_SPANISH,
    )
    for word in words
)
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
    words pointing back, no numbers alone, at least three letters (two for a Cyrillic word)."""
    found = []
    for word in _WORD.findall(unicodedata.normalize("NFKC", question).casefold()):
        if word in _REFERRING or word in _ASKING or word in _STOPWORDS or word.isdigit():
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
    pointing = [word for word in words if word in _REFERRING]
    if pointing:
        return Leaning(True, f"points back ({pointing[0]!r})")
    opening = _CONTINUING.match(question)
    if opening:
        return Leaning(True, f"continues the last question ({opening.group().strip()!r})")
    own = own_words(question)
    if len(own) < MIN_OWN_WORDS:
        return Leaning(True, f"{len(own)} word{'' if len(own) == 1 else 's'} of its own")
    return Leaning(False, "self-contained")


# -- what the model is shown --------------------------------------------------------------------

QUESTIONS_SHOWN = 4
"""Earlier user questions shown to the model, the latest ones."""
QUESTION_WORDS = 60
"""Each earlier question is shown by its last this many words."""
ANSWER_HEAD_WORDS = 90
ANSWER_TAIL_WORDS = 60
"""The last answer is shown by its opening and its end (what "that last thing" points at)."""
FOLLOW_UP_WORDS = 80
"""A longer follow-up is no question to rewrite: it is searched as it is."""

INSTRUCTION = (
    "Rewrite the last question of a conversation as one standalone question for a document "
    "search. Replace every word that points back (it, that, they, the other one, the second, "
    "the last one of those) with what it means in the conversation, most often a thing the "
    "assistant's last answer names, in its words; and name what the conversation is about "
    "(the program, the book, the system) if the question leaves it out. Keep the language of "
    "the last question (English stays English, German stays German, Russian stays Russian) "
    "and its own words; do not answer it. Reply with the rewritten question only."
)
# Three worked examples, shown as earlier turns: a small model follows a pattern better than an
# instruction. Their subjects are far from any document's, so their words do not leak in; the
# third keeps its language and points at the last thing a list named.
EXAMPLES = (
    (
        "User: What does the kettle's warranty cover?\n"
        "Assistant: Defects in materials and workmanship for two years; the heating element is "
        "covered for five years.\n"
        "Last question: And what about the other part, how long?",
        "How long is the kettle's heating element covered by the warranty?",
    ),
    (
        "User: Which database does the app use by default?\n"
        "Assistant: SQLite, in data/app.db; PostgreSQL can be configured instead.\n"
        "Last question: How do I switch to the second one?",
        "How do I switch the app's database from SQLite to PostgreSQL?",
    ),
    (
        "User: Welche Zahlungsarten nimmt der Hofladen an?\n"
        "Assistant: Bargeld, EC-Karte und, für Stammkunden, die Zahlung auf Rechnung.\n"
        "Last question: Und wie läuft das Letzte davon ab?",
        "Wie läuft im Hofladen die Zahlung auf Rechnung für Stammkunden ab?",
    ),
)


def shown_answer(text: str) -> str:
    """An answer cut to its opening and its end."""
    head = first_words(text, ANSWER_HEAD_WORDS + ANSWER_TAIL_WORDS)
    if head == text:
        return text
    return f"{first_words(text, ANSWER_HEAD_WORDS)} … {last_words(text, ANSWER_TAIL_WORDS)}"


def conversation_lines(question: str, earlier: Sequence[Turn]) -> str:
    """The conversation as the model reads it: the latest earlier user questions and the last
    answer (if it came after the last of them), each cut, then the follow-up."""
    users = [index for index, turn in enumerate(earlier) if turn.role == "user"]
    shown = set(users[-QUESTIONS_SHOWN:])
    answers = [index for index, turn in enumerate(earlier) if turn.role == "assistant"]
    if answers and (not users or answers[-1] > users[-1]):
        shown.add(answers[-1])
    lines = []
    for index in sorted(shown):
        turn = earlier[index]
        if turn.role == "user":
            lines.append(f"User: {_one_line(last_words(turn.text, QUESTION_WORDS))}")
        else:
            lines.append(f"Assistant: {_one_line(shown_answer(turn.text))}")
    lines.append(f"Last question: {_one_line(question)}")
    return "\n".join(lines)


def rewrite_messages(question: str, earlier: Sequence[Turn]) -> list[dict[str, str]]:
    """The chat request's messages: the instruction, two worked examples, then the conversation
    as one user message (its text only: no document, no file, no tool output)."""
    return _asked_with_examples(INSTRUCTION, EXAMPLES, question, earlier)


def _asked_with_examples(
    instruction: str,
    examples: Sequence[tuple[str, str]],
    question: str,
    earlier: Sequence[Turn],
) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": instruction}]
    for asked, answered in examples:
        messages += [
            {"role": "user", "content": asked},
            {"role": "assistant", "content": answered},
        ]
    messages.append({"role": "user", "content": conversation_lines(question, earlier)})
    return messages


# -- or: the conversation's key words, named by the model, put before the question by the proxy --

KEY_WORDS_INSTRUCTION = (
    "List the key words of the conversation that the last question needs to be understood in "
    "a document search: what its words point at (it, that, they, the other one, the second, "
    "the tokens) and what the conversation is about (the program, the book, the system). Two "
    "to six key words or short phrases, copied from the conversation in its language, "
    "separated by commas. Do not answer the question and do not repeat it."
)
# Worked examples, shown as earlier turns: picking key words is extraction, which a small model
# does better than rewriting (it leaves the subject out of a rewrite, or changes its language).
# Far from any document's subject; the third's question points back by "the" alone, the fourth
# keeps its language.
KEY_WORDS_EXAMPLES = (
    (EXAMPLES[0][0], "kettle, warranty, heating element"),
    (EXAMPLES[1][0], "app, database, PostgreSQL"),
    (
        "User: How does the garden pump's timer work?\n"
        "Assistant: It switches the pump on at the set hours; a float switch stops it when the "
        "tank runs dry.\n"
        "Last question: Does the switch also protect it against frost?",
        "garden pump, float switch",
    ),
    (EXAMPLES[2][0], "Hofladen, Zahlung auf Rechnung, Stammkunden"),
)
KEY_WORDS = 16
"""The key words are cut to this many words."""


def key_words_messages(question: str, earlier: Sequence[Turn]) -> list[dict[str, str]]:
    """The chat request's messages when the model names the conversation's key words for the
    follow-up: the instruction, worked examples, then the conversation as `rewrite_messages`
    shows it."""
    return _asked_with_examples(KEY_WORDS_INSTRUCTION, KEY_WORDS_EXAMPLES, question, earlier)


# -- what of the answer is kept ------------------------------------------------------------------

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


_QUESTION_END = re.compile(r"[?？](?=\s|$)")
"""A question mark ending a sentence (not one inside a URL or code, "a?b=1")."""


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


def _one_line(text: str) -> str:
    return " ".join(text.split())


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
