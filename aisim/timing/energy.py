"""Energy evidence of op-level passes and the run's power figures (docs/timing.md 6).

Per pass: the pass kernels (`aisim.kernels.optime_pass.price_prefill` / `price_decode`, through
`EnergyPricer` here) give, per op, latency, energy in W*ms (0.0 = no energy evidence, "none")
and covered latency (the op's whole latency when its energy > 0, else 0).

Per run: `power_report(...)` turns the accumulated per-op sums into `power_w`,
`power_coverage` and the `power_diagnostics` object of prediction.json; `unsupported_report()`
is the fixed / polynomial timing case.

Accumulation contract (what the event loop does; checked against AISimulate 0.13 on the
256-request dense-trtllm golden, bit for bit, see tests/test_energy.py):

* Three float64 accumulators of length num_ops (= len(plan.op_names); context ops at
  [0, num_ctx_ops), generation ops after), zero-initialised, one set per timing provider (per
  role; replicas of a role share it), plus two counters: prefill and decode evaluations.
* Every PREFILL(bs_p, isl, pfx) evaluation with bs_p > 0 and isl > pfx, and every
  DECODE(bs_d, ctx) with bs_d > 0, that the scheduler prices is recorded (an evaluation served
  from any price cache counts again): for each op i of that phase, in op order,
      acc_ms[i] += out_ms[i]; acc_covered_ms[i] += out_covered_ms[i];
      acc_energy_wms[i] += out_energy_wms[i]
  (kernel `optime_pass.accumulate(lo, hi, ...)` does exactly this), and the phase counter
  += 1. Sequential float adds in pass order: do not multiply a repeated evaluation by a count
  (pass compression must replay the adds, or accept ~1e-15 relative drift).
* Unweighted: no factor for the number of GPUs (a TP-4 pass counts once, its values are per
  GPU), nor for the pass duration. The latency added is the raw op sum of the evaluation,
  before the nanosecond rounding of the pass clock (so `latency_ms` is the sum of un-rounded
  phase times, not the sum of pass durations).
* Attention-DP: every rank's own evaluation is recorded (not the group max); idle ranks record
  nothing. A mixed pass records its PREFILL and its DECODE.
* The event loop (kernels/sched.op_level_ms) keeps per memo slot the evaluation's per-op rows
  (memo ms / energy / covered, float64[slots, num_ops]) filled by price_prefill /
  price_decode on a miss, and on every call, hit or miss, adds the phase's op range of the
  slot's rows to the run accumulators. At the end: `power_report(plan.op_names,
  op_sources(plan), plan.num_ctx_ops, acc)`; timing fixed / polynomial:
  `unsupported_report()`. Top-level power_w / power_coverage = the first two returned values.
* P/D: one accumulator set per role; merged by op name per phase (acc_prefill_role +
  acc_decode_role, element-wise, prefill role first) before calling power_report.
"""

from __future__ import annotations

import math

import numpy as np

from aisim.kernels import optime_pass as KP
from aisim.timing.plan_record import PassPlan, scalars_of
from aisim.timing.pricer import PassPricer

COVERAGE_GATE = 0.9
_BELOW_GATE = math.nextafter(0.9, 0.0)  # (0.9).next_down()
_NO_ENERGY = "timing provider returned latency without positive energy evidence"
_PARTIAL = "some accumulated operation latency lacks positive energy evidence"
UNSUPPORTED_NO_PROVIDER = "one or more replay roles have no timing provider"
NOT_OBSERVED = "no forward-pass timing evidence was observed"
_KIND = {
    "silicon": "measured",
    "empirical": "measured",
    "transferred": "transferred",
    "sol": "modeled",
    "estimated": "modeled",
    "mixed": "mixed",
}


def _banded(sub_kinds: list[int]) -> bool:
    return any(k in (KP.OP_ATTN_CONTEXT_BANDED, KP.OP_ATTN_GENERATION_BANDED) for k in sub_kinds)


