"""One dispatch from a document kind to its reader; every reader yields units of Markdown."""

from __future__ import annotations

from proxy.documents.failure import ExtractError
from proxy.documents.formats import MUPDF_KINDS, TEXT_KINDS, Kind
from proxy.documents.job import Job, Units
from proxy.documents.readers.docx import docx_to_text
from proxy.documents.readers.epub import epub_to_text
from proxy.documents.readers.html import html_to_text
from proxy.documents.readers.odf import ods_sheets, odt_to_text
from proxy.documents.readers.pdf import mupdf_units
from proxy.documents.readers.plain import first_heading, text_sections, units_of
from proxy.documents.readers.rtf import rtf_to_text
from proxy.documents.readers.sections import merge_units, split_sections
from proxy.documents.readers.sheets import sheet_sections, xls_sheets, xlsx_sheets
from proxy.documents.readers.slides import slide_units


def extract_units(kind: str, data: bytes, job: Job) -> Units:
    """Units of one document in reading order (OCR'd pages of a PDF may come last)."""
    if kind in MUPDF_KINDS:
        yield from mupdf_units(data, job)
    elif kind in (Kind.PPTX, Kind.ODP):
        yield from slide_units(kind, data, job)
    elif kind in (Kind.XLSX, Kind.XLS, Kind.ODS):
        read = {Kind.XLSX: xlsx_sheets, Kind.XLS: xls_sheets, Kind.ODS: ods_sheets}[Kind(kind)]
        yield from units_of(merge_units(sheet_sections(read(data, job)), job.max_pages), job)
    elif kind in TEXT_KINDS:
        yield from units_of(text_sections(kind, job.name, data, job), job)
    else:
        markdown = _reflowable(kind, data, job)
        first_heading(markdown, job)
        sections = split_sections(markdown, anchor="paragraph", max_units=job.max_pages)
        yield from units_of(sections, job)


def _reflowable(kind: str, data: bytes, job: Job) -> str:
    if kind == Kind.DOCX:
        return docx_to_text(data, job)
    if kind == Kind.HTML:
        return html_to_text(data, job)
    if kind == Kind.EPUB:
        return epub_to_text(data, job)
    if kind == Kind.ODT:
        return odt_to_text(data, job)
    if kind == Kind.RTF:
        return rtf_to_text(data)
    raise ExtractError(f"is of a kind no parser reads ({kind})", "unsupported_format")
