"""BM25 per document: words as a reader means them, stemmed in the document's language, kept."""

from __future__ import annotations

import shutil
from pathlib import Path

from proxy.retrieval.function_words import detect_language
from proxy.retrieval.lexical import LexicalIndex, subword_terms, terms, words


def test_pdf_ligatures_and_line_break_hyphens_are_undone() -> None:
    assert words("the ﬁlm was imple-\nmented") == ["the", "film", "was", "implemented"]


def test_unspaced_scripts_become_character_pairs_and_cyrillic_stays_words() -> None:
    assert words("東京都") == ["東京", "京都"]
    assert words("Формат A4") == ["формат", "a4"]


def test_stemming_follows_the_document_language() -> None:
    german = ["Die Menge ist kompakt, wenn sie beschränkt und abgeschlossen ist."] * 3
    russian = ["Масштаб и формат листа указаны в основной надписи чертежа."] * 3
    assert detect_language(german) == "german"
    assert detect_language(russian) == "russian"
    assert detect_language(["qwx zzv"]) == "english"
    assert terms("Mengen", "german") == terms("Menge", "german")
    assert terms("чертежа", "russian") == terms("чертежи", "russian")
    found = terms("The farmers are suing", "english")
    assert found == ["farmer", "su"] and terms("farmer sues", "english") == ["farmer", "sue"]


def test_search_ranks_by_bm25_and_finds_codes_and_numbers() -> None:
    index = LexicalIndex.build(
        [
            "The server answers 507 when the account is over its storage quota.",
            "Clients send a bearer token with every request.",
            "A folder listing carries the version of every document.",
        ]
    )
    assert [i for i, _ in index.search("what does 507 mean", 3)] == [0]
    assert index.search("bearer tokens", 3)[0][0] == 1
    assert index.search("the of and", 3) == []  # stopwords only
    assert index.search("zebra", 3) == []


def test_an_index_survives_save_and_load(tmp_path: Path) -> None:
    index = LexicalIndex.build(["alpha beta", "gamma delta", ""])
    index.save(tmp_path / "bm25")
    loaded = LexicalIndex.load(tmp_path / "bm25")
    assert loaded is not None and loaded.size == 3 and loaded.language == index.language
    assert loaded.search("gamma", 2) == index.search("gamma", 2)
    assert loaded.search_subwords("gammas", 2) == index.search_subwords("gammas", 2) != []
    assert LexicalIndex.load(tmp_path / "nothing") is None


def test_an_index_saved_without_its_pieces_is_made_again(tmp_path: Path) -> None:
    # Saved by a version before word pieces: not loaded, so its passages are indexed anew.
    LexicalIndex.build(["alpha beta", "gamma delta"]).save(tmp_path / "bm25")
    shutil.rmtree(tmp_path / "bm25" / "subwords")
    assert LexicalIndex.load(tmp_path / "bm25") is None


def test_words_are_also_indexed_by_their_character_runs() -> None:
    assert subword_terms("Стол", "russian") == ["#сто", "стол", "тол#"]
    assert subword_terms("is a DB", "english") == ["#db#"]  # stopwords go; a short word is one
    assert subword_terms("Kurve", "german") == ["#kur", "kurv", "urve", "rve#"]


def test_a_words_other_forms_and_compounds_are_found_by_its_pieces() -> None:
    german = LexicalIndex.build(
        [
            "Eine Teilmenge ist kompakt, wenn sie beschränkt und abgeschlossen ist.",
            "Der Jordansche Kurvensatz: das Komplement hat genau zwei Komponenten.",
            "Die Fundamentalgruppe der Kreislinie ist isomorph zu Z.",
        ]
    )
    assert german.search("Kurve", 3) == []  # no whole word "kurv" in any passage
    assert german.ranked("Kurve", 3)[0][0] == 1
    russian = LexicalIndex.build(
        [
            "Для сервера нужно 256 мегабайт памяти.",
            "С настольными приложениями: 2 гигабайта.",
            "Первый жёсткий диск называется /dev/sda.",
        ]
    )
    question = "Сколько памяти для работы с рабочим столом?"
    assert [i for i, _ in russian.search(question, 3)] == [0]
    order, scores = russian.ranked(question, 3)
    assert set(order) == {0, 1} and set(scores) == {0}  # scores: whole words only


def test_whole_words_keep_their_lead_over_pieces() -> None:
    index = LexicalIndex.build(
        [
            "The keeper lit the lamp at dusk.",
            "Housekeeping took the morning; the keepers' shed was swept.",
            "The baker sold bread.",
        ]
    )
    order, scores = index.ranked("keeper lamp", 3)
    assert order[0] == 0 and set(scores) == {0, 1}  # "keepers'" stems to keeper too
    assert 2 not in order
