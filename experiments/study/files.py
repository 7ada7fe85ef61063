"""Writing files without following links planted in a study directory.

The rule (docs/studies.md, "What happens when things go wrong"): hcjax never writes
through a symbolic link inside a study directory. The entries it writes (units/,
checkpoints/, figures/, tables/, tensorboard/, export/, run.log, .lock, ...) are checked
before any work (`StudyDir.check_layout`: a link, or a file where a directory belongs or
the reverse, is the user's mistake, exit 2 naming the entry), and the writes themselves
do not follow links either, so a link planted while a run is going cannot redirect one:

- a new file is created exclusively (`tempfile.mkstemp`: O_CREAT | O_EXCL, which never
  follows a link), written, fsynced and `os.replace`d onto its name (a rename replaces a
  link at the final name rather than writing through it);
- with `root` given, every directory between `root` and the file is checked not to be a
  link before the temporary file is made there;
- appended files (run.log) are opened with O_NOFOLLOW;
- the probe that checks a directory is writable is an exclusively created temporary file.

A write that fails for want of room (a full disk, ENOSPC; a file-size limit, EFBIG) raises
an OSError naming the file it was writing (the system's own error names none).

The study directory itself (`--out`) may be a link: it is what the user named.
"""
from __future__ import annotations

import contextlib
import errno
import glob
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()


class PlantedLink(ValueError):
    """A symbolic link where hcjax writes inside a study directory."""


def file_chars(text) -> str:
    """`text` with every character but letters, digits, '-', '_' and '.' replaced by '_'."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text))


def safe_name(text: str) -> str:
    """`text` as one file name: `file_chars`, and a name of dots only (., ..) or an empty
    one becomes '_'."""
    name = file_chars(text)
    return "_" if not name.strip(".") else name


def no_links_below(root: str | os.PathLike, path: str | os.PathLike) -> None:
    """PlantedLink naming the first existing component of `path` below `root` that is a
    symbolic link (`root` itself may be one); ValueError if `path` is not below `root`."""
    root, path = Path(root), Path(path)
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        raise ValueError(f"{path} lies outside the study directory {root}") from None
    if ".." in parts:
        raise ValueError(f"{path} lies outside the study directory {root}")
    current = root
    for part in parts:
        current = current / part
        if current.is_symlink():
            raise PlantedLink(f"{current} is a symbolic link: hcjax does not write through links inside a study "
                              f"directory (they could point anywhere); remove it (a real file or directory is fine)")


def make_dir(path: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """mkdir -p `path`; with `root`, refusing links between `root` and `path` (before and after)."""
    path = Path(path)
    if root is not None:
        no_links_below(root, path)
    path.mkdir(parents=True, exist_ok=True)
    if root is not None:
        no_links_below(root, path)
    return path


NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK}  # os.link's errors there


def move_no_replace(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Rename `source` to `target`, FileExistsError if `target` exists: never replaces a
    file (a hard link, then unlink; where the filesystem has no hard links, `target` is
    created exclusively and `source` replaces that empty file)."""
    try:
        os.link(source, target)
    except OSError as e:
        if e.errno not in NO_HARD_LINKS:
            raise
        os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))  # FileExistsError if taken
        os.replace(source, target)
        return
    os.unlink(source)


_TEMP_SUFFIX = ".tmp"  # atomic_write_bytes' temp files: .<name>.<random>.tmp beside <name>


def _temp_prefix(path: Path) -> str:
    return f".{path.name}."


def atomic_write_bytes(path: str | os.PathLike, data: bytes, root: str | os.PathLike | None = None) -> None:
    """Write `data` to `path` atomically (an exclusively created temp file in the same
    directory, fsync, os.replace), with the mode a plain `open` would give (0666 minus the
    umask). root: the study directory `path` lies in; no directory between them may be a link."""
    path = Path(path)
    make_dir(path.parent, root)
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=_TEMP_SUFFIX, dir=path.parent)
    try:
        with naming(path), os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def clear_killed_writes(path: str | os.PathLike) -> None:
    """Delete the temp files that `atomic_write_bytes` calls for `path` killed midway left
    beside it; call it only as the file's one writer (a study's lock holder)."""
    path = Path(path)
    for stale in path.parent.glob(f"{glob.escape(_temp_prefix(path))}*{_TEMP_SUFFIX}"):
        stale.unlink(missing_ok=True)


