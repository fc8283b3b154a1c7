"""Seeded generators of hostile input for `tests/test_fuzz.py`, one per input surface.

Each generator returns a `Case`: the command line, the files to create in the case's directory,
the environment, whether the input is known-bad (must exit 2), the file the error must name,
and a `KNOWN_OPEN` tag (see test_fuzz.py) when the case exercises an issue still open in code
this module's author does not own.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

ASSETS = Path(__file__).parent / "assets"
GOOD_TRACE = str(ASSETS / "traces" / "good.jsonl")
MOONCAKE = str(ASSETS / "requests" / "mooncake.jsonl")
VALID_MANIFEST = json.loads((ASSETS / "manifests" / "valid.json").read_text())
FIFO, DIR = "<fifo>", "<dir>"
"""Special file contents: make a FIFO or a directory at that name."""


@dataclass
class Case:
    surface: str
    argv: list[str]
    bad: bool
    """A known-bad input: must exit 2."""
    files: dict[str, object] = field(default_factory=dict)
    """Name (relative to the case directory) -> bytes, str, FIFO or DIR."""
    env: dict[str, str] = field(default_factory=dict)
    place: Optional[str] = None
    """Text the exit-2 error line must contain (the file it blames)."""
    absent: tuple[str, ...] = ()
    """Files that must not exist after the run (outputs of a command that failed)."""
    tag: Optional[str] = None
    """A `KNOWN_OPEN` tag when the case exercises a known open issue."""
    note: str = ""
    good: bool = False
    """A known-valid input: must exit 0 (a refusal is a finding)."""
    stdin: Optional[bytes] = None
    """Bytes on standard input (`-t -`); None = empty."""
    expect: tuple[str, ...] = ()
    """Texts the output (stdout and stderr) must hold when the case succeeds (a note that must be
    said, a number that must come out): a silent accept or a wrong number is a finding."""


# ----------------------------------------------------------------------------- values

HUGE = ["9" * 5000, "18446744073709551616", "9223372036854775808", str(2**31), "1" + "0" * 25]
BAD_INT_YAML = ["0", "-1", "1.5", "true", "'4'", '"\u00b2"', "[4]", "{a: 1}", ".nan", "abc", *HUGE]
BAD_FLOAT_YAML = ["-1", ".nan", ".inf", "-.inf", "'2.0'", "true", "[1.0]", "{a: 1}", "1e999", "x"]
BAD_ENUM_YAML = ["ring", "''", "1", "[zigzag]", "{a: b}", "null", '"\u00b2"', "z" * 3000]
RANDOM_SCALARS = ["0", "1", "-1", "2", "8", "4096", "1e3", "null", "~", "yes", "no", "''", "' '", "[]", "{}", "0x10", "0o17", "1_000", "+5"]


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _alias_bomb(levels: int = 8, fan: int = 9) -> str:
    names = [f"l{i}" for i in range(levels + 1)]
    lines = [f"  {names[0]}: &{names[0]} [" + ",".join(["x"] * fan) + "]"]
    lines += [f"  {names[i]}: &{names[i]} [" + ",".join([f"*{names[i - 1]}"] * fan) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


CONFIG_KEYS: dict[str, list[str]] = {
    "cp_size": BAD_INT_YAML + ["1025", "null"],
    "cp_strategy": BAD_ENUM_YAML,
    "align_size": [v for v in BAD_INT_YAML if v not in ("[4]",)] + ["4194305"],
    "max_padding_factor": BAD_FLOAT_YAML + ["0.5", "101", "null"],
    "capture_layout": BAD_ENUM_YAML,
    "max_context_size_tokens": BAD_INT_YAML,
    "max_capture_requests": BAD_INT_YAML + ["4194305"],
    "buckets": [
        "''", "nope:5", "'sglang-default:0'", "'sglang-default:\u00b2'", "'2048,\u00b2'", "'2048,\u0663'", "/dev/zero",
        "[]", "[0]", "[-1]", "[4194305]", "[true]", "[1.5]", "{a: 1}", "[4]", "'2048,,4096'", "'x" + "y" * 3000 + "'",
        "[" + "9" * 5000 + "]", _deep(200), "'" + ",".join(["2048"] * 5) + ",-8'",
    ],
    "scheduler.chunked_prefill_size": [v for v in BAD_INT_YAML if v != "-1"] + ["-2"],  # -1: no chunking
    "scheduler.max_prefill_tokens": BAD_INT_YAML,
    "scheduler.prefill_max_requests": BAD_INT_YAML,
    "scheduler.max_running_requests": BAD_INT_YAML,
    "scheduler.prefix_cache": ["sometimes", "0", "-5", '"\u00b2"', "1.5", str(2**31), "[1]", "9" * 5000],
    "scheduler.rate": BAD_FLOAT_YAML + ["0"],
    "scheduler.time_scale": BAD_FLOAT_YAML + ["0", "1e-320", "1000001"],
    "scheduler.prefill_tokens_per_s": BAD_FLOAT_YAML + ["0"],
    "scheduler.prefill_fixed_ms": BAD_FLOAT_YAML + ["1000000.1"],
    "scheduler.seed": ["-1", str(2**63), "1.5", "abc", "9" * 5000],
    "scheduler.max_total_tokens": ["0", "-1", "99999999999999999999", str(2**62 + 1), str(2**63), str(2**64 - 1), "1.5", "x"],
    "scheduler.new_token_ratio_decay_steps": ["0", "-1", "99999999999999999999", str(2**31), "1.5"],
    "scheduler.clip_max_new_tokens": ["0", "-1", "99999999999999999999", str(2**31), "1.5"],
    "scheduler.decode_fixed_ms": BAD_FLOAT_YAML + ["1000000.1"],
    "scheduler.decode_ms_per_request": BAD_FLOAT_YAML + ["1000000.1"],
    "gates.min_coverage": ["-0.1", "1.5", "x", ".nan", "[0.5]"],
    "gates.max_padding": ["-0.1", "x", ".nan", ".inf"],
    "gates.max_eager": ["{slow: 1}", "{local_capacity: -1}", "{local_capacity: " + str(2**63) + "}", "{local_capacity: 1.5}", "[1]", "x"],
    "cost.graph_fixed_ms": BAD_FLOAT_YAML,
    "cost.eager_fixed_ms": BAD_FLOAT_YAML,
    "cost.token_ms": BAD_FLOAT_YAML,
    "cp_sise": ["4"],
    "scheduler.ratee": ["1.0"],
}
"""Config key -> YAML values that are known-bad there."""

BASE_CONFIG = {
    "cp_size": "4", "cp_strategy": "zigzag", "max_padding_factor": "2.0", "buckets": "'2048,4096,8192'",
    "scheduler.chunked_prefill_size": "8192", "scheduler.max_prefill_tokens": "16384", "gates.min_coverage": "0.0",
}


def render_config(values: dict[str, str], tabs: bool = False) -> str:
    top = {k: v for k, v in values.items() if "." not in k}
    sections: dict[str, dict[str, str]] = {}
    for key, value in values.items():
        if "." in key:
            head, rest = key.split(".", 1)
            sections.setdefault(head, {})[rest] = value
    lines = [f"{k}: {v}" for k, v in top.items()]
    indent = "\t" if tabs else "  "
    for head, items in sections.items():
        lines.append(f"{head}:")
        lines += [f"{indent}{k}: {v}" for k, v in items.items()]
    return "\n".join(lines) + "\n"


def _config_command(rng: random.Random, cfg: str) -> list[str]:
    return rng.choice([
        ["plan", "-c", cfg, "-t", GOOD_TRACE, "-k", "2"],
        ["plan", "-c", cfg, "-t", GOOD_TRACE, "-f", "json"],
        ["batches", "-c", cfg, "-t", MOONCAKE, "-o", "out.jsonl"],
        ["replay-check", "-c", cfg, "-t", GOOD_TRACE],
        ["layout", "-c", cfg, "1534", "161", "353"],
    ])


# ----------------------------------------------------------------------------- generators


def gen_config(rng: random.Random) -> Case:
    values = dict(BASE_CONFIG)
    kind = rng.random()
    name = "cfg.yaml"
    files: dict[str, object] = {}
    if kind < 0.6:
        key = rng.choice(sorted(CONFIG_KEYS))
        value = rng.choice(CONFIG_KEYS[key])
        values[key] = value
        bad = value not in ("null",) or key in ("cp_size", "cp_strategy", "capture_layout", "max_padding_factor")
        files[name] = render_config(values)
        note = f"{key}: {value[:60]}"
    elif kind < 0.7:
        key = rng.choice(sorted(BASE_CONFIG))
        values[key] = rng.choice(RANDOM_SCALARS)
        files[name], bad, note = render_config(values), False, f"{key}: {values[key]} (random)"
    else:
        text, bad, note = rng.choice(STRUCTURAL)(rng, values)
        files[name] = text
    # a random value may be valid and leave the command to refuse something else (replay-check
    # without gates when `gates.min_coverage: null`): only a known-bad file must be named
    return Case("config", _config_command(rng, name), bad, files, place=name if bad else None, note=note)


def _s_duplicate(rng, values):
    key = rng.choice([k for k in values if "." not in k])
    return render_config(values) + f"{key}: {values[key]}\n", True, f"duplicate {key}"


def _s_bomb(rng, values):
    where = rng.choice(["scheduler", "buckets", "gates"])
    if where == "buckets":
        return render_config({k: v for k, v in values.items() if k != "buckets"}) + "bomb:\n" + _alias_bomb() + "buckets: *l8\n", True, "alias bomb (buckets)"
    return render_config(values).replace(f"{where}:\n", f"{where}:\n" + _alias_bomb(), 1) if f"{where}:\n" in render_config(values) else render_config(values) + f"{where}:\n" + _alias_bomb(), True, f"alias bomb ({where})"


def _s_deep(rng, values):
    return render_config(values) + "extra: " + _deep(rng.choice([100, 1000, 8192])) + "\n", True, "deep nesting"


def _s_tabs(rng, values):
    return render_config(values, tabs=True), True, "tab indentation"


def _s_binary(rng, values):
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))) + b"\xff", True, "binary"


def _s_truncate(rng, values):
    text = render_config(values)
    return text[: rng.randrange(len(text))], False, "truncated"


def _s_flip(rng, values):
    text = bytearray(render_config(values).encode())
    for _ in range(rng.randrange(1, 4)):
        text[rng.randrange(len(text))] = rng.randrange(32, 127)
    return bytes(text), False, "byte flips"


def _s_list(rng, values):
    return "- 1\n- 2\n", True, "top-level list"


def _s_python(rng, values):
    return "cp_size: !!python/object/apply:os.system ['echo pwned']\n", True, "python tag"


def _s_anchor_self(rng, values):
    return "buckets: &b [8, *b]\n", True, "recursive alias"


def _s_bom_crlf(rng, values):
    return ("\ufeff" + render_config(values)).replace("\n", "\r\n"), False, "BOM + CRLF"


STRUCTURAL: list[Callable] = [_s_duplicate, _s_bomb, _s_deep, _s_tabs, _s_binary, _s_truncate, _s_flip, _s_list, _s_python, _s_anchor_self, _s_bom_crlf]


def gen_config_path(rng: random.Random) -> Case:
    choice = rng.choice(["fifo", "dir", "/dev/zero", "missing", "nul"])
    files: dict[str, object] = {}
    if choice == "fifo":
        files["cfg.yaml"], path = FIFO, "cfg.yaml"
    elif choice == "dir":
        files["cfg.yaml"], path = DIR, "cfg.yaml"
    elif choice == "missing":
        path = "no-such.yaml"
    elif choice == "nul":
        path = "cfg\x00.yaml"
    else:
        path = "/dev/zero"
    return Case("config-path", _config_command(rng, path), True, files, place=path.split("\x00")[0], note=choice)


BAD_SPECS = [
    "", ",", "2048,\u00b2", "\u00b2", "2048,\u0663", "sglang-default:\u00b2", "sglang-default:0", "sglang-default:3",
    "sglang-default:" + "9" * 5000, "nope:5", "pow2:0", "vllm:-3", "2048,-1", "0", "-5", "2048,,4096", "4194305",
    "/dev/zero", "x" * 5000, "2048;4096", "2048 4096", "1e3", "0x800", "4", "2,3,4",  # (4,6 at cp 4 is [8] under 0.5.23: rounded, then filtered)
]


def gen_bucket_spec(rng: random.Random) -> Case:
    if rng.random() < 0.75:
        spec, bad = rng.choice(BAD_SPECS), True
        if spec in ("2048 4096",):  # spaces inside a number: refused
            bad = True
    else:
        spec = ",".join(str(rng.choice([rng.randrange(8, 9000), 2048, 4096])) for _ in range(rng.randrange(1, 600)))
        bad = False
    argv = rng.choice([["plan", "-t", GOOD_TRACE, "-b", spec], ["replay-check", "--report-only", "-t", GOOD_TRACE, "-b", spec], ["layout", "-b", spec, "100"]])
    return Case("bucket-spec", argv, bad, note=spec[:60])


BAD_BUCKET_FILES = [
    ("b.json", '{"prefill": {"bs": [8],\n "bs": [16]}}'), ("b.yaml", "capture_num_tokens: [8]\ncapture_num_tokens: [16]\n"),
    ("b.json", _deep(3000)), ("b.yaml", _deep(500)), ("b.json", "[8, 1" + "0" * 40 + "]"), ("b.yaml", "- 8\n- " + "9" * 5000 + "\n"),
    ("b.json", "[8, NaN]"), ("b.json", "[8, true]"), ("b.json", '{"prefill": {}}'), ("b.json", '{"prefill": {"max_bs": 0}}'),
    ("b.json", '{"prefill": {"max_bs": "\u00b2"}}'), ("b.yaml", ""), ("b.yaml", "prefill:\n\tbs: [8]\n"), ("b.json", "[]"),
    ("b.json", "[8, 1.5]"), ("b.json", "[8, -8]"), ("b.yaml", "bomb:\n" + _alias_bomb() + "capture_num_tokens: *l8\n"),
    ("b.json", b"\xff\xfe[8]"), ("b.yaml", FIFO), ("b.yaml", DIR), ("b.json", '{"capture_num_tokens": [8], "capture_num_tokens": [9]}'),
    ("f.txt", '--cuda-graph-bs-prefill "8 16\n'), ("f.txt", "--cuda-graph-bs-prefill 8 16 \\"), ("f.txt", "--cuda-graph-config '{\"prefill\": {\"bs\": [8]}}\n --attn-cp-size '2"),
    ("f.txt", "--cuda-graph-bs-prefill 8 +16\n"), ("b.yaml", "- 2\n- 3\n"),
]


def gen_bucket_file(rng: random.Random) -> Case:
    name, body = rng.choice(BAD_BUCKET_FILES)
    argv = rng.choice([["plan", "-t", GOOD_TRACE, "-b", name], ["replay-check", "--report-only", "-t", GOOD_TRACE, "-b", name]])
    return Case("bucket-file", argv, True, {name: body}, place=name, note=str(body)[:60])


def _manifest_mutations(rng: random.Random) -> tuple[object, str]:
    doc = json.loads(json.dumps(VALID_MANIFEST))
    i = rng.randrange(len(doc["buckets"]))
    mutations = [
        lambda: doc.update(cp_size=rng.choice([0, -1, 2**31, 2**63, "4", True, 1.5, None])),
        lambda: doc.update(cp_strategy=rng.choice(["ring", 3, None, ""])),
        lambda: doc.update(capture_layout=rng.choice(["ring", 3, None])),
        lambda: doc.update(align_size=rng.choice([0, -8, 2**63, "8"])),
        lambda: doc.update(schema_version=rng.choice([2, "1", None, 1.0])),
        lambda: doc.update(max_padding_factor=rng.choice([500, 0.5, "2", -1])),
        lambda: doc["buckets"][i].update(local_rows=rng.choice([2**63, 9223372036854775808, -1, 0, "x", 1.5, None, 10**19])),
        lambda: doc["buckets"][i].update(capture_num_tokens=rng.choice([2**63, -1, 0, "x", 1.5, 4])),
        lambda: doc["buckets"][i].update(replay_ms=rng.choice([-1, "fast", [1]])),
        lambda: doc["buckets"][i].update(verified=False),
        lambda: doc.pop(rng.choice(["schema_version", "cp_size", "cp_strategy", "align_size", "capture_layout", "buckets"])),
        lambda: doc.update(buckets=rng.choice([[], {}, "x", [1], [None]])),
        lambda: doc.update(model=rng.choice([None, [2], "tiny", 3])),
        lambda: doc["model"].update({rng.choice(["num_hidden_layers", "num_layers"]): rng.choice(["x", 0, -1, True, 1.5, 2**31, [2]])}),
    ]
    rng.choice(mutations)()
    return doc, "mutated"


def gen_manifest(rng: random.Random) -> Case:
    kind = rng.random()
    text: object
    if kind < 0.6:
        doc, note = _manifest_mutations(rng)
        text = json.dumps(doc, indent=2)
    else:
        base = json.dumps(VALID_MANIFEST, indent=2)
        text, note = rng.choice([
            (base.replace('"cp_size": 4,', '"cp_size": 4,\n  "cp_size": 8,', 1), "duplicate key"),
            (base.replace('"align_size": 8', '"align_size": ' + "9" * 5000, 1), "5000-digit int"),
            (base[: len(base) // 2], "truncated"),
            (_deep(3000), "deep"),
            ('{"x": ' + _deep(100) + "}", "deep-ish"),
            (base.replace("2.0", "NaN", 1), "NaN"),
            (b"\xff" + base.encode(), "not UTF-8"),
            (FIFO, "fifo"), (DIR, "dir"),
        ])
    argv = rng.choice([["replay-check", "--report-only", "--manifest", "m.json", "-t", GOOD_TRACE], ["plan", "-t", GOOD_TRACE, "--manifest", "m.json", "-k", "2"]])
    return Case("manifest", argv, True, {"m.json": text}, place="m.json", note=note)


def gen_manifest_path(rng: random.Random) -> Case:
    path = rng.choice(["does-not-exist.json", "/dev/zero", "."])
    argv = rng.choice([["plan", "-t", GOOD_TRACE, "--manifest", path], ["plan", "-t", GOOD_TRACE, "--manifest", path, "-k", "2"], ["replay-check", "--report-only", "-t", GOOD_TRACE, "--manifest", path]])
    tag = "unused-input" if argv[0] == "plan" and "-k" not in argv else None
    return Case("manifest-path", argv, True, place=path, tag=tag, note=path)


INT_OPTIONS = [  # (command prefix, option, least valid value)
    (["plan", "-t", GOOD_TRACE], "--cp-size", 1), (["plan", "-t", GOOD_TRACE], "--align-size", 1),
    (["plan", "-t", GOOD_TRACE], "--max-context-size", 1), (["plan", "-t", GOOD_TRACE], "--max-capture-requests", 1),
    (["plan", "-t", MOONCAKE], "--chunked-prefill-size", 1), (["plan", "-t", MOONCAKE], "--max-prefill-tokens", 1),
    (["plan", "-t", MOONCAKE], "--prefill-max-requests", 1), (["plan", "-t", MOONCAKE], "--max-running-requests", 1),
    (["plan", "-t", MOONCAKE], "--seed", 0), (["plan", "-t", GOOD_TRACE], "--max-buckets", 1),
    (["plan", "-t", GOOD_TRACE, "-k", "2"], "--max-tokens", 1), (["plan", "-t", GOOD_TRACE, "-k", "2"], "--bucket-multiple", 1),
    (["batches", "-t", MOONCAKE, "-o", "o.jsonl"], "--chunked-prefill-size", 1),
    (["layout", "100"], "--cp-size", 1),
]
BAD_INT_TEXT = ["\u00b2", "abc", "", "1.5", "1e3", "0x10", "9" * 5000, "18446744073709551616", "-5", "--", "4 4"]
FLOAT_OPTIONS = [
    (["plan", "-t", GOOD_TRACE], "--max-padding-factor"), (["plan", "-t", MOONCAKE], "--rate"), (["plan", "-t", MOONCAKE], "--time-scale"),
    (["plan", "-t", MOONCAKE], "--prefill-tokens-per-s"), (["plan", "-t", MOONCAKE], "--prefill-fixed-ms"),
    (["plan", "-t", GOOD_TRACE], "--graph-fixed-ms"), (["plan", "-t", GOOD_TRACE], "--token-ms"), (["replay-check", "-t", GOOD_TRACE], "--min-coverage"),
    (["plan", "-t", GOOD_TRACE], "--target-coverage"), (["plan", "-t", MOONCAKE], "--decode-fixed-ms"), (["plan", "-t", MOONCAKE], "--decode-ms-per-request"),
]
BAD_FLOAT_TEXT = ["nan", "inf", "-inf", "-1", "x", "1e999", "", "\u00b2", "1e300"]
"""Refused by every float option above (each is bounded on both sides, at most 1e12)."""
FLOAT_EXTRA_BAD = {"--time-scale": ["1e-320", "0", "1000001"], "--rate": ["1e-320", "0"], "--target-coverage": ["0", "-0.0", "1.0000001"],
                   "--prefill-tokens-per-s": ["0.5", "1e-320"], "--max-padding-factor": ["0.999", "-0.0"]}
"""Refused by one option: below or above its own bound."""
STRING_OPTIONS = [
    (["plan", "-t", GOOD_TRACE, "-k", "2", "--include"], ["\u00b2", "8192,\u00b2", "0", "-1", "abc", "4194305", "9" * 5000, "8192,x"]),
    (["replay-check", "-t", GOOD_TRACE, "--max-eager"], ["local_capacity=\u00b2", "local_capacity=-1", "slow=1", "local_capacity", "=3", "local_capacity=" + "9" * 5000, "local_capacity=\u0663"]),
    (["plan", "-t", MOONCAKE, "--prefix-cache"], ["sometimes", "0", "-5", "\u00b2", "9" * 5000, "1.5"]),
    (["plan", "-t", GOOD_TRACE, "--cp-strategy"], ["ring", "", "ZIGZAG "]),
    (["plan", "-t", GOOD_TRACE, "--trace-format"], ["parquet", "", "AUTO", "nope", "vllm_bench", " auto"]),
    (["plan", "-t", GOOD_TRACE, "--page-size", "16", "--trace-format"], ["", "AUTO", "Batches", "x" * 3000]),
]


def gen_option(rng: random.Random) -> Case:
    roll = rng.random()
    if roll < 0.45:
        prefix, option, least = rng.choice(INT_OPTIONS)
        value = rng.choice(BAD_INT_TEXT + [str(least - 1), str(least - 1000), "\u0663"])
        if option == "--chunked-prefill-size" and value == "-1":
            value = "-2"
        tag = None
        if option == "--bucket-multiple" and value in HUGE + ["9" * 5000]:
            tag = "option-bounds"
        return Case("option", [*prefix, option, value], True, tag=tag, note=f"{option} {value[:40]}")
    if roll < 0.5:  # --replay N > 0 runs a CPU capture (seconds): only values refused while parsing
        value = rng.choice(["abc", "-5", "\u00b2", "", "1.5"])
        return Case("option", ["replay-check", "-t", GOOD_TRACE, "--replay", value], True, note=f"--replay {value}")
    if roll < 0.7:
        prefix, option = rng.choice(FLOAT_OPTIONS)
        value = rng.choice(BAD_FLOAT_TEXT + FLOAT_EXTRA_BAD.get(option, []))
        return Case("option", [*prefix, option, value], True, note=f"{option} {value}")
    if roll < 0.9:
        prefix, values = rng.choice(STRING_OPTIONS)
        value = rng.choice(values)
        tag = None
        if prefix[-1] == "--include" and (value in ("4194305", "9" * 5000) or "\u00b2" in value):
            tag = "include-option"
        elif prefix[-1] == "--max-eager" and (value[-1] in "\u00b2\u0663" or len(value) > 4000):
            tag = "max-eager-option"
        return Case("option", [*prefix, value], True, tag=tag, note=f"{prefix[-1]} {value[:40]}")
    prefix, option, least = rng.choice(INT_OPTIONS)
    value = str(rng.choice([least, least + 1, 2, 8, 64, 4096]))
    return Case("option", [*prefix, option, value], False, note=f"{option} {value}")


def gen_output(rng: random.Random) -> Case:
    target, bad, files, tag = rng.choice([
        ("newdir/", True, {}, "output-slash"), ("d", True, {"d": DIR}, None), ("d/", True, {"d": DIR}, None),
        ("missing/x.out", True, {}, None), (".", True, {}, None), ("/dev/null", False, {}, None), ("ok.out", False, {}, None),
    ])
    argv = rng.choice([
        ["plan", "-t", GOOD_TRACE, "--emit", "yaml", "-o", target],
        ["replay-check", "--report-only", "-t", GOOD_TRACE, "--junit", target],
        ["replay-check", "--report-only", "-t", GOOD_TRACE, "--json", target],
        ["batches", "-t", MOONCAKE, "-o", target],
    ])
    if target == "d" and rng.random() < 0.2:
        argv = ["capture", "--cp-size", "2", "-b", "64", "-o", target]  # refused before torch is imported
    return Case("output", argv, bad, files, place=target.rstrip("/") or target, tag=tag if bad else None, note=f"{argv[0]} -> {target}")


def gen_outputs_together(rng: random.Random) -> Case:
    """Two outputs of one command, the second unwritable: neither may be left behind."""
    first = rng.choice(["--junit", "--json"])
    second = "--json" if first == "--junit" else "--junit"
    argv = ["replay-check", "--report-only", "-t", rng.choice([GOOD_TRACE, MOONCAKE]), first, "r.out", second, "/dev/full"]
    return Case("output", argv, True, place="/dev/full", absent=("r.out",), note=f"{first} r.out {second} /dev/full")


def gen_output_is_input(rng: random.Random) -> Case:
    return Case("output", ["batches", "-t", "t.jsonl", "-o", "t.jsonl"], True, {"t.jsonl": Path(MOONCAKE).read_bytes()}, place="t.jsonl", note="output = input")


ENV_VALUES = ["abc", "\u00b2", "-1", "0", "99999999999", "", " 80 ", "1e3", "80x", "\u0663\u0663"]


def gen_env(rng: random.Random) -> Case:
    env: dict[str, str] = {}
    files: dict[str, object] = {}
    for _ in range(rng.randrange(1, 4)):
        name = rng.choice(["CPBCG_WIDTH", "COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "TERM", "GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS"])
        if name == "GITHUB_STEP_SUMMARY":
            choice = rng.choice(["fifo", "dir", "/dev/zero", "missing/s.md", "s.md"])
            if choice == "fifo":
                files["s.md"], env[name] = FIFO, "s.md"
            elif choice == "dir":
                files["sd"], env[name] = DIR, "sd"
            else:
                env[name] = choice
        elif name in ("FORCE_COLOR", "NO_COLOR", "GITHUB_ACTIONS"):
            env[name] = rng.choice(["1", "true", "0", ""])
        elif name == "TERM":
            env[name] = rng.choice(["dumb", "xterm-256color", ""])
        else:
            env[name] = rng.choice(ENV_VALUES)
    argv, bad, place = rng.choice([
        (["presets"], False, None), (["plan", "-t", GOOD_TRACE], False, None), (["replay-check", "-t", GOOD_TRACE, "--min-coverage", "0"], False, None),
        (["plan", "-t", "missing.jsonl"], True, "missing.jsonl"), (["replay-check", "--report-only", "-t", GOOD_TRACE, "--cp-size", "0"], True, None),
        (["plan", "-t", GOOD_TRACE, "-b", "nope:5"], True, None), (["layout", "1534", "161", "353"], False, None),
    ])
    return Case("env", argv, bad, files, env=env, place=place, note=" ".join(f"{k}={v!r}" for k, v in env.items()))


BATCH_LINE_TAGS = {"[" * 1000 + "5" + "]" * 1000: "trace-deep", '{"extend_seq_lens": [0123]}': "trace-leading-zeros"}
NOT_BAD_BATCH_LINES = {'{"extend_seq_lens": [4194305]}'}
"""Legal data (eager above the largest bucket)."""
BAD_BATCH_LINES = [
    "[" * 1000 + "5" + "]" * 1000, '{"extend_seq_lens": [0123]}', '{"extend_seq_lens": [-5]}', '{"extend_seq_lens": [0]}',
    '{"extend_seq_lens": [1.5]}', '{"extend_seq_lens": [true]}', '{"extend_seq_lens": ["5"]}', '{"extend_seq_lens": []}',
    '{"extend_seq_lens": [NaN]}', '{"extend_seq_lens": [' + "9" * 5000 + "]}", '{"extend_seq_lens": [18446744073709551616]}',
    '{"extend_seq_lens": [5], "count": -1}', '{"extend_seq_lens": [5], "count": 0}', '{"extend_seq_lens": [5], "count": 1e30}',
    '{"extend_seq_lens": 5}', '{"extend_seq_lens": [[5]]}', '{"lens": [5]}', "[5, 6", "\x00\x01\x02", '{"extend_seq_lens": [5], "extend_seq_lens": [6]}',
    '{"extend_seq_lens": [4194305]}', "[5], [6]", "[5],[6]", '{"extend_seq_lens": [5]}, {"extend_seq_lens": [6]}', "[5], 6",
    '{"extend_seq_lens": [5], "count": 2}, [6]',
]
REQUEST_TAGS = {"input_length\": [100": "trace-mooncake-list", "0123,": "trace-leading-zeros", "3000-01-01": "trace-azure-date"}
BAD_REQUEST_FILES = [
    ("t.jsonl", '{"timestamp": 0, "input_length": [100, 200], "output_length": 1}\n'),
    ("t.jsonl", '{"timestamp": 0, "input_length": -5, "output_length": 1}\n'),
    ("t.jsonl", '{"timestamp": 0, "input_length": ' + "9" * 5000 + ', "output_length": 1}\n'),
    ("t.jsonl", '{"timestamp": 0, "input_length": 0123, "output_length": 1}\n'),
    ("t.jsonl", '{"timestamp": "x", "input_length": 100, "output_length": 1}\n'),
    ("t.jsonl", '{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": "abc"}\n'),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n3000-01-01 00:00:00,100,10\n"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-100,10\n"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,\u00b2,10\n"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46," + "9" * 5000 + ",10\n"),
    ("t.csv", "num_prefill_tokens,num_decode_tokens\nabc,1\n"),
    ("t.jsonl", "\xff\xfe\x00garbage\n"),
    ("t.jsonl", '{"timestamp": 0, "input_length": 100, "output_length": 1}\n{"timestamp": 1, "input_length": 5, "output_length": 1}, {"timestamp": 2, "input_length": 6, "output_length": 1}\n'),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,+100,10\n"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,100,-0\n"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,100,+0\n"),
    ("t.csv", "num_prefill_tokens,num_decode_tokens\n+7,1\n"),
    ("t.csv", "arrival_time,input_tokens,output_tokens\n0,+5,1\n"),
]


def gen_trace(rng: random.Random) -> Case:
    roll = rng.random()
    if roll < 0.55:
        good = ['{"extend_seq_lens": [1534, 161, 353]}'] * rng.randrange(0, 3)
        line = rng.choice(BAD_BATCH_LINES)
        body = "\n".join([*good, line, *good]) + "\n"
        name = "t.jsonl"
        argv = rng.choice([["plan", "-t", name], ["plan", "-t", name, "-k", "2"], ["replay-check", "--report-only", "-t", name], ["plan", "-t", name, "--trace-format", "batches"]])
        bad = line not in NOT_BAD_BATCH_LINES
        return Case("trace", argv, bad, {name: body.encode("utf-8", "surrogatepass")}, place=name if bad else None, tag=BATCH_LINE_TAGS.get(line), note=line[:60])
    if roll < 0.85:
        name, body = rng.choice(BAD_REQUEST_FILES)
        argv = rng.choice([["plan", "-t", name], ["batches", "-t", name, "-o", "o.jsonl"]])
        tag = next((t for key, t in REQUEST_TAGS.items() if key in body), None)
        return Case("trace", argv, True, {name: body.encode("utf-8", "surrogateescape")}, place=name, tag=tag, note=body[:60])
    name = rng.choice(["t.jsonl", "t.csv"])
    body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
    argv = rng.choice([["plan", "-t", name], ["batches", "-t", name, "-o", "o.jsonl"]])
    return Case("trace", argv, False, {name: body}, note="random bytes")


READER_GOOD = [
    ("requests", n) for n in (
        "aibrix-legacy-keys.jsonl", "aibrix.jsonl", "azure-2024.csv", "azure-2025-multimodal-zero.csv", "azure-2025.csv", "azure.csv",
        "azure.parquet", "burstgpt-zero.csv", "burstgpt.csv", "burstgpt.parquet", "common-columns.csv", "common-keys.jsonl", "generic.csv",
        "mooncake.jsonl", "splitwise.csv", "vidur-arrived-at.csv", "vidur.csv", "vllm-bench-indented.json", "vllm-bench.json", "zero-length.jsonl")
] + [("traces", n) for n in ("extra-keys.jsonl", "good.jsonl", "good.jsonl.gz")] + [("log", "sglang-server.log")]
"""Valid traces of every reader (read as given, and after the transformations of `gen_reader`)."""
READER_BAD = [
    ("requests", n) for n in (
        "aibrix-mixed-null-output.jsonl", "azure-minus-zero-output.csv", "azure-plus-sign.csv", "azure-year-3000.csv", "bad-hash-ids.jsonl",
        "bad-json.jsonl", "bad-timestamp.csv", "binary.jsonl", "cr-in-header.csv", "cut-header.jsonl.gz", "duplicate-column.csv", "empty.csv",
        "generic-comma-joined.jsonl", "header-only.csv", "huge-length.csv", "huge-length.jsonl", "missing-column.csv", "missing-field.jsonl",
        "mooncake-comma-joined.jsonl", "mooncake-list-length.jsonl", "negative-length.csv", "non-integer-length.csv", "non-integer-length.jsonl",
        "non-monotonic-timestamps.csv", "non-monotonic-timestamps.jsonl", "not-gzip.jsonl.gz", "null-length.parquet", "short-row.csv",
        "unknown-columns.csv", "unknown-keys.jsonl", "vidur-plus-sign.csv", "vllm-bench-short-output.json")
] + [("traces", n) for n in (
    "blank-lines-only.jsonl", "bool-length.jsonl", "comma-joined-lists.jsonl", "comma-joined-lists.jsonl.gz", "comma-joined-objects.jsonl",
    "deep-nesting.jsonl", "empty-batch.jsonl", "empty.jsonl", "float-length.jsonl", "leading-zero-line1.jsonl", "leading-zero-line2.jsonl",
    "lens-not-list.jsonl", "missing-field.jsonl", "negative-length.jsonl", "not-json.jsonl", "scalar-line.jsonl", "string-length.jsonl",
    "truncated.jsonl.gz", "zero-count.jsonl", "zero-length.jsonl")]
"""Invalid traces of every reader: refused (exit 2, naming the file) however they are passed."""
TRANSFORMS = ["plain", "bom", "crlf", "gz", "stdin", "blank-head", "no-final-newline"]


def _transform(rng: random.Random, name: str, body: bytes) -> tuple[str, bytes, str]:
    """(name, bytes, how): the same records re-encoded as a reader must accept them alike."""
    import gzip

    binary = name.endswith((".parquet", ".gz"))
    how = "plain" if binary and rng.random() < 0.7 else rng.choice(TRANSFORMS)
    if binary and how not in ("plain", "stdin") or name.endswith(".parquet") and how == "stdin":
        how = "plain"
    if how == "bom":
        body = b"\xef\xbb\xbf" + body
    elif how == "crlf":
        body = body.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    elif how == "gz":
        name, body = name + ".gz", gzip.compress(body)
    elif how == "blank-head":
        body = b"\n" * rng.randrange(1, 4) + body
    elif how == "no-final-newline":
        body = body.rstrip(b"\r\n")
    return name, body, how


def gen_reader(rng: random.Random) -> Case:
    """Every reader with valid and invalid files, plain, BOM, CRLF, gzip, stdin, leading blank
    lines, no final newline: a valid trace must be read (exit 0), an invalid one refused."""
    good = rng.random() < 0.5
    folder, name = rng.choice(READER_GOOD if good else READER_BAD)
    source = ASSETS / ("traces" if folder == "log" else folder) / name
    name, body, how = _transform(rng, name, source.read_bytes())
    stdin = body if how == "stdin" else None
    target = "-" if stdin is not None else name
    if folder == "log":
        argv = ["plan", "-t", target, "-k", "2", "--validate-fraction", "0"]
    elif folder == "traces":
        argv = rng.choice([["plan", "-t", target, "-k", "2"], ["replay-check", "--report-only", "-t", target]])
    else:
        argv = rng.choice([["batches", "-t", target, "-o", "o.jsonl"], ["plan", "-t", target, "-k", "2", "--validate-fraction", "0"],
                           ["replay-check", "--report-only", "-t", target]])
    files = {} if stdin is not None else {name: body}
    place = None if good or stdin is not None else name
    return Case("reader", argv, not good, files, place=place, good=good, stdin=stdin, note=f"{how} {source.name}")


LAYOUT_GOOD = [["100"], ["1534", "161", "353"], ["3"], ["8", "8"], ["4194304"], ["1"] * 50]
LAYOUT_BAD = [["0"], ["-1"], ["abc"], ["\u00b2"], ["1e3"], ["1.5"], ["9" * 5000], ["18446744073709551616"], ["5", "0"], ["\u0663"]]


def gen_command(rng: random.Random) -> Case:
    """The other commands and their options: layout (lengths, CP options), presets, every
    command's --help, batches --fold: valid ones must work, invalid ones be refused."""
    roll = rng.random()
    if roll < 0.35:
        good = rng.random() < 0.5
        lens = rng.choice(LAYOUT_GOOD if good else LAYOUT_BAD)
        extra = rng.choice([[], ["--cp-size", str(rng.choice([1, 2, 3, 4, 8]))], ["--cp-strategy", "interleave"], ["-f", "json"],
                            ["--buckets", "2048,2304"], ["--max-padding-factor", "1.5"], ["--capture-layout", "context_bounded", "--max-context-size", "1000"]])
        return Case("command", ["layout", *extra, *lens], not good, good=good, note=f"layout {' '.join(lens)[:40]}")
    if roll < 0.5:
        command = rng.choice([[], ["plan"], ["batches"], ["layout"], ["presets"], ["replay-check"], ["capture"]])
        return Case("command", [*command, rng.choice(["--help", "-h"])], False, good=True, note=f"{command} --help")
    if roll < 0.6:
        extra = rng.choice([[], [], ["-f", "json"], ["--bogus"]])  # presets takes --format only
        bad = extra == ["--bogus"]
        return Case("command", ["presets", *extra], bad, good=not bad, note=f"presets {' '.join(extra)}")
    if roll < 0.8:
        value = rng.choice(["consecutive", "all", "none", "ALL", "", "some", "\u00b2"])
        good = value in ("consecutive", "all", "none")
        return Case("command", ["batches", "-t", MOONCAKE, "-o", "o.jsonl", "--fold", value], not good, good=good, note=f"--fold {value}")
    preset = rng.choice(["ci-gates-cp4", "deepseek-v3-cp4-mla", "gpt-oss-120b-cp4", "llama-3.1-70b-cp8", "qwen3-32b-cp2-b200", "nope", "../x", ""])
    good = preset not in ("nope", "../x", "")
    return Case("command", ["plan", "-t", GOOD_TRACE, "-c", preset, "-k", "2"], not good, good=good, note=f"preset {preset}")


