"""What the guard changed is told three ways: the decision record, a header, a warning line."""

from __future__ import annotations

from structlog.testing import capture_logs

from proxy.guard.neutralise import GuardReport
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.guard_report import note_guard


def test_changes_are_recorded_per_file_counted_and_logged() -> None:
    exchange = Exchange("req-7", {"messages": [{"role": "user", "content": "q"}]})
    reports = {
        "a.pdf": GuardReport(3, {"chat_token": 2, "invisible": 1}),
        "b.txt": GuardReport(0, {}),
        "c.md": GuardReport(2, {"chat_token": 2}),
    }
    with capture_logs() as logs:
        note_guard(exchange, reports)
    per_file = {"a.pdf": {"chat_token": 2, "invisible": 1}, "b.txt": {}, "c.md": {"chat_token": 2}}
    assert exchange.decision.guard == per_file
    assert exchange.response_headers == {"X-Enrich-Guard-Changes": "5"}
    assert logs == [
        {
            "event": "document text neutralised",
            "log_level": "warning",
            "request_id": "req-7",
            "changes": 5,
            "per_file": per_file,
        }
    ]


def test_nothing_changed_is_a_zero_and_no_warning() -> None:
    exchange = Exchange("req-8", {"messages": [{"role": "user", "content": "q"}]})
    with capture_logs() as logs:
        note_guard(exchange, {"a.pdf": GuardReport()})
    assert exchange.decision.guard == {"a.pdf": {}}
    assert exchange.response_headers == {"X-Enrich-Guard-Changes": "0"}
    assert logs == []
