"""CI gates for `cpbcg replay-check`: compare an evaluation with thresholds, typed results.

A gate is a threshold on one number of an `Evaluation` (the same numbers `plan` prints):

* `min_coverage`: fraction of forwards replayed in graphs must be `>=` the threshold;
* `min_token_coverage`: fraction of tokens replayed in graphs, `>=`;
* `max_padding`: padding overhead (padded / real graph tokens), `<=`;
* `max_eager.REASON`: eager forwards for one reason (`local_capacity`, ...), `<=`;
* `min_observed_coverage` (an SGLang server log whose lines print the graph verdict): fraction
  of forwards the server itself ran in graphs (`cuda graph: True`), `>=`;
* `min_decode_coverage`: fraction of decode steps run in decode CUDA graphs (SGLang 0.5.23's
  decode list as captured, `cpbcg.engines.sglang.decode_plan`), `>=`;
* `max_eager_decode_steps`: decode steps run eagerly (running batch above the captured max), `<=`;
* `min_observed_decode_coverage` (an SGLang log whose `Decode batch` lines print the verdict):
  fraction of those lines the server ran in decode graphs, `>=`;
* `replay_verified` (only with `--replay N`): replays through freshly captured graphs whose
  output differed from eager, `<= 0`.

The library never prints; the CLI and `cpbcg.outputs.ci_reports` render `GateResult`s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping, Sequence


from cpbcg.planner.document import document
from cpbcg.errors import ConfigError
from cpbcg.planner.model.bucket_spec import parse_positive_int
from cpbcg.planner import sampling
from cpbcg.planner.evaluate import Evaluation
from cpbcg.planner.model.layout import BatchSet, CPLayout
from cpbcg.planner.model.selector import EAGER_REASONS, BucketTable

Unit = Literal["fraction", "batches"]


@dataclass(frozen=True)
class Gates:
    """Thresholds a CI run checks (config `gates:`); None / absent = not checked."""

    min_coverage: float | None = None
    """Least fraction of forwards replayed in graphs."""
    min_token_coverage: float | None = None
    """Least fraction of tokens replayed in graphs."""
    max_padding: float | None = None
    """Most padding overhead (padded / real graph tokens)."""
    max_eager: Mapping[str, int] = field(default_factory=dict)
    """Most eager forwards per reason (`local_capacity`, ...)."""
    min_observed_coverage: float | None = None
    """Least fraction of forwards the server printed as run in graphs (an SGLang log)."""
    min_decode_coverage: float | None = None
    """Least fraction of decode steps run in decode graphs."""
    max_eager_decode_steps: int | None = None
    """Most decode steps run eagerly."""
    min_observed_decode_coverage: float | None = None
    """Least fraction of a log's `Decode batch` lines (with a verdict) the server ran in decode graphs."""


@dataclass(frozen=True)
class GateResult:
    """One gate checked against a measured value."""

    name: str
    """Gate key as in the config (`min_coverage`, `max_eager.local_capacity`, `replay_verified`)."""
    metric: str
    """What was measured, in words (`batch coverage`, `eager batches (local_capacity)`)."""
    measured: float
    """Measured value: a fraction in [0, 1] or a count of batches (see `unit`)."""
    threshold: float
    """Threshold the measured value is compared with (same unit)."""
    comparison: Literal[">=", "<="]
    """The gate passes when `measured <comparison> threshold`."""
    unit: Unit
    """`fraction` (printed as a percentage) or `batches` (a count)."""
    passed: bool
    """Whether the gate holds."""
    detail: str = ""
    """Extra context for the report (e.g. the first failing batch); may be empty."""

    @property
    def measured_text(self) -> str:
        return format_value(self.measured, self.unit, self.threshold)

    @property
    def threshold_text(self) -> str:
        return format_value(self.threshold, self.unit, self.measured)

    def message(self) -> str:
        """One line: `min_coverage: batch coverage 72.75% is below the minimum 90.00%`."""
        if self.passed:
            verdict = f"{self.measured_text} {self.comparison} {self.threshold_text}"
        elif self.comparison == ">=":
            verdict = f"{self.measured_text} is below the minimum {self.threshold_text}"
        else:
            verdict = f"{self.measured_text} is above the maximum {self.threshold_text}"
        text = f"{self.name}: {self.metric} {verdict}"
        return f"{text} ({self.detail})" if self.detail and not self.passed else text

    def to_dict(self) -> dict[str, Any]:
        """Every field but `detail`, then the `message` it is said in."""
        return document(self, omit=("detail",), extra={"message": self.message()})


