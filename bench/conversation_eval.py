"""Conversations: does each turn's answer reach the model, follow-ups included? Hits per half.

    python bench/eval/documents.py --set tuning                # fetch the documents (once)
    python bench/conversation_eval.py                          # tuning half, warm, fake upstream
    python bench/conversation_eval.py --set heldout            # the held-out half: aggregates only
    python bench/conversation_eval.py --methods "default;no history"   # named settings, compared
    python bench/conversation_eval.py --proxy-root ../main --methods today   # another checkout
    python bench/conversation_eval.py --data-dir /tmp/conv-data   # keep the indexes between runs
    python bench/conversation_eval.py --check                  # every answer in its document's text
    python bench/conversation_eval.py --show-misses            # the tuning half's misses
    python bench/conversation_eval.py --round 3                # one round of conversations
    python bench/conversation_eval.py --follow-ups-only        # only the follow-ups as written
    python bench/conversation_eval.py --rewrite-upstream http://127.0.0.1:8090   # a model rewrites

The conversations are in `bench/eval/<half>_conversations.json` (see the tuning file's `about`);
their documents are fetched by `bench/eval/documents.py`. Each conversation attaches its
documents to its first user message as file parts; each later turn resends the whole
conversation (the user turns as written, each turn's `reply` as the assistant's), as chat
clients do. Every document is indexed completely first (warm); each request goes to
`POST /v1/enrich/preview` of the checkout's proxy, default settings (a method changes named
settings over them), in front of a fake upstream with a 4,096-token window. With
`--rewrite-upstream URL` a follow-up that leans on its conversation is also rewritten as a
standalone question by the instruction-tuned model served there (`retrieval.rewrite.base_url`);
everything else stays as in the fake-upstream run.

Each turn is asked as:

- **first**: a conversation's first turn (the document is new: the proxy picks the strategy);
- **follow-up**: a later turn as written, in its conversation;
- **ceiling**: the same follow-up replaced by its hand-written `standalone` rewrite, in the same
  conversation (what a perfect rewrite of the question would find);
- **alone**: the follow-up as written, asked alone with its documents, no history.

A turn is a hit when its answer (or one of its `answers`) is inside one passage of the last user
message forwarded upstream — bench/retrieval_eval.py's judge (NFKC, invisible characters
removed, whitespace collapsed); the history the client sent itself does not count. For
`--set heldout` only aggregates are printed, written or logged, no breakdown group is made of
one document, and every run appends its figures to `bench/results/heldout-runs.tsv`. Prints
tables, asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parent
EVAL = BENCH / "eval"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(EVAL))

import retrieval_eval as single  # noqa: E402
from documents import Document, DocumentError, default_cache, ensure, load_documents  # noqa: E402
from reporting import log_heldout_run, merge_single_documents, recorded  # noqa: E402

HALVES = ("tuning", "heldout")
CONDITIONS = ("first", "follow-up", "ceiling", "alone")


# Named settings over the defaults of the checkout under test (bench/retrieval_eval.py's too).
def history(**rule: Any) -> dict[str, Any]:
    """retrieval.history settings, each named one over the first round's rule (the earlier
    questions alone: no carried words, no lean), so that every method means the
    same whatever the defaults."""
    first_round = {"terms": 0.0, "lean": False, "near": False}
    return {"retrieval": {"history": {**first_round, **rule}}}


NO_HISTORY = {"turns": 0, "reply": 0.0, "terms": 0.0, "lean": False}
"""retrieval.history searching the question alone: no earlier turn, no carried word."""


def third(**rule: Any) -> dict[str, Any]:
    """retrieval.history settings named over the third round's default (no last answer)."""
    return {"retrieval": {"history": {"reply": 0.0, "reply_pointing": False, **rule}}}


def rewrite(**rule: Any) -> dict[str, Any]:
    """retrieval.rewrite settings; the model asked for a rewritten question unless `ask` says
    otherwise (the key words, retrieval.rewrite.ask: words, are the default since the fourth
    round)."""
    return {"retrieval": {"rewrite": {"ask": "question", **rule}}}


