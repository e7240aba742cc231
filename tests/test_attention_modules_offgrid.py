"""DeepSeek attention modules on and off their measured grid.

Golden figures: tests/golden_optable/deepseek_attention_modules_offgrid.json, AISimulate 0.13's
own per-op evaluation of the attention module op (all 61 layers, latency and energy):
* DeepSeek-V3.2's DSA context / generation modules on 197 shapes for vLLM and TRT-LLM at
  attention-DP 8 (128 heads per rank) and attention-TP 8 (16 heads): chunk continuations
  (cached prefix between the table's steps 128 and 131072, the ragged bracket along the prefix
  axis), new-token counts and batches above the staircase and beyond isl 32768 (the hold over
  every head count), the dense / sparse regime switch at prefix + new = index_topk, decode
  batches and kv lengths outside the generation grid;
* DeepSeek-V3 / R1's dense MLA modules on vLLM (118 shapes, ADP8 and TP8): the context module
  read as context attention (seq = new + prefix, prefix correction), the generation module's
  hold with the MLA SOL.
Latency and energy through the pass pricer (what `aisim estimate` prints); both within 1e-9
relative.
"""

from __future__ import annotations

import json
import tempfile
from functools import cache
from pathlib import Path

import pytest

from tests.test_moe_pricing import CONFIG

HERE = Path(__file__).parent
GOLDEN = json.loads(
    (HERE / "golden_optable" / "deepseek_attention_modules_offgrid.json").read_text()
)
VERSIONS = {"vllm": "0.24.0", "trtllm": "1.3.0rc20"}
REL = 1e-9
DEPLOYMENTS = {
    f"{d['model'].split('/')[1]}-{d['backend']}-tp{d['tensor']}-dp{d['attention_data']}": d
    for d in GOLDEN["deployments"]
}


@cache
def _pricers(name: str):
    from aisim.config.load import load_config
    from aisim.engine.spec import resolve
    from aisim.timing.pricer import PassPricer
    from aisim.timing.provider import plan_for

    d = DEPLOYMENTS[name]
    text = (
        CONFIG.replace("deepseek-ai/DeepSeek-V3.2", d["model"])
        .replace("backend: vllm", f"backend: {d['backend']}")
        .replace('"0.24.0"', f'"{VERSIONS[d["backend"]]}"')
        .replace(
            "tensor: 1, pipeline: 1, attention_data: 8",
            f"tensor: {d['tensor']}, pipeline: 1, attention_data: {d['attention_data']}",
        )
    )
    path = Path(tempfile.mkdtemp(prefix="aisim-attn-mod-")) / "cfg.yaml"
    path.write_text(text)
    plan = plan_for(resolve(load_config(str(path))), "test")
    return plan, PassPricer(plan)


def _close(got: float, ref: float) -> bool:
    return abs(got - ref) <= REL * max(abs(ref), 1e-12)


@pytest.mark.golden
@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_dsa_module_per_op(name: str) -> None:
    plan, pricer = _pricers(name)
    bad = []
    for phase, b, n, prefix, ms, wms in DEPLOYMENTS[name]["cases"]:
        # the op's name: `*_attention` for the DSA module, `*_mla_block` for the MLA one
        module = "attention" if "V3.2" in DEPLOYMENTS[name]["model"] else "mla_block"
        if phase == "ctx":
            op = f"context_{module}"
            got = dict(pricer.prefill_breakdown(b, n + prefix, prefix))[op]
        else:
            op = f"generation_{module}"
            got = dict(pricer.decode_breakdown(b, n + 1))[op]
        got_e = float(pricer.energy_wms[plan.op_names.index(op)])
        if not (_close(got, ms) and _close(got_e, wms)):
            bad.append(f"{phase} {b}x{n}+{prefix}: {got} vs {ms} ms, {got_e} vs {wms} Wms")
    assert not bad, "\n".join(bad)


def test_chunk_continuation_figures() -> None:
    """The figures that showed the gap: new N after a 2048-token prefix, batch 1, per layer."""
    _plan, pricer = _pricers("DeepSeek-V3.2-vllm-tp1-dp8")
    for new, per_layer in (
        (128, 0.37341597290780676),
        (512, 1.341091102427094),
        (952, 1.8998289672816373),
        (1024, 0.9679313782991202),
    ):
        got = dict(pricer.prefill_breakdown(1, new + 2048, 2048))["context_attention"] / 61
        assert _close(got, per_layer), (new, got, per_layer)
