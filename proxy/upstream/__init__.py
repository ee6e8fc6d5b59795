"""Talking to upstream model servers."""