METHODS: dict[str, dict[str, Any]] = {
    **single.METHODS,
    # What a follow-up is searched with (retrieval.history; docs/retrieval.md, Conversations).
    "no history": history(turns=0, reply=0.0),
    "first round": history(),  # the default before the second round
    "1 turn, 0.5": history(turns=1, weight=0.5, reply=0.0),
    "1 turn, 1": history(turns=1, weight=1.0, reply=0.0),
    "2 turns, 0.5, decay 0.5": history(turns=2, weight=0.5, decay=0.5, reply=0.0),
    "2 turns, 1, decay 0.5": history(turns=2, weight=1.0, decay=0.5, reply=0.0),
    "3 turns, 1, decay 1": history(turns=3, weight=1.0, decay=1.0, reply=0.0),
    "2 turns, 1, decay 1": history(turns=2, weight=1.0, decay=1.0, reply=0.0),
    "2 turns, 1.5, decay 0.5": history(turns=2, weight=1.5, decay=0.5, reply=0.0),
    "2 turns, 2, decay 0.5": history(turns=2, weight=2.0, decay=0.5, reply=0.0),
    "4 turns, 1, decay 0.5": history(turns=4, weight=1.0, decay=0.5, reply=0.0),
    "2 turns 1, reply 0.25": history(turns=2, weight=1.0, decay=0.5, reply=0.25),
    "reply 0.5 alone": history(turns=0, reply=0.5),
    "1 turn 0.5, reply 0.25": history(turns=1, weight=0.5, reply=0.25),
    "1 turn 1, reply 0.5": history(turns=1, weight=1.0, reply=0.5),
    "2 turns 1, reply 0.5": history(turns=2, weight=1.0, decay=0.5, reply=0.5),
    # Second round (bench/results/retrieval/2026-12-04-conversations.md): over the first round's
    # rule; the default is "lean, near terms 1".
    "terms 0.5": history(terms=0.5),
    "terms 1": history(terms=1.0),
    "terms 1, 2 words": history(terms=1.0, term_count=2),
    "terms 1, 8 words": history(terms=1.0, term_count=8),
    "lean": history(lean=True),
    "lean, reply 0.5": history(lean=True, reply=0.5),
    "lean, terms 1": history(lean=True, terms=1.0),
    "near terms 0.5": history(terms=0.5, near=True),
    "near terms 1": history(terms=1.0, near=True),
    "near terms 1, 2 words": history(terms=1.0, near=True, term_count=2),
    "near terms 2, 2 words": history(terms=2.0, near=True, term_count=2),
    "lean, near terms 1": history(lean=True, terms=1.0, near=True),
    "lean, near terms 1, 2 words": history(lean=True, terms=1.0, near=True, term_count=2),
    "lean, near terms 0.5": history(lean=True, terms=0.5, near=True),
    "lean, near terms 1, turns 1": history(lean=True, terms=1.0, near=True, turns=1),
    "lean, near terms 1, reply 0.25": history(lean=True, terms=1.0, near=True, reply=0.25),
    # Third round and fourth round (bench/results/retrieval/2026-12-04-conversations-fourth-round
    # .md), each over the third round's default, which searched no last answer ("third round");
    # the default since is "reply 4 pointing".
    "third round": third(),
    "default, reply 0.25": third(reply=0.25),
    "default, reply 0.5": third(reply=0.5),
    "default, reply 1": third(reply=1.0),
    "default, reply 1.5": third(reply=1.5),
    "default, reply 3": third(reply=3.0),
    "default, terms 1.5": third(terms=1.5),
    "default, 6 words": third(term_count=6),
    "default, turns 3": third(turns=3),
    **{
        f"default, reply {weight:g} pointing": third(reply=weight, reply_pointing=True)
        for weight in (0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0)
    },
    # The standalone question a model writes (retrieval.rewrite; needs --rewrite-upstream).
    "no rewrite": rewrite(enabled=False),
    "rewrite 0.5": rewrite(weight=0.5),
    "rewrite 1": rewrite(weight=1.0),
    "rewrite 1.5": rewrite(weight=1.5),
    "rewrite 2": rewrite(weight=2.0),
    # Third round: the rewrite leading its conversation texts (retrieval.rewrite.lead).
    "rewrite 1 beside": rewrite(weight=1.0, lead=False),  # before the third round
    "rewrite lead 1": rewrite(weight=1.0, lead=True),
    "rewrite lead 1.5": rewrite(weight=1.5, lead=True),
    "rewrite lead 2": rewrite(weight=2.0, lead=True),
    "rewrite lead 3": rewrite(weight=3.0, lead=True),
    # Fourth round: the model names the conversation's key words the follow-up needs; the proxy
    # puts them before the question (retrieval.rewrite.ask).
    "words lead 2": rewrite(ask="words", weight=2.0, lead=True),
    "words lead 1": rewrite(ask="words", weight=1.0, lead=True),
    "words lead 3": rewrite(ask="words", weight=3.0, lead=True),
    "words beside 2": rewrite(ask="words", weight=2.0, lead=False),
    # Fifth round: the model's text searched beside the whole search without a model (a hedge:
    # a bad answer cannot push out what that search found), and the model asked about every
    # follow-up rather than only those the rule says lean (retrieval.rewrite.gate).
    "words beside 1": rewrite(ask="words", weight=1.0, lead=False),
    "rewrite beside 2": rewrite(weight=2.0, lead=False),
    "words lead 2, every follow-up": rewrite(ask="words", weight=2.0, lead=True, gate="every"),
    "words beside 1, every follow-up": rewrite(ask="words", weight=1.0, lead=False, gate="every"),
    "rewrite lead 2, every follow-up": rewrite(weight=2.0, lead=True, gate="every"),
    "rewrite beside 1, every follow-up": rewrite(weight=1.0, lead=False, gate="every"),
    "rewrite 1, no history": {
        "retrieval": {"history": NO_HISTORY, "rewrite": {"ask": "question", "weight": 1.0}}
    },
    "rewrite 2, no history": {
        "retrieval": {"history": NO_HISTORY, "rewrite": {"ask": "question", "weight": 2.0}}
    },
}


