"""How often the bundled base model's answer holds the fact: the chat prompt vs the completion
shape, through the proxy it ships with (`python -m proxy --spawn-llama-server`).

Starts the proxy with its own local model (whatever `.[local]` installed in the Python given),
has every document indexed first (so that each variant gets the same passages), then asks each
question of bench/eval/base_answers.json three ways, all with `max_tokens: 200`:

- today: the chat prompt (`X-Enrich-Prompt: chat`) and the server's own sampling — what the
  README's tour got before the completion shape;
- chat, greedy: the same prompt with `temperature: 0` (what greedy decoding alone does);
- completion: what the proxy now does for a model that is not instruction-tuned (no header).

An answer holds the fact when one of the question's `facts` is in it (case-insensitive,
whitespace collapsed; a fact starting with \\b is a regular expression). `seed` is fixed, so a
run repeats. The figures and the command are in docs/strategy.md.

    python bench/base_model_answers.py [--python .venv/bin/python] [--split dev|test|all]
                                       [--corpus PATH]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unicodedata
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import add_corpus_option, corpus_or_exit
from bench.first_answer import wait_healthy
from proxy.upstream.spawn import free_port

BENCH = Path(__file__).resolve().parent
TOUR_DOCUMENT = "mime-spec"
VARIANTS = {
    "today": ({"X-Enrich-Prompt": "chat"}, {}),
    "chat, greedy": ({"X-Enrich-Prompt": "chat"}, {"temperature": 0}),
    "completion": ({}, {}),
}
MIME_TYPES = {".pdf": "application/pdf", ".html": "text/html", ".epub": "application/epub+zip"}


def normalised(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).replace("\u00ad", "")
    text = re.sub(r"(\w)- (\w)", r"\1\2", " ".join(text.split()))  # hyphenated line ends
    return text.casefold()


def holds_fact(answer: str, facts: list[str]) -> bool:
    text = normalised(answer)
    for fact in facts:
        if fact.startswith("\\b"):
            if re.search(fact, text, re.IGNORECASE):
                return True
        elif normalised(fact) in text:
            return True
    return False


def document_path(source: str, corpus: Path) -> Path:
    """`corpus:pdf/x.pdf` (the shared corpus) or `debian:<package>:<path>` (an installed file)."""
    if source.startswith("corpus:"):
        return corpus / source.removeprefix("corpus:")
    return Path(source.rsplit(":", 1)[1])


def post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[dict[str, str], Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **headers}
    )
    with urllib.request.urlopen(request, timeout=1800) as response:
        return dict(response.headers), json.loads(response.read())


def chat_body(path: Path, name: str, question: str) -> dict[str, Any]:
    data = base64.b64encode(path.read_bytes()).decode()
    part = {"filename": name, "file_data": f"data:{MIME_TYPES[path.suffix]};base64,{data}"}
    return {
        "model": "any",
        "max_tokens": 200,
        "seed": 42,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": question}, {"type": "file", "file": part}],
            }
        ],
    }


def indexed(base: str, body: dict[str, Any]) -> None:
    """Asks for a preview until the document's passages are all embedded: from then on the
    same question retrieves the same passages."""
    while True:
        _, preview = post(base + "/v1/enrich/preview", body, {})
        ready = (preview["decision"].get("retrieval") or {}).get("indexed") or {}
        if all(percent >= 100 for percent in ready.values()):
            return
        time.sleep(5)


def main(python: str, split: str, questions_file: Path, corpus: Path) -> None:
    spec = json.loads(questions_file.read_text())
    documents = spec["documents"]
    questions = [q for q in spec["questions"] if split == "all" or q["split"] == split]
    missing = {
        q["doc"]
        for q in questions
        if not document_path(documents[q["doc"]]["source"], corpus).exists()
    }
    if missing:
        print(f"left out (documents not here): {', '.join(sorted(missing))}")
        questions = [q for q in questions if q["doc"] not in missing]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as workdir:
        env = {**os.environ, "PROXY__SERVER__DATA_DIR": workdir}
        proxy = subprocess.Popen(
            [python, "-m", "proxy", "--spawn-llama-server", "--port", str(port)],
            cwd=workdir,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_healthy(base, proxy, timeout=600)
            began = time.monotonic()
            for doc in dict.fromkeys(q["doc"] for q in questions):
                path = document_path(documents[doc]["source"], corpus)
                indexed(base, chat_body(path, documents[doc]["file"], "What is this about?"))
            print(f"documents indexed in {time.monotonic() - began:.0f} s")
            for q in questions:
                document = documents[q["doc"]]
                body = chat_body(
                    document_path(document["source"], corpus), document["file"], q["q"]
                )
                row: dict[str, Any] = {"id": q["id"], "doc": q["doc"], "split": q["split"]}
                for variant, (headers, fields) in VARIANTS.items():
                    got_headers, answer = post(
                        base + "/v1/chat/completions", {**body, **fields}, headers
                    )
                    text = answer["choices"][0]["message"]["content"] or ""
                    row[variant] = {
                        "answer": text,
                        "holds": holds_fact(text, q["facts"]),
                        "citations": answer.get("citations") or [],
                        "strategy": got_headers.get("X-Enrich-Strategy"),
                    }
                rows.append(row)
                marks = "  ".join(
                    f"{variant} {'yes' if row[variant]['holds'] else ' no'}" for variant in VARIANTS
                )
                print(
                    f"{q['id']:<18} {q['split']:<4} {marks}  {row['completion']['answer'][:70]!r}"
                )
        finally:
            proxy.terminate()
            proxy.wait(30)
    print(f"\n{'questions':<46} {'n':>3}  " + "  ".join(f"{v:>13}" for v in VARIANTS))
    groups = [
        ("the tour's PDF (shared-mime-info spec)", lambda r: r["doc"] == TOUR_DOCUMENT),
        ("other documents", lambda r: r["doc"] != TOUR_DOCUMENT),
        ("all", lambda r: True),
    ]
    for part in ("dev", "test"):
        for label, keep in groups:
            chosen = [r for r in rows if r["split"] == part and keep(r)]
            if not chosen:
                continue
            held = [sum(r[v]["holds"] for r in chosen) for v in VARIANTS]
            counts = "  ".join(f"{h:>5} ({100 * h / len(chosen):3.0f}%)" for h in held)
            print(f"{part + ': ' + label:<46} {len(chosen):>3}  {counts}")
    uncited = sum(1 for r in rows for v in VARIANTS if not r[v]["citations"])
    print(f"answers without citations: {uncited} of {len(rows) * len(VARIANTS)}")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the venv with '.[local]'")
    parser.add_argument("--split", choices=("dev", "test", "all"), default="all")
    parser.add_argument("--questions", type=Path, default=BENCH / "eval" / "base_answers.json")
    add_corpus_option(parser)
    args = parser.parse_args()
    main(args.python, args.split, args.questions, corpus_or_exit(args.corpus))