def op_sources(plan: PassPlan) -> tuple[str, ...]:
    """Source tag per op (docs/timing.md 6.2): GEMM / table comm silicon (a static fp8 GEMM,
    the table's less its deltas, estimated); memory ops and the TP-1
    allreduce empirical; attention mixed, but generation attention silicon when it has no
    analytic extras (models without q/k norm: Llama, MiMo). The p2p hand-off is `empirical`
    when it runs (pipeline > 1) and `silicon` as the zero-latency placeholder of pipeline 1
    (both pinned against AISimulate). A SOL-mode plan tags every op `sol` but those two
    placeholders: the pipeline-1 p2p stays `silicon` and the TP-1 allreduce `empirical`. An
    EMPIRICAL plan tags every op `empirical` but the MoE dispatch and the pipeline-1 p2p
    (`silicon`)."""
    a = plan.arrays
    scalars = scalars_of(a)
    sol = scalars.mode == KP.MODE_SOL
    out = []
    n = len(plan.op_names)  # composite ops keep their hidden sub-ops after these
    static_fp8 = a.gemm.op_scale[:, 0] >= 0  # GEMMs less their static fp8 deltas
    index = a.ops.index.tolist()
    kinds = a.ops.kind.tolist()
    params = a.ops.param.tolist()
    for i, (kind, scale) in enumerate(zip(kinds[:n], a.ops.scale.tolist()[:n], strict=True)):
        if kind == KP.OP_SUM and _banded(kinds[index[i] : index[i] + int(params[i])]):
            kind = kinds[index[i]]  # full and sliding-window layers: tagged as attention
        if scalars.mode == KP.MODE_EMPIRICAL:  # every op estimated but the MoE dispatch; the
            # placeholder p2p stays silicon too
            dispatch = kind in (KP.OP_NCCL_ALL_GATHER, KP.OP_NCCL_REDUCE_SCATTER)
            out.append("silicon" if dispatch or (kind == KP.OP_P2P and scale == 0) else "empirical")
        elif sol:
            if kind == KP.OP_P2P and scale == 0:
                out.append("silicon")
            elif kind == KP.OP_ALLREDUCE and scalars.allreduce_gpus <= 1:
                out.append("empirical")
            else:
                out.append("sol")
        elif kind in (KP.OP_GEMM_TOKENS, KP.OP_GEMM_REQUESTS):
            out.append("estimated" if static_fp8[index[i]] else "silicon")
        elif kind == KP.OP_P2P:
            out.append("empirical" if scale > 0 else "silicon")
        elif kind == KP.OP_ALLREDUCE:
            out.append("silicon" if scalars.allreduce_gpus > 1 else "empirical")
        elif kind == KP.OP_ATTN_GENERATION and scalars.gen_extra_ms == 0.0:
            out.append("silicon")  # the table alone: no per-token extras without q/k norm
        elif kind in (KP.OP_ATTN_CONTEXT, KP.OP_ATTN_GENERATION, KP.OP_OVERLAP):
            out.append("mixed")  # table + analytic extras; overlap of table and memory ops
        elif kind in (
            KP.OP_DSA_CONTEXT,
            KP.OP_DSA_GENERATION,
            KP.OP_DSA_CONTEXT_SKIP,
            KP.OP_DSA_GENERATION_SKIP,
            KP.OP_MOE,
            KP.OP_SUM,
            KP.OP_NCCL_ALL_GATHER,
            KP.OP_NCCL_REDUCE_SCATTER,
        ):
            out.append("silicon")
        else:
            out.append("empirical")
    return tuple(out)


