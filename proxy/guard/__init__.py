"""Neutralising document-derived text before it enters a prompt (docs/guard.md)."""
