"""What a follow-up question is searched for: itself, and itself in its conversation (pure)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.retrieval.function_words import function_word
from proxy.retrieval.referring import (
    ASKING,
    CLITIC,
    CONTINUING,
    DEFINITE,
    HINTS,
    REFERRING,
    SHIFT,
    unread_script,
)

MARKER = re.compile(r"^\[attached: .*\]$", re.S)
"""The text a file part of an earlier message becomes (proxy.pipeline.file_refs)."""
WORD = re.compile(r"\w+")
MAX_WORDS = 80
"""Each earlier text is searched by at most this many words (a reply by its first ones, a
question by its last ones): MiniLM reads 256 word pieces, and a long pasted text must not
drown the question."""


@dataclass(frozen=True)
class Turn:
    """An earlier message of the conversation, as text: `user` or `assistant`."""

    role: str
    text: str


@dataclass(frozen=True)
class SearchText:
    """One text a request's passages are ranked for, and its weight where rankings are fused
    (the question's own is 1). `source`: question | conversation | reply | terms, or rewrite
    (`led_by_rewrite`).

    A `terms` text is ranked by words alone: the question with the `carried` words that are
    rare in the document searched (chosen per document, `salient_words`)."""

    text: str
    weight: float
    source: str
    carried: tuple[str, ...] = ()
    pick: int = 0
    """How many of the `carried` words a document's rarest are searched (a `terms` text)."""
    near: int = 0
    """How many of the first `carried` words stand next to the question's own words where
    they were said: those go first (`salient_words`)."""

    def record(self) -> dict[str, Any]:
        found = {"text": self.text, "weight": round(self.weight, 4), "from": self.source}
        if self.carried:
            found["carried"] = list(self.carried)
        if self.near:
            found["near"] = self.near
        return found


@dataclass(frozen=True)
class HistoryRule:
    """How much of its conversation a follow-up is searched with (docs/retrieval.md,
    Conversations)."""

    turns: int = 2
    """Earlier user questions each searched together with the question (0: none)."""
    weight: float = 1.0
    """The ranking of the question with the latest earlier question, beside the question's 1."""
    decay: float = 0.5
    """Each step further back multiplies the weight by this."""
    reply: float = 4.0
    """The ranking of the question with the last answer (0: the answer is not searched)."""
    terms: float = 1.0
    """The ranking, by words alone, of the question with the rare words of the last answer and
    the latest earlier question (0: none carried over)."""
    term_count: int = 4
    """How many carried words at most, the rarest in the document first."""
    lean: bool = True
    """Each history text's weight scaled by how much the question leans on its history
    (`leaning`): a self-contained question's own passages keep the lead."""
    near: bool = True
    """Carried words said next to the question's own words go first ("his brother Clarence"
    for "What happens to the brother?")."""
    reply_pointing: bool = True
    """The last answer searched only for a question pointing back (`pointing`): "Why is
    that so dangerous?" asks about what the answer said; a question of its own does not."""
    continuing: float = 1.0
    """With `reply_pointing`, the last answer's ranking for a question that points at nothing
    but opens by continuing the exchange (`CONTINUING`: "¿Y si se corta la conexión?", "Et
    pour taper du japonais ?"), or one in a script the index's languages are not written in
    ("それはなぜ？": whether it points back cannot be told): it may lean on the answer, less
    surely than a pronoun says (0: not searched)."""


def message_text(message: dict[str, Any]) -> str:
    """A message's own text: its string content, or its text parts (file markers left out)."""
    content = message.get("content")
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        return ""
    texts = [
        part["text"].strip()
        for part in content
        if isinstance(part, dict)
        and part.get("type") in ("text", "input_text", "output_text")
        and isinstance(part.get("text"), str)
        and not MARKER.match(part["text"].strip())
    ]
    return "\n".join(text for text in texts if text)


def earlier_turns(messages: Sequence[dict[str, Any]], last_user: int | None) -> list[Turn]:
    """The user and assistant messages before the last user message, oldest first, as text
    (system prompts, tool results and empty messages are not the conversation's words)."""
    if last_user is None:
        return []
    turns = []
    for message in messages[:last_user]:
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        text = message_text(message)
        if text:
            turns.append(Turn(str(role), text))
    return turns


def first_words(text: str, limit: int = MAX_WORDS) -> str:
    """The text up to its `limit`-th word (whole, when shorter)."""
    for count, match in enumerate(WORD.finditer(text), 1):
        if count == limit:
            return text[: match.end()]
    return text


def last_words(text: str, limit: int = MAX_WORDS) -> str:
    """The text from its `limit`-th word before the end (whole, when shorter)."""
    starts = [match.start() for match in WORD.finditer(text)]
    return text if len(starts) <= limit else text[starts[-limit] :]


def search_texts(question: str, earlier: Sequence[Turn], rule: HistoryRule) -> list[SearchText]:
    """The question (weight 1), then the question with each of the `rule.turns` latest earlier
    questions (the latest at `rule.weight`, each further back `rule.decay` times less), then
    with the last answer (`answer_weight`), then the question with the words it may refer to
    (`rule.terms`); with `rule.lean`, every history weight times `leaning(question)`. Texts of
    no weight are left out."""
    texts = [SearchText(question, 1.0, "question")]
    if not question.strip():
        return texts
    questions = [turn.text for turn in earlier if turn.role == "user"]
    answer = last_answer(earlier)
    scale = leaning(question) if rule.lean else 1.0
    weight = rule.weight * scale
    for asked in list(reversed(questions))[: rule.turns]:
        if weight > 0:
            texts.append(SearchText(f"{last_words(asked)}\n{question}", weight, "conversation"))
        weight *= rule.decay
    reply = answer_weight(question, answer, rule) * scale
    if answer and reply > 0:
        texts.append(SearchText(f"{first_words(answer)}\n{question}", reply, "reply"))
    carried = carried_words(question, answer, questions[-1:])
    if carried and rule.terms * scale > 0:
        close = near_words(question, [answer, *questions[-1:]]) if rule.near else []
        ordered = tuple(dict.fromkeys([*close, *carried]))
        weight = rule.terms * scale
        texts.append(SearchText(question, weight, "terms", ordered, rule.term_count, len(close)))
    return texts


def led_by_rewrite(
    question: str, rewrite: str, earlier: Sequence[Turn], rule: HistoryRule, weight: float
) -> list[SearchText]:
    """The follow-up searched as its standalone rewrite would be in its conversation (the
    rewrite, its earlier questions, its carried words: `search_texts` of the rewrite), each at
    `weight` times its own weight, beside the question as written at 1: the question's words
    still count, its history texts give way to the rewrite's, which name what it points at."""
    texts = search_texts(rewrite, earlier, rule)
    led = [replace(texts[0], weight=weight, source="rewrite")]
    led += [replace(text, weight=text.weight * weight) for text in texts[1:]]
    return [SearchText(question, 1.0, "question"), *led]


def answer_weight(question: str, answer: str, rule: HistoryRule) -> float:
    """The weight of the question searched with the last answer, before `leaning`: `rule.reply`
    for a question pointing back (or for every question, without `rule.reply_pointing`),
    `rule.continuing` for one opening by continuing the exchange or written in a script whose
    pointing words are not known (`unread_script`), else none (`rule.reply` 0: the answer is
    never searched)."""
    if rule.reply <= 0 or not rule.reply_pointing or pointing(question, [answer]):
        return rule.reply
    unknown = CONTINUING.match(question) or unread_script(question)
    return rule.continuing if unknown else 0.0


def last_answer(earlier: Sequence[Turn]) -> str:
    """The assistant's answer just before the question ('' when the last earlier turn is not
    one: two user messages in a row)."""
    return earlier[-1].text if earlier and earlier[-1].role == "assistant" else ""


CUES = frozenset(
    """it its that this these those they them their he him his she her hers one ones other others
    another former latter last second first same such there then so also why else""".split()  # noqa: SIM905
)
"""Words by which a question points back at what was said (pronouns, demonstratives, "the
other one", "the last one", "why?"), in English; other languages lean on length alone."""
SHORT = 8
"""A question of this many words or fewer says little on its own."""


def pointed_at(question: str, said: Sequence[str]) -> bool:
    """Whether the question names with a definite article or demonstrative (`DEFINITE`), or
    asks which of them (`ASKING`), a thing the last turn (`said`: the last answer) named: "How
    do the tokens limit ...?" after an answer about tokens, "Which keys exactly?" after one
    naming keys. The noun is one of the next two words that is not a function
    word, matched as `near_words` matches ("token", "tokens")."""
    found = WORD.findall(question)
    named = {_key(word) for text in said for word in WORD.findall(first_words(text, MAX_CARRIED))}
    for at, word in enumerate(found):
        if word.casefold() not in DEFINITE and word.casefold() not in ASKING:
            continue
        for noun in found[at + 1 : at + 3]:
            if function_word(noun) or noun.isdigit():
                continue
            if _key(noun) in named:
                return True
            break
    return False


def pointing(question: str, said: Sequence[str] = ()) -> bool:
    """Whether the question points back at what was said: a pronoun or demonstrative
    (`REFERRING`, `HINTS`, in the index's languages), an object pronoun before its verb
    (`CLITIC`: "je la change") or a definite phrase naming what the last turn `said`
    (`pointed_at`)."""
    found = [word.casefold() for word in WORD.findall(question)]
    if any(word in REFERRING or word in HINTS for word in found) or CLITIC.search(question):
        return True
    return bool(said) and pointed_at(question, said)


def leaning(question: str) -> float:
    """How much a question leans on its history, 0 to 1.5: 1 as a rule, 1.5 for a short one
    pointing back in English (`CUES`; measured: counting other languages' pointers there lost
    a Russian follow-up), less for a long one that points at nothing in any language
    (`REFERRING`), and nothing for one that says it changes the subject (`SHIFT`: it is
    searched alone)."""
    if SHIFT.search(question):
        return 0.0
    found = [word.casefold() for word in WORD.findall(question)]
    cues = sum(word in CUES for word in found)
    short = len(found) <= SHORT
    if short and cues:
        return 1.5
    if short or cues or any(word in REFERRING for word in found):
        return 1.0
    return 0.5


MAX_CARRIED = 160
"""Words of the last answer and earlier question offered as carried words, at most."""


def carried_words(question: str, answer: str, questions: Sequence[str]) -> list[str]:
    """The words a follow-up may refer to: the last answer's, then the earlier questions',
    each once (case kept: names and acronyms), leaving out the question's own."""
    own = {word.casefold() for word in WORD.findall(question)}
    seen: dict[str, str] = {}
    for text in [first_words(answer, MAX_CARRIED), *(last_words(q) for q in questions)]:
        for word in WORD.findall(text):
            key = word.casefold()
            if key not in own and key not in seen and not word.isdigit():
                seen[key] = word
    return list(seen.values())


REACH = 2
"""Words this close to one of the question's own words, where it was said, are near it."""
PREFIX = 5
"""Two words match when equal, or both this long and alike up to here ("tokens", "token")."""


def _key(word: str) -> str:
    """A word as `near_words` matches it: casefolded, cut to `PREFIX` letters."""
    folded = word.casefold()
    return folded[:PREFIX] if len(folded) >= PREFIX else folded


def near_words(question: str, texts: Sequence[str]) -> list[str]:
    """The words of `texts` (the last answer, the earlier question) within `REACH` words of
    one of the question's own words (function words aside), nearest first, each once."""
    key = _key
    own = {key(word) for word in WORD.findall(question) if not function_word(word)}
    found: dict[str, tuple[int, int]] = {}
    for text in texts:
        said = WORD.findall(first_words(text, MAX_CARRIED))
        keys = [key(word) for word in said]
        for at, word in enumerate(said):
            if keys[at] in own or word.isdigit():
                continue
            gaps = [
                abs(at - other)
                for other in range(max(0, at - REACH), min(len(said), at + REACH + 1))
                if keys[other] in own
            ]
            if gaps and word.casefold() not in found:
                found[word.casefold()] = (min(gaps), len(found))
    ordered = sorted(found.items(), key=lambda item: item[1])
    originals = {word.casefold(): word for text in texts for word in WORD.findall(text)}
    return [originals[folded] for folded, _ in ordered]


def rarity(found: int, passages: int) -> float:
    """A word's IDF as BM25 computes it, from the passages holding it among `passages`."""
    return math.log(1 + (passages - found + 0.5) / (found + 0.5))


def salient_words(
    carried: Sequence[str],
    frequency: Callable[[str], int],
    passages: int,
    count: int,
    near: int = 0,
    common: Callable[[str], bool] = lambda word: False,
) -> list[str]:
    """The `count` carried words rarest in the document (by the document frequency of their
    index term, IDF as BM25 computes it), the first `near` ones before the rest; leaving out
    words the document does not hold, words of one or two letters, `common` ones (function
    words) and words in more than a quarter of its passages (half, for a near one: where it
    was said chose it, not its rarity); ties in the order carried."""
    scored = []
    for order, word in enumerate(carried):
        found = frequency(word)
        most = passages / 2 if order < near else passages / 4
        if found <= 0 or found > most or len(word) < 3 or common(word):
            continue
        score = rarity(found, passages)
        scored.append((order >= near, -score, order, word))
    return [word for *_, word in sorted(scored)[:count]]
