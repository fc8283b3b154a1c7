"""Each SGLang server argument declared once (`cpbcg.engines.sglang.args.SERVER_ARGS`): the config's
server keys, the deploy flags, the flags an export is read back by, the declarations and the log
reader all read that table."""

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


def test_a_server_argument_added_to_the_table_reaches_config_flags_and_declarations():
    # a fixture: `max_total_tokens` made a written flag in the table alone (before anything reads
    # it) reaches the config's server keys, the deploy flags, the read-back map and the declaration
    code = (
        "import dataclasses, cpbcg.engines.sglang.args as a\n"
        "a.SERVER_ARGS = tuple(dataclasses.replace(x, written=True) if x.field == 'max_total_tokens' else x for x in a.SERVER_ARGS)\n"
        "a.BY_KEY.update({x.key: x for x in a.SERVER_ARGS})\n"
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


def test_the_assumed_settings_name_the_declared_options():
    # a log comparison's "assumed: ... --OPTION sets it" names each setting's declared option
    from cpbcg.engines.sglang.observed import ASSUMED_OPTIONS

    assert ASSUMED_OPTIONS == {key: setting(key).flag for key in ASSUMED_OPTIONS}


def test_a_server_argument_flag_is_spelled_once():
    # `--chunked-prefill-size` is derived from its one declaration (sglang_args: the field's name)
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
