"""Where the serving engines' schedulers differ: one rule per question (docs/rules.md 4-9).

The scheduler phases (running.py, admission.py, pass_price.py, pd_handoff.py) ask these rules
instead of testing `KernelParams.backend` themselves, so each phase reads as one algorithm and an
engine's answers are read in one place. A new engine answers every rule here.

All rules are inlined: a test of the backend scalar, the same code the phases had inline.
"""

from aisim.kernels._jit import helper
from aisim.kernels.codes import Backend, Role
from aisim.kernels.units import ceil_div


@helper
def reserves_to_completion(p):
    """Admission (and a P/D destination's reservation) needs the blocks of the request's whole
    prompt + output beside what admitted requests still need to complete (TRT-LLM
    GUARANTEED_NO_EVICT, rules 5.1, 9.3); otherwise the blocks of the known sequence (vLLM)."""
    return p.backend == Backend.TRTLLM


@helper
def preempts_when_full(p):
    """A failed block allocation of a running request preempts the last running one (vLLM,
    rules 4.2). Under a to-completion reservation it cannot fail, so one that does is reported
    as an error (rules 5.3)."""
    return p.backend != Backend.TRTLLM


@helper
def reuses_whole_prompt(p):
    """A prefix hit may cover a whole block-aligned prompt, which then needs no budget and joins
    the decode set at once (TRT-LLM, rules 5.2); vLLM always recomputes the last token."""
    return p.backend == Backend.TRTLLM


@helper
def never_admissible(p, prompt, output_len):
    """A fresh request (below max_model_len) that can never run on this pool and is rejected at
    the head of the queue: TRT-LLM one with no output token to make, vLLM one whose prompt
    alone needs more blocks than the pool holds (rules 4.3, 5.1)."""
    if p.backend == Backend.TRTLLM:
        return output_len <= 0
    return ceil_div(prompt, p.block_size) > p.num_blocks


@helper
def budgets_draft_slots(p):
    """Native MTP: a drafting request's verification slots (1 + nextn) are charged to the token
    budget (vLLM, rules 8.2); TRT-LLM budgets only the known token."""
    return p.backend == Backend.VLLM


@helper
def drafts_from_prefill_pass(p):
    """Native MTP: the pass that completes a prompt already drafts (TRT-LLM, rules 8.2); vLLM
    drafts from the first decode pass on."""
    return p.backend == Backend.TRTLLM


@helper
def mtp_recomputes_last_hit(p):
    """Native MTP: the last cached block of a prefix hit is recomputed, and the hits' actual
    copies must fit before admission (vLLM, rules 8.7)."""
    return p.backend == Backend.VLLM


@helper
def activated_pass_blocked_recomputes(p):
    """P/D decode rank with a destination still waiting for its reservation: activated requests
    are admitted past preempted recomputes, which stay queued (vLLM, rules 9.6)."""
    return p.backend == Backend.VLLM


@helper
def handoff_tokens(p, prompt):
    """Tokens a P/D destination must hold before it can take a request: the prompt (vLLM), the
    prompt and the first token (TRT-LLM, rules 9.3)."""
    if p.backend == Backend.TRTLLM:
        return prompt + 1
    return prompt


@helper
def holds_back_prompt(p, prompt_left, budget):
    """With chunked prefill off, the head of the queue waits while the prompt positions it still
    has to compute (prompt minus its prefix hit) exceed the budget left. Generated positions are
    not held back: a readmission whose prompt fits is admitted and its recompute is chunked by
    the budget. A P/D decode pool never holds back (its recomputes are chunked whole), on both
    engines (rules 4.3, 4.4, 9.6)."""
    return not p.chunked_prefill and p.role != Role.DECODE and prompt_left > budget
