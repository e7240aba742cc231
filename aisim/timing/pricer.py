"""Python API over the pass-pricing kernels: PREFILL / DECODE in ms and per-op breakdowns.

The same kernels price the event loop's passes (kernels/sched.memo_fill), `aisim estimate` and
this class, so a figure printed here is the figure the simulator charges.
"""

from __future__ import annotations

import numpy as np

from aisim.kernels import optime_pass
from aisim.timing.plan_record import PassPlan, scalars_of


class PassPricer:
    """Prices passes of one resolved plan; each call runs one numba kernel.

    `prefill(batch, isl, prefix)`: isl is the full length per request (cached prefix + new
    tokens), as the scheduler's PREFILL(bs, isl, pfx) of docs/rules.md 4.6.
    `decode(batch, ctx)`: ctx is the floored mean context incl. the token being decoded.
    Results are ms per pass per GPU, not rounded (the event loop rounds each phase to ns).
    After a call, `ms`, `energy_wms` (W*ms, 0 = no energy evidence) and `covered_ms` (the op's
    latency when it has energy evidence, else 0) hold that phase's ops at their plan positions.
    """

    def __init__(self, plan: PassPlan) -> None:
        self.plan = plan
        n = len(plan.op_names)
        self.ms = np.zeros(n, np.float64)
        self.energy_wms = np.zeros(n, np.float64)
        self.covered_ms = np.zeros(n, np.float64)

    def prefill(self, batch: int, isl: int, prefix: int = 0) -> float:
        _check(batch, isl, prefix)
        return float(
            optime_pass.price_prefill(
                self.plan.arrays,
                np.int64(batch),
                np.int64(isl),
                np.int64(prefix),
                self.ms,
                self.energy_wms,
                self.covered_ms,
            )
        )

    def decode(self, batch: int, ctx: int) -> float:
        if batch < 1 or ctx < 1:
            raise ValueError(f"decode needs batch >= 1 and ctx >= 1, got {batch}, {ctx}")
        return float(
            optime_pass.price_decode(
                self.plan.arrays,
                np.int64(batch),
                np.int64(ctx),
                self.ms,
                self.energy_wms,
                self.covered_ms,
            )
        )

    def prefill_breakdown(self, batch: int, isl: int, prefix: int = 0) -> list[tuple[str, float]]:
        self.prefill(batch, isl, prefix)
        n = self.plan.num_ctx_ops
        return list(zip(self.plan.op_names[:n], self.ms[:n].tolist(), strict=True))

    def decode_breakdown(self, batch: int, ctx: int) -> list[tuple[str, float]]:
        self.decode(batch, ctx)
        n = self.plan.num_ctx_ops
        return list(zip(self.plan.op_names[n:], self.ms[n:].tolist(), strict=True))

    def mixed(self, prefill: tuple[int, int, int] | None, decode: tuple[int, int] | None) -> float:
        """The simulator's additive mixed pass: PREFILL(...) + DECODE(...) (docs/timing.md 3.8)."""
        total = 0.0
        if prefill is not None:
            total += self.prefill(*prefill)
        if decode is not None:
            total += self.decode(*decode)
        return total

    def fpm_mixed(self, prefill: tuple[int, int, int], decode: tuple[int, int]) -> float:
        """The FPM / AIC API's 3-pass mixed pass (docs/timing.md 3.8), NOT what the simulator uses.

        Every non-attention context op at m = prefill tokens + decode tokens x (1 + nextn)
        (the logits GEMM at m = 1), context attention at the prefill shape, generation
        attention at the decode shape.
        """
        batch, isl, prefix = prefill
        _check(batch, isl, prefix)
        dec_batch, ctx = decode
        a = self.plan.arrays
        nextn = scalars_of(a).nextn
        new_tokens = float(batch * (isl - prefix))
        tokens = new_tokens + float(dec_batch * (1 + nextn))
        n = self.plan.num_ctx_ops
        names = self.plan.op_names
        # TRT-LLM DeepSeek-V3 / R1 name their attention `*_mla_block` (not checked against
        # the FPM API: the block's GEMMs are taken at the prefill shape like attention)
        attn = names.index(
            "context_attention" if "context_attention" in names else "context_mla_block"
        )
        gen_attn = names.index(
            "generation_attention" if "generation_attention" in names else "generation_mla_block"
        )
        out = (self.ms, self.energy_wms, self.covered_ms)
        total = 0.0
        for i in range(n):
            if i == attn:
                args = (new_tokens, float(batch), float(batch), float(isl), float(prefix))
            else:
                args = (tokens, 1.0, float(batch), float(isl), float(prefix))
            total += optime_pass.price_range(a, i, i + 1, *args, *out)
        eff = float(dec_batch * (1 + nextn))
        total += optime_pass.price_range(
            a, gen_attn, gen_attn + 1, eff, eff, eff, float(ctx), 0.0, *out
        )
        return float(total)


def _check(batch: int, isl: int, prefix: int) -> None:
    if batch < 1 or isl < 1 or prefix < 0 or prefix >= isl:
        raise ValueError(
            f"prefill needs batch >= 1 and 0 <= prefix < isl, got {batch}, {isl}, {prefix}"
        )