@contextlib.contextmanager
def naming(path: str | os.PathLike):
    """An OSError without a file name raised in the block (a write or an fsync on a full
    disk, ENOSPC, or past a file-size limit, EFBIG) raised again naming `path`."""
    try:
        yield
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from e  # OSError(errno, ...) is errno's subclass


def atomic_write_text(path: str | os.PathLike, text: str, root: str | os.PathLike | None = None) -> None:
    atomic_write_bytes(path, text.encode(), root)


def append_text(path: str | os.PathLike, text: str) -> None:
    """Append `text` to `path` (created if absent); OSError (ELOOP) if `path` is a link."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
    with naming(path), os.fdopen(fd, "a") as f:
        f.write(text)


KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
         (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def not_regular(mode: int) -> str | None:
    """What a file of `mode` (st_mode) is when it is not a regular file ('a FIFO', ...), else None."""
    return None if stat.S_ISREG(mode) else next((kind for test, kind in KINDS if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike):
    """`path` open for reading (binary) when it is a regular file (a link to one is followed);
    ValueError saying what it is otherwise: a read of a FIFO waits for a writer forever, and a
    device's may never end. The check is made on the opened file (O_NONBLOCK: opening a FIFO
    does not wait), so nothing can swap the file in between."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        kind = not_regular(os.fstat(fd).st_mode)
        if kind is not None:
            raise ValueError(f"it is {kind}, not a regular file (hcjax reads no FIFO, socket or device: a read "
                             f"could wait forever)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def linked(path: Path, warn: Callable[[str], None]) -> None:
    """`warn` of a unit file that is a symbolic link (nothing when it is not one): it is read, as
    its target's unit, but it is not a file of this study (hcjax writes none through a link), and
    its target may lie anywhere, another study included."""
    if not path.is_symlink():
        return
    target = os.readlink(path)
    outside = not (path.parent / target).resolve().is_relative_to(path.parent.parent.resolve())
    warn(f"{path} is a symbolic link to {target}{' (outside the study directory)' if outside else ''}: the unit is "
         f"read from there, though hcjax never writes a unit through a link; replace the link with the file itself "
         f"if it belongs to this study, or remove it")


def open_dir_below(root: str | os.PathLike, path: str | os.PathLike, create: bool = True) -> int:
    """A file descriptor of the directory `path` below `root`, reached one component at a
    time from `root` with O_NOFOLLOW (each made first when absent and `create`): whenever a
    link is planted at any depth, it is refused (PlantedLink), never followed. OSError
    (NotADirectoryError naming it) where a component is not a directory. Close it after use."""
    root, path = Path(root), Path(path)
    no_links_below(root, path)  # also refuses a path outside root
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    current = root
    try:
        for part in path.relative_to(root).parts:
            current = current / part
            if create:
                try:
                    os.mkdir(part, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                below = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
            except OSError as e:
                if os.path.islink(current):
                    raise PlantedLink(f"{current} is a symbolic link: hcjax does not write through links inside a "
                                      f"study directory (they could point anywhere); remove it") from None
                raise OSError(e.errno, e.strerror, str(current)) from None
            os.close(fd)
            fd = below
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                raise NotADirectoryError(f"{current} is in the way: hcjax keeps a directory there; move it aside")
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_exclusive(dir_fd: int, name: str) -> int:
    """A new file `name` in the directory `dir_fd`, created exclusively (O_CREAT | O_EXCL |
    O_NOFOLLOW: FileExistsError if anything, a link included, has the name) for writing."""
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE, dir_fd=dir_fd)


def probe_writable(directory: str | os.PathLike) -> None:
    """OSError unless a file can be created in `directory` (an exclusively created
    temporary file, removed at once: no link in the directory is followed)."""
    fd, tmp = tempfile.mkstemp(prefix=".write-test-", dir=directory)
    os.close(fd)
    os.unlink(tmp)


def check_writable_dir(path: str | os.PathLike, what: str, root: str | os.PathLike | None = None) -> Path:
    """Create `path` if needed and check a file can be written there; ValueError naming
    it (with `what`, e.g. '--out') and why otherwise. root: as in `make_dir`."""
    path = Path(path)
    if root is not None:
        no_links_below(root, path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {path} is an existing file, not a directory; choose another {what}")
    try:
        make_dir(path, root)
    except OSError as e:
        raise ValueError(f"{what} {path} cannot be created: {e.strerror or e}") from None
    try:
        probe_writable(path)
    except OSError as e:
        raise ValueError(f"{what} {path} is not writable: {e.strerror or e}") from None
    return path
