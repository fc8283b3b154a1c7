"""Atomic writes: whole file or nothing, and devices written in place."""

import os
import stat

import pytest

from cpbcg.atomic import write_atomic


def test_replaces_whole_file(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    write_atomic(path, "new")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_failure_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "out.json"
    path.write_text("old")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(path, b"new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_missing_directory_raises(tmp_path):
    with pytest.raises(OSError):
        write_atomic(tmp_path / "no" / "out.json", b"x")


def test_dev_null_stays_a_device():
    write_atomic("/dev/null", b"discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
