"""Which objects of the S3 file store are orphans: the pure decision, from listings and a clock."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.files.blob_refs import BlobReferences
from proxy.files.orphans import BucketListing, Listed, ListedRefs, Orphans, find_orphans

NOW = 1_000_000.0
GRACE = 3600.0
OLD = NOW - 2 * GRACE
YOUNG = NOW - GRACE / 2
A, B, C, D = (f"file-{n:024x}" for n in range(1, 5))
OWNER = "7465616d2d61"  # "team-a"


def record(file_id: str, modified: float = OLD) -> Listed:
    return Listed(f"files/{file_id}.json", modified)


def marker(file_id: str, modified: float = OLD, size: int = 10) -> Listed:
    return Listed(f"owners/{OWNER}/{file_id}.{size}", modified)


def blob(object_id: str, modified: float = OLD) -> Listed:
    return Listed(f"blobs/{object_id}", modified)


def refs(sha: str, blob_id: str, *files: str, modified: float = OLD) -> ListedRefs:
    return ListedRefs(Listed(f"refs/{sha}.json", modified), BlobReferences(blob_id, files))


def decide(
    records: Sequence[Listed] = (),
    markers: Sequence[Listed] = (),
    blobs: Sequence[Listed] = (),
    refs_: Sequence[ListedRefs] = (),
    cut: frozenset[str] = frozenset(),
    limit: int = 1000,
) -> Orphans:
    return find_orphans(BucketListing(records, markers, blobs, refs_, cut), NOW, GRACE, limit)


# -- a record without its marker ------------------------------------------------------------


def test_an_old_record_without_its_marker_is_an_orphan() -> None:
    assert decide(records=[record(A), record(B)], markers=[marker(B)]).records == (A,)


def test_a_young_record_without_its_marker_is_an_upload_under_way() -> None:
    assert decide(records=[record(A, YOUNG)]).records == ()


def test_a_record_with_its_marker_is_a_file() -> None:
    found = decide(
        records=[record(A)], markers=[marker(A)], blobs=[blob(A)], refs_=[refs("s", A, A)]
    )
    assert found == Orphans()


# -- a marker without its record ------------------------------------------------------------


def test_an_old_marker_without_its_record_is_an_orphan() -> None:
    found = decide(records=[record(B)], markers=[marker(A), marker(B)])
    assert found.markers == (f"owners/{OWNER}/{A}.10",)


def test_a_young_marker_without_its_record_stays() -> None:
    assert decide(markers=[marker(A, YOUNG)]).markers == ()


# -- refs naming files that no longer exist ---------------------------------------------------


def test_an_old_refs_object_naming_files_gone_gives_those_ids() -> None:
    found = decide(records=[record(B)], markers=[marker(B)], refs_=[refs("s", A, A, B, C)])
    assert found.refs == (("s", (A, C)),)


def test_a_young_refs_object_may_name_an_upload_whose_record_is_not_written_yet() -> None:
    assert decide(refs_=[refs("s", A, A, modified=YOUNG)]).refs == ()


def test_a_retired_refs_object_names_nobody_to_release() -> None:
    assert decide(refs_=[refs("s", A)]).refs == ()


# -- blobs -------------------------------------------------------------------------------------


def test_an_old_blob_no_refs_object_names_is_an_orphan() -> None:
    found = decide(blobs=[blob(A), blob(B)], refs_=[refs("s", B, C)])
    assert found.blobs == (A,)


def test_a_young_blob_may_be_an_upload_not_yet_joined() -> None:
    assert decide(blobs=[blob(A, YOUNG)]).blobs == ()


def test_a_blob_named_by_a_live_refs_object_stays_however_young_the_refs() -> None:
    assert decide(blobs=[blob(A)], refs_=[refs("s", A, B, modified=YOUNG)]).blobs == ()


def test_a_blob_named_only_by_a_retired_refs_object_is_an_orphan() -> None:
    # Its deleter retired the refs and stopped before deleting it; a retired one is never joined.
    assert decide(blobs=[blob(A)], refs_=[refs("s", A)]).blobs == (A,)


# -- what a listing cut short cannot decide, keys of others, the bound -------------------------


def one_of_each(cut: frozenset[str] = frozenset()) -> Orphans:
    refs_ = [refs("s", D, D)]
    return decide([record(A)], [marker(B)], [blob(C)], refs_, cut=cut)


def test_a_cut_listing_skips_the_kinds_that_need_it_whole() -> None:
    assert len(one_of_each()) == 4
    by_owners = one_of_each(frozenset({"owners"}))
    assert (by_owners.records, by_owners.skipped, len(by_owners)) == ((), ("records",), 3)
    by_files = one_of_each(frozenset({"files"}))
    assert (by_files.markers, by_files.refs, by_files.skipped) == ((), (), ("markers", "refs"))
    by_refs = one_of_each(frozenset({"refs"}))
    assert (by_refs.blobs, by_refs.skipped, len(by_refs)) == ((), ("blobs",), 3)


def test_keys_the_store_never_writes_are_left_alone() -> None:
    others = [
        Listed("files/notes.txt", OLD),
        Listed("files/file-xyz.json", OLD),
        Listed(f"owners/{OWNER}/readme", OLD),
        Listed(f"owners/{OWNER}/{A}.big", OLD),
        Listed("owners/notes.txt", OLD),
        Listed(f"owners/{OWNER}/{A}.10/copy", OLD),
        Listed("blobs/backup.tar", OLD),
    ]
    assert decide(records=others[:2], markers=others[2:6], blobs=others[6:]) == Orphans()


def test_at_most_limit_orphans_records_first() -> None:
    found = decide(
        records=[record(A), record(B)],
        markers=[marker(C), marker(D)],
        blobs=[blob(A)],
        limit=3,
    )
    assert (found.records, len(found.markers), found.blobs) == ((A, B), 1, ())


def test_an_object_exactly_as_old_as_the_grace_is_an_orphan() -> None:
    # "Nothing younger than grace_s": at grace_s it is no longer in flight.
    exact = NOW - GRACE
    found = decide(records=[record(A, exact)], markers=[marker(B, exact)], blobs=[blob(C, exact)])
    assert (found.records, found.markers, found.blobs) == ((A,), (f"owners/{OWNER}/{B}.10",), (C,))


def test_every_kind_a_cut_listing_leaves_undecided_is_named() -> None:
    found = one_of_each(frozenset({"owners", "files", "refs"}))
    assert (found.skipped, len(found)) == (("records", "markers", "refs", "blobs"), 0)


def test_the_bound_is_shared_by_every_kind_in_order() -> None:
    listing = {
        "records": [record(A)],
        "markers": [marker(B)],
        "refs_": [refs("s", D, C), refs("t", D, D)],
        "blobs": [blob(A), blob(B)],
    }
    assert len(decide(**listing)) == 6
    assert decide(**listing, limit=3) == Orphans(
        (A,), (f"owners/{OWNER}/{B}.10",), (("s", (C,)),), ()
    )
    found = decide(**listing, limit=5)
    assert (len(found.refs), found.blobs, len(found)) == (2, (A,), 5)
