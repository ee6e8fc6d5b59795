"""Spreadsheets (XLSX, XLS, ODS, CSV) as Markdown tables, one or more units per sheet."""

from __future__ import annotations

import contextlib
import csv
import datetime
import io
from collections.abc import Iterable

from proxy.documents.archive import open_zip
from proxy.documents.failure import ExtractError
from proxy.documents.job import Job
from proxy.documents.table_form import cell, table
from proxy.documents.sections import Section
from proxy.documents.text import PAGE_CHARS

Grid = list[list[str]]


def xlsx_sheets(data: bytes, job: Job) -> list[tuple[str, Grid]]:
    import openpyxl  # imported here: only the worker that meets a workbook pays for it

    open_zip(data, "XLSX file", verify=True).close()
    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:
        raise ExtractError(
            f"is not a readable XLSX file ({type(exc).__name__}: {exc})", "corrupt_document"
        ) from exc
    try:
        job.title(book.properties.title)
        return [
            (sheet.title, _grid(sheet.iter_rows(values_only=True), job, sheet.title))
            for sheet in book.worksheets
        ]
    finally:
        book.close()


def xls_sheets(data: bytes, job: Job) -> list[tuple[str, Grid]]:
    import xlrd

    try:
        book = xlrd.open_workbook(file_contents=data, on_demand=True)
    except Exception as exc:
        raise ExtractError(
            f"is not a readable XLS file ({type(exc).__name__}: {exc})", "corrupt_document"
        ) from exc
    sheets = []
    try:
        for index in range(book.nsheets):
            sheet = book.sheet_by_index(index)
            rows = (
                [_xls_value(sheet.cell(r, c), book.datemode) for c in range(sheet.ncols)]
                for r in range(sheet.nrows)
            )
            sheets.append((sheet.name, _grid(rows, job, sheet.name)))
            book.unload_sheet(index)
    finally:
        book.release_resources()
    return sheets


def _xls_value(item: object, datemode: int) -> object:
    import xlrd

    value = getattr(item, "value", None)
    if getattr(item, "ctype", None) == xlrd.XL_CELL_DATE:
        try:
            return xlrd.xldate_as_datetime(float(value), datemode)  # type: ignore[arg-type]
        except (ValueError, OverflowError):
            return value
    return value


def csv_sheet(text: str, name: str, job: Job) -> Grid:
    sample = text[:4096]  # the sniffer's regexes are not linear: a small sample
    delimiter = "\t" if name.lower().endswith(".tsv") else ","
    with contextlib.suppress(csv.Error):
        delimiter = csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
    # Long fields are cut by `cell` with a warning, not refused by the reader.
    csv.field_size_limit(2**31 - 1)
    try:
        return _grid(csv.reader(io.StringIO(text), delimiter=delimiter), job, "")
    except csv.Error as exc:
        raise ExtractError(f"is not a readable CSV file ({exc})", "corrupt_document") from exc


def _grid(rows: Iterable[Iterable[object]], job: Job, sheet: str) -> Grid:
    """Rows as escaped cells, capped at max_rows x max_columns, empty rows and edges dropped."""
    grid: Grid = []
    width = 0
    total = 0
    cut_columns = False
    for row in rows:
        total += 1
        if len(grid) >= job.max_rows:
            continue  # counted, not kept: the note says how many there were
        cells = []
        for index, value in enumerate(row):
            if index >= job.max_columns:
                cut_columns = cut_columns or _value(value) != ""
                break
            text, cut = cell(_value(value))
            if cut:
                job.warn("cell_cut", "table cells longer than 2000 characters were cut")
            cells.append(text)
        while cells and not cells[-1]:
            cells.pop()
        if cells:
            grid.append(cells)
            width = max(width, len(cells))
        if total > 10 * job.max_rows:
            break  # a sheet of a million empty rows is not read to the end
    where = f"sheet {sheet}" if sheet else "the table"
    if total > len(grid) and len(grid) >= job.max_rows:
        job.warn(
            "rows_cut",
            f"{where} has more than {job.max_rows} rows; only the first {job.max_rows} were read",
        )
    if cut_columns:
        job.warn(
            "columns_cut",
            f"{where} has more than {job.max_columns} columns; only the first"
            f" {job.max_columns} were read",
        )
    return grid


def _value(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, datetime.datetime) and value.time() == datetime.time():
        return value.date().isoformat()
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


def sheet_sections(
    sheets: list[tuple[str, Grid]], *, location: str = "sheet", part_chars: int = PAGE_CHARS
) -> list[Section]:
    """Each sheet as Markdown tables of at most ~`part_chars`, each repeating the header row.

    `location` "sheet" names the sheet (`sheet=Q3`); "row" gives the first row (CSV).
    """
    units: list[Section] = []
    for name, grid in sheets:
        if not grid:
            continue
        header, body = grid[0], grid[1:] or []
        start = 0
        while True:
            size, end = 0, start
            while end < len(body) and (end == start or size + _width(body[end]) <= part_chars):
                size += _width(body[end])
                end += 1
            rows = [header, *body[start:end]]
            first, last = start + 2, end + 1
            span = f"rows {first}-{last}" if last > first else f"row {last}"
            heading = f"## Sheet: {name} ({span})" if location == "sheet" else ""
            text = "\n\n".join(part for part in (heading, table(rows)) if part)
            where = f"sheet={name}" if location == "sheet" else f"row={first}"
            units.append(Section(text, where, f"{name} {span}".strip()))
            start = end
            if start >= len(body):
                break
    return units


def _width(row: list[str]) -> int:
    return sum(len(text) + 3 for text in row) + 2