# ---------------------------------------------------------------------------------------------
# The conversations


@dataclass(frozen=True)
class Turn:
    q: str
    answers: tuple[str, ...]
    reply: str
    standalone: str = ""
    leans: str = ""


@dataclass(frozen=True)
class Conversation:
    id: str
    docs: tuple[str, ...]
    lang: str
    turns: tuple[Turn, ...]
    half: str
    round: int = 0  # the round it was written in (the file's `about`); 0 when not marked


def load_conversations(
    halves: Iterable[str], rounds: Iterable[int] = ()
) -> tuple[list[Conversation], dict[str, Document]]:
    """The halves' conversations (only those of `rounds` when given) and their documents."""
    conversations: list[Conversation] = []
    rounds = set(rounds)
    halves = tuple(halves)
    for half in halves:
        path = EVAL / f"{half}_conversations.json"
        if not path.exists():
            raise SystemExit(f"{path} does not exist (yet)")
        spec = json.loads(path.read_text(encoding="utf-8"))
        for item in spec["conversations"]:
            written = int(item.get("round", 0))
            if rounds and written not in rounds:
                continue
            turns = tuple(
                Turn(
                    turn["q"],
                    single.answers_of(turn),
                    turn.get("reply", ""),
                    turn.get("standalone", ""),
                    turn.get("leans", ""),
                )
                for turn in item["turns"]
            )
            conversations.append(
                Conversation(
                    item["id"], tuple(item["docs"]), item.get("lang", ""), turns, half, written
                )
            )
    if rounds and not conversations:
        raise SystemExit(f"no conversation of round {sorted(rounds)} in {', '.join(halves)}")
    documents = {document.id: document for document in load_documents(EVAL, halves)}
    unknown = {doc for conversation in conversations for doc in conversation.docs} - set(documents)
    if unknown:
        raise SystemExit(f"conversations about documents with no entry: {len(unknown)}")
    return conversations, documents


REFUSALS = {
    "en": "I'm sorry, I can't find that in the document.",
    "de": "Das steht leider nicht im Dokument.",
    "fr": "Désolé, je ne trouve pas cela dans le document.",
    "es": "Lo siento, no encuentro eso en el documento.",
    "it": "Mi dispiace, non lo trovo nel documento.",
    "ru": "Извините, в документе этого нет.",
}
"""A last answer that helps nothing, in each conversation's language (`--replies refusal`)."""


def with_replies(conversations: list[Conversation], kind: str) -> list[Conversation]:
    """The conversations with every assistant answer as written (`true`), replaced by one from
    a conversation about another document in the same language (`wrong`: fluent, confident,
    off the subject; a fixed draw) or by a refusal (`refusal`): how much the search of a
    follow-up leans on a last answer the model got right."""
    if kind == "true":
        return conversations
    pool = [(c.docs, c.lang, t.reply) for c in conversations for t in c.turns if t.reply]
    draw = random.Random(7)

    def replaced(conversation: Conversation, turn: Turn) -> Turn:
        if not turn.reply:
            return turn
        if kind == "refusal":
            return dataclasses.replace(turn, reply=REFUSALS.get(conversation.lang, REFUSALS["en"]))
        others = [r for docs, lang, r in pool if docs != conversation.docs]
        alike = [
            r for docs, lang, r in pool if docs != conversation.docs and lang == conversation.lang
        ]
        return dataclasses.replace(turn, reply=draw.choice(alike or others))

    return [
        dataclasses.replace(c, turns=tuple(replaced(c, t) for t in c.turns)) for c in conversations
    ]