def count_of(n: int, noun: str, plural: str | None = None) -> str:
    """`1 gate`, `2 gates`, `1,024 batches`: a count with its noun in the right number."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def format_value(value: float, unit: Unit, other: float | None = None) -> str:
    """`0.7275` → `72.75%` for fractions (more digits when 2 would hide a difference from
    `other`), `5397` → `5,397` for counts."""
    if unit == "batches":
        return f"{int(value):,}"
    for digits in (2, 4, 6):
        text = f"{100.0 * value:.{digits}f}%"
        if other is None or value == other or text != f"{100.0 * other:.{digits}f}%":
            return text
    return f"{100.0 * value:.8f}%"


def _at_least(name: str, metric: str, measured: float, threshold: float) -> GateResult:
    return GateResult(name, metric, measured, threshold, ">=", "fraction", measured >= threshold)


def _at_most(name: str, metric: str, measured: float, threshold: float, unit: Unit, detail: str = "") -> GateResult:
    return GateResult(name, metric, measured, threshold, "<=", unit, measured <= threshold, detail)


def check_gates(ev: Evaluation, gates: Gates, observed: Any = None, decode: Any = None) -> tuple[GateResult, ...]:
    """Every configured gate of `gates` checked against `ev`, in a fixed order
    (coverage, token coverage, padding, eager reasons in `EAGER_REASONS` order, then the
    observed coverage of `observed`, a `cpbcg.engines.sglang.observed.ObservedComparison`, then the
    decode gates on `decode`, a `cpbcg.engines.sglang.decode_plan.DecodePlan`).
    Raises `ConfigError` for `min_observed_coverage` on a trace without printed verdicts and
    for a decode gate on traffic without decode steps (`decode` None)."""
    results: list[GateResult] = []
    if gates.min_coverage is not None:
        results.append(_at_least("min_coverage", "batch coverage", ev.coverage, gates.min_coverage))
    if gates.min_token_coverage is not None:
        results.append(_at_least("min_token_coverage", "token coverage", ev.token_coverage, gates.min_token_coverage))
    if gates.max_padding is not None:
        results.append(_at_most("max_padding", "padding overhead", ev.padding_overhead, gates.max_padding, "fraction"))
    for reason in EAGER_REASONS:
        limit = gates.max_eager.get(reason.value)
        if limit is not None:
            examples = ev.eager_examples.get(reason.value) or []
            detail = f"first: extend_seq_lens {examples[0]}" if examples else ""
            results.append(
                _at_most(f"max_eager.{reason.value}", f"eager batches ({reason.value})", ev.eager[reason.value], limit, "batches", detail)
            )
    if gates.min_observed_coverage is not None:
        if observed is None:
            raise ConfigError("min_observed_coverage: the trace is not an SGLang server log whose Prefill batch lines print "
                              "the graph verdict ('cuda graph: True|False', SGLang 2026-01 and later)")
        results.append(_at_least("min_observed_coverage", f"observed {observed.label} coverage", observed.coverage, gates.min_observed_coverage))
    if gates.min_decode_coverage is not None or gates.max_eager_decode_steps is not None:  # the model's, on the traffic
        if decode is None:
            raise ConfigError("min_decode_coverage / max_eager_decode_steps: the trace has no decode steps (a request trace simulated "
                              "with decode, or an SGLang server log with Decode batch lines, has them)")
        conf = decode.configured
        detail = (f"running batch up to {conf.largest_eager_batch} above the captured decode max_bs {conf.max_bs}"
                  if conf.eager_steps else "")
        if gates.min_decode_coverage is not None:
            results.append(GateResult("min_decode_coverage", "decode steps in graphs", conf.coverage, gates.min_decode_coverage, ">=",
                                      "fraction", conf.coverage >= gates.min_decode_coverage, detail))
        if gates.max_eager_decode_steps is not None:
            results.append(_at_most("max_eager_decode_steps", "eager decode steps", conf.eager_steps, gates.max_eager_decode_steps,
                                    "batches", detail))
    if gates.min_observed_decode_coverage is not None:
        seen = None if decode is None or decode.observed is None else decode.observed
        if seen is None or not seen["with_verdict"]:
            raise ConfigError("min_observed_decode_coverage: the trace is not an SGLang server log whose Decode batch lines print "
                              "the graph verdict ('cuda graph: True|False')")
        results.append(_at_least("min_observed_decode_coverage", "observed decode lines in graphs", seen["graph"] / seen["with_verdict"],
                                 gates.min_observed_decode_coverage))
    return tuple(results)


def what_the_server_did(gates: Gates, observed: Any) -> tuple[GateResult, ...]:
    """A log whose forwards print the server's verdict is gated on what the server did (issue 39): `min_coverage`
    also holds the observed coverage (unless `min_observed_coverage` sets its own), and every forward on which
    the model and the log disagree (`ObservedComparison.model_errors + unexplained_eager`) fails the gate
    `model_agrees_with_log`, the first one named. Nothing without gates or without printed verdicts.
    `replay-check`'s (a CI gate on a log), beside `check_gates`."""
    if observed is None or not observed.forwards or gates == Gates():
        return ()
    out = []
    if gates.min_coverage is not None and gates.min_observed_coverage is None:
        out.append(_at_least("min_coverage.observed", f"observed {observed.label} coverage (the log's verdicts)", observed.coverage,
                             gates.min_coverage))
    disagreeing = observed.model_errors + observed.unexplained_eager
    first = (observed.model_error_lines + observed.eager_lines)[:1]
    detail = (f"first: log line {first[0].line_no}: the server ran {'a graph' if first[0].server_graph else 'eagerly'}, the model says "
              f"{first[0].model}" if first else "")
    out.append(_at_most("model_agrees_with_log", f"forwards where the model and the log's {observed.label} verdict disagree",
                        disagreeing, 0, "batches", detail))
    return tuple(out)


