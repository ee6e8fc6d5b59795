"""Ollama: its window (/api/show, /api/ps), and its native chat API for prompts it would cut."""
