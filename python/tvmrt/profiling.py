"""What measuring a model returns: a benchmark's figures, and a profile as upstream's ``Report``
(its table, CSV and JSON, and its rows as Python data)."""

from __future__ import annotations

import json
import statistics
import time
from typing import Any, Callable

from . import _ffi


class BenchmarkResult:
    """Seconds per run, one figure per repeat, as TVM's ``BenchmarkResult``."""

    def __init__(self, results: list[float]) -> None:
        self.results = [float(r) for r in results]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    def as_dict(self) -> dict[str, Any]:
        return {
            "results": self.results,
            "mean": self.mean,
            "median": self.median,
            "std": self.std,
            "min": self.min,
            "max": self.max,
        }

    def __repr__(self) -> str:
        ms = 1e3
        return (
            f"Execution time summary:\n mean (ms)   median (ms)    max (ms)     min (ms)     std (ms)\n"
            f"{self.mean * ms:10.4f}   {self.median * ms:10.4f}   {self.max * ms:10.4f}   {self.min * ms:10.4f}"
            f"   {self.std * ms:10.4f}"
        )


# TVM's benchmark arguments that tune its time evaluator's loop; taken, and without effect here.
TVM_LOOP_TUNING = ("limit_zero_time_iterations", "cooldown_interval_ms", "repeats_to_cooldown")


def time_runs(run: Callable[[], Any], repeat: int, number: int, warmup: int) -> BenchmarkResult:
    """Seconds per call of `run`, measured from Python: `warmup` calls, then `repeat` figures, each
    the mean of `number` calls."""
    for _ in range(warmup):
        run()
    results = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            run()
        results.append((time.perf_counter() - start) / number)
    return BenchmarkResult(results)


def _metric(value: dict[str, Any]) -> Any:
    """A metric of the report's JSON as plain Python: microseconds, a count, a percent, a ratio, a
    string."""
    for key in ("microseconds", "count", "percent", "ratio", "string"):
        if key in value:
            return value[key]
    return value


class Report:
    """A profile, as upstream's ``runtime.profiling.Report``: :meth:`table`, :meth:`csv`,
    :meth:`json` (which ``tvm.runtime.profiling.Report.from_json`` reads), and :attr:`calls` /
    :attr:`device_metrics` as lists and dicts of plain values (durations in microseconds)."""

    def __init__(self, handle: _ffi.Handle) -> None:
        self._handle = handle
        data = json.loads(self.json())
        self.calls: list[dict[str, Any]] = [{k: _metric(v) for k, v in c.items()} for c in data.get("calls", [])]
        self.device_metrics: dict[str, dict[str, Any]] = {
            d: {k: _metric(v) for k, v in m.items()} for d, m in data.get("device_metrics", {}).items()
        }
        self.configuration: dict[str, Any] = {k: _metric(v) for k, v in data.get("configuration", {}).items()}

    @classmethod
    def from_json(cls, text: str) -> Report:
        return cls(_ffi.global_function("runtime.profiling.FromJSON")(text))

    def table(self, sort: bool = True, aggregate: bool = True, col_sums: bool = True) -> str:
        text: str = _ffi.global_function("runtime.profiling.AsTable")(self._handle, sort, aggregate, col_sums)
        return text

    def csv(self) -> str:
        text: str = _ffi.global_function("runtime.profiling.AsCSV")(self._handle)
        return text

    def json(self) -> str:
        text: str = _ffi.global_function("runtime.profiling.AsJSON")(self._handle)
        return text

    def __str__(self) -> str:
        return self.table()

    __repr__ = __str__
