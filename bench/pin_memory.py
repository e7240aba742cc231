# ruff: noqa: E501  (case tables and command lines)
"""Pin AISimulate's --detail memory figures for KV capacity (type: default) cases.

usage: python pin_memory.py OUTDIR [name-filter]
Each case -> OUTDIR/<name>.json with the inputs, the YAML run and AISimulate's diagnostics.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

AIS = os.path.expanduser("~/aisimulate-venv/bin/aisimulate")


def case(
    name,
    model,
    backend,
    tp=1,
    pp=1,
    dp=1,
    moe_tp=1,
    ep=1,
    f=None,
    G=None,
    T=None,
    S=None,
    block=None,
    context_length=None,
    nextn=0,
    extra_engine=None,
    dcp=None,
):
    return dict(
        name=name,
        model=model,
        backend=backend,
        tensor=tp,
        pipeline=pp,
        attention_data=dp,
        moe_tensor=moe_tp,
        moe_expert=ep,
        memory_fraction=f,
        cuda_graph_reserved_bytes=G,
        max_batched_tokens=T,
        max_sequences=S,
        block_size=block,
        context_length=context_length,
        nextn=nextn,
        extra_engine=extra_engine or {},
        decode_context=dcp,
    )


def build_yaml(c):
    cap = {"type": "default"}
    if c["memory_fraction"] is not None:
        cap["memory_fraction"] = c["memory_fraction"]
    if c["cuda_graph_reserved_bytes"] is not None:
        cap["cuda_graph_reserved_bytes"] = c["cuda_graph_reserved_bytes"]
    kv = {"capacity": cap}
    if c["block_size"] is not None:
        kv["block_size"] = c["block_size"]
    sched = {}
    if c["max_batched_tokens"] is not None:
        sched["max_batched_tokens"] = c["max_batched_tokens"]
    if c["max_sequences"] is not None:
        sched["max_sequences"] = c["max_sequences"]
    par = {k: c[k] for k in ("tensor", "pipeline", "attention_data", "moe_tensor", "moe_expert")}
    if c.get("decode_context"):
        par["decode_context"] = c["decode_context"]
    eng = {
        "mode": "aggregated",
        "model": c["model"],
        "hardware": "b200_sxm",
        "backend": c["backend"],
        "workers": {
            "aggregated": {
                "parallelism": par,
                "scheduler": sched,
                "kv_cache": kv,
                "timing": {"type": "default"},
            }
        },
    }
    if c["context_length"] is not None:
        eng["context_length"] = c["context_length"]
    if c["nextn"]:
        eng["nextn"] = c["nextn"]
        eng["nextn_accepted"] = 1.0
    eng.update(c["extra_engine"])
    return {
        "traffic": {
            "source": {"type": "synthetic", "input_tokens": 64, "output_tokens": 2},
            "load": {"type": "concurrency", "concurrency": 1},
            "stop": {"requests": 1},
        },
        "engine": eng,
    }


def error_figures(stderr):
    """Only figures and a kind are kept (no AISimulate text)."""
    m = re.search(r"no KV budget: non-KV memory \((\d+) bytes\).*capacity=(\d+) bytes", stderr)
    if m:
        return {
            "kind": "no_kv_budget",
            "non_kv_bytes": int(m.group(1)),
            "capacity_bytes": int(m.group(2)),
        }
    if "zero KV-cache blocks" in stderr:
        return {"kind": "zero_blocks"}
    print(stderr[-2000:], file=sys.stderr)
    return {"kind": "other"}


def run(c, outdir):
    doc = build_yaml(c)
    with tempfile.TemporaryDirectory() as td:
        cfg = Path(td) / "c.yaml"
        cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
        p = subprocess.run(
            [
                AIS,
                "predict",
                "-c",
                str(cfg),
                "--output-dir",
                f"{td}/o",
                "--overwrite",
                "--format",
                "json",
                "--detail",
                "memory",
            ],
            capture_output=True,
            text=True,
        )
        rec = {
            "case": c,
            "config": doc,
            "aisimulate_version": "0.13.0.dev202610270000000085",
            "command": "aisimulate predict -c config.yaml --output-dir OUT --overwrite --format json --detail memory",
            "exit_code": p.returncode,
        }
        pj = Path(td) / "o" / "prediction.json"
        if pj.exists():
            d = json.loads(pj.read_text())
            rec["memory_diagnostics"] = d.get("memory_diagnostics")
        else:
            rec["error"] = error_figures(p.stderr)
    (Path(outdir) / f"{c['name']}.json").write_text(
        json.dumps(rec, indent=1, sort_keys=True) + "\n"
    )
    md = (rec.get("memory_diagnostics") or {}).get("aggregated", {})
    print(
        c["name"],
        p.returncode,
        md.get("estimated_num_gpu_blocks"),
        rec.get("error", ""),
        flush=True,
    )


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(__file__))
    from memory_cases import CASES

    flt = sys.argv[2] if len(sys.argv) > 2 else ""
    for c in CASES:
        if flt in c["name"]:
            run(c, sys.argv[1])
