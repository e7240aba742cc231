"""Randomized agreement between the numba event loop and the plain-Python scheduler reference.

Every case is a small seeded random deployment (tiny KV pools that force preemption, small token
budgets, 1-2 replicas x 1-2 attention-DP ranks, shared prefixes, vLLM and TRT-LLM, closed and
open loop). Both implementations run it; every request must agree exactly: status, rank,
arrival, first / second / last token and terminal times, token count, admissions, prefix reuse;
and so must committed_prefill_tokens, the preemption and pass counts and the admission log.
"""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from aisim.engine.driver import simulate_pool
from aisim.engine.spec import EngineSpec
from aisim.engine.workload import WorkloadSpec
from aisim.errors import CapacityError
from aisim.kernels.codes import ReqStatus
from aisim.models import load_model
from aisim.traffic import Traffic, synthetic
from aisim.traffic_session import session_traffic, turn_lengths
from tests.reference import scheduler as ref

NUM_CASES = 1000
_MODEL = None

STATUS = {
    ref.FINISHED: int(ReqStatus.FINISHED),
    ref.REJECTED: int(ReqStatus.REJECTED),
    ref.WAITING: int(ReqStatus.WAITING),
    ref.RUNNING: int(ReqStatus.RUNNING),
    ref.NOT_ARRIVED: int(ReqStatus.NOT_ARRIVED),
}


def _model():
    global _MODEL
    if _MODEL is None:
        _MODEL = load_model("Qwen/Qwen3-32B")
    return _MODEL


def _hash(rng: random.Random) -> int:
    """A prefix-chain hash as the kernels take it: non-zero, bit 62 clear."""
    return (rng.getrandbits(62) & ((1 << 62) - 1)) | 1


def _ms(rng: random.Random, lo: float, hi: float) -> float:
    if rng.random() < 0.4:
        return float(rng.randint(int(lo) + 1, int(hi)))
    return round(rng.uniform(lo, hi), rng.choice([1, 2, 3]))


def random_case(seed: int):
    """(EngineSpec, Traffic) of one small random deployment (a quarter with a tokenizer ahead
    of admission, a fifth as multi-turn sessions, each drawn from a stream of its own so the
    other draws stay as they were)."""
    spec, traffic = _random_case(seed)
    tok = random.Random(seed + 7_000_003)
    if tok.random() < 0.25:
        tokenization = (tok.randint(1, 3), _ms(tok, 0.0, 6.0), tok.choice([0.0, 0.05, 0.37]))
        spec = dataclasses.replace(spec, tokenization=tokenization)
    sess = random.Random(seed + 9_000_011)
    if sess.random() < 0.2:
        spec, traffic = _session_case(sess, spec, traffic.workload)
    return spec, traffic


