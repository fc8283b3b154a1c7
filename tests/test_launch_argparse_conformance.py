"""A launch command's words as SGLang 0.5.23's own argparse takes them (issue 39): `allow_abbrev`
prefixes (`--tp 4` is `--tp-size 4`), aliases (`--tensor-parallel-size`), ambiguous prefixes (exit 2
with argparse's message) and unknown flags, against the wheel's parser (`ServerArgs.add_cli_args`,
built in a subprocess as tests/test_sglang_flags_conformance.py builds it; needs torch, skips without).
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cpbcg.cli import app

from cpbcg.engines.sglang.startup import MODELLED_FLAGS, parse_launch_words
from cpbcg.engines.sglang.startup.args import OPTION_DEST
from sglang_oracle import sglang_wheel  # noqa: F401 - fixture
from test_sglang_flags_conformance import ENUMERATE as _ENUMERATE

_PARSE = _ENUMERATE.replace(
    'print("\\n".join(sorted({o for a in parser._actions for o in a.option_strings if o.startswith("--")})))', '''
import contextlib, io, json
out = {"dest": {o: a.dest for a in parser._actions for o in a.option_strings if o.startswith("--")}, "runs": []}
for words in json.loads(sys.stdin.read()):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns, rest = parser.parse_known_args(["--model-path", "m", *words])
        values = {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in vars(ns).items()}
        out["runs"].append({"values": values, "rest": rest})
    except SystemExit as e:
        out["runs"].append({"exit": e.code, "error": err.getvalue().strip().splitlines()[-1]})
print(json.dumps(out, default=str))
''')
assert _PARSE != _ENUMERATE

OPTIONS = {  # modelled options and a value each takes
    "--tp-size": "4", "--attn-cp-size": "2", "--pp-size": "2", "--dp-size": "2", "--ep-size": "2", "--page-size": "16",
    "--chunked-prefill-size": "8192", "--max-prefill-tokens": "16384", "--cp-strategy": "zigzag", "--attention-backend": "fa3",
    "--prefill-attention-backend": "trtllm_mha", "--enable-prefill-cp": None, "--disable-cuda-graph": None,
    "--cuda-graph-max-bs-prefill": "4096", "--max-running-requests": "64", "--attn-dp-size": "2", "--dcp-size": "2",
    "--tensor-parallel-size": "8", "--attention-context-parallel-size": "4", "--expert-parallel-size": "2", "--ep": "4",
    "--enable-mixed-chunk": None, "--max-total-tokens": "100000", "--moe-a2a-backend": "deepep",
}


def _launches(n: int, seed: int = 39) -> list[list[str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words: list[str] = []
        for option in rng.sample(sorted(OPTIONS), rng.randint(1, 4)):
            cut = option if rng.random() < 0.4 else option[:rng.randint(4, len(option))]  # a prefix, maybe ambiguous
            value = OPTIONS[option]
            words += [cut] if value is None else [f"{cut}={value}"] if rng.random() < 0.2 else [cut, value]
        out.append(words)
    return out


def test_launch_words_parse_as_0523s_argparse(sglang_wheel):  # noqa: F811
    pytest.importorskip("torch", reason="SGLang 0.5.23's server_args imports torch; the parser is built where torch is installed")
    launches = _launches(400) + [["--tp", "4"], ["--page", "16"], ["--cuda-graph-max-bs", "256"], ["--enable-prefill", "--ep", "2"]]
    run = subprocess.run([sys.executable, "-c", _PARSE, str(sglang_wheel)], input=json.dumps(launches), capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    found = json.loads(run.stdout)
    # every alias the resolution reads is the wheel's
    assert {o: d for o, d in found["dest"].items() if d in MODELLED_FLAGS and o[2:].replace("-", "_") != d} == OPTION_DEST
    ambiguous = resolved_prefixes = 0
    for words, want in zip(launches, found["runs"]):
        unknown: list[str] = []
        got = parse_launch_words(words, unrecognized=unknown)
        refused = [u for u in unknown if u.startswith("ambiguous option: ")]  # an ambiguous prefix: a refusal, as unrecognized ones
        if refused:
            assert "exit" in want and "ambiguous option" in want["error"], (words, refused, want)
            # argparse's message, its candidates listed sorted (argparse lists them in registration order)
            mine, theirs = refused[0].partition("ambiguous option: ")[2], want["error"].partition("ambiguous option: ")[2]
            assert mine.partition(" could match ")[0] == theirs.partition(" could match ")[0], (words, mine, theirs)
            assert sorted(mine.partition(" could match ")[2].split(", ")) == sorted(theirs.partition(" could match ")[2].split(", "))
            ambiguous += 1
            continue
        assert "exit" not in want, (words, got, want)
        assert bool(unknown) == bool(want["rest"]), (words, unknown, want["rest"])
        for key, given in got.items():
            if key in MODELLED_FLAGS:
                value = list(given.value) if isinstance(given.value, tuple) else given.value
                assert str(want["values"][key]) == str(value), (words, key, value, want["values"][key])
        resolved_prefixes += any(w.partition("=")[0] not in OPTIONS for w in words if w.startswith("--"))
    assert ambiguous >= 20 and resolved_prefixes >= 100  # both kinds are exercised


def test_tp_is_tp_size_and_page_is_ambiguous():
    assert parse_launch_words(["--tp", "4", "--attn-cp", "4", "--tensor-parallel-size=8"])["tp_size"].value == 8
    assert parse_launch_words(["--tp", "4"])["tp_size"].value == 4
    with pytest.raises(ValueError, match=r"^SGLang 0.5.23 would exit 2: ambiguous option: --page could match --page-size, "
                                         r"--paged-experts-num-resident$"):
        parse_launch_words(["--page", "16"])
    with pytest.raises(ValueError, match="ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
                                         "--cuda-graph-max-bs-prefill"):
        parse_launch_words(["--cuda-graph-max-bs", "256"])


def test_the_retired_prefill_graph_backend_is_refused_as_0523_refuses_it():
    """0.5.23 keeps `tc_piecewise` only as a name to refuse (`parse_cuda_graph_backend_arg`,
    `CudaGraphConfig.from_dict`); the prefill backends it accepts are `Backend.ALL`."""
    import argparse

    from sglang_oracle import definitions

    from cpbcg.engines.sglang.startup.args import PREFILL_GRAPH_BACKENDS, RETIRED_GRAPH_BACKEND

    ns = definitions("sglang/srt/model_executor/cuda_graph_config.py", ["Backend", "parse_cuda_graph_backend_arg"],
                     {"argparse": argparse})
    assert PREFILL_GRAPH_BACKENDS == set(ns["Backend"].ALL)
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{RETIRED_GRAPH_BACKEND}$"):
        ns["parse_cuda_graph_backend_arg"]("tc_piecewise")
    for words in ("--cuda-graph-backend-prefill tc_piecewise", """--cuda-graph-config '{"prefill": {"backend": "tc_piecewise"}}'"""):
        result = CliRunner().invoke(app, ["check-server", "--server-args", f"python -m sglang.launch_server --model-path m {words}"])
        assert result.exit_code == 2 and result.stderr.strip().endswith(RETIRED_GRAPH_BACKEND), result.output
