"""A follow-up question finds what it refers to: searched with its conversation, no model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai

from tests.fakes.upstream import FakeUpstream
from tests.pipeline.test_enrich import text_part

STOPPING = (
    "With the easy interface, return an error from the progress callback to stop a running "
    "transfer at once. With the multi interface, remove the easy handle from the multi stack "
    "at any moment to stop a running transfer."
)
COOKIES = "The cookie jar file uses the Netscape cookie file format, one cookie a line."


def faq() -> str:
    """A FAQ whose many entries on 'the other interface' bury the stopping entry for a
    follow-up read alone."""
    entries = [f"## Stopping a running transfer\n\n{STOPPING}", f"## Cookie jars\n\n{COOKIES}"]
    for n in range(24):
        entries.append(
            f"## Language binding {n}\n\nAnd with the other interface, binding {n} offers the "
            f"other interface as well: the other interface of language {n} is its own."
        )
    return "# libfetch FAQ\n\n" + "\n\n".join(entries)


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)


def conversation(
    follow_up: str, asked: str = "How do I stop a running transfer?"
) -> list[dict[str, Any]]:
    """The whole conversation as a chat client resends it: the FAQ on the first message."""
    first = [{"type": "text", "text": asked}, text_part("faq.md", faq())]
    return [
        {"role": "user", "content": first},
        {"role": "assistant", "content": "Return an error from the progress callback."},
        {"role": "user", "content": follow_up},
    ]


def forwarded(upstream: FakeUpstream) -> str:
    message = upstream.last_to("/v1/chat/completions").json["messages"][-1]
    content = message["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def test_a_follow_up_finds_its_passage_only_with_its_conversation(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval={"chunk_tokens": 60, "chunk_overlap": 0})
    follow_up = "And with the other interface?"
    raw = client(base).chat.completions.with_raw_response.create(
        model="m",
        messages=conversation(follow_up),  # type: ignore[arg-type]
    )
    raw.parse()
    prompt = forwarded(upstream)
    assert "With the multi interface, remove the easy handle" in prompt
    assert prompt.endswith(f"User Query:\n\n{follow_up}")  # the user's own words, unchanged
    # Short and pointing back ("the other"): its history weighs half as much again, and the
    # last answer is searched with it (reply 4 x 1.5).
    assert raw.headers["X-Enrich-Searched"] == "question 1; conversation 1.5; reply 6; terms 1.5"
    record = httpx.get(base + "/v1/enrich/decisions?limit=1", timeout=30).json()["data"][0]
    question, earlier, reply, terms = record["decision"]["retrieval"]["searched"]
    assert reply["from"] == "reply" and reply["text"].endswith(f"\n{follow_up}")
    assert question == {"text": follow_up, "weight": 1.0, "from": "question"}
    assert earlier == {
        "text": f"How do I stop a running transfer?\n{follow_up}",
        "weight": 1.5,
        "from": "conversation",
    }
    # The answer's and earlier question's words, and those the FAQ searched it with.
    assert terms["from"] == "terms" and terms["text"] == follow_up
    assert terms["carried"][:2] == ["Return", "an"]
    assert terms["words"] == {"faq.md": ["Return", "error", "progress", "callback"]}

    # The same follow-up with no history: its own words find only the bindings.
    alone = [{"type": "text", "text": follow_up}, text_part("faq.md", faq())]
    client(base).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": alone}],  # type: ignore[list-item]
        extra_body={"enrich": {"strategy": "retrieval"}},
    )
    prompt = forwarded(upstream)
    assert "Citation 1:" in prompt and "remove the easy handle" not in prompt
    record = httpx.get(base + "/v1/enrich/decisions?limit=1", timeout=30).json()["data"][0]
    assert [text["from"] for text in record["decision"]["retrieval"]["searched"]] == ["question"]


def test_a_topic_shift_still_finds_its_own_passage_first(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval={"chunk_tokens": 60, "chunk_overlap": 0})
    follow_up = "Which file format does the cookie jar use?"
    # The first question weighs more in the conversation's text than the follow-up's words.
    asked = "How do I stop a running transfer? Can a running transfer stop at once, with an error?"
    answer = client(base).chat.completions.create(
        model="m",
        messages=conversation(follow_up, asked),  # type: ignore[arg-type]
    )
    assert answer.choices[0].message.content
    prompt = forwarded(upstream)
    assert prompt.startswith("The following citations were found in the files")
    first = prompt.split("Citation 2:")[0]
    assert COOKIES in first  # its own passage ranks first, the conversation's after it


def test_without_history_settings_a_follow_up_is_searched_as_written(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(
        retrieval={
            "chunk_tokens": 60,
            "chunk_overlap": 0,
            "history": {"turns": 0, "reply": 0, "terms": 0},
        }
    )
    raw = client(base).chat.completions.with_raw_response.create(
        model="m",
        messages=conversation("And with the other interface?"),  # type: ignore[arg-type]
    )
    raw.parse()
    assert "remove the easy handle" not in forwarded(upstream)
    assert "X-Enrich-Searched" not in raw.headers


def test_carried_words_no_file_holds_are_neither_searched_nor_reported(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval={"chunk_tokens": 60, "chunk_overlap": 0})
    first = [{"type": "text", "text": "Zebras?"}, text_part("faq.md", faq())]
    messages = [
        {"role": "user", "content": first},
        {"role": "assistant", "content": "Giraffes and okapis, mostly."},  # none in the FAQ
        {"role": "user", "content": "And with the other interface?"},
    ]
    raw = client(base).chat.completions.with_raw_response.create(
        model="m",
        messages=messages,  # type: ignore[arg-type]
    )
    raw.parse()
    assert raw.headers["X-Enrich-Searched"] == "question 1; conversation 1.5; reply 6"
    record = httpx.get(base + "/v1/enrich/decisions?limit=1", timeout=30).json()["data"][0]
    searched = record["decision"]["retrieval"]["searched"]
    assert [text["from"] for text in searched] == ["question", "conversation", "reply"]


def test_a_follow_up_pointing_back_in_french_is_searched_with_the_last_answer(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval={"chunk_tokens": 60, "chunk_overlap": 0})
    pointing_back = "Pourquoi cela arrête-t-il le transfert ?"  # "pourquoi", "cela"
    raw = client(base).chat.completions.with_raw_response.create(
        model="m",
        messages=conversation(pointing_back),  # type: ignore[arg-type]
    )
    raw.parse()
    searched = raw.headers["X-Enrich-Searched"]
    assert "; reply 4" in searched  # short, but the x1.5 is for English words: measured
    own = "Quel format de fichier utilise la liste des cookies du navigateur ?"
    raw = client(base).chat.completions.with_raw_response.create(
        model="m",
        messages=conversation(own),  # type: ignore[arg-type]
    )
    raw.parse()
    assert "reply" not in raw.headers["X-Enrich-Searched"]
    assert "conversation 0.5" in raw.headers["X-Enrich-Searched"]  # long, pointing at nothing


def test_a_follow_up_continuing_the_exchange_is_searched_with_the_last_answer_at_one(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval={"chunk_tokens": 60, "chunk_overlap": 0})
    continuing = "And if the connection drops halfway?"  # "And …": no pronoun, no named thing
    raw = client(base).chat.completions.with_raw_response.create(
        model="m",
        messages=conversation(continuing),  # type: ignore[arg-type]
    )
    raw.parse()
    assert "; reply 1;" in raw.headers["X-Enrich-Searched"] + ";"
    record = httpx.get(base + "/v1/enrich/decisions?limit=1", timeout=30).json()["data"][0]
    searched = record["decision"]["retrieval"]["searched"]
    reply = next(text for text in searched if text["from"] == "reply")
    assert reply == {
        "text": f"Return an error from the progress callback.\n{continuing}",
        "weight": 1.0,
        "from": "reply",
    }
    raw = client(base).chat.completions.with_raw_response.create(
        model="m",
        messages=conversation("When does the connection drop?"),  # type: ignore[arg-type]
    )
    raw.parse()
    assert "reply" not in raw.headers["X-Enrich-Searched"]  # no "And": a question of its own
