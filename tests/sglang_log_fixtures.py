"""SYNTHETIC SGLang server logs for the tests: written by cpbcg from the format strings of SGLang's
`report_prefill_stats` / `log_prefill_stats`, `cuda_graph_setup.capture_prefill_graph`, the prefill
graph runner's capture progress and `server_args` logging (0.5.23 and older releases, per the
format facts of issue 21). Not copied from any real server log."""

from __future__ import annotations

from pathlib import Path

SYNTHETIC_HEADER = "# SYNTHETIC SGLang server log written by cpbcg's tests (not from a real server)\n"


def prefill_line(n: int, k: int, cached: int = 0, *, graph: bool | None = True, prefix: str = "[2026-11-02 10:00:01 TP0] ",
                 label: str = "cuda graph", style: str = "0.5.23", mixed: int = 0, iteration: int | None = None) -> str:
    """One `Prefill batch` line in the given release's wording."""
    head = "Prefill batch" + (f" [{iteration}]" if iteration is not None else "")
    if mixed:
        head += f"(mixed #running-req: {mixed})"
    verdict = "" if graph is None else f"{label}: {graph}"
    if style == "old":  # 2024-10 .. 2025-03: `.`, cache hit rate, no throughput, no verdict
        return f"{prefix}{head}. #new-seq: {k}, #new-token: {n}, #cached-token: {cached}, cache hit rate: 0.00%, token usage: 0.01, #running-req: 0, #queue-req: 0\n"
    if style == "2026-02":  # verdict after the throughput
        return (f"{prefix}{head}, #new-seq: {k}, #new-token: {n}, #cached-token: {cached}, full token usage: 0.10, swa token usage: 0.05, "
                f"#running-req: 1, #queue-req: 0, input throughput (token/s): 1234.50, {verdict}\n")
    return (f"{prefix}{head}, #new-seq: {k}, #new-token: {n}, #cached-token: {cached}, token usage: 0.10, #running-req: 2, "
            f"#queue-req: 0, #pending-token: 0, {verdict + ', ' if verdict else ''}input throughput (token/s): 12345.67, "
            "est. prefill TFLOPS/s (per GPU): 101.20\n")


def default_buckets(max_bs: int) -> list[int]:
    """SGLang's default prefill list (domain §5)."""
    out = list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32)) + list(range(576, 1025, 64))
    out += list(range(1280, 4097, 256)) + list(range(4608, max_bs + 1, 512))
    return [b for b in out if b <= max_bs]


def sglang_graph_verdict(n: int, buckets: list[int], factor: float = 2.0) -> bool:
    """SGLang 0.5.23's rule without CP (`PrefillCudaGraphRunner.can_replay_locally`): `n` at
    most the largest bucket, and the bucket it pads to at most `factor * n`."""
    if n > max(buckets):
        return False
    padded = min(b for b in buckets if b >= n)
    return padded <= n * factor


