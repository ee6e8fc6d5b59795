"""The completion-shaped prompt for a base model: one worked example, the passages, the question."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.formats.adapter import CHAT_ONLY
from proxy.formats.render import message_text
from proxy.pipeline.file_refs import last_user_index

# A base (pre-trained) model continues text: it answers when the prompt is a text in which an
# answer comes next. The shape and the example were chosen on the dev half of
# bench/eval/base_answers.json (bench/base_model_answers.py; docs/strategy.md has the figures).
EXAMPLE_CONTEXT = (
    "Orders ship from the Leeds warehouse within two working days. "
    "Refunds are paid to the original card within 14 days of the return."
)
EXAMPLE_QUESTION = "How long do refunds take?"
EXAMPLE_ANSWER = "Refunds are paid to the original card within 14 days of the return."
ANSWER_STOP = "\n"
"""The answer is the rest of the "Answer:" line: what follows it would be the model writing
the next question itself."""
NOTHING_FOUND = "(nothing in the documents matches the question)"
BASE_PASSAGES = 2
"""Passages a base model gets per file unless the request sets a retrieval limit: the bundled
model answered more questions from its two best passages than from one, three, four or all
the budget holds (bench/base_model_answers.py, dev half)."""


_HYPHENATED = re.compile(r"(?<=\w)-\n(?=\w)")
_WRAPPED = re.compile(r"[ \t]*(?<!\n)\n(?!\n)[ \t]*")
_PARAGRAPHS = re.compile(r"\n{3,}")


@dataclass(frozen=True)
class CompletionPrompt:
    """What a base model's prompt is made of: the passages (or whole documents), the question."""

    context: tuple[str, ...]
    question: str


def one_line(text: str) -> str:
    """A text on one line: a line break inside a question or an answer would end it early."""
    return " ".join(text.split())


def unwrapped(text: str) -> str:
    """A passage with its lines joined into paragraphs: the model copies a passage's words, and
    a line break copied from a hard-wrapped text (a PDF's lines, an RFC's) would end the answer
    mid-sentence, at the stop."""
    text = _WRAPPED.sub(" ", _HYPHENATED.sub("", text))
    return _PARAGRAPHS.sub("\n\n", text).strip()


def earlier_turns(messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[tuple[str, str]]]:
    """The system text, and the question/answer pairs before the last user message (a user
    message and the assistant's text that follows it; tool calls and their results are left
    out, as a text continuation has no place for them)."""
    last = last_user_index([dict(m) for m in messages])
    end = len(messages) if last is None else last
    system: list[str] = []
    pairs: list[tuple[str, str]] = []
    for message in messages[:end]:
        role = message.get("role")
        text = message_text(message.get("content")).strip()
        if role in ("system", "developer") and not pairs:
            if text:
                system.append(text)
        elif role == "user" and text:
            pairs.append((text, ""))
        elif role == "assistant" and text and pairs and not pairs[-1][1]:
            pairs[-1] = (pairs[-1][0], text)
    return "\n\n".join(system), [(q, a) for q, a in pairs if a]


def render_completion(prompt: CompletionPrompt, messages: Sequence[Mapping[str, Any]]) -> str:
    """The whole prompt: the system text, the worked example, earlier questions with their
    answers, then the passages and the question, ending with `Answer:` for the model to go on."""
    system, pairs = earlier_turns(messages)
    parts = [f"{system}\n\n"] if system else []
    parts.append(
        f"Context: {EXAMPLE_CONTEXT}\n\nQuestion: {EXAMPLE_QUESTION}\nAnswer: {EXAMPLE_ANSWER}\n\n"
    )
    parts.extend(f"Question: {one_line(q)}\nAnswer: {one_line(a)}\n\n" for q, a in pairs)
    context = "\n\n".join(unwrapped(text) for text in prompt.context if text.strip())
    context = context or NOTHING_FOUND
    parts.append(f"Context: {context}\n\nQuestion: {one_line(prompt.question)}\nAnswer:")
    return "".join(parts)


def _client_stops(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list):
        return [stop for stop in value if isinstance(stop, str) and stop]
    return []


def completion_body(chat_body: Mapping[str, Any], prompt: str) -> tuple[dict[str, Any], bool]:
    """A /v1/completions body for `prompt`: the chat request's sampling fields and extras, the
    answer's stop, and greedy decoding when the request sets no temperature (True when so):
    sampled at llama.cpp's default 0.8, the bundled model found the fact a third as often."""
    body = {key: value for key, value in chat_body.items() if key not in CHAT_ONLY}
    if "max_tokens" not in body and "max_completion_tokens" in chat_body:
        body["max_tokens"] = chat_body["max_completion_tokens"]
    if chat_body.get("stream") and "stream_options" in chat_body:
        body["stream_options"] = chat_body["stream_options"]  # keeps include_usage working
    body["prompt"] = prompt
    body["stop"] = list(dict.fromkeys([ANSWER_STOP, *_client_stops(chat_body.get("stop"))]))
    greedy = chat_body.get("temperature") is None
    if greedy:
        body["temperature"] = 0
    return body, greedy
