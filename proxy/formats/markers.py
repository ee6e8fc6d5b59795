"""The plain text an instruct format puts between turns: what a document must not contain
verbatim when the conversation is rendered with that format."""

from __future__ import annotations

import re

from proxy.formats.model import ROLES, InstructFormat

# Jinja expressions, statements and comments: what is left between them is literal text.
_JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.DOTALL)
MIN_MARKER_CHARS = 3


def turn_markers(fmt: InstructFormat) -> tuple[str, ...]:
    """Every line of literal template text (`### Instruction:`, `<|im_start|>user`), the
    generation prompt, separators, stop strings and special tokens of `fmt`, stripped."""
    texts = [fmt.bos, fmt.eos, fmt.generation_prompt, fmt.separator, *fmt.stop]
    texts += fmt.special_tokens
    for role in ROLES:
        for source in fmt.templates.for_role(role).sources():
            texts += _JINJA.split(source)
    markers = {
        line.strip()
        for text in texts
        for line in text.splitlines()
        if len(line.strip()) >= MIN_MARKER_CHARS
    }
    return tuple(sorted(markers))
