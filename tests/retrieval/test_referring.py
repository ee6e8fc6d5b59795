"""Follow-ups point back, continue, or change the subject in each of the index's languages."""

from __future__ import annotations

import re

import pytest

from proxy.retrieval.function_words import LANGUAGES
from proxy.retrieval.history import HistoryRule, Turn, leaning, pointed_at, pointing, search_texts
from proxy.retrieval.referring import (
    CONTINUING,
    DEFINITE,
    HINTS,
    POINTING_WORDS,
    REFERRING,
    SHIFT,
    unread_script,
)
from proxy.retrieval.standalone import leans_on_history, own_words

EARLIER = [Turn("user", "How is the tool set up?"), Turn("assistant", "One file holds it all.")]

# One follow-up per language, pointing back by a pronoun or demonstrative only ("it", "that
# one"): each says something of its own, so only the pointing word makes it lean.
POINTING_BACK = {
    "english": "Does this module support compression natively?",
    "german": "Unterstützt dieses Modul Komprimierung direkt?",
    "russian": "Поддерживает ли этот модуль сжатие напрямую?",
    "french": "Est-ce que cette option supporte la compression directement ?",
    "spanish": "¿Admite esta opción compresión directamente?",
    "italian": "Questa opzione supporta direttamente la compressione?",
    "portuguese": "Essa opção suporta compressão diretamente?",
    "dutch": "Ondersteunt deze optie compressie rechtstreeks?",
    "swedish": "Stöder denna inställning komprimering direkt?",
    "danish": "Understøtter denne indstilling komprimering direkte?",
    "norwegian": "Støtter denne innstillingen komprimering direkte?",
    "turkish": "Bunu sıkıştırma için doğrudan kullanabilir miyim?",
}
# The same questions naming their subject: nothing in them points back.
OF_THEIR_OWN = {
    "english": "Does the zlib module support compression natively?",
    "german": "Unterstützt zlib Komprimierung direkt?",  # "das" is a hint
    "russian": "Поддерживает ли модуль zlib сжатие напрямую?",
    "french": "Est-ce que le module zlib supporte la compression directement ?",
    "spanish": "¿Admite el módulo zlib compresión directamente?",
    "italian": "Il modulo zlib supporta direttamente la compressione?",
    "portuguese": "O módulo zlib suporta compressão diretamente?",
    "dutch": "Ondersteunt de zlib-module compressie rechtstreeks?",
    "swedish": "Stöder zlib-modulen komprimering direkt?",
    "danish": "Understøtter zlib-modulet komprimering direkte?",
    "norwegian": "Støtter zlib-modulen komprimering direkte?",
    "turkish": "Zlib modülü sıkıştırmayı doğrudan destekliyor mu?",
}


def test_every_language_of_the_index_has_its_pointing_words() -> None:
    assert set(POINTING_WORDS) == set(LANGUAGES)
    assert set(POINTING_BACK) == set(POINTING_WORDS) == set(OF_THEIR_OWN)


@pytest.mark.parametrize("language", sorted(POINTING_BACK))
def test_a_follow_up_pointing_back_leans_on_its_conversation(language: str) -> None:
    question = POINTING_BACK[language]
    assert pointing(question), question
    assert leans_on_history(question, EARLIER).needed, question
    texts = search_texts(question, EARLIER, HistoryRule(reply_pointing=True))
    assert "reply" in [text.source for text in texts]  # the last answer is searched


@pytest.mark.parametrize("language", sorted(OF_THEIR_OWN))
def test_the_same_question_naming_its_subject_does_not(language: str) -> None:
    question = OF_THEIR_OWN[language]
    assert not pointing(question), question
    assert not leans_on_history(question, EARLIER).needed, question
    texts = search_texts(question, EARLIER, HistoryRule(reply_pointing=True))
    assert "reply" not in [text.source for text in texts]


