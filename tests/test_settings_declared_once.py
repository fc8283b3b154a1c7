"""Each setting declared once (`cpbcg.settings.SETTINGS`), an SGLang server argument with its
`ServerArgs` field (`cpbcg.engines.sglang.args.SERVER_ARGS` is that column): the config's server
keys, the deploy flags, the flags an export is read back by and the log reader all read it; a new
scheduler setting is its declaration and the planner's field."""

import subprocess
import sys

from cpbcg.api import load_deployment
from cpbcg.config import SERVER_KEYS
from cpbcg.engines.sglang.launch import SGLANG_FLAGS
from cpbcg.engines.sglang.export import FLAG_KEYS, SERVER_SCHEDULER_KEYS, deploy_flags, scheduler_flags, sglang_flag_settings
from cpbcg.engines.sglang.args import SERVER_ARGS
from cpbcg.engines.sglang.logs import settings as sglang_settings
from cpbcg.settings import SETTINGS, setting


def test_every_server_argument_is_a_declared_setting_and_a_flag_of_the_release():
    declared = {s.key for s in SETTINGS}
    for arg in SERVER_ARGS:
        assert arg.key in declared, arg.key
        assert arg.flag in SGLANG_FLAGS, arg.flag  # 0.5.23's parser knows it
        assert setting(arg.key).sglang_flag == arg.flag
    assert setting("cp_size").sglang_flag == "--attn-cp-size" and setting("scheduler.rate").sglang_flag is None


def test_the_maps_are_read_from_the_table():
    assert SERVER_KEYS == {"cp_size": "attn_cp_size", "tp_size": "tp_size", "cp_strategy": "cp_strategy",
                           "scheduler.chunked_prefill_size": "chunked_prefill_size", "scheduler.max_prefill_tokens": "max_prefill_tokens",
                           "scheduler.prefill_max_requests": "prefill_max_requests", "scheduler.max_running_requests": "max_running_requests",
                           "scheduler.page_size": "page_size", "scheduler.max_total_tokens": "max_total_tokens",
                           "scheduler.enable_mixed_chunk": "enable_mixed_chunk"}
    assert FLAG_KEYS == {"--attn-cp-size": "cp_size", "--cp-strategy": "cp_strategy", "--chunked-prefill-size": "scheduler.chunked_prefill_size",
                         "--max-prefill-tokens": "scheduler.max_prefill_tokens", "--prefill-max-requests": "scheduler.prefill_max_requests",
                         "--max-running-requests": "scheduler.max_running_requests", "--page-size": "scheduler.page_size"}
    assert SERVER_SCHEDULER_KEYS == {a.key for a in SERVER_ARGS if a.key.startswith("scheduler.")}
    # the log reader reads every scheduler argument the deploy flags write with a value
    assert set(sglang_settings._SCHEDULER_KEYS) == {a.field for a in SERVER_ARGS if a.key.startswith("scheduler.") and a.written and not a.switch}


def test_every_written_argument_is_emitted_and_read_back():
    deployment = load_deployment(None, **{"scheduler.prefill_max_requests": 8, "scheduler.max_running_requests": 64, "scheduler.enable_mixed_chunk": True})
    words = scheduler_flags(deployment)
    # B200 (assumed): 0.5.23 resolves the chunk to 16384 and the page to 64 (trtllm_mha)
    assert words == ["--chunked-prefill-size", "16384", "--max-prefill-tokens", "16384", "--prefill-max-requests", "8",
                     "--max-running-requests", "64", "--page-size", "64", "--enable-mixed-chunk"]
    read = sglang_flag_settings(deploy_flags([1024, 8192], deployment))
    assert read == {"cp_size": "4", "cp_strategy": "zigzag", "scheduler.chunked_prefill_size": "16384", "scheduler.max_prefill_tokens": "16384",
                    "scheduler.prefill_max_requests": "8", "scheduler.max_running_requests": "64", "scheduler.page_size": "64"}