def messages(
    conversation: Conversation,
    upto: int,
    parts: dict[str, dict[str, Any]],
    last: str | None = None,
) -> list[dict[str, Any]]:
    """The request a chat client sends for turn `upto`: the documents on the first user
    message, every earlier turn with its reply, and the turn's question (or `last`)."""
    out: list[dict[str, Any]] = []
    for index, turn in enumerate(conversation.turns[: upto + 1]):
        text = last if (index == upto and last is not None) else turn.q
        if index == 0:
            files = [parts[doc] for doc in conversation.docs]
            out.append({"role": "user", "content": [{"type": "text", "text": text}, *files]})
        else:
            out.append({"role": "user", "content": text})
        if index < upto:
            out.append({"role": "assistant", "content": turn.reply})
    return out


def alone(
    conversation: Conversation, upto: int, parts: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The turn's question asked alone, its documents attached to it."""
    files = [parts[doc] for doc in conversation.docs]
    text = conversation.turns[upto].q
    return [{"role": "user", "content": [{"type": "text", "text": text}, *files]}]


# ---------------------------------------------------------------------------------------------
# The rewriting model, behind a relay that remembers its answers


class RewriteRelay:
    """Forwards to the rewriting model's server and keeps each chat answer by its request body:
    greedy (temperature 0) answers to the same prompt are the same, so methods that differ only
    in how the rewrite is searched ask the model once. Times the calls that reached it."""

    def __init__(self, target: str, keep: Path | None = None) -> None:
        self.target = target.rstrip("/")
        self.answers: dict[bytes, tuple[int, bytes]] = {}
        self.seconds: list[float] = []  # each chat call the model answered
        self.keep = keep  # a file keeping the answers between runs (--rewrite-cache)
        if keep is not None and keep.exists():
            for line in keep.read_text(encoding="utf-8").splitlines():
                entry = json.loads(line)
                self.answers[entry["asked"].encode()] = (200, entry["answer"].encode())

    def remember(self, body: bytes, answer: bytes) -> None:
        self.answers[body] = (200, answer)
        if self.keep is not None:
            entry = {"asked": body.decode(), "answer": answer.decode()}
            with self.keep.open("a", encoding="utf-8") as out:
                out.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def app(self) -> Any:
        from aiohttp import ClientSession, ClientTimeout, web

        session_key = web.AppKey("session", ClientSession)

        async def start(app: web.Application) -> None:
            app[session_key] = ClientSession(timeout=ClientTimeout(total=None, sock_read=900))

        async def stop(app: web.Application) -> None:
            await app[session_key].close()

        async def forward(request: web.Request) -> web.Response:
            body = await request.read()
            chat = request.method == "POST" and request.path.endswith("/chat/completions")
            if chat and body in self.answers:
                status, answer = self.answers[body]
                return web.Response(status=status, body=answer, content_type="application/json")
            skip = {"host", "content-length", "transfer-encoding"}
            headers = {k: v for k, v in request.headers.items() if k.lower() not in skip}
            began = time.perf_counter()
            async with request.app[session_key].request(
                request.method, self.target + request.path_qs, data=body, headers=headers
            ) as up:
                answer = await up.read()
                kind = up.headers.get("Content-Type", "application/json").split(";")[0]
                status = up.status
            if chat:
                self.seconds.append(time.perf_counter() - began)
                if status == 200:
                    self.remember(body, answer)
            return web.Response(status=status, body=answer, content_type=kind)

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.on_startup.append(start)
        app.on_cleanup.append(stop)
        app.router.add_route("*", "/{tail:.*}", forward)
        return app


# ---------------------------------------------------------------------------------------------
# Running a half


@dataclass
class Row:
    conversation: Conversation
    turn: int
    condition: str
    hit: bool
    rr: float
    error: str | None = None
    searched: list[dict[str, Any]] = field(default_factory=list)  # what retrieval searched for
    seconds: float = 0.0  # the preview's time
    rewrite: dict[str, Any] | None = None  # the standalone question written by the model

    @property
    def leans(self) -> str:
        return self.conversation.turns[self.turn].leans

    @property
    def ceiling_words(self) -> str:
        """Whether the follow-up's ceiling borrows words of its answer that its conversation
        never said (split `ceiling words`): a search reading only the follow-up and its
        conversation, with or without a model, has no such word to search for."""
        if not self.turn:
            return "(first turn)"
        borrowed = borrowed_words(self.conversation, self.turn)
        return "borrows the answer's words" if borrowed else "the conversation's words"


WORD_KEY = 5
"""Words are matched by their first letters (`Papierformat`, `отключил`/`отключать`)."""


def borrowed_words(conversation: Conversation, turn: int) -> set[str]:
    """The content words turn `turn`'s ceiling (its hand-written standalone question) shares
    with its answer that neither the follow-up nor any earlier question or reply says, matched
    by their first `WORD_KEY` letters; function words and words under four letters left out."""
    from proxy.retrieval.function_words import function_word
    from proxy.retrieval.history import WORD

    def keys(text: str) -> set[str]:
        return {
            word.casefold()[:WORD_KEY]
            for word in WORD.findall(text)
            if len(word) >= 4 and word.isalpha() and not function_word(word)
        }

    asked = conversation.turns[turn]
    said = [asked.q]
    for earlier in conversation.turns[:turn]:
        said += [earlier.q, earlier.reply]
    return keys(asked.standalone) & keys(" ".join(asked.answers)) - keys(" ".join(said))


@dataclass
class Run:
    method: str
    rows: list[Row] = field(default_factory=list)
    seconds: float = 0.0
    index_seconds: float = 0.0


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def preview(proxy: single.Proxy, body: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The forwarded last user message and the decision for one request."""
    result = proxy.post("/v1/enrich/preview", {"model": "m", "messages": body})
    return single.last_user_text(result["upstream"]["body"]), result["decision"]


def asked(conversation: Conversation) -> list[tuple[int, str, list[str] | None]]:
    """(turn, condition, None: as written | [replacement] | [] alone) for every request."""
    plan: list[tuple[int, str, list[str] | None]] = [(0, "first", None)]
    for index, turn in enumerate(conversation.turns[1:], 1):
        plan.append((index, "follow-up", None))
        plan.append((index, "ceiling", [turn.standalone or turn.q]))
        plan.append((index, "alone", []))
    return plan


def run_method(
    method: str,
    conversations: list[Conversation],
    paths: dict[str, Path],
    upstream_kind: str,
    data_dir: Path | None,
    rewrite_at: dict[str, Any] | None = None,
    conditions: tuple[str, ...] = CONDITIONS,
) -> Run:
    from tests.fakes.servers import ServerThread

    servers = ServerThread()
    folder = Path(tempfile.mkdtemp(prefix="conversation-eval-"))
    run = Run(method)
    started = time.perf_counter()
    upstream = None
    try:
        upstream = single.Upstream(upstream_kind, servers, folder)
        settings = METHODS[method]
        if rewrite_at:
            # The rewrite calls go to the model there; the method's own rewrite settings win.
            wanted = settings.get("retrieval", {}).get("rewrite", {})
            retrieval = {**settings.get("retrieval", {}), "rewrite": {**rewrite_at, **wanted}}
            settings = {**settings, "retrieval": retrieval}
        proxy = single.Proxy(servers, upstream, data_dir or folder / "data", settings)
        parts = {doc: single.file_part(path) for doc, path in paths.items()}
        heldout = any(conversation.half == "heldout" for conversation in conversations)
        for doc in parts:
            try:
                single.wait_indexed(proxy, parts[doc])
            except (RuntimeError, TimeoutError) as exc:
                # its turns fail in turn, each counted as a miss with its error
                progress(f"  {'a held-out document' if heldout else doc}: not indexed: {exc}")
        run.index_seconds = time.perf_counter() - started
        progress(f"  {len(parts)} documents indexed in {run.index_seconds:.0f} s")
        for number, conversation in enumerate(conversations, 1):
            for turn, condition, replacement in asked(conversation):
                if condition not in conditions:
                    continue
                if replacement == []:
                    body = alone(conversation, turn, parts)
                else:
                    last = replacement[0] if replacement else None
                    body = messages(conversation, turn, parts, last)
                began = time.perf_counter()
                try:
                    prompt, decision = preview(proxy, body)
                    error = None
                except (RuntimeError, httpx.HTTPError) as exc:
                    prompt, decision, error = "", {}, str(exc) or type(exc).__name__
                hit, rr = single.judge(prompt, list(conversation.turns[turn].answers))
                record = decision.get("retrieval") or {}
                searched = list(record.get("searched") or [])
                seconds = time.perf_counter() - began
                row = Row(conversation, turn, condition, hit, rr, error, searched, seconds)
                row.rewrite = record.get("rewrite")
                run.rows.append(row)
            if number % 5 == 0:
                progress(f"  {method}: {number}/{len(conversations)} conversations")
    finally:
        if upstream is not None:
            upstream.close()
        servers.close()
        shutil.rmtree(folder, ignore_errors=True)  # a --data-dir of yours is left alone
    run.seconds = time.perf_counter() - started
    return run


# ---------------------------------------------------------------------------------------------
# Reporting


def score(rows: list[Row]) -> str:
    """Hits, and the mean reciprocal rank of the first citation holding the answer."""
    if not rows:
        return "–"
    hits = sum(row.hit for row in rows)
    mrr = sum(row.rr for row in rows) / len(rows)
    return f"{hits}/{len(rows)} ({hits / len(rows):.0%}), MRR {mrr:.2f}"


def of(rows: list[Row], condition: str) -> list[Row]:
    return [row for row in rows if row.condition == condition]


def figures(rows: list[Row]) -> str:
    """The run's aggregate figures, one line (the held-out log's `figures`)."""
    return "; ".join(f"{condition} {score(of(rows, condition))}" for condition in CONDITIONS)


TABLE_HEADER = (
    "| half | method | split | first turns | follow-ups | ceiling (standalone, in conversation) "
    "| follow-ups alone (no history) |\n|---|---|---|---|---|---|---|"
)


def table_row(half: str, method: str, split: str, rows: list[Row]) -> str:
    cells = " | ".join(score(of(rows, condition)) for condition in CONDITIONS)
    return f"| {half} | {method} | {split} | {cells} |"


def groups(rows: list[Row], key: Callable[[Row], str], half: str) -> dict[str, list[Row]]:
    found: dict[str, list[Row]] = {}
    for row in rows:
        found.setdefault(key(row), []).append(row)
    if half == "heldout":
        return merge_single_documents(found, lambda row: row.conversation.docs)
    return found


def report(
    half: str, runs: list[Run], documents: dict[str, Document], show_misses: bool
) -> list[str]:
    def language(row: Row) -> str:
        langs = {documents[doc].lang for doc in row.conversation.docs}
        doc_lang = "+".join(sorted(langs))
        if row.conversation.lang == doc_lang:
            return row.conversation.lang or "?"
        return f"{row.conversation.lang} about {doc_lang}"

    def leans(row: Row) -> str:
        return row.leans if row.turn else "(first turn)"

    def fmt(row: Row) -> str:
        return "+".join(sorted({documents[doc].format for doc in row.conversation.docs}))

    def ceiling_words(row: Row) -> str:
        return row.ceiling_words

    lines = []
    for run in runs:
        rows = [row for row in run.rows if row.conversation.half == half]
        if not rows:
            continue
        lines.append(table_row(half, run.method, "all", rows))
        splits = (
            ("language", language),
            ("format", fmt),
            ("leans", leans),
            ("ceiling words", ceiling_words),
        )
        for label, key in splits:
            for name, group in sorted(groups(rows, key, half).items()):
                lines.append(table_row(half, run.method, f"{label}: {name}", group))
        times = [row.seconds for row in of(rows, "follow-up")]
        if times:
            lines.append(
                f"| {half} | {run.method} | a follow-up's request (median / mean) | | "
                f"{statistics.median(times):.2f} s / {statistics.fmean(times):.2f} s | | |"
            )
        lines += rewrite_lines(half, run.method, rows)
        errors = sum(row.error is not None for row in rows)
        if errors:
            lines.append(f"| {half} | {run.method} | requests that failed | {errors} | | | |")
    if show_misses and half == "tuning":
        for run in runs:
            lines.append(f"\nmissed ({run.method}):")
            for row in run.rows:
                if row.conversation.half != half or row.hit:
                    continue
                turn = row.conversation.turns[row.turn]
                text = turn.standalone if row.condition == "ceiling" else turn.q
                where = f" [{row.error}]" if row.error else ""
                lines.append(
                    f"  {row.conversation.id}#{row.turn} {row.condition}"
                    f" ({row.leans or 'first'}): {text}{where}"
                )
                if row.rewrite:
                    said = row.rewrite.get("text") or row.rewrite.get("why")
                    lines.append(f"      rewrite {row.rewrite.get('outcome')}: {said}")
    return lines


def rewrite_lines(half: str, method: str, rows: list[Row]) -> list[str]:
    """What became of the rewrites (counts per condition and outcome) and what a call cost."""
    lines = []
    for condition in ("follow-up", "ceiling"):
        outcomes: dict[str, int] = {}
        for row in of(rows, condition):
            if row.rewrite:
                outcome = row.rewrite.get("outcome", "?")
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if outcomes:
            said = ", ".join(f"{name} {count}" for name, count in sorted(outcomes.items()))
            lines.append(f"| {half} | {method} | rewrites ({condition}) | | {said} | | |")
    called = [
        float(row.rewrite["seconds"])
        for row in rows
        if row.rewrite and "seconds" in row.rewrite and not row.rewrite.get("cached")
    ]
    if called:
        lines.append(
            f"| {half} | {method} | a rewrite call (median / mean / max, {len(called)} calls) | | "
            f"{statistics.median(called):.2f} s / {statistics.fmean(called):.2f} s / "
            f"{max(called):.2f} s | | |"
        )
    return lines


def result_json(half: str, runs: list[Run]) -> dict[str, Any]:
    """Per-turn rows for the tuning half; only the counts for the held-out one."""
    out = []
    for run in runs:
        rows = [row for row in run.rows if row.conversation.half == half]
        entry: dict[str, Any] = {
            "half": half,
            "method": run.method,
            **{
                condition: [sum(r.hit for r in of(rows, condition)), len(of(rows, condition))]
                for condition in CONDITIONS
            },
        }
        if half == "tuning":
            entry["rows"] = [
                {
                    "id": row.conversation.id,
                    "turn": row.turn,
                    "condition": row.condition,
                    "hit": row.hit,
                    "rr": row.rr,
                    "error": row.error,
                    "searched": row.searched,
                    "rewrite": row.rewrite,
                }
                for row in rows
            ]
        out.append(entry)
    return {"runs": out}


# ---------------------------------------------------------------------------------------------
# --check


def check(
    conversations: list[Conversation], documents: dict[str, Document], paths: dict[str, Path]
) -> list[str]:
    """Every answer in its documents' parsed text (listed for the tuning half, counted for the
    held-out one), and how many of a half's documents are documents of the other half."""
    import asyncio

    from proxy.documents.parser import DocumentParser

    async def texts(cache: Path) -> dict[str, str]:
        parser = DocumentParser(cache)
        try:
            found = {}
            for doc, path in paths.items():
                parsed = await parser.parse(path.name, path.read_bytes())
                found[doc] = single.normalise(parsed.text)
            return found
        finally:
            await parser.close()

    with tempfile.TemporaryDirectory(prefix="conversation-eval-check-") as cache:
        extracted = asyncio.run(texts(Path(cache)))
    lines = []
    for half in HALVES:
        mine = [conversation for conversation in conversations if conversation.half == half]
        if not mine:
            continue
        missing = []
        for conversation in mine:
            text = " ".join(extracted[doc] for doc in conversation.docs)
            for index, turn in enumerate(conversation.turns):
                missing += [
                    (conversation.id, index, answer)
                    for answer in turn.answers
                    if single.normalise(answer) not in text
                ]
                if index and not (turn.standalone and turn.leans):
                    missing.append((conversation.id, index, "(no standalone or leans)"))
        turns = sum(len(conversation.turns) for conversation in mine)
        lines.append(
            f"{half}: {len(mine)} conversations, {turns} turns, "
            f"{len(missing)} answers not in their documents' text (or follow-ups incomplete)"
        )
        if half == "tuning":
            lines += [f"  {cid}#{index}: {answer[:100]}" for cid, index, answer in missing]
        other = [h for h in HALVES if h != half]
        theirs = load_documents(EVAL, other)
        mine_docs = {doc for conversation in mine for doc in conversation.docs}
        hashes = {d.sha256 for d in theirs} | {d.source_sha256 for d in theirs if d.source_sha256}
        shared = [doc for doc in mine_docs if documents[doc].sha256 in hashes]
        lines.append(f"{half}: {len(shared)} of its documents are documents of the other half")
    return lines


