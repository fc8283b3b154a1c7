"""`cpbcg check-server`: what SGLang 0.5.23 does with a launch command, before deploying it.

parse (`CheckServerOptions`, declared once in `cpbcg.commands.check_server_options`, and the server
group) -> call (`cpbcg.commands.check_server.check_server`) -> hand the verdict to its output
(`cpbcg.outputs.check_server.write`) -> exit 0 / 1 / 2.
"""

from __future__ import annotations

import typer

from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.options import ServerOptions, with_options
from cpbcg.commands.check_server_options import CheckServerOptions


@app.command("check-server")
@error_boundary
@with_options(options=CheckServerOptions, server=ServerOptions)
def check_server(*, options: CheckServerOptions, server: ServerOptions) -> None:
    """Say what SGLang 0.5.23 would do with a launch command on a model and a GPU: start or
    refuse (which check, its message), capture CP prefill graphs or not and why, and the
    resolved page size, chunk and prefill graph list (as captured, rounded). Exit 0 when it
    starts with CP prefill graphs, 1 when it would refuse to start (SGLang's argparse refusing an
    unrecognized flag or an ambiguous prefix such as `--page` included) or run without them, 2 for
    bad input (a file that cannot be read, a bad value of a flag cpbcg resolves).

    Example: `cpbcg check-server --server-args "python -m sglang.launch_server --model-path m --tp-size 4
    --attn-cp-size 4 --enable-prefill-cp --cp-strategy zigzag" --gpu B200 --model-config config.json`
    """
    from cpbcg.commands import check_server as check_server_use_case
    from cpbcg.outputs.check_server import write

    verdict = check_server_use_case.check_server(options.config, server.overrides())
    write(verdict, options.output_format)
    raise typer.Exit(verdict.exit_code)