def test_a_server_argument_declared_deployed_reaches_config_flags_and_read_back():
    # a fixture: `max_total_tokens` declared deployed in its one declaration alone (before anything
    # reads it) reaches the config's server keys, the deploy flags and the read-back map
    code = (
        "import dataclasses, cpbcg.settings as s\n"
        "s.SETTINGS = tuple(dataclasses.replace(x, deployed=True) if x.key == 'scheduler.max_total_tokens' else x for x in s.SETTINGS)\n"
        "from cpbcg.config import SERVER_KEYS\n"
        "from cpbcg.engines.sglang.export import FLAG_KEYS, scheduler_flags\n"
        "from cpbcg.api import load_deployment\n"
        "from cpbcg.settings import setting\n"
        "d = load_deployment(None, **{'scheduler.max_total_tokens': 4096})\n"
        "print(SERVER_KEYS['scheduler.max_total_tokens'], FLAG_KEYS['--max-total-tokens'], ' '.join(scheduler_flags(d)[-2:]),"
        " setting('scheduler.max_total_tokens').sglang_flag)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["max_total_tokens", "scheduler.max_total_tokens", "--max-total-tokens", "4096", "--max-total-tokens"]


NEW_SCHEDULER_SETTING = """
import dataclasses, pathlib, sys
import cpbcg.settings as s
import cpbcg.planner.scheduler.settings as planner_settings

# the two places a new scheduler setting is written: its declaration and the planner's field
new = s._s("scheduler.max_queued_requests", int, None, "Most requests waiting (SGLang --max-queued-requests).", s.SGLANG_FLAG,
           ge=1, le=s.MAX_INT32, unit="requests", sglang_field="max_queued_requests")
s.SETTINGS = (*s.SETTINGS, new)
s._BY_KEY[new.key] = new
planner_settings.SchedulerSettings = dataclasses.make_dataclass(
    "SchedulerSettings", [("max_queued_requests", "int | None", dataclasses.field(default=None))],
    bases=(planner_settings.SchedulerSettings,), frozen=True)

from cpbcg.api import load_deployment
from cpbcg.cli import main
from cpbcg.config import SERVER_KEYS, SchedulerConfig
from cpbcg.engines.sglang.export import sglang_flag_settings
from cpbcg.engines.sglang.logs.settings import read_log_settings

out, log = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
print("config", load_deployment(None, **{"scheduler.max_queued_requests": 5}).scheduler.max_queued_requests,
      SchedulerConfig.model_fields["max_queued_requests"].metadata, SERVER_KEYS["scheduler.max_queued_requests"])
print("read-back", sglang_flag_settings("--max-queued-requests 9"))
log.write_text("[2025-06-01 12:00:00] server_args=ServerArgs(model_path='m', chunked_prefill_size=8192, max_queued_requests=11)\\n")
print("log", read_log_settings(log).overrides())
try:
    main(["plan", "--max-queued-requests", "7", "--emit", "sglang", "-o", str(out)])
except SystemExit as exc:
    assert not exc.code, exc.code
print("flags", out.read_text().split("--max-queued-requests")[1].split()[0])
"""


def test_a_new_scheduler_setting_in_two_places_reaches_the_cli_config_flags_and_log_reader(tmp_path):
    # a fixture adds `scheduler.max_queued_requests` (an SGLang 0.5.23 server argument) by its
    # declaration and the planner's field only: the command-line option, the config key (with its
    # bounds), the emitted flags, the flags' read-back and the log reader follow
    done = subprocess.run([sys.executable, "-c", NEW_SCHEDULER_SETTING, str(tmp_path / "flags.txt"), str(tmp_path / "server.log")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.split(" ", 1)[0] in ("config", "read-back", "log", "flags"))
    assert lines["config"] == "5 [Ge(ge=1), Le(le=2147483647)] max_queued_requests"
    assert lines["read-back"] == "{'scheduler.max_queued_requests': '9'}"
    assert lines["log"] == "{'cp_size': 1, 'scheduler.chunked_prefill_size': 8192, 'scheduler.max_queued_requests': 11}"
    assert lines["flags"] == "7"


def test_every_setting_states_its_unit():
    from cpbcg.settings import UNITS

    assert all(s.unit in UNITS for s in SETTINGS)
    assert {s.key: s.unit for s in SETTINGS if s.key in ("scheduler.chunked_prefill_size", "scheduler.rate", "cost.token_ms", "gates.min_coverage")} == {
        "scheduler.chunked_prefill_size": "tokens", "scheduler.rate": "requests/s", "cost.token_ms": "milliseconds/token",
        "gates.min_coverage": "fraction"}


def test_the_assumed_settings_name_the_declared_options():
    # a log comparison's "assumed: ... --OPTION sets it" names each setting's declared option
    from cpbcg.engines.sglang.observed import ASSUMED_OPTIONS

    assert ASSUMED_OPTIONS == {key: setting(key).flag for key in ASSUMED_OPTIONS}


def test_a_server_argument_flag_is_spelled_once():
    # `--chunked-prefill-size` is derived from its one declaration (settings.py's sglang_field: the field's name)
    # everywhere but 0.5.23's flag table (data)
    from pathlib import Path

    import cpbcg

    root = Path(cpbcg.__file__).parent
    spelled = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if '"--chunked-prefill-size"' in p.read_text())
    assert spelled == ["engines/sglang/launch.py"]


def test_a_scheduler_setting_is_everywhere_it_must_be_or_nowhere():
    # a setting declared in settings.py but missing from one of the three places that still name
    # it (the config model, the CLI group, the planner's SchedulerSettings) once made
    # `cpbcg plan` die with a TypeError traceback: here it fails naming the file to edit
    import dataclasses

    from cpbcg.cli.options import SchedulerOptions
    from cpbcg.config import SchedulerConfig
    from cpbcg.planner.scheduler.settings import SchedulerSettings

    declared = {s.key.partition(".")[2] for s in SETTINGS if s.key.startswith("scheduler.")}
    with_flag = {s.key.partition(".")[2] for s in SETTINGS if s.key.startswith("scheduler.") and s.flag}
    assert set(SchedulerConfig.model_fields) == declared, "cpbcg/config.py SchedulerConfig"
    assert {f.name for f in dataclasses.fields(SchedulerSettings)} == declared, "cpbcg/planner/scheduler/settings.py SchedulerSettings"
    assert {f.name for f in dataclasses.fields(SchedulerOptions)} == with_flag, "cpbcg/cli/options.py SchedulerOptions"


def test_the_values_a_launch_resolves_reach_the_config_under_their_declared_keys():
    # `config._resolved_values` pairs no key by hand: each field the resolution decides
    # (`ResolvedServer.decided`) goes under the key its declaration gives it (`args.BY_FIELD`)
    from cpbcg.config import _resolved_values, load_config
    from cpbcg.engines.sglang.args import BY_FIELD

    launch = ("python -m sglang.launch_server --model-path m --tp-size 4 --attn-cp-size 4 --enable-prefill-cp --cp-strategy zigzag "
              "--prefill-attention-backend trtllm_mha --max-running-requests 64 --max-total-tokens 200000 --prefill-max-requests 8 "
              "--enable-mixed-chunk --page-size 64")
    cfg = load_config(None, {"server": {"args": launch}})
    server = cfg.server_resolution
    assert server is not None and set(server.decided()) <= set(BY_FIELD)
    assert _resolved_values(server) == {
        "scheduler.page_size": 64, "scheduler.chunked_prefill_size": 16384, "scheduler.max_prefill_tokens": 16384,
        "scheduler.max_running_requests": 64, "scheduler.max_total_tokens": 200000, "scheduler.prefill_max_requests": 8,
        "scheduler.enable_mixed_chunk": True, "cp_size": 4, "cp_strategy": "zigzag"}
    assert (cfg.cp_size, cfg.scheduler.max_running_requests, cfg.scheduler.max_total_tokens, cfg.scheduler.prefill_max_requests) == (4, 64, 200000, 8)
    assert {SERVER_KEYS[k] for k in _resolved_values(server)} == set(server.decided())
    # no launch stated: only what 0.5.23 resolves for any deployment (page, chunk, prefill budget on the assumed B200)
    default = load_config(None, {}).server_resolution
    assert default is not None and _resolved_values(default) == {
        "scheduler.page_size": 64, "scheduler.chunked_prefill_size": 16384, "scheduler.max_prefill_tokens": 16384}
