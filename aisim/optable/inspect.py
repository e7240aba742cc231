"""`aisim optable inspect`: what the compiled tables cover (families, rows, key ranges, sources)."""

from __future__ import annotations

import numpy as np

from aisim.optable.load import OpTable


def _rng(a: np.ndarray) -> str:
    if len(a) == 0:
        return "-"
    u = np.unique(a)
    return f"{u[0]}..{u[-1]} ({len(u)} values)" if len(u) > 1 else f"{u[0]}"


def _groups(ot: OpTable, fam: str, cols: dict, names: list[str]):
    """Yield (label, mask) per distinct combination of the given columns (decoded)."""
    cats = ot.categories(fam)
    keys = np.stack([cols[n].astype(np.int64) for n in names], axis=1)
    for combo in np.unique(keys, axis=0):
        mask = np.all(keys == combo, axis=1)
        label = "/".join(
            cats[n][int(v)] if n in cats else f"{n}={int(v)}"
            for n, v in zip(names, combo, strict=True)
        )
        yield label, mask


def _gemm(ot, fam, c):
    for label, m in _groups(ot, fam, c, ["gemm_dtype"]):
        sites = set(zip(c["n"][m].tolist(), c["k"][m].tolist(), strict=True))
        p = m & (c["src"] == 0)
        psites = set(zip(c["n"][p].tolist(), c["k"][p].tolist(), strict=True))
        yield (
            f"{label}: {len(sites)} (n,k) sites ({len(psites)} primary), n {_rng(c['n'][m])}, "
            f"k {_rng(c['k'][m])}, m {_rng(c['m'][m])}"
        )


def _attention(ot, fam, c):
    seq = "isl" if "isl" in c else "kv_len"
    lanes = ot.decode(fam, "kernel_source", c["kernel_source"])
    vals, counts = np.unique(lanes, return_counts=True)
    yield "lanes: " + ", ".join(f"{v} {n}" for v, n in zip(vals, counts, strict=True))
    dims = ["attn_dtype", "kv_cache_dtype"] if "attn_dtype" in c else ["kv_cache_dtype"]
    for label, m in _groups(ot, fam, c, dims):
        heads = set(
            zip(
                c["num_heads"][m].tolist(),
                c["n_kv_lookup"][m].tolist(),
                c["head_dim"][m].tolist(),
                c["window_size"][m].tolist(),
                strict=True,
            )
        )
        yield (
            f"{label}: {len(heads)} head configs (num_heads, n_kv_lookup, head_dim, window), "
            f"head_dim {_rng(c['head_dim'][m])}, {seq} {_rng(c[seq][m])}, "
            f"batch {_rng(c['batch_size'][m])}"
        )


def _curve(ot, fam, c, dims, axis):
    """One line per slice; fan-outs (num_gpus) sharing the same axis grid are merged."""
    for label, m in _groups(ot, fam, c, dims) if dims else [("all", np.ones(len(c["src"]), bool))]:
        by_grid: dict[tuple, list[int]] = {}
        for g in np.unique(c["num_gpus"][m]):
            pts = tuple(np.unique(c[axis][m & (c["num_gpus"] == g)]).tolist())
            by_grid.setdefault(pts, []).append(int(g))
        for pts, gpus in by_grid.items():
            yield (f"{label}: num_gpus {gpus}, {len(pts)} {axis} points {pts[0]}..{pts[-1]}")


def _moe(ot, fam, c):
    shape = ["topk", "num_experts", "hidden_size", "inter_size", "moe_tp_size", "moe_ep_size"]
    for label, m in _groups(ot, fam, c, ["low_latency", "moe_dtype"]):
        shapes = {tuple(int(c[s][i]) for s in shape) for i in np.nonzero(m)[0]}
        yield (
            f"{label}: {len(shapes)} shapes (topk, experts, hidden, inter, tp, ep), "
            f"num_tokens {_rng(c['num_tokens'][m])}"
        )


def _generic(ot, fam, c):
    meta = ot.meta(fam)
    cats = ot.categories(fam)
    for k in meta["key_columns"]:
        if k in cats:
            used = np.unique(c[k])
            yield f"{k}: " + ", ".join(cats[k][int(i)] for i in used)
        else:
            yield f"{k}: {_rng(c[k])}"


def describe(ot: OpTable, details: bool = True) -> list[str]:
    """Human-readable coverage of one OpTable."""
    lines = [
        f"{ot.hardware} {ot.backend} {ot.version}  ({ot.root}; NCCL "
        f"{ot.manifest.get('nccl_version')})"
    ]
    lines.append(f"  {'family':<22} {'rows':>8} {'primary':>8}  sources (channel version: rows)")
    for fam in ot.families:
        e = ot.entries[fam]
        srcs = ", ".join(f"{s['channel']} {s['version']}: {s['rows_kept']}" for s in e["sources"])
        lines.append(f"  {fam:<22} {e['rows']:>8} {e['rows_primary']:>8}  {srcs}")
    if not details:
        return lines
    for fam in ot.families:
        c = ot.columns(fam)
        meta = ot.meta(fam)
        lines.append(f"  {fam} [{meta['unit']}; keys {', '.join(meta['key_columns'])}]")
        if fam == "gemm":
            body = _gemm(ot, fam, c)
        elif fam in ("context_attention", "generation_attention"):
            body = _attention(ot, fam, c)
        elif fam == "custom_allreduce":
            body = _curve(ot, fam, c, [], "message_size")
        elif fam == "nccl":
            body = _curve(ot, fam, c, ["nccl_dtype", "op_name"], "message_size")
        elif fam == "moe":
            body = _moe(ot, fam, c)
        else:
            body = _generic(ot, fam, c)
        lines += [f"    {line}" for line in body]
        if meta["constants"]:
            lines.append(
                "    constant: "
                + ", ".join(f"{k}={v}" for k, v in sorted(meta["constants"].items()))
            )
    return lines
