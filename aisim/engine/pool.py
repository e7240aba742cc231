"""One pool of a run as the outputs see it: a worker role's deployment and its final state.

An aggregated run has one pool (role "aggregated"); a disaggregated run two ("prefill",
"decode") joined by the KV handoff. The summary (aisim.metrics.summarize) and the records
(aisim.output.records) read every run through its pools, so a rule about pools (billing, GPUs
per worker, the cut-off) is written once.
"""

from __future__ import annotations

from dataclasses import dataclass

from aisim import state as st
from aisim.engine.spec import EngineSpec


@dataclass(frozen=True)
class Pool:
    role: str  # aggregated | prefill | decode
    spec: EngineSpec
    req: st.RequestState  # the pool's own view of the requests
    ranks: st.RankState | None  # final rank state (None for a run that kept none)
    workers: st.WorkerState | None = None  # final worker state
    memo: st.TimingMemo | None = None  # op-level runs: the pool's prices and energy sums