SGLANG_FINISH = "[{when}] Finish: obj=x, out={{'id': '{rid}', 'prompt_tokens': {prompt}, 'completion_tokens': 9, 'e2e_latency': {e2e}}}\n"
SGLANG_STATS = ("[{when}] ReqTimeStats(rid={rid}, input_len={prompt}, cached_input_len=0, output_len=4, attempts=1, type=unified): "
                "queue_duration={queue}ms, forward_duration=2.0ms{entry}\n")
ODD_NUMBERS = ["1" + "0" * 330, "9" * 400, "0", "1.5", "7" * 20, "3" * 12, "0.000001"]
ODD_DATES = ["2026-13-45 00:00:00", "2026-02-30 10:00:00", "0000-01-01 00:00:00", "9999-12-31 23:59:59", "2026-01-01 25:61:61",
             "1969-12-31 23:59:59", "2026-01-01 00:00:00,5"]


def _sglang_requests(rng: random.Random) -> tuple[bytes, int, int]:
    """An sglang-requests log of odd lines: (bytes, lines a reader must read, lines it must skip)."""
    lines, good, skipped = [], 0, 0
    for i in range(rng.randrange(1, 7)):
        odd = rng.random() < 0.6
        when = rng.choice(ODD_DATES) if odd and rng.random() < 0.5 else f"2026-01-01 00:00:{10 + i:02d}"
        number = rng.choice(ODD_NUMBERS) if odd else "1.0"
        if rng.random() < 0.5:
            lines.append(SGLANG_FINISH.format(when=when, rid=f"r{i}", prompt=100 + i, e2e=number))
        else:
            entry = rng.choice(["", f", entry_time={number}"])
            lines.append(SGLANG_STATS.format(when=when, rid=f"r{i}", prompt=100 + i, queue=number, entry=entry))
        text = lines[-1]
        try:
            from datetime import datetime

            stamp = datetime.fromisoformat(when.replace(",", "."))
            readable = 1970 <= stamp.year < 2200
        except ValueError:
            readable = False
        huge = float(number) >= 7258118400  # 2200-01-01 as seconds since 1970
        readable = not huge if "entry_time=" in text else readable and not huge
        good += readable
        skipped += not readable
    return "".join(lines).encode(), good, skipped


