"""Option values coerced without pydantic where the answer is plain, so a command run pays
neither for importing pydantic nor for one `TypeAdapter` per option (about 0.1 s of `cpbcg plan`).

typer 0.29 coerces every option value through a pydantic `TypeAdapter` built per option
(`typer._coercion.build_runtime_param`), even an option left unset (`None`). `quick_coercion`
gives each option of a built command a runtime coercion that answers the plain cases itself,
exactly as typer's adapter would (with a typer whose parameters carry no `_runtime_param`,
it leaves them as they are: typer coerces them itself):

- an unset option: `None` (a repeatable one: `()`), as `RuntimeParam.coerce` answers first;
- an option with a `parser=`: the parser's value (a list option: one per item, in a list);
- an `Enum` choice: typer's own `coerce_cli_choice`;
- a `str`: the text; an `int` within its bounds: the number (the text of a plain decimal).

Anything else, and any case where the plain answer raises, goes to typer's own adapter (built
then, once), so every error message is typer's. The parsers are pure functions, so running one
again on that path changes nothing. tests/test_cli_coerce.py compares both on every option.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import TYPE_CHECKING, Any, Optional, get_args, get_origin

if TYPE_CHECKING:  # typer vendors click (its Command and Context); only typer's private modules name it
    import typer._click as click

_PLAIN_INT = re.compile(r"(?:0|[1-9][0-9]{0,17})\Z")
"""A decimal that pydantic's lax `int` and Python's `int` read alike (no sign, space or `_`)."""

_NO = object()


class QuickCoercion:
    """A typer parameter's runtime coercion (duck-typed `typer._coercion.RuntimeParam`): the
    plain cases answered here, the rest by typer's own (`build_runtime_param`), built on first need."""

    def __init__(self, param: Any) -> None:
        self._descriptor = param.type_descriptor
        self._full: Any = None

    def full(self) -> Any:
        """typer's own runtime coercion of this parameter (it imports pydantic)."""
        if self._full is None:
            from typer._coercion import build_runtime_param

            self._full = build_runtime_param(self._descriptor)
        return self._full

    def coerce(self, value: Any, param: Any, ctx: click.Context) -> Any:
        """The coerced value, as `RuntimeParam.coerce` gives it."""
        several = param.multiple or param.nargs == -1
        if value is None:
            return () if several else None
        if several and isinstance(value, str):  # typer's error
            return self.full().coerce(value, param=param, ctx=ctx)
        try:
            quick = self._quick(value, ctx)
        except Exception:  # typer's adapter raises its own error for it
            quick = _NO
        return self.full().coerce(value, param=param, ctx=ctx) if quick is _NO else quick

    def _quick(self, value: Any, ctx: click.Context) -> Any:
        desc = self._descriptor
        info = desc.parameter_info
        annotation = desc.annotation
        if desc.file_annotation is not None:
            return _NO
        if info.parser is not None:
            if get_origin(annotation) is list and len(get_args(annotation)) == 1:
                return [info.parser(item) for item in (value if isinstance(value, (list, tuple)) else [value])]
            return _NO if get_origin(annotation) is not None else info.parser(value)
        if isinstance(annotation, type) and issubclass(annotation, Enum):
            from typer._param_types import coerce_cli_choice

            return coerce_cli_choice(value, choices=list(annotation), case_sensitive=info.case_sensitive, ctx=ctx)
        if annotation is str:
            return value if type(value) is str else _NO
        if annotation is int and not info.clamp:
            number = _plain_int(value)
            if number is None or (info.min is not None and number < info.min) or (info.max is not None and number > info.max):
                return _NO
            return number
        return _NO


def _plain_int(value: Any) -> Optional[int]:
    """`value` as pydantic's lax `int` reads it, where that is plain: an `int` (not a bool) or the
    text of a plain decimal; else None."""
    if type(value) is int:
        return value
    if type(value) is str and _PLAIN_INT.match(value):
        return int(value)
    return None


def quick_coercion(command: click.Command) -> click.Command:
    """Give each typer parameter of `command`, its `--help` included (made on first use), a
    `QuickCoercion` (typer builds its own lazily, so none is built yet); a parameter typer does
    not coerce this way is left as it is."""
    for param in command.params:
        _give(param)
    if getattr(command, "_quick_coercion", False):  # its --help is given one already
        return command
    command._quick_coercion = True  # type: ignore[attr-defined]
    help_option = command.get_help_option

    def get_help_option(ctx: click.Context) -> Any:
        option = help_option(ctx)
        if option is not None:
            _give(option)
        return option

    command.get_help_option = get_help_option  # type: ignore[method-assign]
    return command


def _give(param: Any) -> None:
    if getattr(param, "_runtime_param", _NO) is None and hasattr(param, "type_descriptor"):
        param._runtime_param = QuickCoercion(param)
