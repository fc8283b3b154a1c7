"""Planning over a set of simulations: every (trace, load factor) pair is one job, mapped over an
executor and merged exactly.

A `TrafficJob` names one trace file and one load factor (`time_scale`; for a trace without
timestamps, a Poisson rate). `run_job` reads and simulates it and replays its forwards with the
configured list: it returns the `Evaluation` (with examples) and the job's demand cut into the
part a list is fitted on and the held-back rest (`DemandSplit`, aggregated: one row per
distinct forward shape). Jobs share nothing, so `map_jobs` runs them in order:

* in this process (`workers=1`, or a single job),
* on a local `concurrent.futures.ProcessPoolExecutor` (one worker per core by default), forked
  after `preload` has loaded what every worker would load again (the compiled event loop, pyarrow),
* or on a Dask distributed cluster (`scheduler="tcp://host:8786"`): `Client.get_executor()` is a
  `concurrent.futures` executor, so both share this one code path. Dask is imported only then.

At most `2 * workers` jobs are in flight and results are taken in job order, so memory is
bounded by the workers, not the number of files, and the merge (`Evaluation.merge`,
`DemandSplit.merge`) sees the results in the same order as a serial run: the result is
identical whatever the executor.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections import deque
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from cpbcg.errors import ConfigError, TraceError
from cpbcg.planner.background import JOBS_ENV
from cpbcg.planner.demand_log import DemandLog, DemandSplit
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.evaluate import Evaluation, Evaluator
from cpbcg.planner.bound import bound_demand
from cpbcg.planner.model.layout import BatchSet
from cpbcg.planner.model.selector import BucketTable
from cpbcg.planner.scheduler import SchedulerSettings
from cpbcg.planner.scheduler.simulation import KERNEL_MIN_REQUESTS, load_compiled_loop
from cpbcg.planner.traces import ForwardSizes, TraceKind
from cpbcg.assembly.registry import open_trace
from cpbcg.planner.traces.csv_table import COLUMNAR_MIN_BYTES
from cpbcg.assembly.registry import detect, format_info
from cpbcg.planner.traces.records import RequestChunk
from cpbcg.assembly.sources import BatchSource, TraceSpec

T = TypeVar("T")
R = TypeVar("R")

UTILISATIONS = (0.25, 0.5, 0.75, 0.95)
"""Default loads for a trace without timestamps: Poisson rates that keep the modelled prefill
busy this fraction of the time (from the trace's first requests' mean prompt length and the
prefill speed model). The trace says nothing about its load, and the batch shapes follow the
load: these span a lightly loaded to a nearly saturated server (beyond it every forward is a
full chunk, which the recommendation's headroom serves anyway)."""


@dataclass(frozen=True)
class TrafficJob:
    """One simulation: one trace at one load."""

    spec: TraceSpec
    """The trace, its scheduler settings already at this job's load."""
    label: str
    """The trace as reports name it."""
    load_factor: float
    """Inter-arrival gaps divided by this (`time_scale`); 1 for a Poisson rate job."""
    rate_per_s: float | None = None
    """Poisson arrival rate of a trace without timestamps (requests/s), or None."""
    fit: bool = True
    """Whether the recommendation is fitted on this job (False: reported only, `--fit-trace`)."""

    @property
    def load(self) -> str:
        """The load in words: `x2` (time scale) or `8 req/s` (Poisson rate)."""
        return f"{self.rate_per_s:.4g} req/s" if self.rate_per_s is not None else f"x{self.load_factor:g}"


@dataclass(frozen=True)
class JobOutcome:
    """What one job found (small: aggregated demand, no forwards)."""

    job: TrafficJob
    evaluation: Evaluation
    """The configured list on every forward of the job (examples included)."""
    split: DemandSplit | None
    """Its demand, cut for the out-of-sample check; None when no recommendation is asked for."""
    source: BatchSource
    """The finished source: format, bound flag and the simulation summary (no forwards left)."""


def tally(chunks: Iterable[BatchSet] | Iterable[ForwardSizes], deployment: Deployment, table: BucketTable,
          keep_demand: bool, on_chunk: Callable[[Any], Any] | None = None) -> tuple[Evaluation, DemandLog | None]:
    """Replay `chunks` with `table` and keep their demand in a `DemandLog` (when `keep_demand`).
    `ForwardSizes` chunks (a server log) are taken at their exact worst case (`bound_demand`)."""
    evaluator = Evaluator(table, deployment.cp, deployment.max_padding_factor, deployment.max_seq_len_tokens)
    log = DemandLog() if keep_demand else None
    for chunk in chunks:
        if isinstance(chunk, ForwardSizes):
            demand = bound_demand(chunk, deployment.cp)
            evaluator.add_demand(demand)
            if log is not None:
                log.add(demand)
        else:
            evaluator.add(chunk, None if log is None else log.add)
        if on_chunk is not None:
            on_chunk(chunk)
    return evaluator.result(), log


def run_job(job: TrafficJob, deployment: Deployment, table: BucketTable, held_back: float | None,
            on_chunk: Callable[[Any], Any] | None = None, progress: Callable[[int], None] | None = None) -> JobOutcome:
    """Read, simulate and replay one job; `held_back` is the fraction of its forwards kept out of
    the fit (None: no recommendation, no demand kept). Raises `TraceError`."""
    source = job.spec.open(progress)
    chunks = source.forwards if source.is_bound else source.batches
    evaluation, log = tally(chunks, deployment, table, held_back is not None, on_chunk)  # type: ignore[arg-type]
    split = None if log is None else log.to_split(held_back or 0.0)
    return JobOutcome(job, evaluation, split, finished(source))


def finished(source: BatchSource) -> BatchSource:
    """`source` after iteration, without its iterators (picklable): format, bound flag, the
    simulation's summary and settings, the reader's notes and a log's settings, as the notes read them."""
    sim = None if source.simulation is None else FinishedSimulation(source.simulation.summary(), source.simulation.cfg)
    return BatchSource(iter(()), source.trace_format, sim, iter(()) if source.is_bound else None,  # type: ignore[arg-type]
                       log=source.log, read_notes=source.read_notes, above_chunk=source.above_chunk)


@dataclass(frozen=True)
class FinishedSimulation:
    """A finished scheduler simulation: its summary and settings (what `Simulation` offers after
    iteration)."""

    _summary: Any
    cfg: SchedulerSettings

    def summary(self) -> Any:
        return self._summary


def load_jobs(spec: TraceSpec, label: str, load_factors: Sequence[float], rates: Sequence[float] | None, fit: bool) -> list[TrafficJob]:
    """One job per load factor of `spec`; for a trace without timestamps (`rates` given), one per
    Poisson rate and load factor, at `rate x factor` requests/s (the load factor scales the
    arrivals whatever made them: `untimed_rates`)."""
    if rates is not None:
        return [TrafficJob(replace(spec, scheduler=replace(spec.scheduler, rate=float(r) * float(f), time_scale=1.0)), label, 1.0,
                           float(r) * float(f), fit) for r in rates for f in load_factors]
    return [TrafficJob(replace(spec, scheduler=replace(spec.scheduler, time_scale=float(f))), label, float(f), None, fit)
            for f in load_factors]


@dataclass(frozen=True)
class RequestProfile:
    """What the rate picker needs of a request trace, over the whole trace."""

    timed: bool
    """Its requests carry arrival times (then nothing else is read)."""
    requests: int
    """Requests read (0 when `timed`)."""
    mean_prompt_tokens: float
    """Mean prompt length over every request (tokens; 0.0 when `timed`)."""


def request_profile(spec: TraceSpec) -> RequestProfile | None:
    """Whether the request trace `spec` has arrival times, and if not its mean prompt length over
    every request (a pass over the whole trace, or its held requests from standard input: the
    rates never depend on where a read chunk ends, nor on a file versus standard input); None for
    another kind of trace or an empty one. Raises `TraceError`."""
    if spec.path is None:
        return None
    chunks = spec.requests if spec.requests is not None else open_trace(spec.path, spec.trace_format, spec.options).items
    requests, tokens = 0, 0
    for chunk in chunks:
        if not isinstance(chunk, RequestChunk):
            return None
        if chunk.arrival_s is not None:
            return RequestProfile(True, 0, 0.0)
        requests += chunk.num_requests
        tokens += int(chunk.input_tokens.sum())
    return RequestProfile(False, requests, tokens / requests) if requests else None


def untimed_rates(profile: RequestProfile | None, scheduler: SchedulerSettings, rates: Sequence[float] | str | None) -> list[float] | None:
    """The Poisson rates (requests/s, before load factors) of a trace: None for a trace with
    arrival times (or no requests); `default_rates` of its mean prompt for `rates="auto"`; the
    rates given; else the scheduler's one `rate`. The one load model of `plan`, `replay-check`
    and `batches`."""
    if profile is None or profile.timed:
        return None
    if isinstance(rates, str):
        return default_rates(profile.mean_prompt_tokens, scheduler)
    return [float(r) for r in rates] if rates is not None else [scheduler.rate]


DASK_CONNECT_TIMEOUT_KEY = "distributed.comm.timeouts.connect"
"""Dask's setting for how long a client waits for the scheduler (default `30s`); `plan --scheduler`
reads it, so `DASK_CONNECT_TIMEOUT_ENV=5s` (or `dask.config.set`) shortens the wait."""
DASK_CONNECT_TIMEOUT_ENV = "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT"

def default_rates(mean_prompt_tokens: float, scheduler: SchedulerSettings) -> list[float]:
    """Poisson rates (requests/s) at which the modelled prefill would be busy `UTILISATIONS` of the
    time if nothing else held the server (decode steps and a full KV pool do: the report says the
    busy fraction each simulation reached, `load_reached`):
    `u / (prefill_fixed_ms / 1000 + mean_prompt_tokens / prefill_tokens_per_s)`, 3 significant digits."""
    per_request_s = prefill_s_per_request(mean_prompt_tokens, scheduler)
    return [float(f"{u / per_request_s:.3g}") for u in UTILISATIONS]


def prefill_s_per_request(mean_prompt_tokens: float, scheduler: SchedulerSettings) -> float:
    """The rate picker's prefill-only model: seconds of prefill one request of `mean_prompt_tokens`
    costs (`prefill_fixed_ms / 1000 + mean_prompt_tokens / prefill_tokens_per_s`)."""
    return scheduler.prefill_fixed_ms / 1000.0 + mean_prompt_tokens / scheduler.prefill_tokens_per_s


REACHED_SHARE = 0.9
"""A load whose simulation reached less than this share of the prefill busy fraction the rate
picker's model gives it is said to fall short (decode and the KV pool hold the server)."""


@dataclass(frozen=True)
class LoadReached:
    """How busy one simulated Poisson load kept the prefill (`load_reached`)."""

    target_busy: float
    """The prefill busy fraction the rate picker's model gives the rate (`prefill_s_per_request`
    of the simulated mean prompt times the rate; may exceed 1)."""
    reached_busy: float
    """The prefill busy fraction the simulation reached (busy time over simulated time)."""

    @property
    def short(self) -> bool:
        """The simulation fell short of `REACHED_SHARE` of the target: decode steps or the KV pool held the server."""
        return self.reached_busy < REACHED_SHARE * self.target_busy


def load_reached(source: BatchSource, rate_per_s: float | None) -> LoadReached | None:
    """What the simulation of `source` at `rate_per_s` (req/s) reached against the rate picker's
    model, or None when it was not simulated at a rate or simulated nothing. Complete once
    `source.batches` has been iterated."""
    sim = source.simulation
    if sim is None or rate_per_s is None:
        return None
    s = sim.summary()
    if not s.requests or not s.simulated_s:
        return None
    return LoadReached(rate_per_s * prefill_s_per_request(s.input_tokens / s.requests, sim.cfg), s.busy_s / s.simulated_s)


def simulated_loads(source: BatchSource, rates: Sequence[float] | str | None) -> int:
    """How many Poisson rates the request trace `source` is simulated at under `rates` (`plan`'s
    load model, `untimed_rates`): 0 for a trace with arrival times or another kind."""
    if rates is None or source.spec is None or source.simulation is None:
        return 0
    return len(untimed_rates(request_profile(source.spec), source.spec.scheduler, rates) or ())


def map_jobs(fn: Callable[[T], R], items: Sequence[T], workers: int = 1, scheduler: str | None = None,
             prepare: Callable[[], None] | None = None) -> Iterator[R]:
    """`fn(item)` for every item, in order, on the executor chosen (module doc). Exceptions are
    raised in order, as a serial loop would raise them. `prepare()` runs before a local pool of
    more than one worker forks (`preload`: what every worker would load, loaded once)."""
    if scheduler is None and (workers <= 1 or len(items) <= 1):
        yield from map(fn, items)
        return
    with _executor(workers, scheduler, len(items), prepare) as (executor, width):
        pending: deque[Future[R]] = deque()
        queue = iter(items)
        for item in queue:
            pending.append(executor.submit(fn, item))
            if len(pending) >= 2 * width:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _check_address(scheduler: str) -> None:
    """`ConfigError` at once for an address no Dask client can connect to (`bogus`,
    `tcp://host` without a port, a port outside 1..65535, `http://...`), by distributed's own
    address parser, instead of a wait for the connection timeout."""
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import backends

    try:
        scheme, location = parse_address(scheduler)
        if scheme not in backends:
            raise ValueError(f"unknown protocol {scheme!r} (one of {', '.join(sorted(backends))})")
        host, port = ("", 0) if scheme == "inproc" else parse_host_port(location)
        if scheme != "inproc" and not 1 <= int(port) <= 65535:
            raise ValueError(f"port {port} is outside 1..65535")
    except ValueError as exc:
        raise ConfigError(f"--scheduler {scheduler!r}: not a Dask scheduler address (tcp://host:port): {exc}") from None
    if scheme in ("tcp", "tls"):
        _probe(scheduler, host, int(port))


PROBE_S = 5.0
"""Longest wait of the connection probe (`_probe`) before Dask's own connect."""


def _probe(scheduler: str, host: str, port: int) -> None:
    """`ConfigError` at once when nothing listens at a TCP scheduler address: a refused connection
    is an answer, not a timeout, and Dask's client would retry it for its whole connect timeout
    (30 s by default). Any other failure (no route, a slow network) is left to Dask's own wait."""
    import socket

    try:
        socket.create_connection((host, port), timeout=PROBE_S).close()
    except ConnectionRefusedError:
        raise ConfigError(f"--scheduler {scheduler}: connection refused: no Dask scheduler listens at {host}:{port}") from None
    except OSError:
        return


@contextmanager
def _executor(workers: int, scheduler: str | None, num_items: int,
              prepare: Callable[[], None] | None) -> Iterator[tuple[Executor, int]]:
    if scheduler is not None:
        try:
            from distributed import Client
        except ImportError as exc:
            raise ConfigError(f"--scheduler {scheduler}: a Dask cluster needs the distributed extra (pip install 'cpbcg[distributed]'): {exc}") from None
        _check_address(scheduler)
        import dask.config

        timeout = dask.config.get(DASK_CONNECT_TIMEOUT_KEY)
        try:  # the connect timeout is Dask's own setting (default 30 s): DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=5s
            client = Client(scheduler, timeout=timeout, set_as_default=False)  # type: ignore[no-untyped-call]  # distributed leaves Client unannotated
        except Exception as exc:  # noqa: BLE001 - distributed raises OSError, TimeoutError or its own errors for an unreachable scheduler
            raise ConfigError(f"--scheduler {scheduler}: cannot reach the Dask scheduler within {timeout} "
                              f"(Dask's {DASK_CONNECT_TIMEOUT_KEY}; the environment variable {DASK_CONNECT_TIMEOUT_ENV} sets it): {exc}") from None
        try:
            width = max(1, sum(w.get("nthreads", 1) for w in client.scheduler_info().get("workers", {}).values()))
            yield client.get_executor(pure=False), width  # type: ignore[no-untyped-call]  # unannotated in distributed
        finally:
            client.close()  # type: ignore[no-untyped-call]  # unannotated in distributed
        return
    width = max(1, min(workers, num_items))
    if prepare is not None and width > 1:
        prepare()
    context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice by a forked worker
        stream.flush()
    with ProcessPoolExecutor(max_workers=width, mp_context=context) as pool:
        yield pool, width


MIN_REQUEST_BYTES = 16
"""Fewest bytes a request takes in any request trace format (a CSV row of three short numbers)."""


def preload(jobs: Sequence[TrafficJob]) -> None:
    """Load in this process what the jobs would each load again in a forked worker: the compiled
    event loop (numba, ~0.7 s) when a request trace may be long enough to run through it (at
    least `KERNEL_MIN_REQUESTS` x `MIN_REQUEST_BYTES` bytes), and pyarrow (~0.15 s)
    when a request trace is at least `COLUMNAR_MIN_BYTES` long (its CSV and Parquet readers use it).
    Called before a local pool forks; a batch trace, a server log or the embedded default loads
    neither. A trace that cannot be opened is left to its job to report, in order."""
    compiled = columnar = False
    for job in jobs:
        path = job.spec.path
        if path is None or (compiled and columnar):
            continue
        try:
            if (format_info(job.spec.trace_format) or detect(path, job.spec.options)).kind is not TraceKind.requests:
                continue
            size_bytes = os.path.getsize(path)
        except (TraceError, OSError):
            continue
        if not compiled and size_bytes >= KERNEL_MIN_REQUESTS * MIN_REQUEST_BYTES:
            compiled = True
            load_compiled_loop(job.spec.scheduler)
        if not columnar and size_bytes >= COLUMNAR_MIN_BYTES:
            columnar = True
            with suppress(ImportError):
                import pyarrow.compute  # noqa: F401
                import pyarrow.csv  # noqa: F401


def default_workers() -> int:
    """One worker per core this process may use (`CPBCG_JOBS`, a whole number, when set)."""
    value = os.environ.get(JOBS_ENV, "").strip()
    if value.isdigit() and 1 <= int(value) <= 1024:
        return int(value)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
