"""Search calls a model wrote as text that its server did not parse into `tool_calls` (pure).

Qwen2.5-Coder's chat template shows the call format with doubled braces, `{{"name": <function-name>,
"arguments": <args-json-object>}}`, and the 1.5B model copies them without the `<tool_call>` tags
around them: llama.cpp's Hermes parser then hands the call back as the answer's text (seen with
xllamacpp 2026.10). A turn whose whole text is such a call of the search function is taken as
that call; anything else stays text. Only the search function is taken: a client's function
named in text is the client's to read.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.pipeline.search_space import SEARCH_FUNCTION
from proxy.toolloop.turn import Call

# What may wrap a call written as text: Hermes tags, a Markdown fence, doubled braces.
OPENINGS = ("```json", "```", "<tool_call>")
WRAPPERS = ("```json", "<tool_call>", "</tool_call>")
STRAY = set(" \t\r\n{}`")
NAME_KEY = '"name"'
_decoder = json.JSONDecoder()


def _after_openings(text: str) -> str | None:
    """The text after its fences, tags and opening braces; None while it is still one of them."""
    rest = text.lstrip()
    for opening in OPENINGS:
        if opening.startswith(rest):
            return None
        if rest.startswith(opening):
            rest = rest[len(opening) :].lstrip()
    if not rest:
        return None
    if not rest.startswith("{"):
        return rest
    while rest.startswith("{"):
        rest = rest[1:].lstrip()
    return rest or None


def may_be_call(text: str) -> bool:
    """Whether the text a turn has written so far may still turn out to be a call: held back
    from the client until the turn ends or it cannot be one."""
    rest = _after_openings(text)
    if rest is None:
        return True
    head = text.lstrip()
    if not (head.startswith("{") or head.startswith(OPENINGS)):
        return False
    return rest.startswith(NAME_KEY) or NAME_KEY.startswith(rest)


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


def written_calls(text: str) -> list[Call]:
    """The search calls the text consists of, in order; [] when it is anything else: prose, a
    call of another function, or a call with more than wrappers around it."""
    calls: list[Call] = []
    position = 0
    while True:
        start = text.find("{", position)
        between = text[position:start] if start >= 0 else text[position:]
        for wrapper in WRAPPERS:
            between = between.replace(wrapper, "")
        if any(char not in STRAY for char in between):
            return []
        if start < 0:
            return calls
        # Doubled braces: the object starts at the brace right before "name".
        while start + 1 < len(text) and text[start + 1 :].lstrip().startswith("{"):
            start = text.index("{", start + 1)
        try:
            parsed, position = _decoder.raw_decode(text, start)
        except ValueError:
            return []
        if not isinstance(parsed, dict) or parsed.get("name") != SEARCH_FUNCTION:
            return []
        arguments = parsed.get("arguments", parsed.get("parameters"))
        calls.append(Call(index=len(calls), name=SEARCH_FUNCTION, arguments=_arguments(arguments)))
