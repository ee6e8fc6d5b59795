"""The exact prompt texts replacing the last user message (docs/strategy.md, retrieval.md)."""

from __future__ import annotations

from collections.abc import Sequence


def full_content_prompt(files: Sequence[tuple[str, str]], query: str) -> str:
    """One `** name full content **` block per file, in order, then the user's query."""
    blocks = "".join(
        f"** {name} full content **\n\n{content}\n\n** end of {name} **\n\n"
        for name, content in files
    )
    return (
        "This is a Enriched Context Generation scenario.\n\n"
        "The following content was found in the files provided by the user.\n\n"
        f"{blocks}"
        "Based on the content above, please provide a response to the user query.\n\n"
        f"User query: {query}"
    )


USE_CITATIONS = (
    "Use the citations above to respond to the user query, only if they are relevant. "
    "Otherwise, respond to the best of your ability without them."
)


def citations_tail(query: str) -> str:
    """What follows the citations: how to use them, then the user's query."""
    return f"{USE_CITATIONS}\n\nUser Query:\n\n{query}"


def citations_prompt(passages: Sequence[str], query: str) -> str:
    citations = "".join(
        f'Citation {number}: "{passage}"\n\n' for number, passage in enumerate(passages, 1)
    )
    return (
        "The following citations were found in the files provided by the user:\n\n"
        f"{citations}{citations_tail(query)}"
    )


def no_citations_prompt(query: str) -> str:
    return (
        "Important: No citations were found in the user files for the user query. "
        "In less than one sentence, inform the user of this. "
        "Then respond to the query to the best of your ability.\n\n"
        f"User Query:\n\n{query}"
    )
