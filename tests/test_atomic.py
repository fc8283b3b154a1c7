"""Atomic writes: whole file or nothing, and devices written in place."""

import os
import stat

import pytest

from pathlib import Path

from cpbcg.atomic import check_outputs, write_atomic
from cpbcg.errors import ConfigError


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


def test_new_files_get_ordinary_permissions(tmp_path):
    path = tmp_path / "out.json"
    write_atomic(path, b"x")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask


def test_errors_name_the_target_not_the_temp_file(tmp_path):
    with pytest.raises(OSError) as info:
        write_atomic(tmp_path / "missing" / "out.json", b"x")
    assert info.value.filename == str(tmp_path / "missing" / "out.json")


@pytest.mark.parametrize(
    "outputs, inputs, message",
    [
        ({"-o": "DIR"}, {}, "is a directory"),
        ({"-o": "DIR/nope/out.json"}, {}, "does not exist"),
        ({"-o": "DIR/trace.jsonl"}, {"--trace": "DIR/trace.jsonl"}, "is the same file as --trace"),
        ({"--json": "DIR/r.x", "--junit": "DIR/r.x"}, {}, "--junit DIR/r.x: is also the output of --json"),
    ],
)
def test_check_outputs_refuses(tmp_path, outputs, inputs, message):
    (tmp_path / "trace.jsonl").write_text("[8]\n")
    fix = lambda d: {k: tmp_path if v == "DIR" else tmp_path / v[4:] for k, v in d.items()}  # noqa: E731
    with pytest.raises(ConfigError) as info:
        check_outputs(fix(outputs), fix(inputs))
    assert message.replace("DIR", str(tmp_path)) in str(info.value)


def test_check_outputs_accepts_stdout_new_files_and_devices(tmp_path):
    check_outputs({"-o": Path("-"), "--json": tmp_path / "new.json", "--junit": Path("/dev/null"), "--plot": None})


@pytest.mark.parametrize("given", ["newdir/", "sub/newdir/", "."])
def test_an_output_naming_a_directory_is_refused(tmp_path, monkeypatch, given):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    with pytest.raises(ConfigError, match=f"^-o {given}: (names a directory|is a directory)"):
        check_outputs({"-o": given})
    with pytest.raises(IsADirectoryError):
        write_atomic(given, b"x")
    assert not (tmp_path / "newdir").exists() and not (tmp_path / "sub" / "newdir").exists()


def test_output_path_parser_keeps_the_trailing_slash_for_the_check(tmp_path, monkeypatch):
    from cpbcg.atomic import output_path

    monkeypatch.chdir(tmp_path)
    assert output_path("-") == Path("-") and output_path("a.json") == Path("a.json")
    given = output_path("newdir/")
    assert given == Path("newdir") and isinstance(given, Path)
    with pytest.raises(ConfigError, match="^-o newdir/: names a directory"):
        check_outputs({"-o": given})
    with pytest.raises(IsADirectoryError):
        write_atomic(given, b"x")
    check_outputs({"-o": output_path("newdir.json")})


def test_a_directory_that_access_calls_writable_but_holds_no_new_file_is_refused_up_front(tmp_path):
    """Root passes `os.access(W_OK)` on /proc, where no file can be created: the check tries one."""
    if not Path("/proc").is_dir():
        pytest.skip("no /proc")
    with pytest.raises(ConfigError) as err:
        check_outputs({"--junit": "/proc/cpbcg-junit.xml"})
    assert str(err.value) == "--junit /proc/cpbcg-junit.xml: cannot create a file in /proc (No such file or directory)"


def test_the_writability_probe_leaves_nothing_behind(tmp_path):
    check_outputs({"-o": tmp_path / "out.yaml"})
    assert list(tmp_path.iterdir()) == []
