"""A Chroma server that does not answer: questions on documents are answered from their words,
the decision record says why (no engine needed: nothing listens on its port)."""

from __future__ import annotations

import base64

import openai

from tests.engines import free_port
from tests.faults.conftest import Bench


def test_questions_are_answered_from_the_words_while_chroma_is_down(bench: Bench) -> None:
    base = bench.start(vector_store={"mode": "server", "host": "127.0.0.1", "port": free_port()})
    client = openai.OpenAI(base_url=base + "/v1", api_key="-", max_retries=0)
    text = "\n\n".join(f"Paragraph {n}: the {n}th lantern burns {n * 2} hours." for n in range(400))
    part = {
        "type": "file",
        "file": {"filename": "lanterns.txt", "file_data": base64.b64encode(text.encode()).decode()},
    }
    messages = [{"role": "user", "content": [{"type": "text", "text": "the 321th lantern"}, part]}]
    for stream in (False, True):
        if stream:
            chunks = client.chat.completions.create(model="m", messages=messages, stream=True)
            answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            done = client.chat.completions.create(model="m", messages=messages)
            answer = done.choices[0].message.content or ""
        assert "the 321th lantern burns 642 hours" in answer  # the echoed citations
        retrieval = bench.last_decision()["retrieval"]
        assert retrieval["ranked_by_words"] == ["lanterns.txt"]
        assert "Chroma server" in retrieval["store_down"]["lanterns.txt"]
