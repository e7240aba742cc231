"""Dev check: Qwen3-32B TP4 pass pricing vs AISimulate's golden numbers, from the source parquet.

    python bench/check_dense_pricing.py [--source compiled|dev] [--silicon DIR] [--golden FILE]

Builds the plan from the compiled op-time table (data/optables, default) or, with
`--source dev`, from ../shared/data/silicon through aisim.timing.dev_source; prices every
golden case and prints the worst relative error per case, per op and in total; also times
PREFILL / DECODE calls.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[2] / "shared" / "reference" / "optable_golden.json"
CASES = {
    "qwen3_32b_tp4_vllm_0.24.0": ("vllm", "0.24.0"),
    "qwen3_32b_tp4_trtllm_1.3.0rc20": ("trtllm", "1.3.0rc20"),
}


def parse_case(name: str):
    """('prefill', b, isl, prefix) or ('decode', b, ctx) from a golden case name."""
    import re

    if m := re.fullmatch(r"prefill_(\d+)x(\d+)", name):
        return ("prefill", int(m[1]), int(m[2]), 0)
    if m := re.fullmatch(r"prefill_(\d+)x(\d+)_on_(\d+)_cached", name):
        return ("prefill", int(m[1]), int(m[2]) + int(m[3]), int(m[3]))
    if m := re.fullmatch(r"decode_b(\d+)_kv(\d+)", name):
        return ("decode", int(m[1]), int(m[2]))
    if m := re.fullmatch(r"sim_mixed_(\d+)d_kv(\d+)_plus_(\d+)x(\d+)p", name):
        return ("mixed", int(m[3]), int(m[4]), int(m[1]), int(m[2]))
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--golden", type=Path, default=GOLDEN)
    ap.add_argument("--hardware", default="b200_sxm", help="the golden figures' system")
    ap.add_argument("--silicon", type=Path, default=None)
    ap.add_argument(
        "--source",
        choices=("compiled", "dev"),
        default="compiled",
        help="compiled op-time table (data/optables) or the source parquet",
    )
    args = ap.parse_args()

    from aisim.models import load_model
    from aisim.timing.dev_source import load_dev_system, load_dev_tables
    from aisim.timing.family_dense import build_dense_plan
    from aisim.timing.plan_record import Deployment
    from aisim.timing.pricer import PassPricer
    from aisim.timing.system import GpuSystem
    from aisim.timing.tables import load_tables

    golden = json.loads(args.golden.read_text())
    model = load_model("Qwen/Qwen3-32B")
    system = GpuSystem.from_dict(load_dev_system(args.hardware, silicon_dir=args.silicon))
    worst_all = 0.0
    for key, (backend, version) in CASES.items():
        g = golden[key]
        if args.source == "dev":
            tables = load_dev_tables(backend, version, args.hardware, silicon_dir=args.silicon)
        else:
            tables, system = load_tables(args.hardware, backend, version)
        for mode in ("SILICON", "SOL"):
            plan = build_dense_plan(
                model, tables, system, Deployment(backend, version, tensor=4, mode=mode)
            )
            pr = PassPricer(plan)
            if mode == "SILICON":
                for d in plan.gemm_descr:
                    print("   ", d)
            checks = []
            if mode == "SILICON":
                for name, case in g["cases"].items():
                    if name.startswith("mixed"):
                        continue
                    checks.append((name, case["latency_ms"]))
                for name, val in g["simulator_convention_cases"].items():
                    if name.startswith("fpm3pass"):
                        continue
                    if name == "decode_sweep_kv1100":
                        checks += [(f"decode_b{b}_kv1100", v) for b, v in val.items()]
                    elif name == "prefill_sweep_1req":
                        checks += [(f"prefill_1x{s}", v) for s, v in val.items()]
                    else:
                        checks.append((name, val))
            for name, ops in g["per_op_breakdown"].items():
                if not isinstance(ops, list):
                    continue
                if mode == "SILICON":
                    checks.append((name, sum(o["latency_ms"] for o in ops)))
                else:
                    checks.append((name, sum(o["sol_ms"] for o in ops)))
            for name, ref in checks:
                spec = parse_case(name)
                if spec is None:
                    print(f"  skip {name}")
                    continue
                if spec[0] == "prefill":
                    got = pr.prefill(*spec[1:])
                elif spec[0] == "decode":
                    got = pr.decode(*spec[1:])
                else:
                    got = pr.prefill(spec[1], spec[2], 0) + pr.decode(spec[3], spec[4])
                rel = abs(got / ref - 1)
                worst_all = max(worst_all, rel)
                print(f"{backend:6s} {mode:7s} {name:40s} {got:.12f} {ref:.12f} rel {rel:.2e}")
            for name, ops in g["per_op_breakdown"].items():
                if not isinstance(ops, list):
                    continue
                spec = parse_case(name)
                bd = (
                    pr.prefill_breakdown(*spec[1:])
                    if spec[0] == "prefill"
                    else pr.decode_breakdown(*spec[1:])
                )
                field = "latency_ms" if mode == "SILICON" else "sol_ms"
                assert [n for n, _ in bd] == [o["op"] for o in ops], (name, bd)
                worst = max(
                    abs(v - o[field]) / max(abs(o[field]), 1e-300) if o[field] else abs(v)
                    for (_, v), o in zip(bd, ops, strict=True)
                )
                worst_all = max(worst_all, worst)
                print(f"{backend:6s} {mode:7s} per-op {name:33s} worst rel {worst:.2e}")
            if mode == "SILICON":
                for label, fn, a in (
                    ("prefill(8,1024,0)", pr.prefill, (8, 1024, 0)),
                    ("decode(64,1100)", pr.decode, (64, 1100)),
                ):
                    n = 20000
                    t0 = time.perf_counter()
                    for _ in range(n):
                        fn(*a)
                    dt = (time.perf_counter() - t0) / n
                    print(f"   timing {label}: {dt * 1e6:.2f} us per call (Python wrapper incl.)")
    print(f"worst relative error: {worst_all:.3e}")


if __name__ == "__main__":
    main()