def _session_case(rng: random.Random, spec: EngineSpec, base: WorkloadSpec):
    """The deployment and load of a case, fed multi-turn sessions instead (chunked prefill on:
    later turns outgrow the budget)."""
    ratio = rng.choice([0.0, 0.0, 0.5, 1.0])
    workload = dataclasses.replace(
        base,
        num_requests=0,
        input_tokens=rng.randint(1, 24),
        output_tokens=rng.randint(1, 12),
        turns=rng.randint(2, 4),
        turn_delay_ms=rng.choice([0.0, float(rng.randint(1, 10)), round(rng.uniform(0, 9), 3)]),
        shared_prefix_ratio=ratio,
        prefix_groups=rng.randint(1, 3) if ratio else 0,
        concurrency=rng.randint(1, 4),
    )
    workload = dataclasses.replace(workload, num_requests=rng.randint(1, 5) * workload.turns)
    spec = dataclasses.replace(spec, chunked_prefill=True, num_blocks=10**6)
    prompts, _, outs = turn_lengths(spec, workload)
    live = [
        (p, o)
        for p, o in zip(prompts.tolist(), outs.tolist(), strict=True)
        if spec.max_model_len is None or p < spec.max_model_len
    ]
    bs = spec.block_size
    need = max([max(-(-p // bs), -(-(p + o - 1) // bs)) for p, o in live] or [1])
    spec = dataclasses.replace(spec, num_blocks=need + rng.choice([0, 0, 1, 2, 4, 12]))
    return spec, session_traffic(spec, workload)


def _random_case(seed: int):
    rng = random.Random(seed)
    backend = "trtllm" if rng.random() < 0.3 else "vllm"
    bs = rng.choice([2, 4, 8, 16])
    n = rng.randint(1, 16)
    max_tokens = rng.randint(4, 64)
    chunked = rng.random() < 0.8
    replicas = rng.randint(1, 2)
    dp = rng.randint(1, 2)
    interval = rng.randint(1, 3) if backend == "vllm" and dp > 1 else 1
    homogeneous = rng.random() < 0.25
    p_max = rng.choice([6, 16, 40])
    if not chunked:
        p_max = min(p_max, max_tokens)
    o_max = rng.choice([3, 8, 20, 40])
    if homogeneous:
        p0, o0 = rng.randint(1, p_max), rng.randint(1, o_max)
        prompts, outs = [p0] * n, [o0] * n
    else:
        prompts = [rng.randint(1, p_max) for _ in range(n)]
        outs = [rng.randint(1, o_max) for _ in range(n)]
    mml = None
    if rng.random() < 0.2:
        mml = rng.randint(min(prompts), max(prompts) + o_max)
    eff = []
    for p, o in zip(prompts, outs, strict=True):
        if mml is not None and p < mml:
            o = min(o, mml - p)
        eff.append(o)
    live = [(p, o) for p, o in zip(prompts, eff, strict=True) if mml is None or p < mml]
    need = max([max(-(-p // bs), -(-(p + o - 1) // bs)) for p, o in live] or [1])
    num_blocks = need + rng.choice([0, 0, 0, 0, 1, 1, 2, 3, 6, 20])
    if rng.random() < 0.08:  # one prompt larger than the pool: rejected at its first admission
        prompts[rng.randrange(n)] = num_blocks * bs + rng.randint(1, 2 * bs)
    timing = "polynomial" if rng.random() < 0.1 else "fixed"
    prefill_ms = _ms(rng, 0.5, 12.0)
    decode_ms = _ms(rng, 0.2, 4.0)
    load = rng.choice(["concurrency", "concurrency", "poisson", "constant_rate"])
    spec = EngineSpec(
        role="aggregated",
        backend=backend,
        model=_model(),
        replicas=replicas,
        dp_size=dp,
        tensor=1,
        pipeline=1,
        block_size=bs,
        num_blocks=num_blocks,
        max_tokens=max_tokens,
        max_seqs=rng.randint(1, 8),
        max_model_len=mml,
        prefix_caching=rng.random() < 0.7,
        chunked_prefill=chunked,
        prefill_interval=interval,
        timing=timing,
        prefill_ms=prefill_ms,
        decode_ms=decode_ms,
        startup_ms=0.0,
    )
    workload = WorkloadSpec(
        load=load,
        num_requests=n,
        concurrency=rng.randint(1, n),
        rate_per_s=rng.choice([50.0, 200.0, 1000.0, 4000.0]),
        seed=rng.randint(0, 1000),
        input_tokens=prompts[0],
        output_tokens=outs[0],
        cached_prefix_tokens=rng.choice([0, prompts[0] // 2, prompts[0]]),
    )
    if homogeneous and rng.random() < 0.5:
        return spec, synthetic(spec, workload)

    # heterogeneous prefixes: a few hash-chain families, one grafted onto another's root
    fams = [[_hash(rng) for _ in range(64)] for _ in range(3)]
    graft = rng.randint(0, 4)
    fams[1][:graft] = fams[0][:graft]
    pfx_start, pfx_len, pool = [], [], []
    for p in prompts:
        k = 0
        fam = fams[0]
        if rng.random() < 0.75:
            fam = rng.choice(fams)
            k = p // bs if rng.random() < 0.5 else rng.randint(0, p // bs)
        pfx_start.append(len(pool))
        pfx_len.append(k)
        pool.extend(fam[:k])
    if load == "concurrency":
        arrival = [0.0] * n
    else:
        arrival, t = [], 0.0
        for _ in range(n):
            arrival.append(t)
            mode = rng.random()
            if mode < 0.3:
                t += float(rng.randint(0, 12))  # on pass ends with integer timings, or ties
            elif mode < 0.6:
                t += round(rng.expovariate(1.0 / 6.0), 3)
            else:
                t += rng.uniform(0.0, 20.0)
    traffic = Traffic(
        prompt_len=np.array(prompts, dtype=np.int64),
        requested_output_len=np.array(outs, dtype=np.int64),
        output_len=_kernel_outputs(spec, prompts, outs),
        arrival_ms=np.array(arrival, dtype=np.float64),
        pfx_start=np.array(pfx_start, dtype=np.int64),
        pfx_len=np.array(pfx_len, dtype=np.int32),
        pfx_hash=np.array(pool, dtype=np.uint64),
        workload=workload,
    )
    return spec, traffic


def _kernel_outputs(spec: EngineSpec, prompts, outs) -> np.ndarray:
    """Output lengths the kernel is handed (the Python side truncates / clamps, traffic.py)."""
    res = []
    for p, o in zip(prompts, outs, strict=True):
        if spec.max_model_len is not None and p < spec.max_model_len:
            o = min(o, spec.max_model_len - p)
        if spec.backend == "trtllm":
            o = min(o, spec.num_blocks * spec.block_size - p)
        res.append(o)
    return np.array(res, dtype=np.int64)


def reference_of(spec: EngineSpec, traffic: Traffic) -> ref.Simulator:
    cfg = ref.Config(
        backend=spec.backend,
        block_size=spec.block_size,
        num_blocks=spec.num_blocks,
        max_tokens=spec.max_tokens,
        max_seqs=spec.max_seqs,
        max_model_len=spec.max_model_len,
        prefix_caching=spec.prefix_caching,
        chunked_prefill=spec.chunked_prefill,
        replicas=spec.replicas,
        dp_size=spec.dp_size,
        prefill_interval=spec.prefill_interval,
        timing=spec.timing,
        prefill_ms=spec.prefill_ms,
        decode_ms=spec.decode_ms,
        load="concurrency" if traffic.workload.closed_loop else "open",
        concurrency=traffic.workload.concurrency,
        tok_threads=spec.tokenization[0],
        tok_base_ms=spec.tokenization[1],
        tok_per_token_ms=spec.tokenization[2],
        sessions=traffic.sessions,
    )
    specs = []
    for i in range(len(traffic.prompt_len)):
        s, k = int(traffic.pfx_start[i]), int(traffic.pfx_len[i])
        specs.append(
            ref.RequestSpec(
                prompt_len=int(traffic.prompt_len[i]),
                output_len=int(traffic.requested_output_len[i]),
                arrival_ms=float(traffic.arrival_ms[i]),
                prefix=[int(h) for h in traffic.pfx_hash[s : s + k]],
                turn=int(traffic.turn[i]) if traffic.sessions else 0,
                delay_ms=float(traffic.turn_delay_ms[i]) if traffic.sessions else 0.0,
                conv=int(traffic.conv[i]) if traffic.sessions else None,
            )
        )
    return ref.Simulator(cfg, specs)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def describe(spec: EngineSpec, traffic: Traffic) -> str:
    return (
        f"{spec.backend} bs={spec.block_size} blocks={spec.num_blocks} "
        f"mbt={spec.max_tokens} seqs={spec.max_seqs} mml={spec.max_model_len} "
        f"W={spec.replicas} D={spec.dp_size} k={spec.prefill_interval} "
        f"pc={spec.prefix_caching} chunked={spec.chunked_prefill} {spec.timing} "
        f"{spec.prefill_ms}/{spec.decode_ms} {traffic.workload.load} "
        f"c={traffic.workload.concurrency} tokenizer={spec.tokenization} "
        f"turns={traffic.workload.turns} delay={traffic.workload.turn_delay_ms}\n"
        f"P={traffic.prompt_len.tolist()}\nO={traffic.requested_output_len.tolist()}\n"
        f"arr={traffic.arrival_ms.tolist()}\npfx_len={traffic.pfx_len.tolist()}"
    )


def compare(spec: EngineSpec, traffic: Traffic) -> list[str]:
    """Run both; return the disagreements (empty when they agree exactly)."""
    sim = reference_of(spec, traffic)
    try:
        sim.run()
        ref_outcome = "ok"
    except ref.Stalled:
        ref_outcome = "stalled"
    except ref.TrtPreemption:
        ref_outcome = "trt_preemption"
    try:
        res = simulate_pool(spec, traffic, capture=True, check_invariants=True)
        outcome = "ok"
    except CapacityError:
        outcome = "stalled"
    except RuntimeError as exc:
        outcome = "trt_preemption" if "TRT_PREEMPTION" in str(exc) else f"error {exc}"
    if outcome != ref_outcome or outcome != "ok":
        return [] if outcome == ref_outcome else [f"outcome: kernel {outcome} ref {ref_outcome}"]
    bad = []
    k = res.requests
    for r in sim.requests:
        i = r.idx
        got = {
            "status": int(k.status[i]),
            "rank": int(k.rank[i]),
            "arrival": float(k.arrival_ms[i]),
            "output_len": int(k.output_len[i]),
            "first_admit": float(k.first_admit_ms[i]),
            "first_token": float(k.first_token_ms[i]),
            "second_token": float(k.second_token_ms[i]),
            "last_token": float(k.last_token_ms[i]),
            "terminal": float(k.terminal_ms[i]),
            "generated": int(k.num_generated[i]),
            "admissions": int(k.num_admissions[i]),
            "reused_first": int(k.reused_first[i]),
            "reused_max": int(k.reused_max[i]),
            "tokenized": float(k.tokenized_ms[i]) if spec.tokenization[0] else math.nan,
        }
        want = {
            "status": STATUS[r.status],
            "rank": r.rank,
            "arrival": r.arrival,
            "output_len": r.output_cap,
            "first_admit": r.first_admit,
            "first_token": r.first_token,
            "second_token": r.second_token,
            "last_token": r.last_token,
            "terminal": r.terminal,
            "generated": r.generated,
            "admissions": r.admissions,
            "reused_first": r.reused_first,
            "reused_max": r.reused_max,
            "tokenized": sim.tokenized.get(i, math.nan),
        }
        for name, w in want.items():
            g = got[name]
            if not (_same(g, w) if isinstance(w, float) else g == w):
                bad.append(f"request {i} {name}: kernel {g!r} ref {w!r}")
    counters = res.stats.counters
    for name, g, w in (
        ("committed_prefill_tokens", int(counters[0]), sim.committed),
        ("preemptions", int(counters[2]), sim.preemptions),
        ("passes", int(counters[1]), sim.passes),
    ):
        if g != w:
            bad.append(f"{name}: kernel {g} ref {w}")
    n_log = int(counters[6])
    log = [
        (
            int(res.log.req[j]),
            float(res.log.at_ms[j]),
            int(res.log.reused[j]),
            bool(res.log.readmit[j]),
        )
        for j in range(n_log)
    ]
    if log != sim.log:
        first = next(
            (j for j, (a, b) in enumerate(zip(log, sim.log, strict=False)) if a != b),
            min(len(log), len(sim.log)),
        )
        bad.append(
            f"admission log differs at entry {first}: kernel "
            f"{log[first : first + 2]} ref {sim.log[first : first + 2]}"
        )
    return bad


@pytest.mark.parametrize("seed", range(NUM_CASES))
def test_kernel_matches_reference(seed):
    spec, traffic = random_case(seed)
    bad = compare(spec, traffic)
    assert not bad, f"seed {seed}: {describe(spec, traffic)}\n" + "\n".join(bad[:12])


def test_cases_exercise_the_rules():
    """The random sweep must actually reach preemption, recompute hits, rejection, DP and a
    queue at the tokenizer."""
    seen = {
        "preempt": 0,
        "readmit_hit": 0,
        "reject": 0,
        "defer": 0,
        "trt": 0,
        "hit": 0,
        "truncated": 0,
        "tokenizer_queue": 0,
    }
    for seed in range(NUM_CASES):
        spec, traffic = random_case(seed)
        sim = reference_of(spec, traffic)
        try:
            sim.run()
        except (ref.Stalled, ref.TrtPreemption):
            continue
        seen["preempt"] += sim.preemptions > 0
        seen["readmit_hit"] += any(ra and u > 0 for _, _, u, ra in sim.log)
        seen["reject"] += any(r.status == ref.REJECTED for r in sim.requests)
        seen["defer"] += sim.deferred_passes > 0
        seen["truncated"] += any(r.output_cap < r.requested for r in sim.requests)
        seen["trt"] += spec.backend == "trtllm"
        seen["hit"] += any(u > 0 for _, _, u, _ in sim.log)
        # a request waited for a tokenizer thread, so another was tokenized before it
        base, per = spec.tokenization[1:]
        seen["tokenizer_queue"] += any(
            done > r.arrival + base + r.prompt * per
            for r in sim.requests
            if (done := sim.tokenized.get(r.idx)) is not None
        )
    assert all(v >= 10 for v in seen.values()), seen


def _explicit(
    backend="vllm",
    bs=16,
    blocks=40,
    mbt=8192,
    dp=1,
    k=1,
    prefill_ms=1.0,
    decode_ms=1.0,
    load="concurrency",
    concurrency=8,
    prompts=(),
    outs=(),
    arrivals=None,
):
    n = len(prompts)
    spec = EngineSpec(
        role="aggregated",
        backend=backend,
        model=_model(),
        replicas=1,
        dp_size=dp,
        tensor=1,
        pipeline=1,
        block_size=bs,
        num_blocks=blocks,
        max_tokens=mbt,
        max_seqs=256,
        max_model_len=None,
        prefix_caching=False,
        chunked_prefill=True,
        prefill_interval=k,
        timing="fixed",
        prefill_ms=prefill_ms,
        decode_ms=decode_ms,
        startup_ms=0.0,
    )
    workload = WorkloadSpec(
        load=load,
        num_requests=n,
        concurrency=concurrency,
        input_tokens=prompts[0],
        output_tokens=outs[0],
    )
    traffic = Traffic(
        prompt_len=np.array(prompts, dtype=np.int64),
        requested_output_len=np.array(outs, dtype=np.int64),
        output_len=_kernel_outputs(spec, prompts, outs),
        arrival_ms=np.array(arrivals or [0.0] * n, dtype=np.float64),
        pfx_start=np.zeros(n, dtype=np.int64),
        pfx_len=np.zeros(n, dtype=np.int32),
        pfx_hash=np.zeros(0, dtype=np.uint64),
        workload=workload,
    )
    return spec, traffic


def test_reference_reproduces_rules_examples():
    """The reference itself against worked examples of docs/rules.md (4.4, 5.1, 7.2)."""
    # docs/rules.md 4.4: bs 16, 40 blocks, 8 x (64 in / 64 out): r5-r7 preempted, readmitted at 64
    spec, traffic = _explicit(prompts=[64] * 8, outs=[64] * 8)
    sim = reference_of(spec, traffic).run()
    assert sim.committed == 771
    assert [r.terminal for r in sim.requests] == [64.0] * 5 + [96.0, 112.0, 112.0]
    assert [entry for entry in sim.log if entry[3]] == [(q, 64.0, 0, True) for q in (5, 6, 7)]
    assert not compare(spec, traffic)
    # docs/rules.md 5.1, TRT-LLM: 5 admitted at 0, 3 when they finish at 64
    spec, traffic = _explicit(backend="trtllm", prompts=[64] * 8, outs=[64] * 8)
    sim = reference_of(spec, traffic).run()
    assert [r.first_admit for r in sim.requests] == [0.0] * 5 + [64.0] * 3
    assert not compare(spec, traffic)
    # docs/rules.md 7.2: attention_data 2, fixed 10 / 1 ms, budget 48, bs 64; A B C D E F (G)
    for k, extra, want in (
        (1, False, {"C": (10.0, 31.0, 42.0), "E": (31.0, 64.0, 65.0), "F": (31.0, 53.0, 64.0)}),
        (2, False, {"C": (10.0, 31.0, 32.0), "E": (32.0, 67.0, 68.0), "F": (32.0, 55.0, 56.0)}),
        (3, False, {"C": (10.0, 32.0, 33.0), "E": (34.0, 71.0, 72.0)}),
        (2, True, {"G": (54.0, 89.0, 90.0)}),
    ):
        prompts = [64, 64, 64, 64, 128, 64] + [64] * extra
        outs = [60, 60, 5, 5, 5, 5] + [5] * extra
        arrivals = [0.0, 0.0, 5.0, 5.0, 30.0, 30.5] + [30.7] * extra
        spec, traffic = _explicit(
            bs=64,
            blocks=1000,
            mbt=48,
            dp=2,
            k=k,
            prefill_ms=10.0,
            load="poisson",
            prompts=prompts,
            outs=outs,
            arrivals=arrivals,
        )
        sim = reference_of(spec, traffic).run()
        for name, times in want.items():
            r = sim.requests["ABCDEFG".index(name)]
            assert (r.first_admit, r.first_token, r.second_token) == times, (k, name)
        assert not compare(spec, traffic)
