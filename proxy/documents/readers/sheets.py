"""Spreadsheets (XLSX, XLS, ODS, CSV) as Markdown tables, one or more units per sheet.

Each block of rows between empty rows is a table of its own (see table_form), captioned with
the sheet's name and the block's title row, if it has one; units are cut between rows, each part
of a table starting with its caption and header row again.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import io
from collections.abc import Iterable

from proxy.documents.failure import ExtractError
from proxy.documents.job import Job
from proxy.documents.readers.archive import open_zip
from proxy.documents.readers.sections import Section
from proxy.documents.readers.table_form import cell, table_parts
from proxy.documents.readers.text import PAGE_CHARS

Row = tuple[int, list[str]]
"""A row's number in its sheet (1 for the first) and its cells, escaped."""
Grid = list[Row]
MAX_TITLE_ROWS = 3


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
    """Numbered rows of escaped cells, capped at max_rows x max_columns, empty rows dropped
    (their numbers keep the blocks apart) and trailing empty cells too."""
    grid: Grid = []
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
            grid.append((total, cells))
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


def _unit(name: str, location: str, parts: list[tuple[str, list[int]]]) -> Section:
    numbers = [number for _, rows in parts for number in rows]
    first, last = min(numbers), max(numbers)
    span = f"rows {first}-{last}" if last > first else f"row {last}"
    heading = f"## Sheet: {name} ({span})" if location == "sheet" else ""
    text = "\n\n".join(part for part in (heading, *(text for text, _ in parts)) if part)
    if location == "sheet":
        return Section(text, f"sheet={name}", f"{name} {span}")
    return Section(text, f"row={first}", span)


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


def blocks(grid: Grid) -> list[Grid]:
    """The sheet's tables: runs of rows with no empty row between them, leading columns empty
    in every row of a run dropped."""
    runs: list[Grid] = []
    for number, cells in grid:
        if runs and runs[-1][-1][0] == number - 1:
            runs[-1].append((number, cells))
        else:
            runs.append([(number, cells)])
    out = []
    for run in runs:
        lead = min(next(i for i, text in enumerate(cells) if text) for _, cells in run)
        out.append([(number, cells[lead:]) for number, cells in run])
    return out


def titled(block: Grid) -> tuple[str, Grid]:
    """A block's title rows (one value each, above a wider header row) and its table rows."""
    titles: list[str] = []
    for index, (_, cells) in enumerate(block[: MAX_TITLE_ROWS + 1]):
        if sum(1 for text in cells if text) >= 2:
            if titles:
                return " ".join(titles), block[index:]
            break
        titles.append(next(text for text in cells if text))
    return "", block


def sheet_sections(
    sheets: list[tuple[str, Grid]], *, location: str = "sheet", part_chars: int = PAGE_CHARS
) -> list[Section]:
    """Each sheet's tables as units of at most ~`part_chars`, cut between rows.

    `location` "sheet" names the sheet (`sheet=Q3`) and heads each unit with the rows it
    holds; "row" gives the unit's first row (CSV, where the sheet's name is the file's).
    """
    units: list[Section] = []
    for name, grid in sheets:
        pending: list[tuple[str, list[int]]] = []  # parts of tables, and their data rows
        used = 0
        for block in blocks(grid):
            title, rows = titled(block)
            caption = f"{name} — {title}" if name and title else name or title
            numbers = [number for number, _ in rows]
            for text, start, end in table_parts([row for _, row in rows], caption, part_chars):
                if pending and used + len(text) + 2 > part_chars:
                    units.append(_unit(name, location, pending))
                    pending, used = [], 0
                # The rows a part holds: its body rows, or the header when it has none.
                pending.append((text, numbers[1 + start : 1 + end] or numbers[:1]))
                used += len(text) + 2
        if pending:
            units.append(_unit(name, location, pending))
    return units
