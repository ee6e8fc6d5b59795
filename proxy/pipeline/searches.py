"""What retrieval searched with, as the decision record says it; the question's translations."""

from __future__ import annotations

from typing import Any

from proxy.languages import LANGUAGE_NAMES
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.retrieval_state import Translations
from proxy.pipeline.services import Services
from proxy.retrieval.function_words import query_language
from proxy.retrieval.history import SearchText
from proxy.retrieval.translation import Endpoint, Translation, translatable
from proxy.upstream.kinds import profile


def searched_record(
    searched: list[SearchText], carried: dict[str, list[str]]
) -> list[dict[str, Any]]:
    """The searched texts as the decision record lists them; a `terms` text with the words
    each document searched it with (`words`, by file), left out when no file held any."""
    found = []
    for text in searched:
        entry = text.record()
        if text.source == "terms":
            if not carried:
                continue
            entry["words"] = carried
        found.append(entry)
    return found


def searched_header(searched: list[SearchText]) -> str:
    """`question 1; conversation 0.5; reply 0.25`: what was searched, by where its words came
    from and its weight (the texts are in the decision record)."""
    return "; ".join(f"{text.source} {text.weight:g}" for text in searched)


class QuestionTranslations:
    """The request's question in each of its documents' languages that differs from its own:
    asked of the upstream once per language, at most `retrieval.max_translations` calls for the
    request, in the documents' order (docs/retrieval.md); what was asked is kept in `asked`, the
    request's `Translations`, for the decision record."""

    def __init__(self, exchange: Exchange, services: Services, asked: Translations) -> None:
        self.exchange = exchange
        self.services = services
        self.asked = asked

    def _may_ask(self, target: str) -> str | None:
        """None (and the status line) when one more call fits the request's bound; else why not."""
        bound = self.services.settings.retrieval.max_translations
        if self.asked.calls >= bound:
            return f"not asked: retrieval.max_translations ({bound}) calls made for this request"
        self.asked.calls += 1
        self.exchange.status(f"Translating the question into {LANGUAGE_NAMES[target]}...")
        return None

    async def into(self, target: str) -> Translation | None:
        if target in self.asked.done:
            return self.asked.done[target]
        query = self.exchange.query
        source = query_language(query, prefer=target) if query.strip() else None
        translator = self.services.translator
        if translator is None or not translatable(source, target) or source is None:
            self.asked.done[target] = None
            return None
        mode = self.services.settings.retrieval.translate
        introspection = self.services.introspection
        server = profile(await introspection.kind())
        if mode == "auto":
            mode = "completions" if server.completions_take_any_model else "chat"
        # The same question must give the same translation, whatever was asked before.
        extra: dict[str, Any] = dict(server.repeatable)
        endpoint: Endpoint = "completions" if mode == "completions" else "chat"
        window = None
        if server.native_side_calls and mode == "chat":
            window = await introspection.running_window(self.exchange.model)
        if window is not None:
            # Its OpenAI endpoint sets no window (Ollama's): asked there, a model the proxy runs
            # with a larger one is reloaded with the default, and again for the question itself.
            endpoint, extra = "native", {"options": {"num_ctx": window}}
        found = await translator.translate(
            query,
            source,
            target,
            model=self.exchange.model,
            endpoint=endpoint,
            scope=self.exchange.caller.name,
            extra=extra,
            may_ask=lambda: self._may_ask(target),
        )
        self.asked.done[target] = found
        return found
