"""What the parse worker runs: a reader per format, the dispatch between them, the worker loop."""
