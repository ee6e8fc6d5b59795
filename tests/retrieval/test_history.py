"""What a follow-up is searched for: the question, then the question with its conversation."""

from __future__ import annotations

import dataclasses

from proxy.retrieval.fusion import RRF_K, reciprocal_rank_fusion
from proxy.retrieval.history import (
    MAX_WORDS,
    HistoryRule,
    SearchText,
    Turn,
    answer_weight,
    carried_words,
    earlier_turns,
    first_words,
    last_words,
    leaning,
    led_by_rewrite,
    message_text,
    near_words,
    pointed_at,
    pointing,
    salient_words,
    search_texts,
)

FIRST_ROUND = {"terms": 0.0, "lean": False, "near": False, "reply": 0.0}
"""The earlier questions alone, as the first round searched them (the last answer with
`reply`, given as `FIRST_ROUND | {"reply": ...}`)."""

CONVERSATION = [
    Turn("user", "Is libcurl thread-safe?"),
    Turn("assistant", "Yes, as long as no handle is shared between threads."),
    Turn("user", "How do I stop a transfer?"),
    Turn("assistant", "Return an error from a callback; with the multi interface, remove it."),
]


def test_the_question_comes_first_then_each_earlier_question_latest_first() -> None:
    texts = search_texts(
        "And the other one?", CONVERSATION, HistoryRule(turns=2, weight=0.5, **FIRST_ROUND)
    )
    assert texts == [
        SearchText("And the other one?", 1.0, "question"),
        SearchText("How do I stop a transfer?\nAnd the other one?", 0.5, "conversation"),
        SearchText("Is libcurl thread-safe?\nAnd the other one?", 0.25, "conversation"),
    ]


def test_recency_the_weight_shrinks_by_the_decay_at_each_step_back() -> None:
    rule = HistoryRule(turns=3, weight=0.8, decay=0.25, **FIRST_ROUND)
    earlier = [Turn("user", f"question {n}") for n in range(1, 5)]
    weights = [text.weight for text in search_texts("q", earlier, rule)]
    assert weights == [1.0, 0.8, 0.2, 0.05]  # three turns back at most, the oldest left out
    assert [t.text for t in search_texts("q", earlier, rule)][1] == "question 4\nq"


def test_the_last_answer_is_searched_with_the_question_at_its_own_weight() -> None:
    texts = search_texts(
        "And with the other interface?",
        CONVERSATION,
        HistoryRule(0, **FIRST_ROUND | {"reply": 0.5}),
    )
    assert texts[1:] == [
        SearchText(
            "Return an error from a callback; with the multi interface, remove it.\n"
            "And with the other interface?",
            0.5,
            "reply",
        )
    ]


def test_no_history_no_weight_or_no_words_leave_the_question_alone() -> None:
    rule = HistoryRule(turns=2, weight=0.5, **FIRST_ROUND | {"reply": 0.5})
    assert search_texts("What is it?", [], rule) == [SearchText("What is it?", 1.0, "question")]
    off = HistoryRule(turns=0, **FIRST_ROUND | {"reply": 0.0})
    alone = [SearchText("What is it?", 1.0, "question")]
    assert search_texts("What is it?", CONVERSATION, off) == alone
    assert len(search_texts(" ", CONVERSATION, rule)) == 1  # a file alone: nothing to lean on
    zero = HistoryRule(turns=2, weight=0.0, **FIRST_ROUND | {"reply": 0.0})
    assert len(search_texts("What is it?", CONVERSATION, zero)) == 1


def test_an_answer_is_only_the_last_one_when_it_is_the_last_turn() -> None:
    # Two user messages in a row: the answer before them is not "the last answer".
    earlier = [*CONVERSATION, Turn("user", "Thanks.")]
    texts = search_texts("And then?", earlier, HistoryRule(turns=0, **FIRST_ROUND | {"reply": 0.5}))
    assert [text.source for text in texts] == ["question"]


