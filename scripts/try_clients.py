"""Run the README's client recipes against a proxy and say what each client saw.

    python scripts/try_clients.py PROXY_URL DOCUMENT.pdf [--echo]

Runs in its own environment (scripts/try-clients makes it): the openai SDK (chat and
Responses), LangChain (chat and use_responses_api), LlamaIndex, the `llm` CLI (chat and
responses models) and curl. `--echo`: the upstream echoes its prompt, so the document's
passages must show in the answer itself.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

QUESTION = "What did the lighthouse keeper feed the cats?"
MAX_TOKENS = 60  # a small model on a CPU: short answers keep the whole run in minutes
PASSAGE = "sardines"
OPTIONS = {"X-Enrich-Strategy": "retrieval", "X-Enrich-Citations": "inline"}


def check(answer: str, echo: bool) -> str | None:
    """What is wrong with a visible answer, or None."""
    if "Sources:" not in answer:
        return "no 'Sources:' block in the answer"
    if echo and PASSAGE not in answer:
        return f"the document's passage ({PASSAGE!r}) did not reach the model"
    return None


def openai_chat(base: str, pdf: bytes) -> str:
    import openai

    client = openai.OpenAI(base_url=base + "/v1", api_key="unused")
    data = base64.b64encode(pdf).decode()
    answer = client.chat.completions.create(
        model="any",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": QUESTION},
                    {
                        "type": "file",
                        "file": {
                            "filename": "book.pdf",
                            "file_data": f"data:application/pdf;base64,{data}",
                        },
                    },
                ],
            }
        ],
        max_tokens=MAX_TOKENS,
        extra_body={"enrich": {"strategy": "retrieval", "citations": "both"}},
    )
    citations = (answer.model_extra or {}).get("citations")
    assert citations, "no citations field"
    return answer.choices[0].message.content or ""


def openai_responses(base: str, pdf: bytes) -> str:
    import openai

    client = openai.OpenAI(base_url=base + "/v1", api_key="unused")
    uploaded = client.files.create(file=("book.pdf", pdf), purpose="user_data")
    request = {
        "model": "any",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": QUESTION},
                    {"type": "input_file", "file_id": uploaded.id},
                ],
            }
        ],
        "max_output_tokens": MAX_TOKENS,
        "extra_body": {"enrich": {"strategy": "retrieval", "citations": "inline"}},
    }
    response = client.responses.create(**request)  # type: ignore[call-overload]
    notes = response.output[0].content[0].annotations
    assert notes and notes[0].type == "file_citation", "no file_citation annotation"
    assert notes[0].file_id == uploaded.id and notes[0].filename == "book.pdf", notes[0]
    with client.responses.stream(**request) as stream:
        streamed = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert streamed == final.output_text == response.output_text or streamed, "stream differs"
    return final.output_text


def langchain_chat(base: str, pdf: bytes, responses: bool = False) -> str:
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        base_url=base + "/v1",
        api_key="unused",  # type: ignore[arg-type]
        model="any",
        default_headers=OPTIONS,
        max_tokens=MAX_TOKENS,  # type: ignore[call-arg]
        use_responses_api=responses,
    )
    message = HumanMessage(
        content=[
            {"type": "text", "text": QUESTION},
            {
                "type": "file",
                "base64": base64.b64encode(pdf).decode(),
                "mime_type": "application/pdf",
            },
        ]
    )
    return str(llm.invoke([message]).text)


def llamaindex_chat(base: str, pdf: bytes) -> str:
    from llama_index.core.llms import ChatMessage, DocumentBlock, TextBlock
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(
        model="any",
        api_base=base + "/v1",
        api_key="unused",
        is_chat_model=True,
        max_tokens=MAX_TOKENS,
        default_headers=OPTIONS,
    )
    message = ChatMessage(
        role="user",
        blocks=[
            TextBlock(text=QUESTION),
            DocumentBlock(data=pdf, document_mimetype="application/pdf"),
        ],
    )
    return str(llm.chat([message]).message.content)


def llm_cli(base: str, pdf_path: Path, model: str) -> str:
    with tempfile.TemporaryDirectory() as home:
        config = [
            {
                "model_id": "enrich",
                "model_name": "any",
                "api_base": base + "/v1",
                "vision": True,  # without it, llm refuses to attach files
                "headers": OPTIONS,
            },
            {
                "model_id": "enrich-responses",
                "model_name": "any",
                "api_base": base + "/v1",
                "vision": True,
                "responses": True,
                "headers": OPTIONS,
            },
        ]
        (Path(home) / "extra-openai-models.yaml").write_text(json.dumps(config))
        llm = Path(sys.executable).parent / "llm"
        done = subprocess.run(
            [str(llm), "-m", model, QUESTION, "-a", str(pdf_path), "-o", "max_tokens", "60"],
            env={**os.environ, "LLM_USER_PATH": home},
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode:
            raise RuntimeError(done.stderr.strip()[-500:])
        return done.stdout


def agents_run(base: str, pdf: bytes) -> str:
    """The OpenAI Agents SDK's non-streamed `Runner.run` (Responses API), the way its docs
    point it at another server: an AsyncOpenAI client with the proxy's base_url. It raises
    when a response ends `incomplete`, so the answer must end by itself."""
    import asyncio

    from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base + "/v1", api_key="unused", default_headers=OPTIONS)
    agent = Agent(
        name="reader",
        instructions="Answer from the document.",
        model=OpenAIResponsesModel(model="any", openai_client=client),
    )
    data = base64.b64encode(pdf).decode()
    question = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": QUESTION},
                {
                    "type": "input_file",
                    "filename": "book.pdf",
                    "file_data": f"data:application/pdf;base64,{data}",
                },
            ],
        }
    ]
    result = asyncio.run(Runner.run(agent, question))  # type: ignore[arg-type]
    return str(result.final_output)


def agents_file_search(base: str, pdf: bytes) -> str:
    """The Agents SDK's hosted `FileSearchTool` over a vector store made through the proxy:
    upload, a store, then `Runner.run`. Sources show in `final_output` only as the "Sources:"
    block (inline citations); without it they are the reply's `file_citation` annotations."""
    import asyncio
    import time

    from agents import Agent, FileSearchTool, OpenAIResponsesModel, Runner, set_tracing_disabled
    from agents.items import MessageOutputItem
    from openai import AsyncOpenAI, OpenAI

    set_tracing_disabled(True)
    files = OpenAI(base_url=base + "/v1", api_key="unused")
    uploaded = files.files.create(file=("book.pdf", pdf), purpose="assistants")
    store = files.vector_stores.create(name="books", file_ids=[uploaded.id])
    deadline = time.monotonic() + 300
    while files.vector_stores.retrieve(store.id).file_counts.in_progress:
        if time.monotonic() > deadline:
            raise RuntimeError("the vector store was not ready in 300 s")
        time.sleep(0.5)
    client = AsyncOpenAI(base_url=base + "/v1", api_key="unused", default_headers=OPTIONS)
    agent = Agent(
        name="librarian",
        instructions="Answer from the files.",
        model=OpenAIResponsesModel(model="any", openai_client=client),
        tools=[FileSearchTool(vector_store_ids=[store.id], max_num_results=3)],
    )
    result = asyncio.run(Runner.run(agent, QUESTION))
    cited = [
        annotation
        for item in result.new_items
        if isinstance(item, MessageOutputItem)
        for part in item.raw_item.content
        for annotation in getattr(part, "annotations", None) or []
        if annotation.type == "file_citation"
    ]
    if not cited:
        raise RuntimeError("no file_citation annotation in the reply")
    return str(result.final_output)


