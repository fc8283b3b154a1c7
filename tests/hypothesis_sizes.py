"""Example counts of the property tests: the full count in CI (`CI=true`, which GitHub Actions
and .ci/run set), a quarter of it (at least 20) in a developer's run, so that a local
`python -m pytest` stays cheap while CI searches as widely as before (issue 44)."""

import os

FULL = os.environ.get("CI", "").strip().lower() in ("true", "1")


def examples(full: int) -> int:
    """`full` in CI, else a quarter of it (at least 20, never more than `full`)."""
    return full if FULL else min(full, max(20, full // 4))


def seeds(full: int) -> range:
    """Seeds of a parametrized random-case test: all `full` in CI, else a quarter (at least one)."""
    return range(full if FULL else max(1, full // 4))
