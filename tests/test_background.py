"""`Background` runs work in a forked child and gives the same answer as running it in place."""

import os
import signal

import numpy as np
import pytest

from cpbcg.errors import ModelError
from cpbcg.planner import background
from cpbcg.planner.background import Background

needs_fork = pytest.mark.skipif(not background.can_fork(), reason="forking needs Linux and two usable CPUs")


def _pid_and_sum(values):
    return os.getpid(), int(np.sum(values))


def _fails():
    raise ModelError("no bucket fits")


def _dies():
    os.kill(os.getpid(), signal.SIGKILL)


@needs_fork
def test_work_runs_in_a_child_and_returns_its_value():
    job = Background(_pid_and_sum, np.arange(10))
    assert job.forked
    pid, total = job.result()
    assert pid != os.getpid() and total == 45


@needs_fork
def test_child_errors_are_raised_in_the_parent():
    job = Background(_fails)
    with pytest.raises(ModelError, match="no bucket fits"):
        job.result()


@needs_fork
def test_a_child_that_dies_is_redone_in_place():
    parent = os.getpid()

    def dies_in_the_child():
        if os.getpid() != parent:
            _dies()
        return "redone"

    job = Background(dies_in_the_child)
    assert job.forked and job.result() == "redone"


def test_cpbcg_jobs_1_runs_in_place(monkeypatch):
    monkeypatch.setenv(background.JOBS_ENV, "1")
    assert not background.can_fork()
    job = Background(_pid_and_sum, [1, 2])
    assert not job.forked and job.result() == (os.getpid(), 3)


def test_closed_before_the_result_still_answers():
    job = Background(_pid_and_sum, [4])
    job.close()
    assert job.result() == (os.getpid(), 4)
