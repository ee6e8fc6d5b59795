"""Child process entry: `python -m proxy.upstream.xllamacpp_child <llama-server options>`.

xllamacpp serves llama.cpp's HTTP API from inside the Python process that creates it, for as
long as that process lives; running it here, in a child, lets the proxy supervise it exactly
like a llama-server binary (health wait, restarts, stop, log file).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from proxy.upstream.server_args import Assignment, EnumMember, xllamacpp_assignments

_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def make_params(xllamacpp: Any, assignments: Sequence[Assignment]) -> Any:
    """A `CommonParams` with the assignments applied (llama-server's defaults otherwise)."""
    params = xllamacpp.CommonParams()
    # GET /props answers only with this on; the proxy reads the context window there.
    params.endpoint_props = True
    params.ui = False
    for path, value in assignments:
        *parents, attribute = path.split(".")
        target = params
        for parent in parents:
            target = getattr(target, parent)
        final: Any = value
        if isinstance(value, EnumMember):
            final = getattr(getattr(xllamacpp, value.enum), value.member)
        elif attribute == "model_alias" and isinstance(value, list):
            final = set(value)  # a C++ std::set on xllamacpp's side
        setattr(target, attribute, final)
    return params


def main(argv: Sequence[str]) -> int:
    try:
        assignments = xllamacpp_assignments(argv)
    except ValueError as exc:
        print(f"xllamacpp_child: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        import xllamacpp
    except ImportError:
        print(
            "xllamacpp_child: xllamacpp is not installed; pip install '.[local]'",
            file=sys.stderr,
            flush=True,
        )
        return 2
    params = make_params(xllamacpp, assignments)
    # Blocked before the server's threads exist, so they inherit the mask and only sigwait()
    # below sees a stop signal (including the parent-death SIGTERM the supervisor arranges).
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    print(f"xllamacpp_child: xllamacpp {xllamacpp.__version__}, pid {os.getpid()}", flush=True)
    try:
        server = xllamacpp.Server(params)
    except Exception as exc:  # any failure to load or bind: say it in the log, exit non-zero
        print(f"xllamacpp_child: server failed to start: {exc!r}", file=sys.stderr, flush=True)
        return 1
    print(f"xllamacpp_child: listening on {server.listening_address}", flush=True)
    received = signal.sigwait(_STOP_SIGNALS)
    print(f"xllamacpp_child: {signal.Signals(received).name}, stopping", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # The server's threads are native and own the model: ending the process is the clean stop.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