def test_earlier_turns_are_the_user_and_assistant_words_before_the_last_question() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Is libcurl thread-safe?"},
                {"type": "text", "text": "[attached: faq.md]"},  # a file part, taken out
            ],
        },
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},
        {"role": "tool", "content": "result"},
        {"role": "assistant", "content": [{"type": "output_text", "text": " Yes. "}]},
        {"role": "user", "content": "And the other one?"},
        {"role": "assistant", "content": "after the question: not history"},
    ]
    assert earlier_turns(messages, 5) == [
        Turn("user", "Is libcurl thread-safe?"),
        Turn("assistant", "Yes."),
    ]
    assert earlier_turns(messages, None) == []
    assert message_text({"role": "user", "content": 42}) == ""


def test_long_texts_are_cut_to_their_words_nearest_the_question() -> None:
    long = " ".join(f"w{n}" for n in range(200))
    assert last_words(long).split() == [f"w{n}" for n in range(200 - MAX_WORDS, 200)]
    assert first_words(long).split() == [f"w{n}" for n in range(MAX_WORDS)]
    assert last_words("short one") == first_words("short one") == "short one"
    [_, conversation, _] = search_texts("q", [Turn("user", long)] * 2, HistoryRule(**FIRST_ROUND))
    assert conversation.text == last_words(long) + "\nq"


def test_rankings_are_fused_at_their_weights() -> None:
    # The question's ranking puts 1 first; the conversation's, at half weight, 2.
    fused = dict(reciprocal_rank_fusion([[1, 2], [2, 3]], weights=[1.0, 0.5]))
    assert fused[1] == 1 / (RRF_K + 1)
    assert fused[2] == 1 / (RRF_K + 2) + 0.5 / (RRF_K + 1)
    assert fused[3] == 0.5 / (RRF_K + 2)
    assert reciprocal_rank_fusion([[1], [2]], weights=[1.0, 0.5])[0][0] == 1
    assert reciprocal_rank_fusion([[1], [2]], weights=[0.5, 1.0])[0][0] == 2


def test_a_short_question_pointing_back_leans_most_a_long_plain_one_least() -> None:
    assert leaning("What is it for?") == 1.5  # short, and "it" points back
    assert leaning("And for a GET?") == 1.0  # short, nothing pointing back
    assert leaning("Why would it still work in my browser but not with curl then, I wonder?") == 1.0
    long_plain = "Which file format does the cookie jar of libcurl use when it is saved to disk"
    assert leaning(long_plain.replace(" it ", " the jar ")) == 0.5
    assert leaning("Wie nehme ich das wieder zurück?") == 1.0  # other languages: by length


def test_carried_words_come_from_the_last_answer_then_the_earlier_question() -> None:
    words = carried_words(
        "What is it for?",
        "The ETag header, then ETag again; see RFC 7232.",
        ["How does versioning work?"],
    )
    # Each once, case kept, numbers and the question's own words left out.
    assert words == ["The", "ETag", "header", "then", "again", "see", "RFC", "How", "does",
                     "versioning", "work"]  # fmt: skip
    assert carried_words("q", "", []) == []


def test_salient_words_are_the_rarest_in_the_document_that_it_holds() -> None:
    frequency = {"ETag": 1, "header": 3, "RFC": 2, "the": 0, "versioning": 40, "work": 6}
    found = salient_words(
        ["the", "ETag", "header", "RFC", "versioning", "work", "absent"],
        lambda word: frequency.get(word, 0),
        passages=100,
        count=2,
    )
    assert found == ["ETag", "RFC"]  # rarest first; absent, stopwords and common ones out
    everything = salient_words(list(frequency), lambda w: frequency[w], passages=100, count=9)
    assert everything == ["ETag", "RFC", "header", "work"]  # in 40 of 100 passages: too common


