"""Documents parsed for a request (told in the decision record and warnings), and the control
tokens their text must not hold."""

from __future__ import annotations

from proxy.documents.model import ParsedDocument
from proxy.errors import BadRequest
from proxy.formats.markers import turn_markers
from proxy.pipeline.document_report import document_record, warning_lines, warnings_header
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_refs import FileRef
from proxy.pipeline.renaming import titled
from proxy.pipeline.services import Services


async def parse_refs(
    refs: list[FileRef], exchange: Exchange, services: Services
) -> list[ParsedDocument]:
    """Parse one document after another; once the request's documents hold more text than
    documents.max_request_chars, a 400 and nothing more is parsed. A document we had to name
    takes its own title (`refs` follow the rename)."""
    limit = services.settings.documents.max_request_chars
    documents = []
    for index, ref in enumerate(refs):
        document = await services.parser.parse(
            ref.name, ref.data, exchange.status, owner=exchange.caller.name
        )
        exchange.document_chars += document.char_count
        if exchange.document_chars > limit:
            raise BadRequest(
                f"the request's documents hold more than {limit} characters of text "
                "(documents.max_request_chars); send fewer or smaller documents",
                param="messages",
                code="too_much_text_in_request",
            )
        documents.append(titled(refs, index, document, exchange))
    note_documents(exchange, documents)
    return documents


def note_documents(exchange: Exchange, documents: list[ParsedDocument]) -> None:
    """Each document in the decision record; lossy steps (repair, OCR, cuts) told the user as
    a status line and an `X-Enrich-Warnings` header."""
    lines = exchange.decision.warnings
    for document in documents:
        exchange.decision.documents.append(document_record(document))
        for line in warning_lines([document]):
            exchange.status(f"Warning: {line}")
            lines.append(line)
    if lines:
        exchange.response_headers["X-Enrich-Warnings"] = warnings_header(lines)


async def learn_control_tokens(exchange: Exchange, services: Services) -> None:
    """The upstream model's control tokens (and the text adapter's markers): document text
    must not hold them when it reaches the model."""
    exchange.control_tokens = (
        *await services.introspection.declared_tokens(),
        *format_markers(exchange, services),
    )


def format_markers(exchange: Exchange, services: Services) -> tuple[str, ...]:
    """With the text adapter, the rendered prompt's own turn markers and stop strings are
    control tokens too: a document holding `### Instruction:` must not open a turn."""
    model_settings = services.settings.model_settings(exchange.model)
    if model_settings.adapter != "text":
        return ()
    return turn_markers(services.formats.get(model_settings.format or "chatml"))