class EnergyPricer(PassPricer):
    """A PassPricer that also tags each op's source, reports evidence and accumulates a run.

    `record_prefill` / `record_decode` price one evaluation and add it into `acc`.
    """

    def __init__(self, plan: PassPlan) -> None:
        super().__init__(plan)
        self.sources = op_sources(plan)
        self.acc = Accumulators(len(plan.op_names))

    def _evidence(self, lo: int, hi: int) -> list[dict]:
        return [
            {
                "name": self.plan.op_names[i],
                "latency_ms": float(self.ms[i]),
                "energy_wms": float(self.energy_wms[i]) if self.energy_wms[i] > 0 else None,
                "covered_latency_ms": float(self.covered_ms[i]),
                "source": self.sources[i],
            }
            for i in range(lo, hi)
        ]

    def prefill_evidence(self, batch: int, isl: int, prefix: int = 0) -> list[dict]:
        self.prefill(batch, isl, prefix)
        return self._evidence(0, self.plan.num_ctx_ops)

    def decode_evidence(self, batch: int, ctx: int) -> list[dict]:
        self.decode(batch, ctx)
        return self._evidence(self.plan.num_ctx_ops, len(self.plan.op_names))

    def record_prefill(self, batch: int, isl: int, prefix: int = 0) -> float:
        """Price and accumulate one PREFILL evaluation (nothing when batch 0 or isl <= prefix)."""
        if batch <= 0 or isl <= prefix:
            return 0.0
        total = self.prefill(batch, isl, prefix)
        self.acc.add(self, 0, self.plan.num_ctx_ops)
        self.acc.prefill_evals += 1
        return total

    def record_decode(self, batch: int, ctx: int) -> float:
        if batch <= 0:
            return 0.0
        total = self.decode(batch, ctx)
        self.acc.add(self, self.plan.num_ctx_ops, len(self.plan.op_names))
        self.acc.decode_evals += 1
        return total

    def report(self) -> tuple[float | None, float | None, dict]:
        return power_report(self.plan.op_names, self.sources, self.plan.num_ctx_ops, self.acc)


class Accumulators:
    """The per-op run sums of the accumulation contract (module doc)."""

    def __init__(self, num_ops: int) -> None:
        self.ms = np.zeros(num_ops)
        self.covered_ms = np.zeros(num_ops)
        self.energy_wms = np.zeros(num_ops)
        self.prefill_evals = 0
        self.decode_evals = 0

    def add(self, pricer: PassPricer, lo: int, hi: int) -> None:
        KP.accumulate(
            np.int64(lo),
            np.int64(hi),
            pricer.ms,
            pricer.energy_wms,
            pricer.covered_ms,
            self.ms,
            self.energy_wms,
            self.covered_ms,
        )


# --------------------------------------------------------------------------- aggregation


def _stats(lat: list[float], cov: list[float], en: list[float | None]):
    """(L, C, E or None, power_w, coverage) of an op list (docs/timing.md 6.4), sums in list
    order."""
    total_l = 0.0
    total_c = 0.0
    total_e = None
    uncovered = 0.0
    for x, c, e in zip(lat, cov, en, strict=True):
        total_l += x
        total_c += c
        uncovered += x - c
        if e is not None:
            total_e = e if total_e is None else total_e + e
    if total_l <= 0.0:
        return total_l, total_c, total_e, None, 0.0
    qualifies = total_c > 0.0 and total_c / 9.0 >= uncovered
    ratio = min(max(total_c / total_l, 0.0), 1.0)
    coverage = max(ratio, COVERAGE_GATE) if qualifies else min(ratio, _BELOW_GATE)
    power = None
    if qualifies and total_e is not None:
        p = total_e / total_l
        if math.isfinite(p) and p > 0.0:
            power = p
    return total_l, total_c, total_e, power, coverage


def _status(total_l: float, power, coverage) -> str:
    if total_l <= 0.0:
        return "not_observed"
    if power is not None:
        return "available"
    if coverage < COVERAGE_GATE:
        return "withheld"
    return "missing"


def _merge(sources) -> str:
    out = None
    for s in sources:
        out = s if out is None or out == s else "mixed"
    return out or "missing"


def _kind(source: str, has_energy: bool) -> str:
    if not has_energy:
        return "missing"
    return _KIND.get(source, "other")


