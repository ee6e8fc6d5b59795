"""Size, page, text and time limits applied to every parsed document."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True)
class ParseLimits:
    """Limits for one document; exceeding any of them is an error naming the file and the limit."""

    max_file_bytes: int = 50 * MIB
    max_pages: int = 2000
    max_chars: int = 5_000_000
    timeout_s: float = 60.0
    max_rows: int = 5000
    """Rows read per sheet (or CSV file); more are cut, with a warning."""
    max_columns: int = 100
    """Columns read per sheet; more are cut, with a warning."""
    ocr_page_s: float = 30.0
    pdf_tables: bool = True
    """Look for tables on PDF pages with ruling lines (Markdown tables in reading position)."""
    """Seconds each page read by OCR adds to `timeout_s`."""
