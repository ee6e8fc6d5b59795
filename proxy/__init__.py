"""An OpenAI-compatible reverse proxy that enriches prompts with documents in flight."""

import os

__version__ = "0.1.0"

# ONNX Runtime (MiniLM's engine) ships Microsoft's 1DS telemetry in its Linux wheels since 1.2x:
# on import it writes a device id and an event store under ~/.cache/Microsoft and uploads them
# over HTTPS. Nothing the proxy runs reaches the internet unasked: off, unless set otherwise.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