@pytest.mark.parametrize(
    "question",
    [
        "Why did the worker process die under load?",  # Dutch "die" is left out
        "Was zijn die Vorteile von zlib gegenüber gzip?",  # neither "die" nor "zijn"
        "Wie groß muss die EFI-Partition mindestens sein?",  # German "sein": to be
        "Qu'est-ce que le module zlib compresse par défaut ?",  # "ce" of "est-ce que"
        "Can I sue the vendor over a broken zlib release?",  # Italian "sue" is left out
        "Il modulo zlib supporta la compressione?",  # French "il" is left out
        "Que dit la documentation de zlib sur la compression ?",  # Dutch "dit" is left out
    ],
)
def test_words_of_another_meaning_elsewhere_do_not_point_back(question: str) -> None:
    assert not (set(re.findall(r"\w+", question.casefold())) & REFERRING)
    assert not leans_on_history(question, EARLIER).needed


def test_the_readmes_french_follow_up_points_back() -> None:
    question = "Pourquoi est-ce dangereux, cela ?"
    assert pointing(question)
    assert leans_on_history(question, EARLIER).needed


def test_hints_point_back_for_the_search_but_do_not_ask_the_model() -> None:
    question = "Is there a ready-made tool for caching method calls?"
    assert pointing(question)  # "there": the last answer is searched, which costs nothing
    assert not leans_on_history(question, EARLIER).needed  # a rewrite call is not made
    assert not HINTS & REFERRING


@pytest.mark.parametrize(
    "question",
    [
        "And Rhino?",
        "Und für Aufrufe?",
        "А если памяти меньше?",
        "Et pour les appels ?",
        "Mais sans le réseau ?",
        "¿Y con la otra interfaz?",
        "Pero sin red?",
        "Ma senza rete?",
        "Mas sem rede?",
        "Maar zonder netwerk?",
        "Och utan nätverk?",
        "Og uden netværk?",
        "Peki ağ olmadan?",
    ],
)
def test_a_question_opening_like_the_rest_of_a_sentence_continues(question: str) -> None:
    assert CONTINUING.match(question)
    assert leans_on_history(question, EARLIER).needed


@pytest.mark.parametrize(
    "question", ["Of all the options, which compresses best?", "En quelle année zlib est-il né ?"]
)
def test_words_opening_questions_of_their_own_elsewhere_do_not_continue(question: str) -> None:
    assert not CONTINUING.match(question)


@pytest.mark.parametrize(
    "question",
    [
        "Different question: what is the Mozilla Festival?",
        "Andere Frage: was ist ein metrischer Raum?",
        "Кстати: что такое загрузочная флешка?",
        "Autre question : qu'est-ce qu'un espace métrique ?",
        "Otra pregunta: ¿qué es un espacio métrico?",
        "Altra domanda: cos'è uno spazio metrico?",
        "Outra pergunta: o que é um espaço métrico?",
        "Andere vraag: wat is een metrische ruimte?",
        "En annan fråga: vad är ett metriskt rum?",
        "Et andet spørgsmål: hvad er et metrisk rum?",
        "Et annet spørsmål: hva er et metrisk rom?",
        "Başka bir soru: metrik uzay nedir?",
    ],
)
def test_a_question_saying_it_changes_the_subject_is_searched_alone(question: str) -> None:
    assert SHIFT.search(question)
    assert leaning(question) == 0.0


@pytest.mark.parametrize(
    ("question", "said"),
    [
        ("How do the tokens limit an app?", "Bearer tokens carry scopes."),
        ("Wie lange gilt die Sitzung?", "Die Sitzung endet nach einer Stunde."),
        ("Comment les jetons limitent-ils une application ?", "Des jetons portent des portées."),
        ("¿Cuánto dura la sesión?", "Cada sesión termina tras una hora."),
        ("Quanto dura la sessione?", "Ogni sessione finisce dopo un'ora."),
        ("Quanto tempo dura os tokens?", "Os tokens expiram."),
        ("Hoe lang geldt het token?", "Elk token verloopt na een uur."),
    ],
)
def test_a_definite_phrase_naming_what_the_answer_named_points_back(
    question: str, said: str
) -> None:
    assert pointed_at(question, [said])
    assert not pointed_at(question, ["Nothing of the kind was said here."])


