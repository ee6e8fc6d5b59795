"""`formats list | show | render | import | export`: inspect and manage instruct formats."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from proxy.errors import ProxyError
from proxy.formats.presets import FormatRegistry, export_preset, import_any
from proxy.formats.render import render_prompt, resolve_macros

DEFAULT_DIR = Path("data/formats")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="proxy formats", description="Instruct formats.")
    p.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help="user presets (default: %(default)s)"
    )
    # --dir is accepted before or after the subcommand.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", type=Path, default=argparse.SUPPRESS, help="user presets")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", parents=[common], help="list the known formats")
    show = sub.add_parser("show", parents=[common], help="describe a format, render a sample")
    show.add_argument("name")
    render = sub.add_parser("render", parents=[common], help="print exactly the prompt sent")
    render.add_argument("name")
    render.add_argument("messages", type=Path, help='JSON: [messages] or {"messages": [...]}')
    render.add_argument("--bos", action="store_true", help="start with BOS (upstream adds none)")
    render.add_argument("--no-generation-prompt", action="store_true")
    render.add_argument("--var", action="append", default=[], metavar="KEY=VALUE", help="macro")
    imp = sub.add_parser("import", parents=[common], help="validate a preset or ST file, save it")
    imp.add_argument("file", type=Path)
    imp.add_argument("--name", help="save under this name instead of the preset's")
    imp.add_argument("--force", action="store_true", help="overwrite an existing preset file")
    exp = sub.add_parser("export", parents=[common], help="print a format as a JSON preset")
    exp.add_argument("name")
    return p


_SAMPLE = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there"},
    {"role": "user", "content": "Who are you?"},
]


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _run(args: argparse.Namespace) -> int:
    if args.command == "import":
        fmt = import_any(_read_json(args.file), name=args.name)
        target = args.dir / f"{fmt.name}.json"
        if target.exists() and not args.force:
            print(f"error: {target} exists (use --force to overwrite)", file=sys.stderr)
            return 1
        args.dir.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(export_preset(fmt), indent=2, ensure_ascii=False) + "\n")
        print(f"imported {fmt.name!r} -> {target}")
        return 0
    registry = FormatRegistry(user_dir=args.dir)
    if args.command == "list":
        for name in registry.names():
            fmt = registry.get(name)
            also = f" (also: {', '.join(fmt.aliases)})" if fmt.aliases else ""
            print(f"{name:20} {fmt.description}{also}")
    elif args.command == "export":
        print(json.dumps(export_preset(registry.get(args.name)), indent=2, ensure_ascii=False))
    elif args.command == "show":
        fmt = registry.get(args.name)
        print(f"name:        {fmt.name}\ndescription: {fmt.description}\nsource:      {fmt.source}")
        print(f"bos:         {fmt.bos!r} (in official prompt: {fmt.bos_in_prompt})")
        print(f"eos:         {fmt.eos!r}\nsystem:      {fmt.system_mode}\nstop:        {fmt.stop}")
        print("sample:\n" + render_prompt(fmt, _SAMPLE))
    elif args.command == "render":
        fmt = registry.get(args.name)
        data = _read_json(args.messages)
        messages = data.get("messages") if isinstance(data, dict) else data
        if not isinstance(messages, list):
            print("error: expected a list of messages", file=sys.stderr)
            return 1
        variables = dict(v.split("=", 1) for v in args.var if "=" in v)
        prompt = render_prompt(
            fmt,
            resolve_macros(messages, variables),
            include_bos=args.bos,
            add_generation_prompt=not args.no_generation_prompt,
        )
        sys.stdout.write(prompt)  # exactly the prompt: no newline added
    return 0


def formats_command(argv: list[str]) -> int:
    """Entry point for `python -m proxy formats ...`; returns the exit status."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return int(exc.code or 0)
    try:
        return _run(args)
    except ProxyError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
