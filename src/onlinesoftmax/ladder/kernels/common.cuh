// common.cuh -- the seeds' ladder's shared device helpers (fp32): warp and block reductions, (m, d) merges.
// The state's guard itself is ../../state.cuh, shared with the production engine. Knows nothing of torch.
#pragma once

#include "../../state.cuh"

// ---- plain warp reductions (safe softmax, Harris K6) -----------------------------------------

// Lane 0 ends with the result (seed 001 §1.3: five SHFL.DOWN steps).
__device__ __forceinline__ float warp_reduce_sum(float v) {
#pragma unroll
    for (int off = OS_WARP / 2; off > 0; off >>= 1) v += __shfl_down_sync(OS_FULL_MASK, v, off);
    return v;
}

__device__ __forceinline__ float warp_reduce_max(float v) {
#pragma unroll
    for (int off = OS_WARP / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_down_sync(OS_FULL_MASK, v, off));
    return v;
}

// Every lane ends with the result.
__device__ __forceinline__ float warp_allreduce_sum(float v) {
#pragma unroll
    for (int off = OS_WARP / 2; off > 0; off >>= 1) v += __shfl_xor_sync(OS_FULL_MASK, v, off);
    return v;
}

__device__ __forceinline__ float warp_allreduce_max(float v) {
#pragma unroll
    for (int off = OS_WARP / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(OS_FULL_MASK, v, off));
    return v;
}

// ---- (m, d) merges ---------------------------------------------------------------------------

// (m, d) <- (m, d) (+) (m2, d2), with the -inf guard.
__device__ __forceinline__ void md_merge(float& m, float& d, float m2, float d2) {
    const float mn = fmaxf(m, m2);
    const float s = os_safe_shift(mn);
    d = d * expf(m - s) + d2 * expf(m2 - s);
    m = mn;
}

// (m, d) <- (m, d) (+) (x, 1): the per-element online recurrence of seed 000 §1.
__device__ __forceinline__ void md_update(float& m, float& d, float x) { md_merge(m, d, x, 1.0f); }

// (m, d) <- (m, d) (+) state(v.x, v.y, v.z, v.w): the max of the four first, then one rescale
// (5 exps per 4 elements instead of 8).
__device__ __forceinline__ void md_update4(float& m, float& d, float4 v) {
    const float mn = fmaxf(fmaxf(m, fmaxf(v.x, v.y)), fmaxf(v.z, v.w));
    const float s = os_safe_shift(mn);
    d = d * expf(m - s) + ((expf(v.x - s) + expf(v.y - s)) + (expf(v.z - s) + expf(v.w - s)));
    m = mn;
}

// Butterfly merge over a warp: every lane ends with the warp's (m, d).
__device__ __forceinline__ void warp_md_merge(float& m, float& d) {
#pragma unroll
    for (int off = OS_WARP / 2; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(OS_FULL_MASK, m, off);
        const float d2 = __shfl_xor_sync(OS_FULL_MASK, d, off);
        md_merge(m, d, m2, d2);
    }
}

// Block merge: warps merge by shuffles, lane 0 of each warp parks its state in shared memory,
// then every warp merges the NWARPS parked states (redundantly, so no broadcast step is needed).
// Every thread returns with the block's (m, d). `sm`/`sd` hold at least NWARPS floats.
// Callers that reuse sm/sd (grid-stride loops) must __syncthreads() before the next call.
template <int NWARPS>
__device__ __forceinline__ void block_md_merge(float& m, float& d, float* sm, float* sd) {
    static_assert(NWARPS >= 1 && NWARPS <= 32, "1..32 warps");
    const int lane = threadIdx.x % OS_WARP;
    const int wid = threadIdx.x / OS_WARP;
    warp_md_merge(m, d);
    if (NWARPS == 1) return;
    if (lane == 0) {
        sm[wid] = m;
        sd[wid] = d;
    }
    __syncthreads();
    // Lanes past NWARPS hold the identity (-inf, 0); the guard keeps merging them NaN-free
    // (seed 002 §4.3 meets exactly this NaN without it).
    m = lane < NWARPS ? sm[lane] : OS_NEG_INF;
    d = lane < NWARPS ? sd[lane] : 0.0f;
    warp_md_merge(m, d);
}

// The same block merge evaluated as one n-ary merge per level instead of a pairwise tree:
//   M = max_i m_i (shuffles, no exp), then d = sum_i d_i * exp(m_i - s), s = M or 0 if M = -inf.
// Equal to folding the states pairwise (the merge is associative), but one exp per thread per
// level instead of five: V3 uses it, since its per-element work is already small.
template <int NWARPS>
__device__ __forceinline__ void block_md_merge_nary(float& m, float& d, float* sm, float* sd) {
    static_assert(NWARPS >= 1 && NWARPS <= 32, "1..32 warps");
    const int lane = threadIdx.x % OS_WARP;
    const int wid = threadIdx.x / OS_WARP;
    float mw = warp_allreduce_max(m);
    d = warp_allreduce_sum(d * expf(m - os_safe_shift(mw)));
    m = mw;
    if (NWARPS == 1) return;
    if (lane == 0) {
        sm[wid] = m;
        sd[wid] = d;
    }
    __syncthreads();
    const float mi = lane < NWARPS ? sm[lane] : OS_NEG_INF;
    const float di = lane < NWARPS ? sd[lane] : 0.0f;
    m = warp_allreduce_max(mi);
    d = warp_allreduce_sum(di * expf(mi - os_safe_shift(m)));
}

