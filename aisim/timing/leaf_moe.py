"""Leaf builder: the routed experts' curve (docs/timing.md 4.7) as `optime_moe.MoeCurve`.

One key slice of the `moe` table (dtype, token distribution, topk, experts, hidden, inter,
moe_tp, moe_ep) is a 1-D curve over global tokens; the SOL constants beside it come from the
model and the deployment. A missing slice is raised here as `OpTableError`, naming it.

TRT-LLM's tables also hold rows of its min-latency NVFP4 kernel (`low_latency` 1); for NVFP4
experts of a gated FFN their slice (the same key, else the same key at the uniform distribution)
is a second curve that prices passes of at most LL_MAX_TOKENS global tokens.
"""

from __future__ import annotations

import numpy as np

from aisim.errors import OpTableError
from aisim.kernels import optime_moe as KM
from aisim.kernels.optime_moe import MoeCurve
from aisim.models import ModelArch
from aisim.timing.system import DTYPE_BYTES, GpuSystem
from aisim.timing.tables import Tables, first_row_points, ordered_rows, row_power

LL_MAX_TOKENS = 128  # global tokens up to which TRT-LLM runs its min-latency NVFP4 kernel
LL_DTYPE = "nvfp4"


def absent_moe() -> MoeCurve:
    """The stand-in for a plan without routed experts."""
    par = np.ones(KM.MOE_PAR_SIZE)
    par[KM.MOE_LL_TOKENS] = -1.0
    return MoeCurve(np.ones(1), np.ones(1), np.zeros(1), par, np.ones(1), np.ones(1), np.zeros(1))


def _curve(c: dict, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    y = c["latency"][idx].tolist()
    energy = [pw * lat for pw, lat in zip(row_power(c, idx), y, strict=True)]
    return first_row_points(c["num_tokens"][idx].tolist(), y, energy)


def moe_curve(
    tables: Tables,
    model: ModelArch,
    *,
    dtype: str,
    distribution: str,
    moe_tp: int,
    moe_ep: int,
    attention_dp: int,
    system: GpuSystem,
    where: str,
) -> MoeCurve:
    slice_text = (
        f"moe moe_dtype={dtype} distribution={distribution} "
        f"topk={model.num_experts_per_tok} num_experts={model.num_experts} "
        f"hidden={model.hidden_size} inter={model.moe_intermediate_size} "
        f"moe_tp={moe_tp} moe_ep={moe_ep}"
    )
    if "moe" not in tables:
        raise OpTableError("moe", slice_text, f"the op-time table has no moe family ({where})")
    c = ordered_rows(tables["moe"])
    key = (
        (c["moe_dtype"] == dtype)
        & (c["topk"] == model.num_experts_per_tok)
        & (c["num_experts"] == model.num_experts)
        & (c["hidden_size"] == model.hidden_size)
        & (c["inter_size"] == model.moe_intermediate_size)
        & (c["moe_tp_size"] == moe_tp)
        & (c["moe_ep_size"] == moe_ep)
    )
    low_latency = c["low_latency"] == 1 if "low_latency" in c else np.zeros(key.shape, bool)
    idx = np.nonzero(key & (c["distribution"] == distribution) & ~low_latency)[0]
    if idx.size == 0:
        raise OpTableError("moe", slice_text, f"MoE perf data missing for {where}")
    x, y, en = _curve(c, idx)
    if x.shape[0] < 2:
        # a curve of one token count: AISimulate extrapolates from it by a rule aisim does not
        # have (oracle: Llama-4 Maverick on b300_sxm vLLM 0.24.0 at EP4, bf16 rows at 1 token
        # only, 1,839 ms a layer at 3,000 tokens where aisim's hold gave 6.3 ms)
        raise OpTableError(
            "moe", slice_text, f"MoE perf data holds one token count only for {where}"
        )
    ll_x, ll_y, ll_en, ll_tokens = x, y, en, -1.0
    if dtype == LL_DTYPE:  # every priced MoE family has a gated (SwiGLU) expert FFN
        for dist in (distribution, "uniform"):
            ll_idx = np.nonzero(key & (c["distribution"] == dist) & low_latency)[0]
            if ll_idx.size:
                ll_x, ll_y, ll_en = _curve(c, ll_idx)
                ll_tokens = float(LL_MAX_TOKENS)
                break
    par = np.zeros(KM.MOE_PAR_SIZE, np.float64)
    par[KM.MOE_TOPK] = model.num_experts_per_tok
    par[KM.MOE_HIDDEN] = model.hidden_size
    par[KM.MOE_INTER] = model.moe_intermediate_size
    par[KM.MOE_EXPERTS] = model.num_experts
    par[KM.MOE_TP] = moe_tp
    par[KM.MOE_EP] = moe_ep
    par[KM.MOE_BPE] = DTYPE_BYTES[dtype]
    par[KM.MOE_FLOPS] = system.tensor_flops(dtype)
    par[KM.MOE_MEM_BW] = system.mem_bw
    par[KM.MOE_DP] = attention_dp
    par[KM.MOE_GATED] = 3.0
    par[KM.MOE_LL_TOKENS] = ll_tokens
    return MoeCurve(x, y, en, par, ll_x, ll_y, ll_en)
