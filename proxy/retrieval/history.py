"""What a follow-up question is searched for: itself, and itself in its conversation (pure)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MARKER = re.compile(r"^\[attached: .*\]$", re.S)
"""The text a file part of an earlier message becomes (proxy.pipeline.references)."""
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
    (the question's own is 1). `source`: question | conversation | reply."""

    text: str
    weight: float
    source: str

    def record(self) -> dict[str, Any]:
        return {"text": self.text, "weight": round(self.weight, 4), "from": self.source}


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
    reply: float = 0.0
    """The ranking of the question with the last answer (0: the answer is not searched)."""


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
    with the last answer (`rule.reply`); texts of no weight are left out."""
    texts = [SearchText(question, 1.0, "question")]
    if not question.strip():
        return texts
    questions = [turn.text for turn in earlier if turn.role == "user"]
    weight = rule.weight
    for asked in list(reversed(questions))[: rule.turns]:
        if weight > 0:
            texts.append(SearchText(f"{last_words(asked)}\n{question}", weight, "conversation"))
        weight *= rule.decay
    answers = [turn.text for turn in earlier if turn.role == "assistant"]
    if answers and rule.reply > 0 and earlier[-1].role == "assistant":
        texts.append(SearchText(f"{first_words(answers[-1])}\n{question}", rule.reply, "reply"))
    return texts
