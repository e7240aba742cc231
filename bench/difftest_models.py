"""The model sets of the differential test's spaces (bench/difftest_space.py): which models each
space draws, their parallel splits, and the per-model limits the sampler keeps to."""

from __future__ import annotations

# the model-family space (--space models): the MoE families priced since space 9
MODEL_SPACE_SPLITS = {
    "mistralai/Mixtral-8x7B-v0.1": [
        (4, 1, 1, 4, 1),
        (2, 1, 1, 2, 1),
        (8, 1, 1, 8, 1),
        (1, 4, 1, 4, 1),
        (2, 2, 1, 4, 1),
        (1, 8, 1, 8, 1),
        (2, 1, 2, 1, 1),
    ],
    "mistralai/Mixtral-8x22B-v0.1": [(8, 1, 1, 8, 1), (4, 1, 1, 4, 1), (4, 2, 1, 8, 1)],
    "MiniMaxAI/MiniMax-M2.5": [
        (4, 1, 1, 4, 1),
        (8, 1, 1, 8, 1),
        (1, 8, 1, 8, 1),
        (2, 2, 1, 4, 1),
        (4, 2, 1, 8, 1),
    ],
    "zai-org/GLM-5-FP8": [(1, 8, 1, 8, 1), (2, 4, 1, 8, 1), (8, 1, 1, 8, 1), (4, 2, 1, 8, 1)],
    "moonshotai/Kimi-K2-Instruct": [
        (1, 8, 1, 8, 1),
        (2, 4, 1, 8, 1),
        (8, 1, 1, 8, 1),
        (4, 2, 1, 8, 1),
    ],
}
MODEL_SPACE_SPLITS["openai/gpt-oss-120b"] = [
    (4, 1, 1, 4, 1),
    (2, 1, 1, 2, 1),
    (8, 1, 1, 8, 1),
    (1, 1, 1, 1, 1),
    (1, 4, 1, 4, 1),
    (2, 2, 1, 4, 1),
    (1, 8, 1, 8, 1),
]
MODEL_SPACE_SPLITS["openai/gpt-oss-20b"] = [
    (1, 1, 1, 1, 1),
    (2, 1, 1, 2, 1),
    (4, 1, 1, 4, 1),
    (1, 2, 1, 2, 1),
    (2, 2, 1, 4, 1),
]
MODEL_SPACE_SPLITS["meta-llama/Llama-4-Scout-17B-16E-Instruct"] = [
    (4, 1, 1, 4, 1),
    (2, 1, 1, 2, 1),
    (8, 1, 1, 8, 1),
    (1, 4, 1, 4, 1),
    (2, 2, 1, 4, 1),
    (1, 8, 1, 8, 1),
]
MODEL_SPACE_SPLITS["meta-llama/Llama-4-Maverick-17B-128E-Instruct"] = [
    (8, 1, 1, 8, 1),
    (1, 8, 1, 8, 1),
    (2, 4, 1, 8, 1),
    (4, 2, 1, 8, 1),
]
# Kimi-K2.5 (int4 experts) and its NVFP4 export, GLM-5.1: the splits of their base models
MODEL_SPACE_SPLITS["moonshotai/Kimi-K2.5"] = MODEL_SPACE_SPLITS["moonshotai/Kimi-K2-Instruct"]
MODEL_SPACE_SPLITS["nvidia/Kimi-K2.5-NVFP4"] = MODEL_SPACE_SPLITS["moonshotai/Kimi-K2-Instruct"]
MODEL_SPACE_SPLITS["zai-org/GLM-5.1-FP8"] = MODEL_SPACE_SPLITS["zai-org/GLM-5-FP8"]
MODEL_SPACE_SPLITS["nvidia/GLM-5-NVFP4"] = MODEL_SPACE_SPLITS["zai-org/GLM-5-FP8"]
MODEL_SPACE_SPLITS["nvidia/DeepSeek-V3.2-NVFP4"] = MODEL_SPACE_SPLITS["zai-org/GLM-5-FP8"]
MODEL_SPACE_SPLITS["zai-org/GLM-5.2-FP8"] = MODEL_SPACE_SPLITS["zai-org/GLM-5-FP8"]
MODEL_SPACE_SPLITS["nvidia/GLM-5.3-NVFP4"] = MODEL_SPACE_SPLITS["zai-org/GLM-5-FP8"]
MODEL_SPACES = {
    "default": {
        "Qwen/Qwen3-0.6B": 0.12,
        "Qwen/Qwen3-8B": 0.22,
        "Qwen/Qwen3-32B": 0.26,
        "Qwen/Qwen3-30B-A3B": 0.12,
        "Qwen/Qwen3-235B-A22B": 0.07,
        "deepseek-ai/DeepSeek-V3": 0.08,
        "deepseek-ai/DeepSeek-R1": 0.04,
        "deepseek-ai/DeepSeek-V3.2": 0.09,
    },
    "models": {
        "mistralai/Mixtral-8x7B-v0.1": 0.35,
        "mistralai/Mixtral-8x22B-v0.1": 0.15,
        "MiniMaxAI/MiniMax-M2.5": 0.3,
        "moonshotai/Kimi-K2-Instruct": 0.12,
        "zai-org/GLM-5-FP8": 0.12,
        "zai-org/GLM-5.1-FP8": 0.05,
        "moonshotai/Kimi-K2.5": 0.12,
        "nvidia/Kimi-K2.5-NVFP4": 0.08,
        "nvidia/GLM-5-NVFP4": 0.1,
        "nvidia/DeepSeek-V3.2-NVFP4": 0.15,
        "zai-org/GLM-5.2-FP8": 0.12,
        "nvidia/GLM-5.3-NVFP4": 0.08,
        "openai/gpt-oss-120b": 0.3,
        "openai/gpt-oss-20b": 0.15,
        "meta-llama/Llama-4-Scout-17B-16E-Instruct": 0.2,
        "meta-llama/Llama-4-Maverick-17B-128E-Instruct": 0.12,
    },
}
MODEL_SPACES["sessions"] = MODEL_SPACES["default"]  # the default set, every case sessions
MLA_MODELS = (
    "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1",
    "deepseek-ai/DeepSeek-V3.2",
    "moonshotai/Kimi-K2-Instruct",
    "zai-org/GLM-5-FP8",
    "zai-org/GLM-5.1-FP8",
    "moonshotai/Kimi-K2.5",
    "nvidia/Kimi-K2.5-NVFP4",
    "nvidia/GLM-5-NVFP4",
    "nvidia/DeepSeek-V3.2-NVFP4",
    "zai-org/GLM-5.2-FP8",
    "nvidia/GLM-5.3-NVFP4",
)
"""MLA models: fp8_block GPUs only, no quantized variants drawn (a documented refusal)."""
FP8_BLOCK_MODELS = (*MLA_MODELS, "MiniMaxAI/MiniMax-M2.5")
"""Block-fp8 checkpoints: only the GPUs whose tables hold fp8_block GEMMs."""
VLLM_ONLY_MODELS = ("moonshotai/Kimi-K2.5",)
"""Models priced on vLLM only, drawn with backend vllm (TRT-LLM has no int4 expert rows)."""


