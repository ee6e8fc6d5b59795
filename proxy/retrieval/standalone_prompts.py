"""What the model is shown when a follow-up is rewritten or its key words asked for: the
instruction, worked examples and the conversation, cut (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.retrieval.history import Turn, first_words, last_words

QUESTIONS_SHOWN = 4
"""Earlier user questions shown to the model, the latest ones."""
QUESTION_WORDS = 60
"""Each earlier question is shown by its last this many words."""
ANSWER_HEAD_WORDS = 90
ANSWER_TAIL_WORDS = 60
"""The last answer is shown by its opening and its end (what "that last thing" points at)."""

INSTRUCTION = (
    "Rewrite the last question of a conversation as one standalone question for a document "
    "search. Replace every word that points back (it, that, they, the other one, the second, "
    "the last one of those) with what it means in the conversation, most often a thing the "
    "assistant's last answer names, in its words; and name what the conversation is about "
    "(the program, the book, the system) if the question leaves it out. Keep the language of "
    "the last question (English stays English, German stays German, Russian stays Russian) "
    "and its own words; do not answer it. Reply with the rewritten question only."
)
# Three worked examples, shown as earlier turns: a small model follows a pattern better than an
# instruction. Their subjects are far from any document's, so their words do not leak in; the
# third keeps its language and points at the last thing a list named.
EXAMPLES = (
    (
        "User: What does the kettle's warranty cover?\n"
        "Assistant: Defects in materials and workmanship for two years; the heating element is "
        "covered for five years.\n"
        "Last question: And what about the other part, how long?",
        "How long is the kettle's heating element covered by the warranty?",
    ),
    (
        "User: Which database does the app use by default?\n"
        "Assistant: SQLite, in data/app.db; PostgreSQL can be configured instead.\n"
        "Last question: How do I switch to the second one?",
        "How do I switch the app's database from SQLite to PostgreSQL?",
    ),
    (
        "User: Welche Zahlungsarten nimmt der Hofladen an?\n"
        "Assistant: Bargeld, EC-Karte und, für Stammkunden, die Zahlung auf Rechnung.\n"
        "Last question: Und wie läuft das Letzte davon ab?",
        "Wie läuft im Hofladen die Zahlung auf Rechnung für Stammkunden ab?",
    ),
)


def shown_answer(text: str) -> str:
    """An answer cut to its opening and its end."""
    head = first_words(text, ANSWER_HEAD_WORDS + ANSWER_TAIL_WORDS)
    if head == text:
        return text
    return f"{first_words(text, ANSWER_HEAD_WORDS)} … {last_words(text, ANSWER_TAIL_WORDS)}"


def conversation_lines(question: str, earlier: Sequence[Turn]) -> str:
    """The conversation as the model reads it: the latest earlier user questions and the last
    answer (if it came after the last of them), each cut, then the follow-up."""
    users = [index for index, turn in enumerate(earlier) if turn.role == "user"]
    shown = set(users[-QUESTIONS_SHOWN:])
    answers = [index for index, turn in enumerate(earlier) if turn.role == "assistant"]
    if answers and (not users or answers[-1] > users[-1]):
        shown.add(answers[-1])
    lines = []
    for index in sorted(shown):
        turn = earlier[index]
        if turn.role == "user":
            lines.append(f"User: {_one_line(last_words(turn.text, QUESTION_WORDS))}")
        else:
            lines.append(f"Assistant: {_one_line(shown_answer(turn.text))}")
    lines.append(f"Last question: {_one_line(question)}")
    return "\n".join(lines)


def rewrite_messages(question: str, earlier: Sequence[Turn]) -> list[dict[str, str]]:
    """The chat request's messages: the instruction, two worked examples, then the conversation
    as one user message (its text only: no document, no file, no tool output)."""
    return _asked_with_examples(INSTRUCTION, EXAMPLES, question, earlier)


def _asked_with_examples(
    instruction: str,
    examples: Sequence[tuple[str, str]],
    question: str,
    earlier: Sequence[Turn],
) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": instruction}]
    for asked, answered in examples:
        messages += [
            {"role": "user", "content": asked},
            {"role": "assistant", "content": answered},
        ]
    messages.append({"role": "user", "content": conversation_lines(question, earlier)})
    return messages


# -- or: the conversation's key words, named by the model, put before the question by the proxy --

KEY_WORDS_INSTRUCTION = (
    "List the key words of the conversation that the last question needs to be understood in "
    "a document search: what its words point at (it, that, they, the other one, the second, "
    "the tokens) and what the conversation is about (the program, the book, the system). Two "
    "to six key words or short phrases, copied from the conversation in its language, "
    "separated by commas. Do not answer the question and do not repeat it."
)
# Worked examples, shown as earlier turns: picking key words is extraction, which a small model
# does better than rewriting (it leaves the subject out of a rewrite, or changes its language).
# Far from any document's subject; the third's question points back by "the" alone, the fourth
# keeps its language.
KEY_WORDS_EXAMPLES = (
    (EXAMPLES[0][0], "kettle, warranty, heating element"),
    (EXAMPLES[1][0], "app, database, PostgreSQL"),
    (
        "User: How does the garden pump's timer work?\n"
        "Assistant: It switches the pump on at the set hours; a float switch stops it when the "
        "tank runs dry.\n"
        "Last question: Does the switch also protect it against frost?",
        "garden pump, float switch",
    ),
    (EXAMPLES[2][0], "Hofladen, Zahlung auf Rechnung, Stammkunden"),
)


def key_words_messages(question: str, earlier: Sequence[Turn]) -> list[dict[str, str]]:
    """The chat request's messages when the model names the conversation's key words for the
    follow-up: the instruction, worked examples, then the conversation as `rewrite_messages`
    shows it."""
    return _asked_with_examples(KEY_WORDS_INSTRUCTION, KEY_WORDS_EXAMPLES, question, earlier)


def _one_line(text: str) -> str:
    return " ".join(text.split())
