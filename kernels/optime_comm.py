"""Communication lookups: 1-D curves over message elements (timing.md 3.4).

A curve is sorted x (message elements) with latency y (ms). Inside: exact or raw linear.
Outside: utilisation hold on the single nearest boundary point (k_tail = 1):
latency = SOL(query) / (SOL(x_edge) / y_edge).

Mirrors: AISimulate 0.13 perf_interp v2 1-D curve (custom allreduce, NCCL).
"""

from aisim.kernels._jit import helper, kernel


@helper
def allreduce_sol_ms(elements, num_gpus, elem_bytes, link_bw):
    """Ring allreduce roofline, ms: 2 (elements x bytes) (t - 1) / t / intra-node bandwidth."""
    if num_gpus <= 1:
        return 0.0
    return 2.0 * (elements * elem_bytes) * (num_gpus - 1.0) / num_gpus / link_bw * 1000.0


@kernel
def allreduce_latency_ms(elements, x, y, num_gpus, elem_bytes, link_bw):
    """Custom allreduce of `elements` on its curve (x, y); 0 at one GPU."""
    if num_gpus <= 1:
        return 0.0
    n = x.shape[0]
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        if x[mid] < elements:
            lo = mid + 1
        else:
            hi = mid
    if lo < n and x[lo] == elements:
        return y[lo]
    if 0 < lo < n:
        w = (elements - x[lo - 1]) / (x[lo] - x[lo - 1])
        return y[lo - 1] + (y[lo] - y[lo - 1]) * w
    j = 0 if lo == 0 else n - 1
    util = allreduce_sol_ms(x[j], num_gpus, elem_bytes, link_bw) / y[j]
    return allreduce_sol_ms(elements, num_gpus, elem_bytes, link_bw) / util
