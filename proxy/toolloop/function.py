"""The search function the model is offered, and reading the queries out of its calls (pure).

Modelled on OpenAI's hosted file search, whose model-facing function takes a list of queries
(up to five) that the model writes itself — rephrased to stand alone, a complex question split
into several searches run together — and answers with numbered passages.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy import jsonio
from proxy.pipeline.search_space import MAX_QUERY_CHARS, SEARCH_FUNCTION
from proxy.retrieval.history import HistoryRule, Turn, answer_weight, first_words, last_answer

MAX_NAMES = 20
"""Names of files and stores written into the description; the rest are counted."""

EXAMPLE = '{"queries": ["a short search query", "another wording of it"]}'


class CallError(ValueError):
    """A call the proxy cannot run: what the model is told, so it can call again."""


def search_function(scope: list[str], max_queries: int) -> dict[str, Any]:
    """The function, in Chat Completions' shape, with the names of what it searches."""
    names = scope[:MAX_NAMES]
    more = len(scope) - len(names)
    covered = ", ".join(names) + (f" and {more} more" if more > 0 else "")
    description = (
        f"Search the user's files ({covered}) for passages relevant to the conversation. "
        f"Give 1 to {max_queries} short search queries, each one complete on its own (name what "
        "a follow-up question refers to); split a question about several things into one query "
        "each. Returns numbered citations from the files. Search before answering a question "
        "about the files, and again with other words if nothing relevant came back."
    )
    return {
        "type": "function",
        "function": {
            "name": SEARCH_FUNCTION,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    "queries": {
                        "type": "array",
                        "items": {"type": "string"},
                        "minItems": 1,
                        "maxItems": max_queries,
                        "description": "The search queries, each a few words or one question.",
                    }
                },
                "required": ["queries"],
            },
        },
    }


ANSWER_WORDS = 40
"""Words of the last answer put before a follow-up that leans on it, in the proxy's own query."""


def proxy_queries(question: str, earlier: Sequence[Turn], rule: HistoryRule) -> list[str]:
    """The queries of a search the proxy writes for the model (one the request forced and the
    model did not make), as the search without a model reads a follow-up: the question, the
    question after the latest earlier one (its end), and the question after the last answer
    (its first words) when the rule searches that answer for it (`answer_weight`: it points
    back, continues the exchange...); each within `MAX_QUERY_CHARS`, the question kept whole."""
    asked = question.strip()[:MAX_QUERY_CHARS]
    queries = [asked]
    questions = [turn.text for turn in earlier if turn.role == "user"]
    if questions:
        queries.append(f"{questions[-1].strip()} {asked}"[-MAX_QUERY_CHARS:].strip())
    answer = last_answer(earlier)
    room = MAX_QUERY_CHARS - len(asked) - 1
    if answer and room > 0 and answer_weight(asked, answer, rule) > 0:
        queries.append(f"{first_words(answer, ANSWER_WORDS)[:room].strip()} {asked}")
    return list(dict.fromkeys(queries))


@dataclass(frozen=True)
class Queries:
    """The queries of a call, as many as may run, and whether some were left out."""

    run: list[str]
    dropped: int = 0


def read_queries(arguments: str, max_queries: int) -> Queries:
    """The queries of a call's arguments: `{"queries": [...]}`, also `{"query": "..."}` and a
    single string for `queries` (small models write those); CallError says what was wrong."""
    try:
        parsed = jsonio.loads(arguments) if arguments.strip() else {}
    except ValueError as error:
        raise CallError(
            f"the arguments are not valid JSON ({error}); call {SEARCH_FUNCTION} with {EXAMPLE}"
        ) from None
    if not isinstance(parsed, dict):
        raise CallError(f"the arguments must be a JSON object such as {EXAMPLE}")
    value = parsed.get("queries", parsed.get("query"))
    if value is None:
        raise CallError(f"no query was given; call {SEARCH_FUNCTION} with {EXAMPLE}")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise CallError(f"give the queries as a list of strings, such as {EXAMPLE}")
    queries = list(dict.fromkeys(" ".join(item.split())[:MAX_QUERY_CHARS] for item in value))
    queries = [query for query in queries if query]
    if not queries:
        raise CallError(f"no query was given; call {SEARCH_FUNCTION} with {EXAMPLE}")
    return Queries(queries[:max_queries], max(0, len(queries) - max_queries))


def unknown_function(name: str) -> str:
    return (
        f"error: there is no function named {json.dumps(name)[:200]}; call {SEARCH_FUNCTION} "
        "to search the user's files"
    )


def object_arguments(arguments: str) -> str:
    """Arguments as the conversation keeps them: a JSON object's text, else `{}`. llama.cpp
    parses them for a template that takes an object and fails the whole request on text that is
    not JSON ("Failed to parse tool call arguments as JSON", seen with xllamacpp 2026.10)."""
    try:
        return arguments if isinstance(jsonio.loads(arguments), dict) else "{}"
    except ValueError:
        return "{}"
