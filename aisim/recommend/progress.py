"""The recommend progress line (stderr, on a terminal): simulated / feasible / pruned and the
best score so far."""

from __future__ import annotations

import sys
import time

from aisim.recommend import score as sc


class RecommendProgress:
    def __init__(self, pruned: int, stream=None, enabled: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.pruned = pruned
        self.total = 0
        self.done = 0
        self.feasible = 0
        self.best: float | None = None
        self.spec = None
        self.cands: dict = {}
        self.stage = ""
        self.t0 = time.monotonic()

    def attach(self, spec, task_cands: dict, stage: str = "") -> None:
        """A new set of simulations (successive halving runs one per rung): counts restart."""
        if self.done:
            self.done, self.feasible, self.best = 0, 0, None
            self.t0 = time.monotonic()
        self.spec = spec
        self.cands = task_cands
        self.stage = stage

    def observe(self, record: dict) -> None:
        if record["status"] != "ok" or record["point_id"] not in self.cands:
            return
        cand = self.cands[record["point_id"]][1]
        pred = record["prediction"]
        if sc.infeasibility(self.spec, pred, cand.used_gpus) is None:
            self.feasible += 1
            value = sc.score(self.spec.target, pred, cand.used_gpus)
            if self.best is None or value > self.best:
                self.best = value

    def advance(self, ok: bool = True) -> None:
        self.done += 1
        if self.enabled:
            self.stream.write("\r" + self.line())
            self.stream.flush()

    def line(self) -> str:
        elapsed = time.monotonic() - self.t0
        left = self.total - self.done
        eta = f"{elapsed / self.done * left:5.1f}s" if self.done else "--"
        best = "" if self.best is None else f", best {self.spec.target} {_shown(self.best)}"
        stage = f" {self.stage}" if self.stage else ""
        return (
            f"recommend{stage} {self.done}/{self.total} simulated, {self.feasible} feasible, "
            f"{self.pruned} pruned{best}, elapsed {elapsed:5.1f}s ETA {eta}"
        )

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _shown(value: float) -> str:
    return f"{value:.4g}"
