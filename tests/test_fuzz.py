"""Hostile-input fuzzer: seeded generators of bad (and random) input on every input surface,
run in-process through `cpbcg.cli.main`.

Every case must end with exit code 0, 1 or 2, never a traceback or an uncaught exception,
never a hang (per-case `TIMEOUT_S`), an exit-2 error must be ONE line of at most 300
characters starting `cpbcg: error:`, the first line on stderr (plain text, naming the file it
blames where the case knows it), and an input of a known-bad kind must never be accepted (it must exit 2).

Fast by default (`DEFAULT_CASES` cases in CI, a quarter locally: `hypothesis_sizes.examples`). Long mode:
`CPBCG_FUZZ_CASES=10000 pytest tests/test_fuzz.py` (`CPBCG_FUZZ_SEED` picks another seed;
`CPBCG_FUZZ_REPORT=path` writes every failing case as JSON lines).

Surfaces: batch and request traces, every reader's valid and invalid files (plain, BOM, CRLF,
gzip, stdin, leading blank lines; a valid one must exit 0), configs, presets, bucket specs and
files, manifests, integer and float options, the other commands (layout, presets, --help,
batches --fold), output paths, environment. FIFOs and /dev/zero given as a *trace* are left to
the trace readers' own tests (an in-process read of /dev/zero would fill memory before any
timeout fires); as configs, bucket files and manifests they are fuzzed here.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import sys
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from cpbcg.errors import MAX_MESSAGE_CHARS

import cpbcg.planner.traces.stdin as stdin_module
from cpbcg.cli import main
from hypothesis_sizes import examples
from test_fuzz_generators import ASSETS, DIR, FIFO, GOOD_TRACE, MOONCAKE, VALID_MANIFEST, Case, generate  # noqa: F401 (re-exported)

DEFAULT_CASES = examples(200)
TIMEOUT_S = 10
MAX_LINE = MAX_MESSAGE_CHARS

KNOWN_OPEN: dict[str, str] = {}
"""Tags of failures in code this fuzzer's author does not own, reported (not failed) until fixed:
delete a tag when its fix lands so that the fuzzer guards it."""


# ----------------------------------------------------------------------------- running


class _Timeout(BaseException):
    pass


class _Stdin(io.StringIO):
    """Standard input of a case: its bytes on `.buffer` (what `-t -` reads)."""

    def __init__(self, data: bytes):
        super().__init__("")
        self.buffer = io.BufferedReader(io.BytesIO(data))


def _alarm(signum, frame):  # noqa: ANN001
    raise _Timeout()


@dataclass
class Outcome:
    code: Optional[int]
    stdout: str
    stderr: str
    crash: Optional[str] = None
    left: tuple[str, ...] = ()
    """`case.absent` files that exist after the run."""


def run_case(case: Case, workdir: Path) -> Outcome:
    workdir.mkdir(parents=True)
    for name, body in case.files.items():
        path = workdir / name
        if body == FIFO:
            os.mkfifo(path)
        elif body == DIR:
            path.mkdir()
        else:
            path.write_bytes(body if isinstance(body, bytes) else str(body).encode("utf-8", "surrogatepass"))
    old_cwd, old_env, old_stdin = os.getcwd(), dict(os.environ), sys.stdin
    out, err = io.StringIO(), io.StringIO()
    code: Optional[int] = None
    crash = None
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        os.chdir(workdir)
        os.environ.update(case.env)
        sys.stdin = _Stdin(case.stdin or b"")
        stdin_module._tap = None  # a fresh standard input per case
        signal.setitimer(signal.ITIMER_REAL, TIMEOUT_S)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(case.argv))
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except _Timeout:
        crash = f"hang: no result within {TIMEOUT_S} s"
    except BaseException as exc:  # noqa: BLE001 - any escape is the finding
        crash = "".join(traceback.format_exception_only(type(exc), exc)).strip()[-500:]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sys.stdin = old_stdin
        os.environ.clear()
        os.environ.update(old_env)
        os.chdir(old_cwd)
        left = tuple(name for name in case.absent if (workdir / name).exists())
        shutil.rmtree(workdir, ignore_errors=True)
    return Outcome(code, out.getvalue(), err.getvalue(), crash, left)


def problems(case: Case, result: Outcome) -> list[str]:
    """Everything wrong with one run (empty: the case passed)."""
    if result.crash is not None:
        return [f"uncaught: {result.crash}"]
    found = []
    if result.code not in (0, 1, 2):
        found.append(f"exit code {result.code!r}")
    if "Traceback (most recent call last)" in result.stdout + result.stderr:
        found.append("traceback printed")
    errors = [line for line in result.stderr.splitlines() if "cpbcg: error:" in line]
    if case.bad and result.code != 2:
        found.append(f"bad input accepted: exit {result.code}")
    if case.good and result.code != 0:
        found.append(f"valid input refused: exit {result.code}: {result.stderr.strip().splitlines()[-1:]}")
    if result.left:
        found.append(f"output left behind by a failed command: {', '.join(result.left)}")
    if result.code == 0:
        found += [f"not said: {text!r}" for text in case.expect if text not in result.stdout + result.stderr]
    if result.code == 2:
        if len(errors) != 1:
            found.append(f"{len(errors)} error lines")
        first = result.stderr.splitlines()[:1]
        # one refusal path: the error is the first thing a user reads (not for bare `cpbcg`, whose help
        # comes first, nor for an output that fails to be written once the answer was shown)
        if errors and first != errors[:1] and case.argv and case.surface != "output":
            found.append(f"error not the first stderr line (first: {first[0][:80]!r})")
        for line in errors:
            if not line.startswith("cpbcg: error: "):
                found.append(f"error line does not start with 'cpbcg: error: ': {line[:80]!r}")
            if len(line) > MAX_LINE:
                found.append(f"error line of {len(line)} characters")
            if "\x1b" in line:
                found.append("escape codes in the error line")
            if case.place and case.place not in line:
                found.append(f"error does not name {case.place!r}")
    elif errors:
        found.append(f"exit {result.code} with an error line")
    return found


def fuzz(count: int, seed: int, root: Path) -> tuple[Counter, list[dict]]:
    tally: Counter = Counter()
    failures: list[dict] = []
    for index, case in enumerate(generate(count, seed)):
        result = run_case(case, root / f"case{index}")
        found = problems(case, result)
        tally[(case.surface, "bad" if case.bad else "any", result.code if result.crash is None else "crash")] += 1
        if found:
            failures.append({
                "index": index, "surface": case.surface, "argv": [a[:200] for a in case.argv], "env": case.env,
                "files": {k: (v if v in (FIFO, DIR) else repr(v)[:200]) for k, v in case.files.items()},
                "note": case.note, "tag": case.tag, "problems": found, "stderr": result.stderr[-400:],
            })
    return tally, failures


def test_fuzz_hostile_inputs(tmp_path):
    count = int(os.environ.get("CPBCG_FUZZ_CASES", DEFAULT_CASES))
    seed = int(os.environ.get("CPBCG_FUZZ_SEED", 20261201))
    tally, failures = fuzz(count, seed, tmp_path)
    report = os.environ.get("CPBCG_FUZZ_REPORT")
    if report:
        with open(report, "w") as handle:
            for row in failures:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            handle.write(json.dumps({"tally": {" ".join(map(str, k)): v for k, v in sorted(tally.items(), key=str)}}) + "\n")
    open_issues = [f for f in failures if f["tag"] in KNOWN_OPEN]
    for tag in sorted({f["tag"] for f in open_issues}):
        print(f"known open ({tag}): {sum(f['tag'] == tag for f in open_issues)} case(s): {KNOWN_OPEN[tag]}")
    new = [f for f in failures if f["tag"] not in KNOWN_OPEN]
    assert sum(tally.values()) == count
    assert not new, f"{len(new)} of {count} cases failed; first: " + json.dumps(new[:3], ensure_ascii=False, indent=1)


def test_generator_is_seeded_and_covers_every_surface():
    first, again = generate(400, 7), generate(400, 7)
    assert [c.argv for c in first] == [c.argv for c in again]
    assert {c.surface for c in first} == {"config", "config-path", "bucket-spec", "bucket-file", "manifest", "manifest-path", "option", "output",
                                          "env", "trace", "reader", "command", "round4", "round5"}
    assert any(c.stdin for c in first) and sum(c.good for c in first) > 20
    assert sum(c.bad for c in first) > 250


@pytest.mark.parametrize(
    "case, expected",
    [
        (Case("t", ["plan", "-t", "missing.jsonl"], True, place="missing.jsonl"), []),
        (Case("t", ["plan", "-t", GOOD_TRACE], True), ["bad input accepted: exit 0"]),
        (Case("t", ["plan", "-t", "missing.jsonl"], True, place="elsewhere.jsonl"), ["error does not name 'elsewhere.jsonl'"]),
    ],
)
def test_the_checks_can_fail(tmp_path, case, expected):
    """The fuzzer's own checks: a case that must fail is reported, one that must pass is not."""
    assert problems(case, run_case(case, tmp_path / "c")) == expected
