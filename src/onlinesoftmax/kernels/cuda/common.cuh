// common.cuh -- shared device helpers for the CUDA ladder (fp32). Knows nothing of torch.
//
// The online-softmax state of a set of values x_i is (m, d):  m = max x_i,  d = sum exp(x_i - m).
//   (m1,d1) (+) (m2,d2) = (M, d1*exp(m1 - s) + d2*exp(m2 - s)),  M = max(m1,m2),
//   s = M, or 0 when M = -inf (the guard: two empty states stay (-inf, 0) instead of NaN).
// Identity (-inf, 0). NaN is not over-guarded: fmaxf ignores NaN, so exp(NaN - m) poisons d and
// the whole row becomes NaN; a +inf gives exp(inf - inf) = NaN the same way (as torch does).
// Every exponent is exp(x - m) with x <= m, never exp(x) * exp(-m): no overflow near FLT_MAX.
//
// Included textually by the Python runtime (runtime/nvrtc.py inlines `#include "common.cuh"`),
// so it must not include anything itself: NVRTC without a toolkit has no <cmath>/<cfloat>.
#pragma once

#define OS_FULL_MASK 0xffffffffu
#define OS_WARP 32
// -inf without <math.h> (NVRTC has no INFINITY macro).
#define OS_NEG_INF __int_as_float(0xff800000)

// The max to subtract: m itself, or 0 when m = -inf (the guard, state.py:safe_shift).
__device__ __forceinline__ float os_safe_shift(float m) { return m == OS_NEG_INF ? 0.0f : m; }

// 1/d, or 0 for an empty row (d == 0: every entry -inf) so the row's output is 0, not NaN.
// d = NaN (a NaN or +inf in the row) stays NaN.
__device__ __forceinline__ float os_safe_inv(float d) { return d == 0.0f ? 0.0f : 1.0f / d; }

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

