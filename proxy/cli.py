"""Command line: serve (the default), preview a request, manage instruct formats."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from proxy.config import ConfigError, Settings, load_settings
from proxy.errors import StartupError
from proxy.logs import configure_logging, log_line
from proxy.upstream.launch import LlamaServerError

USAGE = """\
python -m proxy [serve] [--config PATH] [--host HOST] [--port PORT] [--upstream URL]
python -m proxy preview REQUEST.json [--config PATH] [--upstream URL]
python -m proxy formats {list,show,render,import,export} ...
"""


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="YAML config file (see config.example.yaml)")
    parser.add_argument("--upstream", help="upstream base URL, overrides upstream.base_url")


def serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m proxy",
        description=(
            "OpenAI-compatible reverse proxy that enriches chat requests with attached documents. "
            "Every config key can also be set as PROXY__SECTION__KEY in the environment, "
            "e.g. PROXY__UPSTREAM__BASE_URL=http://127.0.0.1:8080."
        ),
        epilog="More: 'python -m proxy preview --help', 'python -m proxy formats --help'.",
    )
    _common(parser)
    parser.add_argument("--host", help="address to listen on, overrides server.host")
    parser.add_argument("--port", type=int, help="port to listen on, overrides server.port")
    parser.add_argument(
        "--workers", type=int, help="worker processes sharing the port, overrides server.workers"
    )
    parser.add_argument(
        "--spawn-llama-server",
        action="store_true",
        help="start a local llama.cpp server (upstream.spawn.enabled) and proxy to it",
    )
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    server: dict[str, Any] = {}
    if getattr(args, "host", None):
        server["host"] = args.host
    if getattr(args, "port", None) is not None:
        server["port"] = args.port
    if getattr(args, "workers", None) is not None:
        server["workers"] = args.workers
    if server:
        overrides["server"] = server
    upstream: dict[str, Any] = {}
    if args.upstream:
        upstream["base_url"] = args.upstream
    if getattr(args, "spawn_llama_server", False):
        upstream["spawn"] = {"enabled": True}
    if upstream:
        overrides["upstream"] = upstream
    return load_settings(args.config, overrides=overrides)


def announce_start(settings: Settings) -> None:
    """A first line at once, before the seconds of imports and of a local server's start."""
    server = settings.server
    then = (
        "then a local llama.cpp server (a few seconds more)"
        if settings.upstream.spawn.enabled
        else f"in front of {settings.upstream.base_url}"
    )
    log_line(
        server.log_format,
        server.log_level,
        "starting",
        detail=f"loading, for {server.host}:{server.port}, {then}",
    )
    for note in settings.retired:
        log_line(server.log_format, server.log_level, "config", detail=note)


async def _preview(settings: Settings, body: bytes) -> tuple[int, Any]:
    """Run the real app on a loopback port for one preview request."""
    import aiohttp
    from aiohttp import web

    from proxy.http.app import make_app

    runner = web.AppRunner(make_app(settings))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"http://127.0.0.1:{port}/v1/enrich/preview",
                data=body,
                headers={"Content-Type": "application/json"},
            ) as response,
        ):
            return response.status, await response.json()
    finally:
        await runner.cleanup()


def preview_command(settings: Settings, request_file: Path) -> int:
    """`python -m proxy preview request.json`: print what the proxy would send, exit 0 or 1."""
    try:
        body = request_file.read_bytes()
    except OSError as exc:
        print(f"cannot read {request_file}: {exc.strerror}", file=sys.stderr)
        return 2
    configure_logging(settings.server.log_format, settings.server.log_level)  # to stderr
    status, answer = asyncio.run(_preview(settings, body))
    print(json.dumps(answer, ensure_ascii=False, indent=2))
    return 0 if status == 200 else 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and not argv[0].startswith("-") else "serve"
    if argv and command == argv[0]:
        argv = argv[1:]
    try:
        if command == "serve":
            settings = _settings(serve_parser().parse_args(argv))
            announce_start(settings)
            from proxy.serve import serve  # seconds of imports (openai, chromadb's client, ...)

            return serve(settings)
        if command == "preview":
            parser = argparse.ArgumentParser(
                prog="python -m proxy preview",
                description="Print the decision record and the exact body that would go upstream, "
                "without calling the model (the upstream is asked for token counts only).",
            )
            parser.add_argument("request", type=Path, help="a chat completions request body (JSON)")
            _common(parser)
            args = parser.parse_args(argv)
            return preview_command(_settings(args), args.request)
        if command == "formats":
            from proxy.formats.cli import formats_command

            return int(formats_command(argv))
    except ConfigError as error:
        print(f"invalid configuration: {error}", file=sys.stderr)
        return 2
    except StartupError as error:
        print(f"cannot start: {error}", file=sys.stderr)
        return 1
    except LlamaServerError as error:
        print(f"cannot start the local llama.cpp server: {error}", file=sys.stderr)
        return 1
    print(f"unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2