def empirical_family(model: str) -> bool:
    """Dense and GQA MoE models without sliding windows (not Llama-4: its chunked layers)."""
    return model not in MLA_MODELS and not any(m in model for m in ("gpt-oss", "Llama-4"))


# (KV bytes of one token in one layer at bf16, layers) per model: the rough per-rank token size
# a sampled `bytes` capacity is given (difftest_space._kv_bytes; others: DeepSeek's MLA latent)
KV_SHAPES = {
    "Qwen/Qwen3-0.6B": (8 * 128 * 2 * 2, 28),
    "Qwen/Qwen3-8B": (8 * 128 * 2 * 2, 36),
    "Qwen/Qwen3-32B": (8 * 128 * 2 * 2, 64),
    "Qwen/Qwen3-30B-A3B": (4 * 128 * 2 * 2, 48),
    "Qwen/Qwen3-235B-A22B": (4 * 128 * 2 * 2, 94),
    "mistralai/Mixtral-8x7B-v0.1": (8 * 128 * 2 * 2, 32),
    "mistralai/Mixtral-8x22B-v0.1": (8 * 128 * 2 * 2, 56),
    "MiniMaxAI/MiniMax-M2.5": (8 * 128 * 2 * 2, 62),
    "openai/gpt-oss-120b": (8 * 64 * 2 * 2, 36),
    "openai/gpt-oss-20b": (8 * 64 * 2 * 2, 24),
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": (8 * 128 * 2 * 2, 48),
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": (8 * 128 * 2 * 2, 48),
}
