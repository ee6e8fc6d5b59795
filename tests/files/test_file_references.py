"""The refs record's decisions (pure): joining a live blob, starting anew after retirement."""

from __future__ import annotations

from proxy.files.blob_refs import BlobReferences, with_file, without_file


def test_the_first_upload_names_its_own_blob_and_later_ones_join_it() -> None:
    first = with_file(None, "file-a", "file-a")
    assert (first.blob, first.files) == ("file-a", ("file-a",))
    second = with_file(first, "file-b", "file-b")
    assert (second.blob, second.files) == ("file-a", ("file-a", "file-b"))
    assert second.rev != first.rev  # every version its own ETag: no ABA


def test_the_last_delete_retires_and_a_later_upload_never_joins_a_retired_blob() -> None:
    live = BlobReferences("file-a", ("file-a", "file-b"))
    assert not without_file(live, "file-a").retired
    retired = without_file(without_file(live, "file-a"), "file-b")
    assert retired.retired and retired.blob == "file-a"
    fresh = with_file(retired, "file-c", "file-c")
    assert (fresh.blob, fresh.files) == ("file-c", ("file-c",))


def test_records_round_trip_and_adding_twice_changes_nothing_but_the_rev() -> None:
    record = BlobReferences("file-a", ("file-a",))
    assert BlobReferences.decode(record.encode()) == record
    again = with_file(record, "file-a", "file-x")
    assert again.files == record.files and again.rev != record.rev
