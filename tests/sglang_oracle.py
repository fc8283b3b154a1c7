"""SGLang 0.5.23's own code as a test oracle, read from the released wheel at test time.

The wheel is fetched with `pip download sglang==0.5.23 --no-deps` into a cache directory
(`$CPBCG_SGLANG_CACHE`, default `~/.cache/cpbcg-sglang`); tests that need it take the
`sglang_wheel` fixture, which skips with the reason when the registry cannot be reached.
`wheel_source(path)` gives a file of the wheel; `definitions(path, names, namespace)` executes
only the named top-level definitions of that file (or `Class.method`) in `namespace`, so the
tests run SGLang's functions under small stubs without importing its package. Nothing of
SGLang is copied into this repository.
"""

from __future__ import annotations

import __future__
import ast
import functools
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

SGLANG_WHEEL_VERSION = "0.5.23"
CACHE_DIR = Path(os.environ.get("CPBCG_SGLANG_CACHE", "~/.cache/cpbcg-sglang")).expanduser()


@functools.cache
def wheel_file() -> Path | str:
    """The cached wheel, downloaded on first use; a string says why there is none."""
    found = sorted(CACHE_DIR.glob(f"sglang-{SGLANG_WHEEL_VERSION}-*.whl"))
    if found:
        return found[-1]
    cmd = [sys.executable, "-m", "pip", "download", f"sglang=={SGLANG_WHEEL_VERSION}", "--no-deps",
           "--only-binary", ":all:", "--quiet", "-d", str(CACHE_DIR)]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"pip download sglang=={SGLANG_WHEEL_VERSION} failed: {exc}"
    found = sorted(CACHE_DIR.glob(f"sglang-{SGLANG_WHEEL_VERSION}-*.whl"))
    if run.returncode or not found:
        tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no wheel"]
        return f"cannot fetch sglang=={SGLANG_WHEEL_VERSION} (registry unreachable?): {tail[0][:200]}"
    return found[-1]


@functools.cache
def wheel_source(path_in_wheel: str) -> str:
    """Text of `path_in_wheel` (e.g. `sglang/srt/managers/schedule_policy.py`) in the wheel."""
    wheel = wheel_file()
    if isinstance(wheel, str):
        _unavailable(wheel)
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(path_in_wheel).decode()


