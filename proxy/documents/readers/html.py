"""HTML to readable text with selectolax: headings and paragraphs kept, page chrome dropped."""

from __future__ import annotations

import re

from selectolax.lexbor import LexborHTMLParser, LexborNode

from proxy.documents.failure import ExtractError
from proxy.documents.job import Job
from proxy.documents.readers.table_form import Block, Table, cell, join_blocks
from proxy.documents.readers.text import decode_text, tidy


def _tags(names: str) -> frozenset[str]:
    return frozenset(names.split())


_DROP = _tags(
    "script style noscript template svg canvas iframe object embed nav aside form button"
    " select textarea head footer"
)
_CHROME = (
    '[role="navigation"], [role="banner"], [role="contentinfo"], [role="search"],'
    ' [aria-hidden="true"], [hidden], .navbox, .mw-jump, .mw-jump-link, .mw-editsection,'
    " #jump-to-nav, #mw-navigation, #mw-panel, #footer"
)
_BLOCK = _tags(
    "p div section article main header h1 h2 h3 h4 h5 h6 ul ol dl dt dd li table tr pre"
    " blockquote figure figcaption address hr details summary body"
)
_PARAGRAPH = _tags("p h1 h2 h3 h4 h5 h6 pre blockquote table ul ol dl figure")
_CELL = frozenset({"td", "th"})
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


MAX_DEPTH = 5000
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)[^>]*?(/?)>")
# Elements that never take a closing tag, or whose end tag browsers imply often enough that
# counting them would overstate the depth.
_VOID = _tags(
    "area base br col embed hr img input link meta param source track wbr p li td th tr dt dd"
    " option"
)


def nesting_depth(html: str) -> int:
    """The deepest element nesting, counted from the tags alone in one linear pass."""
    depth = deepest = 0
    for match in _TAG.finditer(html):
        closing, tag, self_closing = match.groups()
        if self_closing or tag.lower() in _VOID:
            continue
        if closing:
            depth = max(0, depth - 1)
        else:
            depth += 1
            deepest = max(deepest, depth)
    return deepest


def html_to_text(data: bytes, job: Job | None = None) -> str:
    """Readable Markdown of an HTML page: the main content if marked, else the body."""
    declared = _META_CHARSET.search(data[:4096])
    html = decode_text(data, declared.group(1).decode("ascii") if declared else None)
    if nesting_depth(html) > MAX_DEPTH:
        # lexbor's tree building is quadratic in depth (20k nested divs: seconds): refuse
        # before parsing rather than hold a worker until the parse timeout.
        raise ExtractError(
            f"is nested more than {MAX_DEPTH} elements deep; not a page a person reads",
            "corrupt_document",
        )
    tree = LexborHTMLParser(html)
    for node in tree.css(_CHROME):
        node.decompose()
    root = tree.css_first('main, [role="main"], article') or tree.body or tree.root
    title_node = tree.css_first("title")
    title = " ".join(title_node.text().split()) if title_node is not None else ""
    if job is not None:
        job.title(title)
    text = join_blocks(_render(root)) if root is not None else ""
    if title and title not in text[:500]:
        text = f"# {title}\n\n{text}"
    return tidy(text)


def _render(root: LexborNode) -> list[Block]:
    """Markdown text, with each data table as a `Table` between the text around it."""
    # An explicit stack, not recursion: hostile pages nest thousands of levels deep.
    blocks: list[Block] = []
    out: list[str] = []
    captions: dict[int, str] = {}  # a figure's table -> the figure's caption
    skipped: set[int] = set()  # figure captions that became a table's
    stack: list[tuple[LexborNode, bool, bool]] = [(root, False, False)]
    while stack:
        node, closing, in_pre = stack.pop()
        tag = node.tag or ""
        if closing:
            out.append(_after(tag))
            continue
        if node.is_text_node:
            value = node.text_content or ""
            if not in_pre:
                value = _SPACES.sub(" ", value)
                if not out or out[-1].endswith("\n"):
                    value = value.lstrip()
            if value:
                out.append(value)
            continue
        if not node.is_element_node or tag in _DROP or node.mem_id in skipped:
            continue
        if tag == "figure":
            _figure_caption(node, captions, skipped)
        if tag == "table" and not in_pre:
            rows = _data_table(node)
            if rows is not None:
                caption = node.css_first("caption")
                named = captions.get(node.mem_id, "")
                if caption is not None and caption.parent and caption.parent.mem_id == node.mem_id:
                    named = caption.text(separator=" ")
                blocks.extend(["".join(out), Table(rows, named)])
                out = ["\n"]
                continue
        out.append(_before(tag))
        stack.append((node, True, in_pre))
        children = list(node.iter(include_text=True))
        inner_pre = in_pre or tag == "pre"
        stack.extend((child, False, inner_pre) for child in reversed(children))
    blocks.append("".join(out))
    return blocks


def _figure_caption(figure: LexborNode, captions: dict[int, str], skipped: set[int]) -> None:
    """A figure holding one table and a figcaption: the figcaption is the table's caption."""
    children = [child for child in figure.iter() if child.is_element_node]
    tables = [child for child in children if child.tag == "table"]
    named = [child for child in children if child.tag == "figcaption"]
    if len(tables) == 1 and len(named) == 1:
        captions[tables[0].mem_id] = named[0].text(separator=" ")
        skipped.add(named[0].mem_id)


def _data_table(node: LexborNode) -> list[list[str]] | None:
    """A table of short cells as rows of cells; None for a layout table (cells holding
    paragraphs, lists or other tables), which is rendered as ordinary blocks."""
    blocks = node.css("table, p, div, ul, ol, h1, h2, h3, h4, h5, h6, pre, blockquote")
    if any(inner.mem_id != node.mem_id for inner in blocks):
        return None
    rows: list[list[str]] = []
    for row in node.css("tr"):
        cells = [cell(child.text(separator=" ")) for child in row.iter() if child.tag in _CELL]
        if any(len(text) > LAYOUT_CELL_CHARS for text, _ in cells):
            return None
        if any(text for text, _ in cells):
            rows.append([text for text, _ in cells])
    return rows or None


LAYOUT_CELL_CHARS = 500


def _before(tag: str) -> str:
    if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
        return "\n\n" + "#" * int(tag[1]) + " "
    if tag == "li":
        return "\n- "
    if tag == "tr":
        return "\n"
    if tag == "br":
        return "\n"
    return "\n" if tag in _BLOCK else ""


def _after(tag: str) -> str:
    if tag in ("li", "tr"):
        return ""
    if tag in _PARAGRAPH:
        return "\n\n"
    if tag in _CELL:
        return "\t"
    return "\n" if tag in _BLOCK else ""