def test_terms_texts_follow_the_rule_and_the_lean() -> None:
    rule = HistoryRule(turns=1, reply=0.0, terms=1.0, term_count=3, lean=False, near=False)
    texts = search_texts("What is it for?", CONVERSATION, rule)
    assert [(t.source, t.weight) for t in texts] == [
        ("question", 1.0),
        ("conversation", 1.0),
        ("terms", 1.0),
    ]
    terms = texts[2]
    assert terms.text == "What is it for?" and terms.pick == 3
    assert terms.carried[:3] == ("Return", "an", "error")  # the answer's words first
    assert "stop" in terms.carried  # then the earlier question's
    assert terms.record() == {
        "text": "What is it for?",
        "weight": 1.0,
        "from": "terms",
        "carried": list(terms.carried),
    }
    leaned = search_texts("What is it for?", CONVERSATION, dataclasses.replace(rule, lean=True))
    assert [t.weight for t in leaned] == [1.0, 1.5, 1.5]  # the question keeps its 1
    plain = "Which file format does the cookie jar of libcurl use when saved to disk"
    assert [t.weight for t in search_texts(plain, CONVERSATION, HistoryRule(terms=0))] == [
        1.0,
        0.5,
        0.25,
    ]


def test_near_words_are_those_said_next_to_the_questions_own_words() -> None:
    reply = "He laid plots to set his brother Clarence and the king in deadly hate."
    # "brother" is the question's: the words around it where it was said, nearest first.
    assert near_words("What happens to the brother?", [reply]) == ["his", "Clarence", "set", "and"]
    tokens = near_words("How do the tokens limit it?", ["Over https with CORS and bearer token."])
    assert tokens == ["bearer", "and"]  # "tokens" and "token" are alike
    assert near_words("Was ist an dem Sonderfall anders?", ["Als Sonderfall Pre-Depends."]) == [
        "Als",
        "Pre",
        "Depends",
    ]
    assert near_words("How does the second way work?", [reply]) == []  # nothing in common


def test_near_words_go_first_and_function_words_are_never_salient() -> None:
    frequency = {"Clarence": 30, "king": 20, "deadly": 2, "his": 1}
    common = {"his", "and"}
    pick = {
        "carried": ["his", "Clarence", "deadly", "king"],
        "frequency": lambda word: frequency.get(word, 0),
        "passages": 1000,
        "count": 2,
        "common": lambda word: word in common,
    }
    assert salient_words(**pick) == ["deadly", "king"]  # the rarest
    assert salient_words(**pick, near=2) == ["Clarence", "deadly"]  # the near one first
    rule = HistoryRule(turns=0, reply=0.0, terms=1.0, near=True)
    earlier = [
        Turn("user", "Who speaks first?"),
        Turn("assistant", "Gloucester, then his brother Clarence."),
    ]
    [_, terms] = search_texts("What happens to the brother?", earlier, rule)
    assert terms.carried[: terms.near] == ("his", "Clarence", "then")
    assert terms.record()["near"] == 3


def test_a_question_saying_it_changes_the_subject_leans_least() -> None:
    for shift in (
        "Separate problem: it can't log in to a server that wants NTLM. Why?",
        "Different question: what is the Mozilla Festival?",
        "Something else: I write my scripts in TypeScript, anything I should know?",
        "Andere Frage: was ist ein metrischer Raum?",
        "Другой вопрос: что это?",
    ):
        assert leaning(shift) == 0.0, shift
    # Pointing back is not changing the subject, even with "other" or "new" in front.
    assert leaning("Other one: what is it for?") == 1.5
    assert leaning("New: how?") == 1.0
    texts = search_texts("Different question: what is it?", CONVERSATION, HistoryRule(lean=True))
    assert texts == [SearchText("Different question: what is it?", 1.0, "question")]


def test_a_near_word_may_be_commoner_than_a_carried_one() -> None:
    frequency = {"bearer": 40, "carries": 2}
    pick = {"frequency": lambda word: frequency.get(word, 0), "passages": 100, "count": 1}
    assert salient_words(["bearer", "carries"], near=1, **pick) == ["bearer"]  # in 40%: near
    assert salient_words(["carries", "bearer"], near=0, **pick) == ["carries"]  # not near
    assert salient_words(["bearer"], near=0, **pick) == []  # too common, when not near
    frequency["bearer"] = 60
    assert salient_words(["bearer"], near=1, **pick) == []  # in more than half: never


