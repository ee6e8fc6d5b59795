"""Questions in another language than the document: told apart, translated in one bounded call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from proxy.config import UpstreamSettings
from proxy.retrieval.function_words import query_language
from proxy.retrieval.translation import (
    MAX_QUERY_WORDS,
    QueryTranslator,
    chat_messages,
    clean_translation,
    completion_prompt,
    translatable,
)
from proxy.upstream.client import UpstreamClient


@pytest.mark.parametrize(
    ("question", "language"),
    [
        ("What is a compact topological space?", "english"),
        ("Who founded Mozilla?", "english"),
        ("Which company did the studios sue?", "english"),
        ("Wer hat Mozilla gegründet?", "german"),
        ("Wann wurde die Stiftung gegründet?", "german"),
        ("Какой срок действия договора?", "russian"),
        ("Стоимость работ?", "russian"),
        ("Quelle est la date de fondation de Mozilla?", "french"),
        # Short questions told by their asking word alone (no stopword in them).
        ("Pourquoi ?", "french"),
        ("Combien de niveaux ?", "french"),
        ("¿Cómo lo cambio?", "spanish"),
        ("¿Cuándo sale?", "spanish"),
        ("How do I add a comment?", "english"),  # "comment" asks only in French
        ("Mozilla founders?", None),  # no function word: unsure
    ],
)
def test_the_language_of_a_question(question: str, language: str | None) -> None:
    assert query_language(question) == language


def test_a_tie_goes_to_the_documents_language() -> None:
    # "was" and "die" are German and Dutch stopwords alike.
    assert query_language("Was kostet die Installation?") is None
    assert query_language("Was kostet die Installation?", prefer="german") == "german"


def test_only_a_known_other_language_is_translated() -> None:
    assert translatable("english", "russian")
    assert not translatable("english", "english")
    assert not translatable(None, "russian")
    assert not translatable("english", "klingon")


def test_the_completion_prompt_ends_where_the_translation_begins() -> None:
    prompt = completion_prompt("How long is the\n contract valid?", "english", "russian")
    assert prompt.endswith("English: How long is the contract valid?\nRussian:")
    assert "English: Where is the train station?\nRussian: Где находится вокзал?" in prompt
    messages = chat_messages("How long?", "english", "german")
    assert messages[0]["role"] == "system" and "into German" in messages[0]["content"]
    assert messages[-1] == {"role": "user", "content": "How long?"}
    assert [m["role"] for m in messages[1:-1]] == ["user", "assistant"] * 2


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (" Каков срок действия договора?\nEnglish: more", "Каков срок действия договора?"),
        ('Russian: "Каков срок действия договора?"', "Каков срок действия договора?"),
        ("«Каков срок?»", "Каков срок?"),
        ("How long is the contract valid?", None),  # the question itself
        ("Translation is not possible here.", None),  # Latin script for Russian
        ("", None),
        ("Каков " * 80, None),  # far longer than the question
    ],
)
def test_what_counts_as_a_translation(raw: str, expected: str | None) -> None:
    assert clean_translation(raw, "How long is the contract valid?", "russian") == expected


def test_a_latin_target_refuses_cyrillic() -> None:
    assert clean_translation("Срок договора", "Срок договора?", "english") is None
    assert clean_translation("Contract term", "Срок договора?", "english") == "Contract term"


class Model:
    """An upstream that translates one question, counting how often it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, object]]] = []
        self.status = 200
        self.delay = 0.0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self.answer)
        app.router.add_post("/v1/chat/completions", self.answer)
        return app

    async def answer(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.asked.append((request.path, body))
        await asyncio.sleep(self.delay)
        if self.status != 200:
            return web.json_response({"error": {"message": "down"}}, status=self.status)
        if request.path == "/v1/completions":
            return web.json_response({"choices": [{"text": " Каков срок действия договора?"}]})
        message = {"role": "assistant", "content": "Каков срок действия договора?"}
        return web.json_response({"choices": [{"message": message}]})


@pytest.fixture
async def model() -> AsyncIterator[tuple[Model, UpstreamClient]]:
    fake = Model()
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    async with aiohttp.ClientSession() as session:
        settings = UpstreamSettings(base_url=f"http://127.0.0.1:{port}")
        yield fake, UpstreamClient(settings, session)
    await runner.cleanup()


QUESTION = "How long is the contract valid?"


async def test_a_question_is_translated_in_one_short_call(
    model: tuple[Model, UpstreamClient],
) -> None:
    fake, upstream = model
    translator = QueryTranslator(upstream, timeout_s=5)
    found = await translator.translate(
        QUESTION, "english", "russian", model="m", endpoint="completions", scope="ann"
    )
    assert found.text == "Каков срок действия договора?" and found.error is None
    [(path, body)] = fake.asked
    assert path == "/v1/completions"
    assert body["max_tokens"] == 96 and body["temperature"] == 0 and body["stop"] == ["\n"]
    assert body["model"] == "m" and str(body["prompt"]).endswith(f"English: {QUESTION}\nRussian:")
    chat = await translator.translate(
        QUESTION, "english", "russian", model="m", endpoint="chat", scope="ann"
    )
    assert chat.text == "Каков срок действия договора?" and fake.asked[-1][0].endswith(
        "chat/completions"
    )
    assert found.record() == {
        "from": "english",
        "to": "russian",
        "query": "Каков срок действия договора?",
        "endpoint": "completions",
        "seconds": round(found.seconds, 3),
    }


async def test_translations_are_remembered_per_caller(model: tuple[Model, UpstreamClient]) -> None:
    fake, upstream = model
    translator = QueryTranslator(upstream, timeout_s=5)
    ask = lambda scope: translator.translate(  # noqa: E731
        QUESTION, "english", "russian", model="m", endpoint="completions", scope=scope
    )
    await ask("ann")
    again = await ask("ann")
    assert again.cached and again.text == "Каков срок действия договора?"
    assert len(fake.asked) == 1
    # Another key's identical question is asked again: a remembered answer would be quicker,
    # telling it that somebody asked the same.
    other = await ask("bob")
    assert not other.cached and len(fake.asked) == 2


async def test_a_failing_or_slow_model_means_no_translation(
    model: tuple[Model, UpstreamClient],
) -> None:
    fake, upstream = model
    translator = QueryTranslator(upstream, timeout_s=0.3)
    fake.status = 500
    failed = await translator.translate(
        QUESTION, "english", "russian", model="m", endpoint="completions", scope="ann"
    )
    assert failed.text is None and "500" in str(failed.error)
    fake.status, fake.delay = 200, 2.0
    slow = await translator.translate(
        QUESTION, "english", "russian", model="m", endpoint="chat", scope="ann"
    )
    assert slow.text is None and slow.error == "TimeoutError"
    # Failures are not remembered: the next question asks again.
    fake.delay = 0.0
    again = await translator.translate(
        QUESTION, "english", "russian", model="m", endpoint="chat", scope="ann"
    )
    assert again.text == "Каков срок действия договора?"


async def test_a_long_message_is_not_translated(model: tuple[Model, UpstreamClient]) -> None:
    fake, upstream = model
    translator = QueryTranslator(upstream, timeout_s=5)
    long = " ".join(["word"] * (MAX_QUERY_WORDS + 1))
    found = await translator.translate(
        long, "english", "russian", model="m", endpoint="chat", scope="ann"
    )
    assert found.text is None and fake.asked == []
