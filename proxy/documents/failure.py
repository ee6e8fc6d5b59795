"""Worker-side failures, carried to the parent as a reason and an error code."""

from __future__ import annotations


class ExtractError(Exception):
    """A document could not be turned into text; `reason` completes "<file>: ..."."""

    def __init__(self, reason: str, code: str = "invalid_document") -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code
