"""A slow, object-style reference of the aggregated scheduler (docs/rules.md 1-7).

Written from the rules of docs/rules.md, not from the kernels: requests, blocks, ranks and workers
are plain objects held in lists, dicts and deques. It exists to be compared, request by request,
with the numba event loop on small random cases (tests/test_kernel_vs_reference.py), and it
checks its own invariants after every pass.

Rules implemented (section numbers of docs/rules.md):
* 1.2, 1.3 event loop: pass ends (pass-start order) -> closed-loop replacements -> open-loop
       arrivals -> routing -> a pass on every idle worker with work; per-phase nanosecond rounding.
* 4.2-4.4 vLLM pass: running first (LIFO preemption, self-preemption), then FCFS head-of-line
       admission (whole-sequence block check with active hits only, budget, max_sequences).
* 4.5, 4.6 prefill set on prompt positions with floored means; decode set; fixed/polynomial.
* 7.1  attention-DP lock-step group: pass end = max over participating ranks of their own sums.
* 6, 4.4 KV blocks: same-pass prefix hits, last-token cap, tail-first release, LRU eviction with
       unhashed blocks reused first, recompute after preemption (hits may cover generated blocks).
* 5    TRT-LLM: to-completion reservation, output clamped to the pool, never preempts.
* 2.1  round robin over workers, then over the worker's DP ranks.
* 2.3  the tokenizer: each worker's threads tokenize its requests first come, first served;
       a request joins its rank's waiting queue when done (ties in request order).
* 7.2  prefill_schedule_interval deferral (vLLM, attention_data > 1).
* 10.5 multi-turn sessions: a turn arrives at its predecessor's terminal time plus its think
       time (closed loop: a session's last turn starts the next session); a conversation's
       own blocks are keyed by its first turn.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from fractions import Fraction

WAITING = "waiting"
RUNNING = "running"
FINISHED = "finished"
REJECTED = "rejected"
NOT_ARRIVED = "not_arrived"


class Stalled(Exception):
    """A pass with no effect and no duration: the simulation can make no progress."""


class TrtPreemption(Exception):
    """TRT-LLM reached a preemption, which its reservation should make impossible."""


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def phase_ms(ns: int) -> float:
    """A whole-ns phase as the clock adds it: (seconds + ns / 1e9) x 1000 (docs/rules.md 1.2)."""
    whole = ns // 1_000_000_000
    return (float(whole) + (ns - whole * 1_000_000_000) / 1e9) * 1000.0


def round_ns(ms: float) -> int:
    """A phase duration as whole nanoseconds: the exact value of the double ms / 1000 in
    seconds, times 1e9, rounded to the nearest integer, ties to even (Rust's
    Duration::from_secs_f64), computed with exact rationals."""
    if ms <= 0.0:
        return 0
    exact = Fraction(ms / 1000.0) * 1_000_000_000
    whole = math.floor(exact)
    rest = exact - whole
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2 == 1):
        whole += 1
    return whole


@dataclass
class Config:
    backend: str  # "vllm" | "trtllm"
    block_size: int
    num_blocks: int  # per rank
    max_tokens: int  # per rank and pass
    max_seqs: int  # per rank
    max_model_len: int | None  # None: no limit
    prefix_caching: bool
    chunked_prefill: bool
    replicas: int
    dp_size: int
    prefill_interval: int
    timing: str  # "fixed" | "polynomial"
    prefill_ms: float
    decode_ms: float
    load: str  # "concurrency" | "open"
    concurrency: int
    tok_threads: int = 0  # tokenizer threads per worker (0: none)
    tok_base_ms: float = 0.0
    tok_per_token_ms: float = 0.0
    sessions: bool = False  # requests are the turns of multi-turn sessions, session by session


@dataclass
class RequestSpec:
    prompt_len: int
    output_len: int  # as requested (before truncation / clamping)
    arrival_ms: float  # open loop only (sessions: first turns only)
    prefix: list = field(default_factory=list)  # content keys of the shareable leading blocks
    turn: int = 0  # turn within its session
    delay_ms: float = 0.0  # think time after the previous turn's terminal time
    conv: int | None = None  # request keying its conversation's own blocks (None: itself)


class Block:
    def __init__(self, bid: int):
        self.id = bid
        self.ref = 0
        self.key = None  # content key while cached


class Request:
    def __init__(self, idx: int, spec: RequestSpec, cfg: Config):
        self.idx = idx
        self.prompt = spec.prompt_len
        self.prefix = list(spec.prefix)
        self.arrival = spec.arrival_ms
        self.turn = spec.turn
        self.delay = spec.delay_ms
        self.conv = idx if spec.conv is None else spec.conv
        # Output the request can emit: max_model_len truncation and the TRT-LLM pool clamp
        # (docs/rules.md 3.2)
        self.requested = spec.output_len
        cap = spec.output_len
        if cfg.max_model_len is not None and self.prompt < cfg.max_model_len:
            cap = min(cap, cfg.max_model_len - self.prompt)
        if cfg.backend == "trtllm":
            cap = min(cap, cfg.num_blocks * cfg.block_size - self.prompt)
        self.output_cap = cap
        self.status = NOT_ARRIVED
        self.rank = -1
        self.computed = 0
        self.generated = 0
        self.blocks: list[Block] = []
        self.num_hashed = 0  # leading blocks already looked at for caching
        self.first_admit = math.nan
        self.first_token = math.nan
        self.second_token = math.nan
        self.last_token = math.nan
        self.terminal = math.nan
        self.admissions = 0
        self.reused_first = 0
        self.reused_max = 0

    @property
    def known(self) -> int:
        """L: prompt plus every generated token."""
        return self.prompt + self.generated

    def key(self, j: int):
        """Content key of block j: shared prefix keys first, then blocks only its conversation
        has (a synthetic session's turns extend one conversation: keyed by its first turn)."""
        if j < len(self.prefix):
            return ("shared", self.prefix[j])
        return ("own", self.conv, j)


class KVPool:
    """One rank's blocks: free unhashed blocks, an LRU of evictable cached blocks, a hash map."""

    def __init__(self, num_blocks: int):
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.clean = list(self.blocks)  # free, no content worth keeping
        self.lru: OrderedDict[int, Block] = OrderedDict()  # free but cached, oldest first
        # content key -> its cached blocks in insertion order (vLLM keeps every copy; a lookup
        # returns the oldest one still cached)
        self.cache: dict = {}

    def num_free(self) -> int:
        return len(self.clean) + len(self.lru)

    def num_referenced(self) -> int:
        return sum(1 for b in self.blocks if b.ref > 0)

    def take(self) -> Block:
        if self.clean:
            b = self.clean.pop()
        else:
            _, b = self.lru.popitem(last=False)  # evict the least recently released block
            copies = self.cache[b.key]
            del copies[b.id]
            if not copies:
                del self.cache[b.key]
            b.key = None
        b.ref = 1
        return b

    def use_hit(self, b: Block) -> None:
        if b.ref == 0:
            del self.lru[b.id]
        b.ref += 1

    def release(self, blocks: list[Block]) -> None:
        for b in reversed(blocks):  # tail first
            b.ref -= 1
            if b.ref == 0:
                if b.key is not None:
                    self.lru[b.id] = b
                else:
                    self.clean.append(b)

    def register(self, key, b: Block) -> None:
        if b.key is None:
            self.cache.setdefault(key, OrderedDict())[b.id] = b
            b.key = key

    def lookup(self, key) -> Block | None:
        copies = self.cache.get(key)
        return next(iter(copies.values())) if copies else None


class Rank:
    def __init__(self, rid: int, sim: Simulator):
        self.id = rid
        self.sim = sim
        self.cfg = sim.cfg
        self.pool = KVPool(sim.cfg.num_blocks)
        self.running: list[Request] = []
        self.waiting: deque[Request] = deque()
        self.capacity_bound = False
        self.scheduled: dict[int, tuple[int, int]] = {}  # req idx -> (computed_before, n)
        self.rejected: list[Request] = []  # rejected by the in-flight pass, in order

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    # ---- KV helpers
    def grow(self, r: Request, tokens: int) -> None:
        while len(r.blocks) < ceil_div(tokens, self.cfg.block_size):
            r.blocks.append(self.pool.take())

    def free(self, r: Request) -> None:
        self.pool.release(r.blocks)
        r.blocks = []
        r.num_hashed = 0

    def cache_full_blocks(self, r: Request) -> None:
        if not self.cfg.prefix_caching:
            return
        full = r.computed // self.cfg.block_size
        for j in range(r.num_hashed, full):
            self.pool.register(r.key(j), r.blocks[j])
        r.num_hashed = max(r.num_hashed, full)

    def probe(self, r: Request) -> tuple[list[Block], int]:
        """Leading cached blocks of r's known sequence (last token always computed) and how
        many of them are referenced by a live request."""
        if not self.cfg.prefix_caching:
            return [], 0
        # TRT-LLM may reuse a whole block-aligned prompt; vLLM recomputes the last token
        if self.cfg.backend == "trtllm":
            cap = r.known // self.cfg.block_size
        else:
            cap = (r.known - 1) // self.cfg.block_size
        hits = []
        for j in range(cap):
            b = self.pool.lookup(r.key(j))
            if b is None:
                break
            hits.append(b)
        return hits, sum(1 for b in hits if b.ref > 0)

    def reservation_left(self) -> int:
        """TRT-LLM: blocks the running requests still need to reach completion."""
        bs = self.cfg.block_size
        return sum(ceil_div(q.prompt + q.output_cap, bs) - len(q.blocks) for q in self.running)

    def schedule(self, r: Request, before: int, n: int) -> None:
        self.grow(r, before + n)
        r.computed = before + n
        self.cache_full_blocks(r)
        if before < r.prompt:
            self.sim.committed += n
        self.scheduled[r.idx] = (before, n)

    def preempt_last(self) -> Request:
        v = self.running.pop()
        self.free(v)
        v.computed = 0
        v.status = WAITING
        self.waiting.appendleft(v)
        self.sim.preemptions += 1
        return v

    # ---- one pass
    def run_pass(self, now: float, step: int) -> tuple[tuple[int, int], bool]:
        """Schedule this rank's pass at `now`; returns ((prefill ns, decode ns), made progress)."""
        cfg = self.cfg
        bs = cfg.block_size
        self.scheduled = {}
        budget = cfg.max_tokens
        progress = False
        preempted = False
        defer = (
            cfg.backend == "vllm"
            and cfg.dp_size > 1
            and cfg.prefill_interval > 1
            and step % cfg.prefill_interval != 0
            and not self.capacity_bound
            and any(q.computed >= q.prompt for q in self.running)
        )

        # (a) running requests in list order
        i = 0
        while i < len(self.running) and budget > 0:
            r = self.running[i]
            if defer and r.computed < r.prompt:
                i += 1
                continue
            n = min(r.known - r.computed, budget)
            need = ceil_div(r.computed + n, bs) - len(r.blocks)
            while need > self.pool.num_free():
                if cfg.backend == "trtllm":
                    raise TrtPreemption(f"rank {self.id} request {r.idx}")
                victim = self.preempt_last()
                preempted = True
                progress = True
                if victim is r:
                    break
            if r.status != RUNNING:  # preempted itself: it was the last one
                break
            self.schedule(r, r.computed, n)
            budget -= n
            progress = True
            i += 1

        # (b) waiting queue, FCFS, head-of-line blocking
        while self.waiting and len(self.running) < cfg.max_seqs and not preempted:
            r = self.waiting[0]
            fresh = r.admissions == 0
            if fresh and self.must_reject(r):
                self.waiting.popleft()
                r.status = REJECTED  # terminal (and replaced) when this pass ends
                self.rejected.append(r)
                progress = True
                continue
            hits, active = self.probe(r)
            if cfg.backend == "vllm":
                need = ceil_div(r.known, bs) - active
                avail = cfg.num_blocks - self.pool.num_referenced()
            else:
                need = ceil_div(r.prompt + r.output_cap, bs) - active
                avail = cfg.num_blocks - self.pool.num_referenced() - self.reservation_left()
            if need > avail:
                break
            hit_tokens = len(hits) * bs
            remaining = r.known - hit_tokens
            n = min(remaining, budget)
            if n == 0 and remaining > 0:  # a fully cached prompt needs no budget
                break
            if not cfg.chunked_prefill and r.prompt - min(hit_tokens, r.prompt) > budget:
                break  # only the prompt part is held back; a recompute is chunked
            if defer and remaining > 1:
                break
            self.waiting.popleft()
            self.running.append(r)
            r.status = RUNNING
            for b in hits:
                self.pool.use_hit(b)
            r.blocks = list(hits)
            r.num_hashed = len(hits)
            self.schedule(r, hit_tokens, n)
            if fresh:
                r.first_admit = now
                r.reused_first = hit_tokens
            r.reused_max = max(r.reused_max, hit_tokens)
            r.admissions += 1
            self.sim.log.append((r.idx, now, hit_tokens, not fresh))
            budget -= n
            progress = True
            # a fully cached prompt admitted with no budget left stops admission; one that spent
            # the budget on tokens does not (the next head may still be rejected or be a full hit)
            if budget == 0 and n == 0:
                break

        self.sim.deferred_passes += defer
        if not defer and not preempted:
            self.capacity_bound = len(self.waiting) > 0
        self.check(budget)
        return self.duration_ns(), progress

    def must_reject(self, r: Request) -> bool:
        cfg = self.cfg
        if cfg.max_model_len is not None and r.prompt >= cfg.max_model_len:
            return True
        if cfg.backend == "vllm":
            return ceil_div(r.prompt, cfg.block_size) > cfg.num_blocks
        return r.output_cap < 1  # the prompt alone fills the pool

    def duration_ns(self) -> int:
        cfg = self.cfg
        bs_p = sum_isl = sum_pfx = 0
        bs_d = sum_ctx = 0
        for r in self.running:
            if r.idx not in self.scheduled:
                continue
            before, n = self.scheduled[r.idx]
            after = before + n
            if before < r.prompt:  # the chunk holds prompt positions
                bs_p += 1
                sum_isl += min(after, r.prompt)
                sum_pfx += before
            # decode, completed recompute, or a fully cached prompt (no new token: L = P)
            if (r.generated > 0 or n == 0) and after == r.known:
                bs_d += 1
                sum_ctx += r.known
        prefill = decode = 0.0
        if bs_p > 0:
            isl, pfx = sum_isl // bs_p, sum_pfx // bs_p
            if isl != pfx:
                if cfg.timing == "fixed":
                    prefill = cfg.prefill_ms
                else:
                    t = float(bs_p * (isl - pfx))
                    prefill = 4.209989e-7 * (t * t) + 1.518344e-2 * t + 16.50142
        if bs_d > 0:
            if cfg.timing == "fixed":
                decode = cfg.decode_ms
            else:
                u = min(1.0, sum_ctx / (cfg.num_blocks * cfg.block_size))
                decode = max(1.0, -25.74 * (u * u) + 54.01 * u + 5.74)
        return round_ns(prefill), round_ns(decode)

    def emit(self, now: float) -> None:
        """Pass end: every scheduled request whose known sequence is computed emits a token."""
        for r in list(self.running):
            if r.idx not in self.scheduled or r.computed != r.known:
                continue
            if r.generated == 0:
                r.first_token = now
            elif r.generated == 1:
                r.second_token = now
            r.last_token = now
            r.generated += 1
            if r.generated >= r.output_cap:
                self.running.remove(r)
                self.free(r)
                self.sim.retire(r, FINISHED, now)
        self.scheduled = {}
        self.check(None)

    # ---- invariants
    def check(self, budget_left: int | None) -> None:
        cfg = self.cfg
        pool = self.pool
        referenced = pool.num_referenced()
        assert len(pool.clean) + len(pool.lru) + referenced == cfg.num_blocks, "blocks lost"
        owners: dict[int, int] = {}
        for r in self.running:
            ids = [b.id for b in r.blocks]
            assert len(set(ids)) == len(ids), f"request {r.idx} holds a block twice"
            for b in ids:
                owners[b] = owners.get(b, 0) + 1
            assert r.computed <= r.known
            assert len(r.blocks) == ceil_div(r.computed, cfg.block_size), "block count"
        for b in pool.blocks:
            assert b.ref == owners.get(b.id, 0), f"block {b.id}: ref {b.ref} != owners"
        for b in pool.clean:
            assert b.ref == 0 and b.key is None
        for b in pool.lru.values():
            assert b.ref == 0 and b.key is not None
        for key, copies in pool.cache.items():
            assert copies and all(b.key == key for b in copies.values())
        assert all(not r.blocks and r.status == WAITING for r in self.waiting)
        assert len(self.running) <= cfg.max_seqs, "max_sequences exceeded"
        if budget_left is not None:
            used = sum(n for _, n in self.scheduled.values())
            assert used + budget_left == cfg.max_tokens and budget_left >= 0, "budget"


class Worker:
    def __init__(self, wid: int, sim: Simulator):
        self.id = wid
        self.sim = sim
        self.ranks = [Rank(wid * sim.cfg.dp_size + d, sim) for d in range(sim.cfg.dp_size)]
        self.busy = False
        self.start = 0.0
        self.end = 0.0
        self.step = 0
        self.in_pass: list[Rank] = []
        self.rr_rank = 0

    def has_work(self) -> bool:
        return any(k.has_work() for k in self.ranks)

    def start_pass(self, now: float) -> None:
        self.in_pass = [k for k in self.ranks if k.has_work()]
        longest = prefill = 0
        progress = False
        for k in self.in_pass:
            (pre, dec), moved = k.run_pass(now, self.step)
            if pre + dec > longest:  # the slowest rank sets both phases of the group pass
                longest, prefill = pre + dec, pre
            progress = progress or moved
        if longest == 0 and not progress:
            raise Stalled(f"worker {self.id} at {now}")
        self.busy = True
        self.start = now
        self.end = now + phase_ms(prefill) + phase_ms(longest - prefill)
        self.sim.passes += 1
        for k in self.in_pass:
            for r in k.rejected:  # terminal at the pass end, replaced when it is processed
                r.status, r.terminal = REJECTED, self.end

    def finish_pass(self) -> None:
        for k in self.in_pass:
            for r in k.rejected:
                self.sim.replace(self.end, r)
            k.rejected = []
            k.emit(self.end)
        self.in_pass = []
        self.busy = False
        self.step = self.step + 1 if self.has_work() else 0


class Simulator:
    def __init__(self, cfg: Config, specs: list[RequestSpec]):
        self.cfg = cfg
        self.requests = [Request(i, s, cfg) for i, s in enumerate(specs)]
        self.workers = [Worker(w, self) for w in range(cfg.replicas)]
        self.ranks = [k for w in self.workers for k in w.ranks]
        self.committed = 0
        self.preemptions = 0
        self.passes = 0
        self.deferred_passes = 0
        self.log: list[tuple[int, float, int, bool]] = []
        self.created: list[Request] = []  # requests that exist, in index order
        self.routed = 0
        self.rr_worker = 0
        # tokenizer: each worker's thread free times; requests inside as (done, index, request)
        self.tok_free = [[0.0] * cfg.tok_threads for _ in self.workers]
        self.tokenizing: list[tuple[float, int, Request]] = []
        self.tokenized: dict[int, float] = {}
        # sessions: turns whose arrival is known, not routed yet; the next session to start
        self.pending: list[Request] = []
        self.next_session = 0

    def create(self, arrival: float) -> None:
        r = self.requests[len(self.created)]
        r.arrival = arrival
        self.created.append(r)

    def retire(self, r: Request, status: str, now: float) -> None:
        r.status = status
        r.terminal = now
        self.replace(now, r)

    def replace(self, now: float, r: Request) -> None:
        """r is terminal at `now`: its session's next turn arrives after its think time, or
        (closed loop) the next request or session arrives at once."""
        if self.cfg.sessions:
            nxt = r.idx + 1
            if nxt < len(self.requests) and self.requests[nxt].turn > 0:
                self.requests[nxt].arrival = now + self.requests[nxt].delay
                self.pending.append(self.requests[nxt])
            elif self.cfg.load == "concurrency":
                self.start_session(now)
            return
        if self.cfg.load == "concurrency" and len(self.created) < len(self.requests):
            self.create(now)  # closed loop: the replacement arrives at once

    def start_session(self, now: float) -> None:
        """Closed loop: the next session's first turn arrives now."""
        i = self.next_session
        if i >= len(self.requests):
            return
        self.requests[i].arrival = now
        self.pending.append(self.requests[i])
        i += 1
        while i < len(self.requests) and self.requests[i].turn > 0:
            i += 1
        self.next_session = i

    def route(self, r: Request) -> None:
        w = self.workers[self.rr_worker % len(self.workers)]
        self.rr_worker += 1
        k = w.ranks[w.rr_rank % len(w.ranks)]
        w.rr_rank += 1
        r.rank = k.id
        r.status = WAITING
        if not self.cfg.tok_threads:
            k.waiting.append(r)
            return
        free = self.tok_free[w.id]
        thread = free.index(min(free))
        done = max(r.arrival, free[thread]) + (
            self.cfg.tok_base_ms + r.prompt * self.cfg.tok_per_token_ms
        )
        free[thread] = done
        self.tokenized[r.idx] = done
        self.tokenizing.append((done, r.idx, r))

    def release_tokenized(self, now: float) -> None:
        ready = sorted(e for e in self.tokenizing if e[0] <= now)
        self.tokenizing = [e for e in self.tokenizing if e[0] > now]
        for _, _, r in ready:
            self.ranks[r.rank].waiting.append(r)

    def run(self) -> Simulator:
        if self.cfg.sessions:
            if self.cfg.load == "concurrency":
                for _ in range(self.cfg.concurrency):
                    self.start_session(0.0)
            else:
                self.pending = [r for r in self.requests if r.turn == 0]
        elif self.cfg.load == "concurrency":
            for _ in range(min(self.cfg.concurrency, len(self.requests))):
                self.create(0.0)
        else:
            for r in self.requests:
                self.created.append(r)
        now = 0.0
        while True:
            times = [w.end for w in self.workers if w.busy]
            if self.routed < len(self.created):
                times.append(max(now, self.created[self.routed].arrival))
            times += [max(now, r.arrival) for r in self.pending]
            times += [max(now, e[0]) for e in self.tokenizing]
            if not times:
                break
            now = min(times)
            while True:
                ending = [w for w in self.workers if w.busy and w.end <= now]
                if not ending:
                    break
                min(ending, key=lambda w: (w.start, w.id)).finish_pass()
            while self.routed < len(self.created) and self.created[self.routed].arrival <= now:
                self.route(self.created[self.routed])
                self.routed += 1
            # session turns due by now, in (arrival, index) order
            due = sorted(
                (r for r in self.pending if r.arrival <= now), key=lambda r: (r.arrival, r.idx)
            )
            self.pending = [r for r in self.pending if r.arrival > now]
            for r in due:
                self.route(r)
            self.release_tokenized(now)
            for w in self.workers:
                if not w.busy and w.has_work():
                    w.start_pass(now)
        return self