def power_report(op_names, sources, num_ctx_ops: int, acc) -> tuple[float | None, float, dict]:
    """(power_w, power_coverage, power_diagnostics) from the run's accumulators.

    op_names / sources: per op (plan order); acc: `Accumulators`-like (ms, covered_ms,
    energy_wms arrays; prefill_evals, decode_evals counts). Energy 0 means none.
    """
    phases = []
    combined: tuple[list, list, list] = ([], [], [])
    for name, lo, hi, evals in (
        ("prefill", 0, num_ctx_ops, acc.prefill_evals),
        ("decode", num_ctx_ops, len(op_names), acc.decode_evals),
    ):
        if evals == 0:
            phases.append(
                {
                    "covered_latency_ms": 0.0,
                    "latency_ms": 0.0,
                    "name": name,
                    "operations": [],
                    "power_coverage": 0.0,
                    "power_w": None,
                    "publication_status": "not_observed",
                    "source": "missing",
                    "source_kind": "missing",
                }
            )
            continue
        lat = [float(x) for x in acc.ms[lo:hi]]
        cov = [float(x) for x in acc.covered_ms[lo:hi]]
        en = [float(x) if x > 0.0 else None for x in acc.energy_wms[lo:hi]]
        src = list(sources[lo:hi])
        for dst, part in zip(combined, (lat, cov, en), strict=True):
            dst.extend(part)
        total_l, total_c, total_e, power, coverage = _stats(lat, cov, en)
        ops = []
        for i in range(hi - lo):
            op = {
                "covered_latency_ms": cov[i],
                "latency_ms": lat[i],
                "name": op_names[lo + i],
                "power_coverage": (min(max(cov[i] / lat[i], 0.0), 1.0) if lat[i] > 0.0 else 0.0),
                "source": src[i],
                "source_kind": _kind(src[i], en[i] is not None),
            }
            if en[i] is not None:
                op["energy_wms"] = en[i]
                if total_e is not None:
                    op["energy_contribution"] = en[i] / total_e
            if en[i] is None:
                op["status"] = "missing"
                op["uncovered_reason"] = _NO_ENERGY
            elif lat[i] == 0.0 or op["power_coverage"] >= 1.0:
                op["status"] = "available"
            else:
                op["status"] = "partial"
                op["uncovered_reason"] = _PARTIAL
            ops.append(dict(sorted(op.items())))
        ops.sort(key=lambda o: (o["name"], o["source"]))
        phase_src = _merge(src)
        phase = {
            "covered_latency_ms": total_c,
            "latency_ms": total_l,
            "name": name,
            "operations": ops,
            "power_coverage": coverage,
            "power_w": power,
            "publication_status": _status(total_l, power, coverage),
            "source": phase_src,
            "source_kind": _kind(phase_src, total_e is not None),
        }
        if total_e is not None:
            phase["energy_wms"] = total_e
        phases.append(dict(sorted(phase.items())))
    total_l, total_c, total_e, power, coverage = _stats(*combined)
    diag = {
        "coverage_gate": COVERAGE_GATE,
        "covered_latency_ms": total_c,
        "energy_unit": "W-ms",
        "latency_ms": total_l,
        "latency_unit": "ms",
        "phases": phases,
        "power_coverage": coverage,
        "power_w": power,
        "power_w_unit": "W",
        "publication_status": _status(total_l, power, coverage),
        "schema_version": "1.0",
        "scope": "active_forward_pass_per_gpu",
    }
    if total_e is not None:
        diag["energy_wms"] = total_e
    if total_l <= 0.0:
        diag["unavailable_reason"] = NOT_OBSERVED
    return power, coverage, dict(sorted(diag.items()))


def unsupported_report(reason: str = UNSUPPORTED_NO_PROVIDER) -> tuple[None, None, dict]:
    """No energy evidence provider (fixed / polynomial timing): both figures null."""
    return (
        None,
        None,
        {
            "coverage_gate": COVERAGE_GATE,
            "energy_unit": "W-ms",
            "latency_unit": "ms",
            "phases": [],
            "power_coverage": None,
            "power_w": None,
            "power_w_unit": "W",
            "publication_status": "unsupported",
            "schema_version": "1.0",
            "scope": "active_forward_pass_per_gpu",
            "unavailable_reason": reason,
        },
    )
