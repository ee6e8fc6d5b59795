"""Neutralising document-derived text before it enters a prompt (SPEC §4)."""
