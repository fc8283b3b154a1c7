"""SGLang 0.5.23: everything that is that release's (launch parser, start-up resolution, graph
phases and their capture lists, logs, deploy flags, metric names). Each rule cites the 0.5.23
function it restates; `tests/sglang_oracle.py` runs the released code against it."""
