"""Windows: a hit with the whole sentences around it, merged where they meet, never shown twice."""

from __future__ import annotations

import itertools

from proxy.retrieval.chunking import Chunk, chunk_document
from proxy.retrieval.sentence_windows import WindowShape, document_text, windows
from tests.retrieval.support import text_document


def words(text: str) -> int:
    return len(text.split())


def sentences(start: int, count: int, length: int = 8) -> str:
    return " ".join(
        " ".join(f"s{n}w{k}" for k in range(length - 1)) + f" s{n}end."
        for n in range(start, start + count)
    )


def passages(text: str, tokens: int = 40) -> list[Chunk]:
    return chunk_document(text_document([text]), chunk_tokens=tokens, overlap=0, count_tokens=words)


def windowed(
    chunks: list[Chunk], hits: list[int], before: int = 0, after: int = 0, tokens: int = 40
) -> list[tuple[int, Chunk]]:
    shape = WindowShape(before, after)
    text = document_text(chunks)
    return windows(chunks, text, [chunks[i] for i in hits], shape, words, tokens)


def test_the_text_is_rebuilt_where_the_passages_were_cut_from() -> None:
    text = sentences(0, 30) + "\n\n" + sentences(30, 30)
    chunks = passages(text)
    rebuilt = document_text(chunks)
    assert rebuilt.split() == text.split()
    assert all(rebuilt[c.start : c.end] == c.text for c in chunks)


def test_a_window_adds_the_whole_sentences_after_a_hit() -> None:
    chunks = passages(sentences(0, 40))
    [(rank, window)] = windowed(chunks, [1], after=20)
    assert rank == 0
    hit = chunks[1]
    assert window.text.startswith(hit.text)
    added = window.text[len(hit.text) :]
    assert added.strip().endswith("end.") and 0 < words(added) <= 20
    assert words(added) > 20 - 8  # as many whole sentences as fit
    assert window.index == hit.index and window.start == hit.start


def test_a_window_adds_the_whole_sentences_before_a_hit() -> None:
    chunks = passages(sentences(0, 40))
    [(_, window)] = windowed(chunks, [2], before=16)
    hit = chunks[2]
    assert window.text.endswith(hit.text)
    added = window.text[: -len(hit.text)]
    assert words(added) == 16 and added.split()[0].endswith("w0")  # two whole sentences
    assert window.start < hit.start and window.end == hit.end


def test_windows_that_meet_are_merged_and_nothing_is_shown_twice() -> None:
    chunks = passages(sentences(0, 40))
    shown = windowed(chunks, [3, 4, 1], after=16, before=8)
    # Hits 3 and 4 meet: one window, with the better hit's rank; hit 1 stands apart.
    assert [rank for rank, _ in shown] == [0, 2]
    merged = shown[0][1]
    assert chunks[3].text in merged.text and chunks[4].text in merged.text
    spans = sorted((chunk.start, chunk.end) for _, chunk in shown)
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))


def test_a_merged_window_stays_within_three_passages() -> None:
    chunks = passages(sentences(0, 60))
    shown = windowed(chunks, [2, 3, 4, 5, 6], after=8)
    assert all(words(chunk.text) <= 3 * 40 for _, chunk in shown)
    texts = [chunk.text for _, chunk in shown]
    joined = " ".join(texts).split()
    assert len(joined) == len(set(joined))  # no word of the document shown twice
    assert all(chunks[i].text.split()[0] in joined for i in (2, 3, 4, 5, 6))


def test_a_window_stops_before_the_next_heading() -> None:
    text = sentences(0, 5) + "\n\n## Next part\n\n" + sentences(5, 5)
    chunks = passages(text, tokens=30)
    [(_, window)] = windowed(chunks, [0], after=100, tokens=30)
    assert "Next part" not in window.text


def test_a_window_ends_after_a_whole_table_row() -> None:
    rows = "\n".join(f"| r{n} a | r{n} b | r{n} c |" for n in range(20))
    text = sentences(0, 4) + "\n\n| A | B | C |\n|---|---|---|\n" + rows
    chunks = passages(text, tokens=40)
    hit = next(i for i, c in enumerate(chunks) if "| r3 a" in c.text)
    [(_, window)] = windowed(chunks, [hit], after=12, tokens=40)
    assert window.text.endswith("|")
    assert all(line.endswith("|") for line in window.text.splitlines() if line.startswith("|"))


def test_no_window_leaves_the_hits_as_they_are() -> None:
    chunks = passages(sentences(0, 20))
    shown = windowed(chunks, [1, 0])
    assert [(rank, chunk) for rank, chunk in shown] == [(0, chunks[1]), (1, chunks[0])]


def test_a_hit_already_shown_adds_no_window_of_text_away_from_it() -> None:
    chunks = passages(sentences(0, 60))
    # Hit 3 lies inside hit 2's window; its own window would make the merged one too long, and
    # what is left of it (past hit 2's window) does not hold hit 3: nothing more is shown.
    shown = windowed(chunks, [2, 3], after=80)
    assert [rank for rank, _ in shown] == [0]
    assert chunks[3].text in shown[0][1].text