UNTIMED = "input_tokens,output_tokens\n" + "".join(f"{100 + 37 * i % 3000},{5 + i % 40}\n" for i in range(60))


def gen_round4(rng: random.Random) -> Case:
    """Issue 32's surfaces: sglang-requests numbers and dates, empty trace paths, one role per
    column, AIBrix spellings, untimed traces on standard input and files, --fit-trace aliases,
    the Dask address, YAML tags, replay-check without a trace, --include, the largest chunk,
    other documents as manifests, UTF-16 text, timestamps beyond doubles."""
    roll = rng.randrange(16)
    pinned = ["--page-size", "1", "--chunked-prefill-size", "8192"]
    if roll == 0:
        body, good, skipped = _sglang_requests(rng)
        argv = rng.choice([["plan", "-t", "s.log", "-k", "2", *pinned], ["batches", "-t", "s.log", "-o", "o.jsonl", *pinned]])
        expect = (f"skipped {skipped:,} unreadable request line",) if good and skipped else ()
        return Case("round4", argv, not good, {"s.log": body}, place="s.log" if not good else None, good=bool(good), expect=expect,
                    note=f"sglang-requests {good} good {skipped} odd")
    if roll == 1:
        empty = rng.choice(["", " ", "\t"])
        argv = rng.choice([["plan", "-t", empty], ["batches", "-t", empty, "-o", "o.jsonl"], ["replay-check", "--report-only", "-t", empty],
                           ["plan", "-t", "a.jsonl", "--fit-trace", empty]])
        return Case("round4", argv, True, {"a.jsonl": b"[100]\n", "b.jsonl": b"[200]\n"}, place="empty path", note=f"-t {empty!r}")
    if roll == 2:
        option, column = rng.choice([("--length-field", "timestamp"), ("--time-field", "output_tokens"), ("--output-field", "timestamp"),
                                     ("--length-field", "output_tokens"), ("--output-field", "input_tokens"), ("--time-field", "input_tokens")])
        body = b"timestamp,input_tokens,output_tokens\n1,300,3\n2,700,4\n"
        good = not (option != "--length-field" and column == "input_tokens")  # then no column is left for the prompt length
        expect = (f"{column} is the {option}, so it is not read as",)
        return Case("round4", ["batches", "-t", "r.csv", option, column, "-o", "o.jsonl", "--rate", "4", *pinned], not good, {"r.csv": body},
                    place="r.csv" if not good else None, good=good, expect=expect, note=f"{option} {column}")
    if roll == 3:
        keys = rng.choice([('"prompt_length": 100, "Prompt Length": 50', True), ('"output_length": 3, "Output Length": 4, "prompt_length": 9', True),
                           ('"Prompt Length": 50, "Output Length": 4', False)])
        body = ('{"timestamp": 0, "requests": [{' + keys[0] + '}]}\n').encode()
        return Case("round4", ["batches", "-t", "a.jsonl", "-o", "o.jsonl", *pinned], keys[1], {"a.jsonl": body},
                    place="a.jsonl" if keys[1] else None, good=not keys[1], note=keys[0])
    if roll == 4:
        how = rng.choice(["file", "stdin", "no-final-newline"])
        body = UNTIMED.encode() if how != "no-final-newline" else UNTIMED.rstrip("\n").encode()
        command = rng.choice([["plan", "-k", "3"], ["replay-check", "--report-only"], ["batches", "-o", "o.jsonl"]])
        target = "-" if how == "stdin" else "u.csv"
        return Case("round4", [*command, "-t", target, *pinned], False, {} if how == "stdin" else {"u.csv": body}, good=True,
                    stdin=body if how == "stdin" else None, expect=("has no arrival times: simulated at Poisson rates 7.19 (", "21.6 (", "27.3 ("),  # the mean prompt of all 60 rows
                    note=f"untimed {how} {command[0]}")
    if roll == 5:
        alias = rng.choice(["sub/../a.jsonl", "./a.jsonl", "a.jsonl", "sub/./../a.jsonl"])
        files = {"a.jsonl": b"[100]\n[2000, 300]\n", "b.jsonl": b"[900]\n", "sub": DIR}
        return Case("round4", ["plan", "-t", "a.jsonl", "-t", "b.jsonl", "--fit-trace", alias, "-k", "3", "-f", "json", *pinned], False, files,
                    good=True, note=f"--fit-trace {alias}", expect=('"batches": 3',))
    if roll == 6:
        address = rng.choice(["tcp://127.0.0.1:70000", "tcp://127.0.0.1:0", "tcp://127.0.0.1:99999999", "tcp://[::1]:65536"])
        return Case("round4", ["plan", "-t", GOOD_TRACE, "--scheduler", address, "--no-recommend"], True, note=address)
    if roll == 7:
        tag = rng.choice(["!!python/name:os.system", "!!python/object/apply:os.system ['x']", "!foo", "!!binary aGk=", "!!set {a}"])
        key = rng.choice(["cp_size", "scheduler.rate", "buckets"])
        text = f"{key}: {tag}\n" if "." not in key else f"scheduler:\n  rate: {tag}\n"
        return Case("round4", ["plan", "-c", "c.yaml", "-t", GOOD_TRACE], True, {"c.yaml": text.encode()}, place=key, note=f"{key} {tag}")
    if roll == 8:
        gate = rng.choice([["--min-coverage", "0.5"], ["--max-eager", "local_capacity=0"], ["--max-padding", "0.9"]])
        named = rng.random() < 0.3
        return Case("round4", ["replay-check", *gate, *(["--embedded-sample"] if named else [])], not named,  # named: 0 or 1 by the gate
                    place="no --trace given" if not named else None, note=f"replay-check {gate} named={named}")
    if roll == 9:
        value = rng.choice(["5", "9", "12", "8", "4", "3", "8192", "8193"])
        rounded = -(-int(value) // 4) * 4  # up to a multiple of cp_size 4
        good = rounded >= 8  # 2*cp_size: what the CP capture keeps
        expect = (f"{value} -> {rounded}",) if good and rounded != int(value) else ()
        return Case("round4", ["plan", "-t", GOOD_TRACE, "--include", value, "-k", "12", "--cp-size", "4", *pinned], not good, good=good,
                    expect=expect, note=f"--include {value}")
    if roll == 10:
        value = rng.choice(["4194305", "2147483647", "99999999"])
        flag = rng.choice([["--chunked-prefill-size", value], ["--chunked-prefill-size", "-1", "--max-prefill-tokens", value]])
        return Case("round4", ["plan", "-t", GOOD_TRACE, *flag], True, note=" ".join(flag))
    if roll == 11:
        doc = rng.choice([{"schema_version": 1, "source": "x", "coverage": 1.0, "cp_size": 4, "cp_strategy": "zigzag", "align_size": 8,
                           "capture_layout": "single_request", "buckets": [2048]}, {"capture_num_tokens": [2048], "cp_size": 4},
                          {"prefill": {"bs": [2048]}}, {"cp_size": 4}])
        return Case("round4", ["replay-check", "--report-only", "-t", GOOD_TRACE, "--manifest", "m.json"], True, {"m.json": json.dumps(doc).encode()},
                    place="not a capture manifest", note=str(doc)[:60])
    if roll == 12:
        encoding = rng.choice(["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
        name, text = rng.choice([("t.csv", "input_tokens,output_tokens\n100,5\n"), ("t.jsonl", "[100]\n"), ("c.yaml", "cp_size: 4\n")])
        argv = ["plan", "-c", name] if name.endswith(".yaml") else ["plan", "-t", name]
        return Case("round4", argv, True, {name: text.encode(encoding)}, place="not UTF-8 text: it looks like UTF-", note=f"{encoding} {name}")
    if roll == 13:
        value = rng.choice(["1.7e308", "-1.7e308", "1e300", "1700000000000000000", "7300000000000", "-7300000000"])  # Mooncake: ms
        name, body = rng.choice([("t.jsonl", f'{{"timestamp": 0, "input_length": 100, "output_length": 5}}\n{{"timestamp": {value}, "input_length": 100, "output_length": 5}}\n'),
                                 ("t.csv", f"timestamp,input_tokens\n0,100\n{value},100\n")])
        return Case("round4", ["batches", "-t", name, "-o", "o.jsonl"], True, {name: body.encode()}, place=name, note=f"timestamp {value}")
    if roll == 14:
        buckets = rng.choice([("8", "sglang-default:12", [16]), ("8", "12", [16]), ("4", "2,3", None), ("4", "5,6", [8])])
        cp, spec, captured = buckets
        return Case("round4", ["plan", "--cp-size", cp, "--buckets", spec, "--no-recommend", "-f", "json", *pinned], captured is None, good=captured is not None,
                    expect=(f'"buckets": [\n    {captured[0]}\n  ]',) if captured else (), note=f"cp {cp} {spec}")
    return Case("round4", [], True, note="bare cpbcg")


def _sglang_log(cp: int, edit: tuple[str, str] | None, forwards: int = 2) -> bytes:
    """A synthetic 0.5.23 log (tests/sglang_log_fixtures.py) at `cp` (tp = cp), its dump edited."""
    from sglang_log_fixtures import SYNTHETIC_HEADER, prefill_line, startup_lines

    body = startup_lines(tp=cp, cp=cp, capture=edit is None)
    if edit is not None:
        body = body.replace(*edit)
    return (SYNTHETIC_HEADER + body + "".join(prefill_line(100 + 97 * i, 1, graph=edit is None) for i in range(forwards))).encode()


LAUNCH_PREFIXES = ["", "python -m sglang.launch_server ", "python3 -m sglang.launch_server ", "CUDA_VISIBLE_DEVICES=0,1,2,3 python -m sglang.launch_server ",
                   "sglang serve ", "/usr/bin/env python -m sglang.launch_server ", "torchrun --nproc-per-node 4 -m sglang.launch_server "]
LAUNCH_FLAGS = ["--tp-size 4 --attn-cp-size 4 --enable-prefill-cp --cp-strategy zigzag", "--page-size 64", "--chunked-prefill-size 8192",
                "--cuda-graph-max-bs-decode 256", "--cuda-graph-bs-decode 1 2 4 8", "--cuda-graph-bs-decode 0", "--cuda-graph-max-bs-decode -1",
                "--cuda-graph-bs-decode x", "--disable-decode-cuda-graph", "--cuda-graph-bs-prefill 1024 2048", "--model-path m",
                "--cuda-graph-max-bs-prefill 99999999999", "--bogus-flag 3", "\\\n  --page-size 16", "# a comment\n", "'--page-size' '32'"]


def gen_round5(rng: random.Random) -> Case:
    """Issue 43's surfaces: budgets with every recommendation mode, launch files (empty, comments,
    prefixes, decode flags), empty configs, watch's options (old and new) and long lines, replay-check on a
    log whose flags capture no CP graph, a refused Dask port, bucket lists of any length."""
    roll = rng.randrange(11)
    pinned = ["--page-size", "1", "--chunked-prefill-size", "8192"]
    if roll == 0:
        mode = rng.choice([[], ["--target-coverage", rng.choice(["0.5", "0.99", "1"])], ["-k", str(rng.randint(1, 20))], ["--objective", "time"],
                           ["--time-scale", "1,2"], ["--guarantee"], ["--guarantee", "-k", "3"], ["--objective", "time", "--target-coverage", "0.9"]])
        budget = rng.sample([["--max-graph-memory", rng.choice(["0.001", "1", "40", "64", "1e5", "0", "-1", "nan"])],
                             ["--max-capture-seconds", rng.choice(["0.01", "2", "12", "1e4", "0", "-5", "inf"])]], rng.randint(1, 2))
        traces = rng.choice([["-t", GOOD_TRACE], ["-t", MOONCAKE], ["-t", GOOD_TRACE, "-t", MOONCAKE]])
        argv = ["plan", *traces, *mode, *[w for b in budget for w in b], *pinned]
        return Case("round5", argv, False, note=" ".join(argv[3:]))
    if roll == 1:
        body = rng.choice(["", "\n", "\n  \n\t\n", "# only a comment\n", "#!/bin/sh\n# launch\n\n", "\\\n"])
        given = rng.choice(["@l.sh", "l.sh"])
        command = rng.choice([["plan", "-t", GOOD_TRACE], ["check-server"], ["replay-check", "--report-only", "-t", GOOD_TRACE]])
        return Case("round5", [*command, "--server-args", given], True, {"l.sh": body.encode()}, place="l.sh", note=f"launch file {body!r}")
    if roll == 2:
        words = rng.choice(LAUNCH_PREFIXES) + " ".join(rng.sample(LAUNCH_FLAGS, rng.randint(1, 4)))
        command = rng.choice([["check-server"], ["plan", "-t", GOOD_TRACE, "--no-recommend"]])
        return Case("round5", [*command, "--server-args", "@l.sh"], False, {"l.sh": words.encode()}, note=words[:80])
    if roll == 3:
        body = rng.choice(["", "\n", "# nothing\n", "---\n", "...\n", "~\n", "null\n"])
        return Case("round5", ["plan", "-c", "c.yaml", "-t", GOOD_TRACE], True, {"c.yaml": body.encode()}, place="c.yaml", note=f"config {body!r}")
    if roll == 4:
        url = rng.choice(["http://", "https://", "http://:30000/metrics", "http://h:99999/metrics", "http://h:x/metrics", "http:///metrics",
                          "ftp://h:1/m", "h:30000", "http://[::1/metrics"])
        return Case("round5", ["watch", "s.log", "--duration", "5", "--metrics-url", url], True, {"s.log": _sglang_log(1, None)},
                    place="--metrics-url", note=url)
    if roll == 5:
        long = b"x" * ((1 << 20) + rng.choice([1, 10, 5000])) + rng.choice([b"\n", b"\r\n"])
        head = _sglang_log(1, None, 0)
        argv = rng.choice([["watch", "s.log", "--duration", "5"], ["plan", "-t", "s.log"], ["replay-check", "--report-only", "-t", "s.log"]])
        return Case("round5", argv, True, {"s.log": head + long + _sglang_log(1, None, 2).split(b"\n", 1)[0] + b"\n"}, place="s.log:",
                    note=f"{argv[0]} long line")
    if roll == 6:
        edit = rng.choice([("'backend': 'breakable'", "'backend': 'disabled'"), ("'enable_prefill_cp': True", "'enable_prefill_cp': False"),
                           ("'cp_strategy': 'zigzag'", "'cp_strategy': 'ring'")])
        return Case("round5", ["replay-check", "-t", "s.log", "--min-coverage", "0.5"], True, {"s.log": _sglang_log(4, edit)}, place="s.log:",
                    note=f"replay-check {edit[1]}")
    if roll == 7:
        port = rng.choice([1, 9, 7, 13])  # nothing listens there on a test machine: refused at once, never Dask's 30 s wait
        return Case("round5", ["plan", "-t", MOONCAKE, "--time-scale", "1,2", "--scheduler", f"tcp://127.0.0.1:{port}", "--no-recommend"], True,
                    place="--scheduler", note=f"refused port {port}")
    if roll == 8:  # watch's options of this round (issue 42): where to start, replicas, scrape-error gates
        option = rng.choice([["--since", rng.choice(["2026-11-02 10:00", "2026-11-02T09:59:30", "yesterday", "2026-13-45 10:00", "", "1e400", "x" * 300])],
                             ["--from-end"], ["--instance", rng.choice(["a", "", "a b", "\x1b[31mred", "z" * 500, "é"])],
                             ["--max-scrape-errors", rng.choice(["0", "3", "-1", "1e9", "x"])], ["--from-end", "--since", "2026-11-02 10:00"]])
        stdin = rng.random() < 0.2
        argv = ["watch", "-" if stdin else "s.log", "--duration", "2", "--max-forwards", "2", *option]
        return Case("round5", argv, False, {} if stdin else {"s.log": _sglang_log(1, None)}, stdin=_sglang_log(1, None) if stdin else None,
                    note=" ".join(option)[:80])
    n = rng.choice([2_000, 20_000, 100_000])
    bad = rng.random() < 0.4
    values = [8 * (i + 1) for i in range(n)]
    at = rng.randrange(n)
    if bad:
        values[at] = rng.choice([0, -8, 9_999_999_999])
    name, text = rng.choice([("b.yaml", "".join(f"- {v}\n" for v in values)), ("b.json", json.dumps(values)), ("b.yml", json.dumps(values)),
                             ("flags.txt", "--cuda-graph-bs-prefill " + " ".join(map(str, values)) + "\n")])
    return Case("round5", ["plan", "-t", GOOD_TRACE, "-b", name, "-k", "4", *pinned], bad, {name: text.encode()}, good=not bad,
                place=name if bad else None, note=f"{n} buckets in {name}" + (f", bad at {at}" if bad else ""))


GENERATORS: list[tuple[Callable[[random.Random], Case], int]] = [
    (gen_config, 20), (gen_config_path, 3), (gen_bucket_spec, 10), (gen_bucket_file, 6), (gen_manifest, 10),
    (gen_manifest_path, 2), (gen_option, 20), (gen_output, 7), (gen_outputs_together, 1), (gen_output_is_input, 1), (gen_env, 8), (gen_trace, 13),
    (gen_reader, 14), (gen_command, 6), (gen_round4, 16), (gen_round5, 16),
]


def generate(count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    makers = [g for g, weight in GENERATORS for _ in range(weight)]
    return [rng.choice(makers)(rng) for _ in range(count)]