def startup_lines(*, max_bs: int = 8192, cp: int = 1, tp: int = 1, dp: int = 1, pp: int = 1, chunk: int = 8192, page: int = 1,
                  mixed: bool = False, date: str = "2026-11-02", dict_form: bool = True, capture: bool = True) -> str:
    """Start-up output: the settings dump and the prefill capture lines (58 buckets for 8192)."""
    buckets = default_buckets(max_bs)
    if dict_form:  # 0.5.23: server_args={...} (ServerArgs.resolved_dict)
        args = (f"server_args={{'model_path': 'org/model', 'tp_size': {tp}, 'dp_size': {dp}, 'pp_size': {pp}, 'attn_cp_size': {cp}, "
                f"'enable_prefill_cp': {cp > 1}, 'cp_strategy': 'zigzag', 'chunked_prefill_size': {chunk}, 'page_size': {page}, "
                f"'enable_mixed_chunk': {mixed}, 'max_prefill_tokens': 16384, 'prefill_max_requests': None, "
                f"'cuda_graph_config': {{'decode': {{'backend': 'full', 'bs': None, 'max_bs': 256}}, "
                f"'prefill': {{'backend': 'breakable', 'bs': None, 'max_bs': {max_bs}}}}}, 'disable_cuda_graph': False}}")
    else:  # older: a Python repr with an enum that ast cannot read as a literal
        args = (f"server_args=ServerArgs(model_path='org/model', tp_size={tp}, dp_size={dp}, pp_size={pp}, attn_cp_size={cp}, "
                f"load_format=<LoadFormat.AUTO: 'auto'>, chunked_prefill_size={chunk}, page_size={page}, enable_mixed_chunk={mixed}, "
                f"piecewise_cuda_graph_max_tokens={max_bs}, enable_piecewise_cuda_graph=True, disable_cuda_graph=False)")
    text = f"[{date} 09:59:00] {args}\n[{date} 09:59:10 TP0] Load weight end. type=LlamaForCausalLM, avail mem=60.00 GB, mem usage=15.00 GB.\n"
    if capture:
        text += (f"[{date} 09:59:20 TP0] Capture target prefill CUDA graph begin. backend=breakable, num_tokens={buckets}, "
                 "avail mem=44.04 GB\n")
        avail, steps = 44.04, []
        for b in reversed(buckets):  # largest first; each step printed before its bucket is captured
            steps.append(f"Capturing prefill shape (num_tokens={b} avail_mem={avail:.2f} GB): ")
            avail = round(avail - (2.29 if b == buckets[-1] else 0.01 if b >= 4096 else 0.0), 2)
        text += "\r".join(steps) + "\n"
        text += (f"[{date} 09:59:50 TP0] Capture target prefill CUDA graph end. elapsed=31.50 s, mem usage={44.04 - avail:.2f} GB, "
                 f"avail mem={avail:.2f} GB.\n")
    return text


def write_log(path: Path, body: str) -> Path:
    path.write_text(SYNTHETIC_HEADER + body)
    return path


def resolved_line(*, chunk: int = 8192, max_prefill: int = 16384, max_running: int = 256, total: int = 500000, context: int = 32768,
                  prefix: str = "[2026-11-02 09:59:30 TP0] ") -> str:
    """The scheduler's start-up line of the values it resolved (`Scheduler.__init__`, every release)."""
    return (f"{prefix}max_total_num_tokens={total}, chunked_prefill_size={chunk}, max_prefill_tokens={max_prefill}, "
            f"max_running_requests={max_running}, context_len={context}, available_gpu_mem=12.34 GB\n")


def old_dump(*, date: str = "2025-09-01", piecewise: bool = False, disable_cuda_graph: bool = False, tp: int = 1, pp: int = 1) -> str:
    """A 2025 `server_args=ServerArgs(...)` repr: no attention CP field, a piecewise list listed whether on or off."""
    return (f"[{date} 09:59:00] server_args=ServerArgs(model_path='org/model', tp_size={tp}, dp_size=1, pp_size={pp}, "
            f"load_format=<LoadFormat.AUTO: 'auto'>, chunked_prefill_size=8192, page_size=1, enable_mixed_chunk=False, "
            f"disable_cuda_graph={disable_cuda_graph}, enable_piecewise_cuda_graph={piecewise}, "
            f"piecewise_cuda_graph_tokens=[4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096], piecewise_cuda_graph_max_tokens=4096)\n")


def piecewise_capture(buckets: list[int], *, date: str = "2025-09-01", total_gb: float = 0.77) -> str:
    """A piecewise runner's capture: the list, the progress line (largest first) and the end line."""
    text = f"[{date} 09:59:20 TP0] Capture cuda graph num tokens {buckets}\n"
    avail, steps = 40.0, []
    for b in reversed(buckets):
        steps.append(f"Capturing num tokens (num_tokens={b} avail_mem={avail:.2f} GB): ")
        avail = round(avail - (total_gb - 0.01 * (len(buckets) - 1) if b == buckets[-1] else 0.01), 2)
    text += "\r".join(steps) + "\n"
    return text + f"[{date} 09:59:40 TP0] Capture piecewise CUDA graph end. Time elapsed: 9.80 s. mem usage={40.0 - avail:.2f} GB. avail mem={avail:.2f} GB.\n"
