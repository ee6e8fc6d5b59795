"""How a request fills the model's context window, part by part (pure): the numbers of /ui's bar."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from proxy.formats.render import message_text
from proxy.pipeline.decision import WindowShare
from proxy.pipeline.file_refs import last_user_index

CHARS_PER_TOKEN = 4.0
"""For text nobody counted and no counted text to learn from: about 4 characters of English
per token, the usual rule of thumb for BPE tokenizers."""


@dataclass(frozen=True)
class PromptSizes:
    """Characters of each part of the prompt as it goes upstream."""

    system: int
    history: int
    documents: int  # what the proxy injected (files in full or passages) with the prompt's frame
    question: int


def prompt_sizes(messages: list[dict[str, Any]], query: str, *, injected: bool) -> PromptSizes:
    """System and developer messages, the other turns, and the last user message — which after
    injection holds the documents (or passages) and the question."""
    last = last_user_index(messages)
    system = history = documents = question = 0
    for index, message in enumerate(messages):
        size = len(message_text(message.get("content")))
        if index == last:
            question = min(len(query), size) if injected else size
            documents = size - question
        elif message.get("role") in ("system", "developer"):
            system += size
        else:
            history += size
    return PromptSizes(system, history, documents, question)


def _split(total: int, left: int, right: int) -> tuple[int, int]:
    """`total` shared out in proportion to two character counts."""
    if left + right == 0:
        return 0, total
    share = round(total * left / (left + right))
    return share, total - share


def share_window(
    sizes: PromptSizes,
    *,
    context_window: int | None,
    conversation_tokens: int | None,
    question_tokens: int | None,
    counted_files: tuple[int, int] | None,
    full_content: bool,
    max_tokens: int | None,
    images: tuple[int, bool] = (0, False),
) -> WindowShare:
    """The window's parts: decide's exact counts where it made them, the rest estimated.

    `conversation_tokens` (the conversation before injection, template applied) and
    `question_tokens` are decide's counts; system and history share the conversation's other
    tokens by their characters. `counted_files` is (tokens, characters) of the files decide
    counted: the documents part when they went in full, and the rate at which passages and the
    prompt's frame are estimated (else `CHARS_PER_TOKEN`). `images` is (tokens, estimated) of
    the documents' pages sent as images: part of the documents.
    """
    estimated: list[str] = []
    notes: list[str] = []
    rate = 1 / CHARS_PER_TOKEN
    if counted_files is not None and counted_files[1] > 0:
        rate = counted_files[0] / counted_files[1]

    def estimate(chars: int) -> int:
        return math.ceil(chars * rate)

    if question_tokens is not None:
        question = question_tokens
    else:
        question = estimate(sizes.question)
        estimated.append("question")
    if conversation_tokens is not None:
        rest = max(0, conversation_tokens - question)
        system, history = _split(rest, sizes.system, sizes.history)
        notes.append("conversation and question counted")
        if sizes.system and sizes.history:
            estimated += ["system", "history"]
            notes.append("system and history split by their characters")
    else:
        system, history = estimate(sizes.system), estimate(sizes.history)
        estimated += [
            name for name, chars in (("system", sizes.system), ("history", sizes.history)) if chars
        ]
    if full_content and counted_files is not None:
        frame = max(0, sizes.documents - counted_files[1])
        documents = counted_files[0] + estimate(frame)
        notes.append(f"documents counted, their frame ({frame} characters) estimated")
    else:
        documents = estimate(sizes.documents)
        if sizes.documents:
            estimated.append("documents")
    if images[0]:
        documents += images[0]
        notes.append(f"page images {images[0]} tokens" + (" (estimated)" if images[1] else ""))
        if images[1] and "documents" not in estimated:
            estimated.append("documents")
    if estimated:
        notes.append(f"estimated at {1 / rate:.2f} characters per token")
    used = system + history + documents + question
    return WindowShare(
        context_window=context_window,
        system=system,
        history=history,
        documents=documents,
        question=question,
        answer_room=None if context_window is None else max(0, context_window - used),
        max_tokens=max_tokens,
        estimated=estimated,
        note="; ".join(notes) if notes else "nothing counted",
    )


def after_shift(share: WindowShare, prompt_tokens: int, dropped: int) -> WindowShare:
    """The window once context shifting counted the whole prompt (`prompt_tokens`, exact) and
    dropped `dropped` old messages: the history is what the other parts leave of that count."""
    others = share.system + share.documents + share.question
    window = share.context_window
    estimated = share.estimated
    if estimated and "history" not in estimated:
        estimated = [*estimated, "history"]
    return dataclasses.replace(
        share,
        history=max(0, prompt_tokens - others),
        answer_room=None if window is None else max(0, window - prompt_tokens),
        estimated=estimated,
        note=f"{share.note}; the whole prompt counted after shifting ({prompt_tokens} tokens, "
        f"{dropped} old messages dropped), history is the rest",
    )
