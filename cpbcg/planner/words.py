"""Counted nouns in messages: `counted(1, "request")` is "1 request", `counted(2, "request")`
"2 requests" (thousands separated)."""

from __future__ import annotations


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """`number` and `noun`, plural unless `number` is 1 (`plural`, default `noun + "s"`)."""
    word = noun if number == 1 else (plural if plural is not None else noun + "s")
    return f"{number:,} {word}"