def definitions(path_in_wheel: str, names: list[str], namespace: dict) -> dict:
    """Execute the top-level definitions `names` of a wheel file in `namespace` and return it.

    A name `Class.method` executes that method alone, without its decorators (stage timers,
    grad modes), bound to the namespace under `method`.
    Annotations are not evaluated (`from __future__ import annotations`). Raises KeyError for a
    name the file does not define (the release changed: the test must be looked at)."""
    tree = ast.parse(wheel_source(path_in_wheel))
    top = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            top[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    top[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            top[node.target.id] = node
    body = []
    for name in names:
        owner, _, member = name.partition(".")
        node = top[owner]
        if member:
            node = next(n for n in node.body if getattr(n, "name", None) == member)
            node.decorator_list = []
        body.append(node)
    module = ast.Module(body=body, type_ignores=[])
    code = compile(module, path_in_wheel, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, namespace)  # noqa: S102 - SGLang's released code, the oracle
    return namespace


def prefill_cp_bcg(namespace: dict) -> dict:
    """Define 0.5.23's `supports_prefill_cp_bcg` (`layers/cp/bcg/__init__.py`) in `namespace` with
    what it reads: the CP enums (`layers/cp/base.py`), the zigzag and interleave CP input classes,
    `get_cp_bcg_input_type` mapping each strategy to its class (as the wheel's registry does) and
    `PREFILL_CP_BCG_SUPPORTED_COMBINATIONS`. `namespace` holds `IntEnum`, `dataclass` and
    `field` and whatever the classes' bodies call; returns it."""
    definitions("sglang/srt/layers/cp/base.py", ["ContextParallelStrategyKind", "CPAttentionBackendKind"], namespace)
    definitions("sglang/srt/layers/cp/bcg/bcg.py", ["PrefillCPBCGInput"], namespace)
    definitions("sglang/srt/layers/cp/bcg/interleave_bcg.py", ["InterleaveCPBCGInput"], namespace)
    inputs = {namespace["ContextParallelStrategyKind"].ZIGZAG: namespace["PrefillCPBCGInput"],
              namespace["ContextParallelStrategyKind"].INTERLEAVE: namespace["InterleaveCPBCGInput"]}
    namespace["get_cp_bcg_input_type"] = inputs.__getitem__
    return definitions("sglang/srt/layers/cp/bcg/__init__.py", ["PREFILL_CP_BCG_SUPPORTED_COMBINATIONS", "supports_prefill_cp_bcg"], namespace)


REQUIRE_ENV = "CPBCG_REQUIRE_SGLANG_WHEEL"
"""Set (as `.ci/run` does) to fail rather than skip when the wheel cannot be fetched."""


def _unavailable(reason: str):
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{reason} ({REQUIRE_ENV} is set: the 0.5.23 conformance tests must run)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def sglang_wheel() -> Path:
    """The 0.5.23 wheel (skips the test, with the reason, when it cannot be fetched; fails
    instead under `CPBCG_REQUIRE_SGLANG_WHEEL`)."""
    wheel = wheel_file()
    if isinstance(wheel, str):
        _unavailable(wheel)
    return wheel


@pytest.fixture(scope="session")
def sglang_source(sglang_wheel):
    """`wheel_source` once the wheel is had (skips or fails as `sglang_wheel` does)."""
    return wheel_source



_IMPORT_PRELUDE = r'''
import importlib.abc, importlib.machinery, sys, types
class Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub(f"{self.__name__}.{name}")
    def __call__(self, *a, **k):
        if len(a) == 1 and not k and isinstance(a[0], type) and "register" in self.__name__:
            return a[0]  # a stubbed class decorator keeps the class
        return self
    def __iter__(self):
        return iter(())
    def __or__(self, other):
        return self
    __ror__ = __or__
    def __getitem__(self, item):
        return self
    def __mro_entries__(self, bases):
        return (object,)
class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if any(name == m or name.startswith(m + ".") for m in STUBBED):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        return Stub(spec.name)
    def exec_module(self, module):
        module.__path__ = []
sys.meta_path.insert(0, Finder())
sys.path.insert(0, sys.argv[1])
'''


def wheel_import_script(stubbed: tuple[str, ...], body: str, before: str = "") -> str:
    """A `python -c` script that imports SGLang 0.5.23 from the wheel (its path: the script's first argument,
    as zipimport reads it) with the modules `stubbed` (and their submodules) replaced by stubs that answer
    every attribute, then runs `body`; `before` runs first, before any stub is installed."""
    return f"{before}\nSTUBBED = {stubbed!r}\n{_IMPORT_PRELUDE}\n{body}"


_MODEL_CONFIG_BEFORE = r'''
import importlib.machinery, importlib.util, pickle, sys
from transformers.utils import import_utils
assert not import_utils.is_torchvision_available()  # decided before torchvision is stubbed for SGLang's multimodal imports
dill = importlib.util.module_from_spec(importlib.machinery.ModuleSpec("dill", None))
vars(dill).update({k: v for k, v in vars(pickle).items() if not k.startswith("__")}, extend=lambda *a, **k: None)
sys.modules["dill"] = dill  # SGLang serialises its logit-processor classes at import: by reference, as pickle does
'''
_MODEL_CONFIG_BODY = r'''
import json, os, shutil, tempfile
from sglang.srt.configs.model_config import ModelConfig
HF = ("architectures", "model_type", "quantization_config", "index_topk", "index_kpool", "linear_attn_config", "layer_types",
      "linear_num_heads", "linear_head_dim")
def attrs(config):
    out = {}
    for name in HF:
        if hasattr(config, name):  # absent stays absent: getattr(config, name, default) reads it so
            value = getattr(config, name)
            out[name] = value.to_dict() if hasattr(value, "to_dict") else value
    text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else getattr(config, "text_config", None)
    out["text_config"] = attrs(text) if text is not None and text is not config else None
    return out
found = {}
for name, path in json.loads(sys.stdin.read()).items():
    folder = tempfile.mkdtemp()
    shutil.copy(path, os.path.join(folder, "config.json"))
    found[name] = {}
    for mm in (None, True, False):
        for lm_only in (False, True):
            mc = ModelConfig(model_path=folder, enable_multimodal=mm, language_model_only=lm_only)
            found[name][f"{mm}/{lm_only}"] = {
                "attention_arch": mc.attention_arch.name, "is_multimodal": bool(mc.is_multimodal),
                "is_multimodal_breakable_cuda_graph_supported": bool(mc.is_multimodal_breakable_cuda_graph_supported),
                "is_encoder_decoder": bool(mc.is_encoder_decoder), "context_len": mc.context_len,
                "has_asymmetric_kv": bool(mc.has_asymmetric_kv), "has_attention_sinks": bool(getattr(mc, "has_attention_sinks", False)),
                "num_kv_heads": {str(tp): mc.get_num_kv_heads(tp) for tp in (1, 2, 4, 8, 16)},
                "hf": attrs(mc.hf_config), "hf_text": attrs(mc.hf_text_config)}
print(json.dumps(found, default=str))
'''
MODEL_CONFIG_SCRIPT = wheel_import_script(
    ("pybase64", "requests", "triton", "starlette", "zmq", "sglang.kernels", "IPython", "aiohttp", "torchvision", "sentencepiece",
     "sglang.srt.layers.quantization"), _MODEL_CONFIG_BODY, before=_MODEL_CONFIG_BEFORE)
"""Run with the wheel's path as its argument and `{name: config.json path}` on stdin: 0.5.23's `ModelConfig`
(`configs/model_config.py`) built on each config.json with transformers' config loading, for each
`--enable-multimodal` (unset, true, false) and `--language-model-only`; prints what the start-up resolution
reads of it as JSON. Stubbed: kernels (triton, sglang.kernels, quantization), image and tokenizer back ends
and serving I/O, which loading a config never runs."""