def parse_max_eager(specs: Sequence[str]) -> dict[str, int]:
    """Parse repeated `--max-eager REASON=N` values into `{reason: N}` (later ones win).

    Raises `ConfigError` for a missing `=`, an unknown reason (naming the valid ones) or an `N`
    that is not a non-negative integer.
    """
    valid = [r.value for r in EAGER_REASONS]
    out: dict[str, int] = {}
    for spec in specs:
        reason, sep, count = (part.strip() for part in spec.partition("="))
        if not sep:
            raise ConfigError(f"--max-eager {spec!r}: expected REASON=N, e.g. local_capacity=0")
        if reason not in valid:
            raise ConfigError(f"--max-eager {spec!r}: unknown reason {reason!r} (choose from {', '.join(valid)})")
        try:
            out[reason] = parse_positive_int(count, "N", allow_zero=True, maximum=2**63 - 1)
        except ConfigError:
            raise ConfigError(f"--max-eager {spec[:40]!r}: N must be a non-negative integer, got {count[:20]!r}") from None
    return out


def max_eager_overrides(max_eager: Sequence[str]) -> dict[str, int]:
    """Dotted config overrides of `--max-eager REASON=N` options (`parse_max_eager`, merged into
    the config's `gates.max_eager`). Raises `ConfigError` for an unknown reason or a bad count."""
    return {f"gates.max_eager.{reason}": n for reason, n in parse_max_eager(max_eager).items()}


@dataclass(frozen=True)
class ReplayRecord:
    """One batch replayed through freshly captured graphs and compared with eager."""

    extend_seq_lens: list[int]
    """The replayed batch (tokens per request)."""
    bucket: int | None
    """Bucket (tokens) it replayed in; None if the harness ran it eagerly."""
    verified: bool
    """Graph output matched the eager forward within tolerance."""
    max_abs_err: float | None
    """Largest absolute difference from eager; None when not measured."""
    replay_ms: float | None
    """Replay time (ms); None in a dry run."""

    @classmethod
    def of(cls, record: Any) -> "ReplayRecord":
        """From one `cpbcg.graph_capture.BatchReplay` of `replay_batches`."""
        return cls([int(x) for x in record.extend_seq_lens], record.bucket, record.verified is True,
                   record.max_abs_err, record.replay_ms)


def replay_gate(records: Sequence[ReplayRecord]) -> GateResult:
    """`replay_verified`: every replayed batch must match eager (no failures allowed)."""
    failed = [r for r in records if not r.verified]
    detail = f"first: extend_seq_lens {failed[0].extend_seq_lens}, max_abs_err {failed[0].max_abs_err}" if failed else ""
    metric = f"failed replays of {count_of(len(records), 'captured-graph replay')}"
    return _at_most("replay_verified", metric, len(failed), 0, "batches", detail)


@dataclass(frozen=True)
class CheckReport:
    """Everything `replay-check` found: the evaluation, the gates and any real replays."""

    header: dict[str, Any]
    """Deployment settings and source (`cpbcg.outputs.tables.deployment_header`, plus `manifest`)."""
    evaluation: Evaluation
    """The evaluation, the same `plan` prints."""
    gates: tuple[GateResult, ...]
    """Checked gates, in report order."""
    replays: tuple[ReplayRecord, ...] = field(default=())
    """Batches replayed with `--replay N` (empty without it)."""
    observed: Any = None
    """An SGLang log's observed vs modelled graph use (`ObservedComparison`), else None."""
    parts: tuple[Any, ...] = ()
    """The (trace, load) parts (`PlanPart`) of a trace without timestamps simulated at the rate
    picker's rates, as `plan` simulates it; empty when the trace was simulated once."""
    launches: tuple[Any, ...] = ()
    """An SGLang log of several launches: each launch under the server it resolved to
    (`LaunchPlan`, `PlanResult.launches`; `evaluation` is their total); empty otherwise."""
    default_evaluation: Evaluation | None = None
    """SGLang 0.5.23's default list for the chunk on the same forwards (`plan.AgainstDefault`); None: not compared."""
    against_default: tuple[str, ...] = ()
    """Where the judged list costs more padding or modelled time than that default, with both numbers (empty: it does not)."""
    decode: Any = None
    """Decode graphs on the traffic's decode steps (`DecodePlan`), None without decode steps."""

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)

    @property
    def failed(self) -> tuple[GateResult, ...]:
        return tuple(g for g in self.gates if not g.passed)


def sample_graph_batches(
    chunks: Iterable[BatchSet], table: BucketTable, cp: CPLayout, max_padding_factor: float, k: int, seed: int = 0
) -> list[list[int]]:
    """Up to `k` distinct trace lines the selector replays in a graph, uniformly sampled
    (`cpbcg.planner.sampling.sample_graph_batches`), in trace order."""
    sample = sampling.sample_graph_batches(chunks, table, cp, max_padding_factor, k, seed)
    return [list(b.extend_seq_lens) for b in sample.batches]
