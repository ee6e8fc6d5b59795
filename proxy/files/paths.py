"""Path references (`#file:root/relative/path`): resolved inside a configured root, then opened
once, component by component from the root's descriptor, following no link: a directory
swapped for a symlink between resolving and reading cannot lead outside the root."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

from proxy.errors import DocumentError, PayloadTooLarge

REFUSE = "path_not_allowed"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in for the file must not hang the open.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def resolve_document_path(roots: dict[str, Path], reference: str) -> Path:
    """`root/relative/path` inside a configured root, or a DocumentError; never outside a root.

    Links inside the root are followed here, so the returned path names the real file; the
    read (`read_document_path`) then follows none.
    """
    if not roots:
        raise DocumentError(reference, "path references are off (no documents.roots)", code=REFUSE)
    if "\x00" in reference or "\\" in reference:
        raise DocumentError(reference, "the path contains forbidden characters", code=REFUSE)
    root_name, _, relative = reference.partition("/")
    if root_name not in roots:
        known = ", ".join(sorted(roots))
        raise DocumentError(
            reference, f"unknown document root {root_name!r} (known: {known})", code=REFUSE
        )
    rel = PurePosixPath(relative)
    if not relative or rel.is_absolute() or any(part in {"..", "."} for part in rel.parts):
        raise DocumentError(
            reference, "the path must be relative to the root, without '..'", code=REFUSE
        )
    root = roots[root_name].resolve()
    try:
        target = (root / rel).resolve(strict=True)
    except (FileNotFoundError, NotADirectoryError):
        raise DocumentError(
            reference, "no such file in the document root", code="file_not_found"
        ) from None
    except (OSError, RuntimeError):
        raise DocumentError(reference, "the path cannot be resolved", code=REFUSE) from None
    if not target.is_relative_to(root):
        raise DocumentError(reference, "the path leads outside its document root", code=REFUSE)
    if not target.is_file():
        raise DocumentError(reference, "not a regular file", code=REFUSE)
    return target


def _open_beneath(root: Path, relative: PurePosixPath) -> int:
    """A descriptor of `root/relative`, opened from the root's descriptor one component at a
    time with O_NOFOLLOW: any link met on the way (one swapped in since resolving) fails."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in relative.parts[:-1]:
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
        return os.open(relative.parts[-1], _FILE_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)


def read_document_path(roots: dict[str, Path], reference: str, name: str, max_bytes: int) -> bytes:
    """The bytes of a path reference, read from the one descriptor that was checked."""
    target = resolve_document_path(roots, reference)
    root = roots[reference.partition("/")[0]].resolve()
    try:
        fd = _open_beneath(root, PurePosixPath(target.relative_to(root)))
    except FileNotFoundError:
        raise DocumentError(
            reference, "no such file in the document root", code="file_not_found"
        ) from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise DocumentError(
                reference, "the path changed into a link while it was opened", code=REFUSE
            ) from None
        raise DocumentError(reference, "the file cannot be opened", code=REFUSE) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise DocumentError(reference, "not a regular file", code=REFUSE)
        if info.st_size > max_bytes:
            raise PayloadTooLarge(
                f"{name}: the file is larger than documents.max_file_mb "
                f"({max_bytes // 1048576} MiB)",
                code="file_too_large",
            )
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew since fstat
        raise PayloadTooLarge(
            f"{name}: the file is larger than documents.max_file_mb ({max_bytes // 1048576} MiB)",
            code="file_too_large",
        )
    return data