def test_a_rewrite_leads_the_conversation_texts_at_its_weight() -> None:
    rule = HistoryRule(**FIRST_ROUND)
    rewrite = "How do I stop a transfer with the multi interface?"
    led = led_by_rewrite("And the other one?", rewrite, CONVERSATION, rule, 2.0)
    assert [(text.source, text.text, text.weight) for text in led] == [
        ("question", "And the other one?", 1.0),
        ("rewrite", rewrite, 2.0),
        ("conversation", f"How do I stop a transfer?\n{rewrite}", 2.0),
        ("conversation", f"Is libcurl thread-safe?\n{rewrite}", 1.0),
    ]
    # The carried words are the rewrite's too: what it already names is not carried again.
    carrying = led_by_rewrite("And the other one?", rewrite, CONVERSATION, HistoryRule(), 1.0)
    (terms,) = [text for text in carrying if text.source == "terms"]
    assert terms.text == rewrite and "multi" not in terms.carried and "callback" in terms.carried


def test_a_definite_phrase_naming_what_the_last_turn_named_points_back() -> None:
    answer = "Apps get an access token whose scopes name what they may read."
    question = "How do the tokens limit what an app may touch in the end, exactly?"
    assert pointed_at(question, [answer])  # "the tokens": the answer's token
    assert leaning(question) == 0.5  # long, no pronoun: the lean does not look at the last turn
    assert not pointed_at(question.replace("the tokens", "tokens"), [answer])  # no article
    assert not pointed_at("How do the cookies limit what an app may touch?", [answer])
    # German and Russian: an article or demonstrative before the noun the last turn said.
    assert pointed_at("Wozu dient die Funktion eigentlich?", ["Die Funktion parse() liest."])
    assert pointed_at("А зачем нужен этот флаг вообще?", ["Флаг -k отключает проверку."])
    # The first content word after the article decides: "the same tokens" still points.
    assert pointed_at("Do the same tokens expire?", [answer])


def test_a_definite_phrase_leaves_the_history_weights_of_a_long_question_as_they_were() -> None:
    turns = [
        Turn("user", "How does an app get access?"),
        Turn("assistant", "Apps get an access token whose scopes name what they may read."),
    ]
    question = "How do the tokens limit what an app may touch in the end, exactly?"
    plain = search_texts(question, turns, HistoryRule(reply=0.0))
    assert [t.weight for t in plain[1:]] == [0.5, 0.5]  # a long plain question: x0.5


FAST_STARTUP = [
    Turn("user", "Was muss ich in Windows abschalten?"),
    Turn("assistant", "Den Schnellstart: mit ihm fährt Windows nicht wirklich herunter."),
]


def test_a_definite_phrase_naming_what_the_last_answer_named_gets_the_answer_searched() -> None:
    turns, gated = FAST_STARTUP, HistoryRule(reply=0.5, reply_pointing=True)
    named = search_texts("Ist der Schnellstart ab Werk eingeschaltet?", turns, gated)
    assert "reply" in [text.source for text in named]  # "der Schnellstart": the answer's
    other = search_texts("Ist der Ruhezustand ab Werk eingeschaltet?", turns, gated)
    assert "reply" not in [text.source for text in other]  # a thing the answer never named


def test_the_last_answer_is_searched_only_for_a_question_pointing_back_when_asked() -> None:
    turns, gated = FAST_STARTUP, HistoryRule(reply=0.5, reply_pointing=True)
    pointing_back = search_texts("Warum ist das so gefährlich?", turns, gated)
    assert "reply" in [text.source for text in pointing_back]  # "das" points back
    own = search_texts("Wie groß muss die EFI-Partition mindestens sein?", turns, gated)
    assert "reply" not in [text.source for text in own]
    ungated = HistoryRule(reply=0.5, reply_pointing=False)
    assert "reply" in [t.source for t in search_texts("Wie groß muss sie sein?", turns, ungated)]
    assert pointing("Почему это так опасно?")  # Russian: "это"
    assert pointing("Who looks after it these days?")  # English: "it"
    assert not pointing("Wie groß muss die EFI-Partition mindestens sein?")
    # A definite phrase counts when its noun was said in the last turn.
    assert pointing("Is the Schnellstart on by default?", ["Den Schnellstart abschalten."])