def test_definite_articles_that_are_english_words_are_left_out() -> None:
    assert not {"a", "i", "as"} & DEFINITE
    # "a" before a noun the answer named is no pointer in English.
    assert not pointed_at("How do I make a tuple quickly?", ["A tuple is made with commas."])


def test_the_noun_pointed_at_is_one_of_the_next_two_words() -> None:
    said = ["Each of the tokens expires after an hour."]
    assert pointed_at("How long do the same tokens last?", said)  # "same": a function word
    # Two function words and then the noun: too far from its article to be its noun.
    assert not pointed_at("How long do the very same tokens last?", said)


@pytest.mark.parametrize(
    "question",
    [
        "Kann ein einzelner Kollege trotzdem bei seinem eigenen Format bleiben?",
        "А писать образ на всю флешку целиком или только на её первый раздел?",
        "Est-ce que cette option reste active après le redémarrage du serveur ?",
        "How does the previous setting behave after the server restarts tonight?",
    ],
)
def test_a_long_question_pointing_back_in_any_language_leans_as_a_rule(question: str) -> None:
    assert leaning(question) == 1.0
    own = "Kann ein einzelner Kollege trotzdem beim Format A4 im Büro bleiben?"
    assert leaning(own) == 0.5  # long, pointing at nothing


def test_stopwords_of_every_language_are_no_words_of_a_questions_own() -> None:
    # Italian drops the subject ("How does [it] work with the server?"): two words of its own,
    # "come" and "con" are Italian stopwords.
    question = "Come funziona con il server?"
    assert own_words(question) == ["funziona", "server"]
    assert leans_on_history(question, EARLIER).needed


@pytest.mark.parametrize(
    ("question", "said"),
    [
        ("Which keys exactly?", "Press Alt-SysRq, then one of the keys."),
        ("Quelles touches exactement ?", "Avec Alt-SysRq suivie d'une des touches."),
        ("Welche Optionen genau?", "Dafür gibt es zwei Optionen."),
        ("Какие флаги нужны?", "Для этого есть флаги сборки."),
        ("¿Cuáles paquetes exactamente?", "Instale los paquetes recomendados."),
    ],
)
def test_asking_which_of_the_things_the_answer_named_points_back(question: str, said: str) -> None:
    assert pointing(question, [said])
    assert not pointing(question, ["Nothing of the kind was said here."])


def test_which_of_things_the_answer_did_not_name_is_a_question_of_its_own() -> None:
    assert not pointed_at("Which editor should I use?", ["Press Alt-SysRq, then a key."])


@pytest.mark.parametrize(
    "question",
    [
        "Comment je la change après coup ?",
        "Et si on les supprime ?",
        "Je ne la trouve pas, où est-elle rangée ?",
        "¿Cómo lo cambio después?",
        "Come la cambio dopo?",
    ],
)
def test_an_object_pronoun_before_its_verb_points_back(question: str) -> None:
    assert pointing(question), question


@pytest.mark.parametrize(
    "question",
    [
        "Comment changer la langue du système ?",
        "Combien de temps prend la mise à jour ?",
        "¿Cómo funciona la red?",
        "Come funziona la rete?",
    ],
)
def test_an_article_before_its_noun_is_no_pronoun(question: str) -> None:
    assert not pointing(question), question


def test_a_question_mostly_in_a_script_the_index_does_not_read_is_told_apart() -> None:
    assert unread_script("それはなぜですか？") and unread_script("这个怎么用？")
    assert unread_script("Τι είναι αυτό;") and unread_script("APIは何ですか？")  # 5 of 8 letters
    assert not unread_script("Was ist π1?") and not unread_script("Почему это так?")
    assert not unread_script("Is 日本 in it?")  # a name in another script
    assert not unread_script("") and not unread_script("42?")
    assert not unread_script("日本 at?")  # half its letters: not most
    assert unread_script("\U00017000\U00017001?")  # Tangut: letters without a Unicode name