def curl_stream(base: str, pdf: bytes) -> str:
    body = {
        "model": "any",
        "stream": True,
        "max_tokens": MAX_TOKENS,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": QUESTION},
                    {
                        "type": "file",
                        "file": {
                            "filename": "book.pdf",
                            "file_data": "data:application/pdf;base64,"
                            + base64.b64encode(pdf).decode(),
                        },
                    },
                ],
            }
        ],
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json") as request:
        json.dump(body, request)
        request.flush()
        headers = [arg for name, value in OPTIONS.items() for arg in ("-H", f"{name}: {value}")]
        done = subprocess.run(
            [
                *("curl", "-sN", base + "/v1/chat/completions"),
                *("-H", "Content-Type: application/json", *headers, "-d", f"@{request.name}"),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
    # What a client filtering on data: lines sees; the ": status" comments fall away.
    text = ""
    for line in done.stdout.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices", []):
                text += choice.get("delta", {}).get("content") or ""
    comments = [line for line in done.stdout.splitlines() if line.startswith(": ")]
    print(f"    curl saw {len(comments)} status comment line(s), e.g. {comments[:1]}")
    return text


def main() -> int:
    base, pdf_path = sys.argv[1], Path(sys.argv[2])
    echo = "--echo" in sys.argv
    pdf = pdf_path.read_bytes()
    tries: list[tuple[str, Callable[[], str]]] = [
        ("openai SDK, chat.completions", lambda: openai_chat(base, pdf)),
        ("openai SDK, responses.create + stream", lambda: openai_responses(base, pdf)),
        ("LangChain ChatOpenAI", lambda: langchain_chat(base, pdf)),
        ("LangChain ChatOpenAI use_responses_api", lambda: langchain_chat(base, pdf, True)),
        ("LlamaIndex OpenAILike", lambda: llamaindex_chat(base, pdf)),
        ("llm CLI (chat model)", lambda: llm_cli(base, pdf_path, "enrich")),
        ("llm CLI (responses model)", lambda: llm_cli(base, pdf_path, "enrich-responses")),
        ("curl, SSE data: lines", lambda: curl_stream(base, pdf)),
    ]
    if "--agents" in sys.argv:  # its own environment: it needs openai 3, llm and LlamaIndex 2
        tries = [
            ("OpenAI Agents SDK, Runner.run", lambda: agents_run(base, pdf)),
            ("OpenAI Agents SDK, FileSearchTool", lambda: agents_file_search(base, pdf)),
        ]
    failed = 0
    for name, attempt in tries:
        try:
            answer = attempt()
            problem = check(answer, echo)
        except Exception:
            answer, problem = "", traceback.format_exc(limit=3).strip().splitlines()[-1]
        failed += problem is not None
        print(f"{'ok  ' if problem is None else 'FAIL'} {name}: {problem or 'answer + Sources'}")
        shown = answer.strip().replace("\n", "⏎")
        print(f"    {shown[:70]} … {shown[-45:]}" if len(shown) > 120 else f"    {shown}")
    print(f"{len(tries) - failed} of {len(tries)} clients ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
