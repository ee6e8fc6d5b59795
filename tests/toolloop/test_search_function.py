"""The search function exactly as the model reads it: its description names what it searches
(up to twenty names, the rest counted) and how to call it, its parameters bound the queries."""

from __future__ import annotations

from proxy.toolloop.function import search_function


def test_the_function_the_model_is_offered() -> None:
    assert search_function(["a.pdf", "vector store notes"], 4) == {
        "type": "function",
        "function": {
            "name": "file_search",
            "description": (
                "Search the user's files (a.pdf, vector store notes) for passages relevant to the "
                "conversation. Give 1 to 4 short search queries, each one complete on its own "
                "(name what a follow-up question refers to); split a question about several "
                "things into one query each. Returns numbered citations from the files. Search "
                "before answering a question about the files, and again with other words if "
                "nothing relevant came back."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "queries": {
                        "type": "array",
                        "items": {"type": "string"},
                        "minItems": 1,
                        "maxItems": 4,
                        "description": "The search queries, each a few words or one question.",
                    }
                },
                "required": ["queries"],
            },
        },
    }


def test_twenty_names_are_written_and_the_rest_counted() -> None:
    def covered(count: int) -> str:
        description = search_function([f"f{n}" for n in range(count)], 5)["function"]
        return str(description["description"]).split("(", 1)[1].split(")", 1)[0]

    assert covered(20) == ", ".join(f"f{n}" for n in range(20))
    assert covered(21) == ", ".join(f"f{n}" for n in range(20)) + " and 1 more"