# ---------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="tuning", choices=[*HALVES, "all"])
    parser.add_argument("--upstream", default="fake", help="fake | spawn | http://host:port")
    parser.add_argument("--methods", default="default", help="names joined by ;")
    parser.add_argument("--proxy-root", type=Path, default=BENCH.parent)
    parser.add_argument("--data-dir", type=Path, help="keep the indexes between runs")
    parser.add_argument("--cache", type=Path, help="the documents' cache")
    parser.add_argument(
        "--round",
        type=int,
        action="append",
        default=[],
        help="only the conversations of this round (the `round` field; repeatable)",
    )
    parser.add_argument("--check", action="store_true", help="only check the answers")
    parser.add_argument("--show-misses", action="store_true", help="tuning half only")
    parser.add_argument(
        "--follow-ups-only",
        action="store_true",
        help="ask only the follow-ups as written (a quicker comparison of methods)",
    )
    parser.add_argument(
        "--conditions",
        help=f"only these, joined by commas (of {','.join(CONDITIONS)}; e.g. follow-up,ceiling)",
    )
    parser.add_argument(
        "--replies",
        default="true",
        choices=("true", "wrong", "refusal"),
        help="the assistant answers resent: as written, another document's, or a refusal",
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--verbose", action="store_true", help="the proxy's own log lines")
    parser.add_argument(
        "--window", type=int, default=single.WINDOW, help="the fake upstream's context window"
    )
    parser.add_argument(
        "--rewrite-upstream",
        help="an OpenAI-compatible server whose instruction-tuned model rewrites follow-ups",
    )
    parser.add_argument("--rewrite-model", help="the model named in the rewrite calls")
    parser.add_argument(
        "--rewrite-cache",
        type=Path,
        help="a file keeping the model's answers between runs (the same prompt, the same answer)",
    )
    parser.add_argument(
        "--rewrite-timeout", type=float, default=120.0, help="seconds a rewrite call may take"
    )
    parser.add_argument(
        "--out", type=Path, help="also write what is printed here (e.g. bench/results/retrieval/…)"
    )
    args = parser.parse_args()
    with recorded(args.out):
        evaluate(args)


def evaluate(args: argparse.Namespace) -> None:
    """The run `main` was asked for: the conversations asked, the tables printed."""
    single.WINDOW = args.window
    sys.path.insert(0, str(args.proxy_root.resolve()))
    halves = HALVES if args.set == "all" else (args.set,)
    level = single.proxy_log_level(halves, args.verbose)
    if level is not None:
        single.quiet_logs(level)
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path.home() / ".cache" / "tiktoken"))

    conversations, documents = load_conversations(halves, args.round)
    conversations = with_replies(conversations, args.replies)
    rounds = f", round {'+'.join(map(str, sorted(set(args.round))))}" if args.round else ""
    if args.replies != "true":
        rounds += f", replies {args.replies}"
    needed = {doc: documents[doc] for c in conversations for doc in c.docs}
    try:
        fetched = ensure(needed.values(), args.cache or default_cache())
    except DocumentError as exc:
        raise SystemExit(f"{exc}\n(run: python bench/eval/documents.py)") from exc
    paths = {doc: result.path for doc, result in fetched.items()}
    if args.check:
        print("\n".join(check(conversations, documents, paths)))
        return

    names = [name.strip() for name in args.methods.split(";") if name.strip()]
    unknown = [name for name in names if name not in METHODS]
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; known: {', '.join(METHODS)}")
    rewrite_at: dict[str, Any] | None = None
    relay: RewriteRelay | None = None
    if args.rewrite_upstream:
        from tests.fakes.servers import ServerThread

        relay = RewriteRelay(args.rewrite_upstream, args.rewrite_cache)
        relay_thread = ServerThread()
        relay_url = relay_thread.serve(relay.app())
        rewrite_at = {"base_url": relay_url, "timeout_s": args.rewrite_timeout}
        if args.rewrite_model:
            rewrite_at["model"] = args.rewrite_model
    runs = []
    for name in names:
        progress(f"{name} / upstream {args.upstream}: {len(conversations)} conversations")
        conditions = ("follow-up",) if args.follow_ups_only else CONDITIONS
        if args.conditions:
            conditions = tuple(args.conditions.split(","))
        run = run_method(
            name, conversations, paths, args.upstream, args.data_dir, rewrite_at, conditions
        )
        runs.append(run)
        progress(f"{name}: {run.seconds:.0f} s")
        if "heldout" in halves:
            rows = [row for row in run.rows if row.conversation.half == "heldout"]
            upstream = args.upstream
            if args.rewrite_upstream:
                upstream += f", rewrites by {args.rewrite_model or args.rewrite_upstream}"
            log_heldout_run(
                "conversation_eval", "heldout", name, f"warm, window {args.window}{rounds}",
                upstream, figures(rows), args.proxy_root.resolve(),
            )  # fmt: skip

    turns = sum(len(conversation.turns) for conversation in conversations)
    print(
        f"{len(conversations)} conversations{rounds}, {turns} turns, over {len(needed)} documents; "
        f"window {single.WINDOW:,}; upstream {args.upstream}; rewrites "
        f"{args.rewrite_upstream or 'none asked'}; checkout {args.proxy_root.resolve()}"
    )
    print(TABLE_HEADER)
    for half in halves:
        print("\n".join(report(half, runs, documents, args.show_misses)))
    if relay is not None and relay.seconds:
        times = relay.seconds
        print(
            f"\nrewrite calls the model answered: {len(times)}, "
            f"{statistics.median(times):.2f} s median, {statistics.fmean(times):.2f} s mean, "
            f"{max(times):.2f} s at most ({len(relay.answers)} answers kept for later methods)"
        )
    if args.rewrite_upstream:
        relay_thread.close()
    if args.show_misses and "heldout" in halves:
        print("\n(--show-misses lists the tuning half only: the held-out half stays unseen)")
    if "heldout" in halves:
        print("\n(held-out runs are logged in bench/results/heldout-runs.tsv)")
    if args.json:
        payload = {half: result_json(half, runs) for half in halves}
        args.json.write_text(json.dumps(payload, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
