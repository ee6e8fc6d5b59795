"""Which follow-ups are rewritten, what the model is shown, and what of its answer is kept."""

from __future__ import annotations

import pytest

from proxy.retrieval.history import Turn
from proxy.retrieval.standalone import (
    ANSWER_TAIL_WORDS,
    EXAMPLES,
    MAX_CHARS,
    MAX_WORDS,
    NOT_A_QUESTION,
    QUESTIONS_SHOWN,
    REFUSED,
    clean_rewrite,
    conversation_lines,
    leans_on_history,
    own_words,
    rewrite_messages,
)

EARLIER = [
    Turn("user", "How do I get curl to follow redirects?"),
    Turn("assistant", "Add the -L option."),
]


@pytest.mark.parametrize(
    "question",
    [
        "Why would it still work in my browser but not with curl then?",  # pronoun
        "What does the 403 one mean?",  # "the other one"
        "How long did that right last?",  # demonstrative
        "And Rhino?",  # ellipsis
        "What about those JavaScript proxy config files, PAC?",
        "What happens to the brother?",  # no word of its own but "brother"
        "Ist jeder davon auch ein topologischer Raum?",
        "Wann nennt man so eine universell?",
        "А если памяти меньше, поставить всё-таки можно?",
        "А несколько процессоров он поддерживает?",
    ],
)
def test_follow_ups_that_lean_on_their_conversation_are_rewritten(question: str) -> None:
    assert leans_on_history(question, EARLIER).needed


@pytest.mark.parametrize(
    "question",
    [
        "Is there a ready-made tool for caching method calls?",
        "Which file format does the cookie jar use?",
        "Different question: what is the Mozilla Festival?",
        "Wie ist die Gauß-Krümmung einer Fläche definiert?",
    ],
)
def test_self_contained_follow_ups_are_not(question: str) -> None:
    found = leans_on_history(question, EARLIER)
    assert not found.needed and found.why == "self-contained"


def test_no_earlier_question_no_rewrite() -> None:
    assert not leans_on_history("And Rhino?", []).needed
    # An earlier answer alone (a system greeting, say) is no conversation to lean on.
    found = leans_on_history("And Rhino?", [Turn("assistant", "Hello! Ask me anything.")])
    assert not found.needed and found.why == "no earlier question"


def test_why_names_what_leans() -> None:
    assert leans_on_history("Which options does it accept?", EARLIER).why == "points back ('it')"
    assert leans_on_history("And Rhino?", EARLIER).why == "continues the last question ('And')"
    assert leans_on_history("Firefox OS support?", EARLIER).why == "2 words of its own"
    assert leans_on_history("Firefox?", EARLIER).why == "1 word of its own"


def test_own_words_leave_out_asking_and_pointing_words() -> None:
    assert own_words("What does the Caterpillar tell her about the mushroom?") == [
        "caterpillar",
        "mushroom",
    ]
    assert own_words("Сколько стоит ОЗУ 2 ГБ?") == ["стоит", "озу", "гб"]


def test_the_model_sees_the_latest_questions_and_the_last_answer_cut() -> None:
    long_answer = " ".join(f"w{n}" for n in range(500)) + " memoizing"
    earlier = [Turn("user", f"question {n}?") for n in range(6)]
    earlier += [Turn("assistant", "an older answer"), Turn("user", "last question?")]
    earlier += [Turn("assistant", long_answer)]
    shown = conversation_lines("What's that last thing?", earlier)
    lines = shown.splitlines()
    users = [line for line in lines if line.startswith("User:")]
    assert len(users) == QUESTIONS_SHOWN and users[-1] == "User: last question?"
    assert "question 0?" not in shown and "an older answer" not in shown
    (answer,) = [line for line in lines if line.startswith("Assistant:")]
    assert answer.startswith("Assistant: w0 w1") and answer.endswith("memoizing")
    assert " … " in answer and len(answer.split()) < 200
    assert answer.split(" … ")[1].split()[0] == f"w{500 - ANSWER_TAIL_WORDS + 1}"
    assert lines[-1] == "Last question: What's that last thing?"


def test_an_answer_before_the_last_question_is_not_shown_as_the_last_answer() -> None:
    earlier = [Turn("user", "first?"), Turn("assistant", "old"), Turn("user", "second?")]
    assert "old" not in conversation_lines("And then?", earlier)


def test_the_messages_are_the_instruction_the_examples_and_the_conversation() -> None:
    messages = rewrite_messages("And Rhino?", EARLIER)
    assert messages[0]["role"] == "system"
    assert [m["role"] for m in messages[1:-1]] == ["user", "assistant"] * len(EXAMPLES)
    assert messages[-1] == {
        "role": "user",
        "content": "User: How do I get curl to follow redirects?\n"
        "Assistant: Add the -L option.\nLast question: And Rhino?",
    }


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        ("How do I stop a transfer?", "How do I stop a transfer?"),
        ('Standalone question: "How do I stop a transfer?"', "How do I stop a transfer?"),
        ("**Rewritten question:** How?\nMore text", "How?"),
        ("Question:\nWas ist eine Überlagerung?", "Was ist eine Überlagerung?"),
        ("<think>the user means curl</think>\nWhy does curl fail?", "Why does curl fail?"),
        # A small model that goes on to answer: the question ends at its mark.
        ("Why does curl fail? It lacks -L.", "Why does curl fail?"),
        ("Wie setze ich es zurück? Mit apt-mark unhold.", "Wie setze ich es zurück?"),
        ("Is https://x/?a=1 reachable?", "Is https://x/?a=1 reachable?"),
    ],
)
def test_the_question_is_taken_from_the_answer(raw: str, kept: str) -> None:
    assert clean_rewrite(raw).text == kept


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("", NOT_A_QUESTION),
        ("  \n \n", NOT_A_QUESTION),
        ('"?"', NOT_A_QUESTION),
        ("I'm sorry, but I can't help with that.", REFUSED),
        ("I cannot rewrite this question.", REFUSED),
        ("<think>the user means curl, so", "the answer stopped inside its reasoning"),
    ],
)
def test_no_question_no_rewrite(raw: str, error: str) -> None:
    assert clean_rewrite(raw).text is None
    assert clean_rewrite(raw).error == error


def test_a_long_answer_is_cut() -> None:
    kept = clean_rewrite(" ".join(["word"] * 500)).text
    assert kept is not None and len(kept.split()) == MAX_WORDS
    kept = clean_rewrite("x" * 5000).text
    assert kept is not None and len(kept) <= MAX_CHARS
