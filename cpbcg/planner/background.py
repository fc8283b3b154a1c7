"""Run one independent piece of work on a second core while the caller does its own.

`plan`'s recommendation fits two lists: one on the first part of the trace (the out-of-sample
check) and one on the whole trace. They share nothing, so `Background(fn, *args)` runs the
first in a forked child process while the parent fits the second, and `result()` returns the
child's value (or re-raises its exception). Forking copies the parent's memory lazily, so the
child reads the aggregated demand without pickling it; only the small result comes back
through a pipe.

The work runs in the caller instead (at `result()`, same value) when forking is unavailable
(not Linux), when this process may use a single CPU, when `CPBCG_JOBS=1`, or when the child
dies without an answer (killed, out of memory). Results are the same either way: the child runs
the same deterministic code on the same arrays.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import warnings
from multiprocessing.connection import Connection
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")

JOBS_ENV = "CPBCG_JOBS"
"""Environment variable: processes `plan` may use; `1` runs everything in one process (the CLI
drops a value that is not a whole number from 1 to 1024, with a warning)."""


def can_fork() -> bool:
    """Whether `Background` will use a child process here (Linux, two or more usable CPUs, not
    disabled by `CPBCG_JOBS=1`)."""
    if os.environ.get(JOBS_ENV, "").strip() == "1" or not sys.platform.startswith("linux"):
        return False
    return len(os.sched_getaffinity(0)) >= 2


class Background(Generic[T]):
    """`fn(*args)` started in a forked child now (see the module doc); `result()` waits for it."""

    def __init__(self, fn: Callable[..., T], *args: Any):
        self._fn, self._args = fn, args
        self._process = None
        if can_fork():
            context = multiprocessing.get_context("fork")
            for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
                stream.flush()
            self._receive, send = context.Pipe(duplex=False)
            self._process = context.Process(target=_child, args=(send, fn, args), daemon=True)
            with warnings.catch_warnings():  # numpy's idle BLAS threads do not run in the child
                warnings.simplefilter("ignore", DeprecationWarning)
                self._process.start()
            send.close()

    @property
    def forked(self) -> bool:
        """Whether the work runs in a child process."""
        return self._process is not None

    def result(self) -> T:
        """The value of `fn(*args)`; its exception is raised here."""
        if self._process is None:
            return self._fn(*self._args)
        try:
            status, value = self._receive.recv()
        except Exception:  # the child died without an answer, or it cannot be read: work here
            status, value = "retry", None
        finally:
            self.close()
        if status == "retry":
            return self._fn(*self._args)
        if status == "error":
            raise value
        answer: T = value  # what the child's `fn(*args)` returned, through the pipe
        return answer

    def close(self) -> None:
        """Stop the child if it still runs (idempotent)."""
        if self._process is None:
            return
        process, self._process = self._process, None  # a later result() computes here
        self._receive.close()
        if process.is_alive():
            process.terminate()
        process.join()

    def __enter__(self) -> "Background[T]":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _child(send: Connection, fn: Callable[..., object], args: tuple[object, ...]) -> None:
    sys.stdout = sys.stderr = open(os.devnull, "w")  # the child never writes to the terminal
    try:
        send.send(("ok", fn(*args)))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
        try:
            send.send(("error", exc))
        except Exception:  # an exception that cannot be pickled: the parent recomputes
            pass
    finally:
        send.close()
