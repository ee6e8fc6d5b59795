"""Documents in, pages of text out: format detection, sandboxed parsing and caching."""

from proxy.documents.detect import Kind, detect
from proxy.documents.limits import ParseLimits
from proxy.documents.model import Page, ParsedDocument, StatusSink
from proxy.documents.parser import DocumentParser

__all__ = [
    "DocumentParser",
    "Kind",
    "Page",
    "ParseLimits",
    "ParsedDocument",
    "StatusSink",
    "detect",
]
