"""An OpenAI-compatible reverse proxy that enriches prompts with documents in flight."""

__version__ = "0.1.0"