SHUTDOWN = [
    Turn("user", "¿Puedo apagar un servidor remoto por SSH?"),
    Turn("assistant", "Sí, con shutdown -h now lanzado con at para que no muera con la sesión."),
]


def test_a_question_continuing_the_exchange_gets_the_last_answer_at_its_own_weight() -> None:
    rule = HistoryRule(reply=4.0, continuing=1.5, reply_pointing=True, lean=False, terms=0.0)
    continuing = search_texts("¿Y si se corta la conexión a mitad?", SHUTDOWN, rule)
    assert continuing[-1] == SearchText(
        "Sí, con shutdown -h now lanzado con at para que no muera con la sesión.\n"
        "¿Y si se corta la conexión a mitad?",
        1.5,
        "reply",
    )
    # Pointing back ("eso") outranks continuing: the answer at `reply`.
    assert answer_weight("¿Y eso funciona con screen?", "", rule) == 4.0
    assert answer_weight("Et pour taper du japonais ?", "", rule) == 1.5
    assert answer_weight("А если памяти меньше?", "", rule) == 1.5
    # A question of its own, or "and" inside a sentence, is not continuing anything.
    assert answer_weight("¿Se puede apagar por SSH y luego encender?", "", rule) == 0.0
    assert answer_weight("How do salt and pepper differ?", "", rule) == 0.0
    own = search_texts("¿Cómo imprimo desde Debian?", SHUTDOWN, rule)
    assert "reply" not in [text.source for text in own]


def test_the_continuing_weight_is_off_at_zero_and_with_the_answer_switched_off() -> None:
    question = "¿Y si se corta la conexión a mitad?"
    off = HistoryRule(reply=4.0, continuing=0.0, reply_pointing=True)
    assert "reply" not in [t.source for t in search_texts(question, SHUTDOWN, off)]
    no_answer = HistoryRule(reply=0.0, continuing=1.0, reply_pointing=True)
    assert answer_weight(question, "", no_answer) == 0.0
    light = HistoryRule(reply=0.5, continuing=0.25, reply_pointing=True)
    assert answer_weight(question, "", light) == 0.25  # a light `reply` still tells them apart
    # A definite phrase naming what the answer said points back: the answer at `reply`.
    said = "Sí, con shutdown lanzado con at."
    assert answer_weight("¿Funciona el shutdown con screen?", said, light) == 0.5
    assert answer_weight("¿Funciona el shutdown con screen?", "", light) == 0.0
    ungated = HistoryRule(reply=2.0, continuing=1.0, reply_pointing=False)
    assert answer_weight(question, "", ungated) == 2.0  # every question gets `reply`
    # The lean scales it as it scales the rest of the history: none after a change of subject.
    leaning_rule = HistoryRule(reply=4.0, continuing=1.0, lean=True)
    shifted = search_texts("Otra pregunta: ¿y el correo?", SHUTDOWN, leaning_rule)
    assert [text.source for text in shifted] == ["question"]


def test_a_question_in_a_script_no_index_language_uses_gets_the_last_answer_at_continuing() -> None:
    rule = HistoryRule(reply=4.0, continuing=1.5, reply_pointing=True, lean=False, terms=0.0)
    earlier = [
        Turn("user", "このキツネは何をしましたか？"),
        Turn("assistant", "ブドウを取ろうとしました。"),
    ]
    texts = search_texts("それはなぜですか？", earlier, rule)
    assert texts[-1] == SearchText("ブドウを取ろうとしました。\nそれはなぜですか？", 1.5, "reply")
    for question in ["为什么会这样？", "그건 왜요?", "Γιατί είναι επικίνδυνο;", "لماذا هذا خطير؟"]:
        assert answer_weight(question, "", rule) == 1.5, question
    # Latin and Cyrillic are read: a question of its own there is not searched with the answer,
    # nor one whose few letters of another script are a formula's or a name's.
    for question in ["Wie groß ist π1(S¹, x)?", "Где скачать образ?", "Is 日本 in the list?"]:
        assert answer_weight(question, "", rule) == 0.0, question


