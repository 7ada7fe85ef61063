"""Issue 24, classes 5, 7 and 8: quarantine never replaces a file; a HostTuner state
saved over another space, other options or with indices out of range is refused naming
what differs; smaller edges of categoricals, `fixed`, `--space` and the manifest."""
from __future__ import annotations

import datetime
import errno
import types

import pytest

from experiments.study import files
from experiments.study import store as R


class FrozenClock(datetime.datetime):
    """datetime.datetime whose now() is one fixed second: every move happens 'in the same second'."""

    @classmethod
    def now(cls, tz=None):
        return cls(2026, 1, 2, 3, 4, 5, tzinfo=tz)


@pytest.fixture
def same_second(monkeypatch):
    monkeypatch.setattr(R, "datetime", types.SimpleNamespace(datetime=FrozenClock, UTC=datetime.UTC))


def test_quarantine_keeps_a_unit_a_checkpoint_and_an_earlier_file_of_the_same_name(tmp_path, same_second):
    """The issue's reproduction: a corrupt unit and a corrupt checkpoint of one unit moved
    aside in the same second got the same name, the second replacing the first (and any
    earlier file of that name), while both log lines said 'moved to'."""
    store = R.StudyDir(tmp_path)
    unit, checkpoint = store.unit_path("A", "fixed"), store.checkpoint_path("A", "fixed")
    said = []
    contents = {}
    for round_ in range(2):  # the second round finds the first round's files in units/corrupt/
        for path, what in ((unit, b"unit"), (checkpoint, b"checkpoint")):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"not a zip: " + what + bytes([round_]))
        assert store.finished("A", "fixed", "key", log=said.append) is False
        assert store.load_checkpoint("A", "fixed", log=said.append) is None
        assert not unit.exists() and not checkpoint.exists()
        contents[round_] = {what + bytes([round_]) for what in (b"unit", b"checkpoint")}
    moved = sorted((tmp_path / "units" / "corrupt").iterdir())
    assert {p.read_bytes()[len(b"not a zip: "):] for p in moved} == contents[0] | contents[1]
    assert len(moved) == 4 and all(p.name.startswith(unit.name + ".") for p in moved)
    assert {p.name.split(".")[2] for p in moved} == {"unit", "checkpoint"}
    for line, source in zip(said, (unit, checkpoint) * 2):
        target = next(p for p in moved if f"moved {source} to {p}," in line)
        assert target.name.split(".")[2] == ("unit" if source == unit else "checkpoint")


def test_move_no_replace_without_hard_links_still_never_replaces(tmp_path, monkeypatch):
    """Where the filesystem has no hard links the target is reserved exclusively instead."""
    def no_links(source, target):
        raise PermissionError(errno.EPERM, "hard links not supported")

    monkeypatch.setattr(files.os, "link", no_links)
    source, taken, free = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    source.write_text("new")
    taken.write_text("earlier")
    with pytest.raises(FileExistsError):
        files.move_no_replace(source, taken)
    assert taken.read_text() == "earlier" and source.read_text() == "new"
    files.move_no_replace(source, free)
    assert free.read_text() == "new" and not source.exists()