def test_a_question_of_eight_words_is_short() -> None:
    assert leaning("What is it for in a browser, exactly?") == 1.5  # eight words, "it"
    assert leaning("What is it for in a web browser, exactly?") == 1.0  # nine


def test_a_word_the_answer_opens_with_has_neighbours() -> None:
    reply = "Clarence, his brother, dies in the Tower."
    assert near_words("What happens to Clarence?", [reply]) == ["his", "brother"]


def test_only_the_answers_first_words_are_looked_at_for_what_it_named() -> None:
    filler = " ".join(f"w{n}" for n in range(MAX_WORDS + 20))  # past MAX_WORDS, within 160
    said = f"{filler} then the access token"
    assert pointed_at("How do the tokens expire?", [said])
    assert near_words("And the bearer ones?", [f"{filler} bearer tokens"]) == [
        "w99",
        "tokens",
        "w98",
    ]
    further = f"{filler} {filler} then the access token"  # past the first 160 words
    assert not pointed_at("How do the tokens expire?", [further])
    assert near_words("And the bearer ones?", [f"{filler} {filler} bearer tokens"]) == []


def test_a_word_in_a_quarter_of_the_passages_is_still_rare_enough() -> None:
    frequency = {"scopes": 25, "bearer": 26, "header": 10}
    pick = {"frequency": lambda word: frequency[word], "passages": 100, "count": 3}
    assert salient_words(["bearer", "scopes", "header"], **pick) == ["header", "scopes"]
    # Without near words, rarity alone orders them, whichever was carried first.
    assert salient_words(["scopes", "header"], **pick | {"count": 1}) == ["header"]


def test_a_definite_phrase_further_on_still_points_back() -> None:
    answer = "Apps get an access token whose scopes name what they may read."
    assert pointed_at("Why does the server reject the tokens?", [answer])  # not "the server"


def test_text_parts_of_either_api_are_the_conversations_words() -> None:
    responses = {"role": "user", "content": [{"type": "input_text", "text": "Is it safe?"}]}
    assert message_text(responses) == "Is it safe?"
    parts = [{"type": "text", "text": "First part."}, {"type": "text", "text": "Second part."}]
    assert message_text({"role": "user", "content": parts}) == "First part.\nSecond part."


def test_the_record_keeps_four_decimals_of_a_weight() -> None:
    assert SearchText("q", 1 / 3, "conversation").record()["weight"] == 0.3333


OSTRICHES = [
    Turn("user", "How do penguins swim?"),
    Turn("assistant", "Fast."),
    Turn("user", "Where do ostriches run wild?"),
    Turn("assistant", "On the savanna."),
    Turn("user", "What do kettles boil?"),
    Turn("assistant", "Water for tea."),
]


def test_words_are_carried_from_the_last_answer_and_the_latest_question_only() -> None:
    rule = HistoryRule(turns=0, reply=0.0, terms=1.0, lean=False, near=True)
    [_, terms] = search_texts("And the ostriches?", OSTRICHES, rule)
    # The ostriches were asked about two questions back: nothing of it is carried or near.
    assert terms.carried == ("Water", "for", "tea", "What", "do", "kettles", "boil")
    assert terms.near == 0


def test_without_near_the_carried_words_keep_the_order_they_were_said_in() -> None:
    earlier = [
        Turn("user", "Who speaks first?"),
        Turn("assistant", "Gloucester, then his brother Clarence."),
    ]
    rule = HistoryRule(turns=0, reply=0.0, terms=1.0, lean=False, near=False)
    [_, terms] = search_texts("What happens to the brother?", earlier, rule)
    assert terms.carried[:4] == ("Gloucester", "then", "his", "Clarence")
    assert terms.near == 0 and "near" not in terms.record()


def test_words_are_carried_from_the_answers_first_160_words() -> None:
    filler = " ".join(f"w{n}" for n in range(MAX_WORDS + 20))  # past MAX_WORDS, within 160
    assert "Clarence" in carried_words("Who?", f"{filler} Clarence", [])
    assert "Clarence" not in carried_words("Who?", f"{filler} {filler} Clarence", [])
