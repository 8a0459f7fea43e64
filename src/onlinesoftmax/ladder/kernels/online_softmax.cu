// online_softmax.cu -- online softmax, fp32, rows of length N (seeds 000 / 002, seed 001 exp 3).
//
// online_v0               one thread per row: online (m, d) recurrence over the row, then a normalising pass
// online_v1               one block (256) per row: per-thread online (m, d), warp-shuffle merge, warp states
//                         merged through shared memory, second pass re-reads x (2 reads + 1 write)
// online_v2               V1 with float4 loads/stores (N % 4 == 0 only: row starts must be 16-byte aligned;
//                         the host refuses other N), the four lanes of a float4 folded as one state
// online_v3<SLOTS>        1-pass: each thread caches SLOTS float4 of the row in registers (fully unrolled,
//                         compile-time indices), all loads issued before any reduction, the cache turned
//                         into exp(x - m_thread) in place, states merged n-ary (max, one rescale, sum);
//                         1 read + 1 write; N <= 1024 * SLOTS, SLOTS in {1, 2, 4, 8, 16}, N % 4 == 0
// online_v3_rtidx<SLOTS>  V3 step for step but with a runtime index into the cache (seed 000 §5): the array
//                         lands in local memory (ptxas reports a stack frame); SLOTS in {2, 4, 8, 16}
//                         (with one slot the index can only be 0 and ptxas keeps the array in registers)
// online_v4<VEC>          V2 (VEC = true, N % 4 == 0) or V1 (VEC = false, any N) over a grid-stride loop on
//                         rows: grid = min(M, 4 * SMs), shared memory reused across rows
//
// All use 256 threads per block except V0 (256 threads/block, one row each, grid ceil(M / 256)).
// Signature of every kernel: (const float* x, float* y, int M, int N); row offsets are 64-bit.
// The (m, d) merge and its -inf guard live in common.cuh; every kernel folds the same state.
#include "common.cuh"

#define OS_BLOCK 256
#define OS_NWARPS (OS_BLOCK / OS_WARP)

__device__ __forceinline__ float4 os_exp_scale4(float4 v, float shift, float inv) {
    return make_float4(expf(v.x - shift) * inv, expf(v.y - shift) * inv, expf(v.z - shift) * inv,
                       expf(v.w - shift) * inv);
}

__global__ void __launch_bounds__(OS_BLOCK) online_v0(const float* __restrict__ inp, float* __restrict__ out, int M, int N) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;
    const float* x = inp + (size_t)row * N;
    float* y = out + (size_t)row * N;
    float m = OS_NEG_INF, d = 0.0f;
    for (int i = 0; i < N; i++) md_update(m, d, x[i]);
    const float shift = os_safe_shift(m), inv = os_safe_inv(d);
    for (int i = 0; i < N; i++) y[i] = expf(x[i] - shift) * inv;
}

__global__ void __launch_bounds__(OS_BLOCK) online_v1(const float* __restrict__ inp, float* __restrict__ out, int M, int N) {
    __shared__ float sm[OS_NWARPS], sd[OS_NWARPS];
    const int tid = threadIdx.x;
    const float* x = inp + (size_t)blockIdx.x * N;
    float* y = out + (size_t)blockIdx.x * N;
    float m = OS_NEG_INF, d = 0.0f;
#pragma unroll 4
    for (int i = tid; i < N; i += OS_BLOCK) md_update(m, d, x[i]);
    block_md_merge<OS_NWARPS>(m, d, sm, sd);
    const float shift = os_safe_shift(m), inv = os_safe_inv(d);
#pragma unroll 4
    for (int i = tid; i < N; i += OS_BLOCK) y[i] = expf(x[i] - shift) * inv;
}

__global__ void __launch_bounds__(OS_BLOCK) online_v2(const float* __restrict__ inp, float* __restrict__ out, int M, int N) {
    __shared__ float sm[OS_NWARPS], sd[OS_NWARPS];
    const int tid = threadIdx.x;
    const float4* x4 = reinterpret_cast<const float4*>(inp + (size_t)blockIdx.x * N);
    float4* y4 = reinterpret_cast<float4*>(out + (size_t)blockIdx.x * N);
    const int N4 = N / 4;  // the host guarantees N % 4 == 0
    float m = OS_NEG_INF, d = 0.0f;
#pragma unroll 4
    for (int i = tid; i < N4; i += OS_BLOCK) md_update4(m, d, x4[i]);
    block_md_merge<OS_NWARPS>(m, d, sm, sd);
    const float shift = os_safe_shift(m), inv = os_safe_inv(d);
#pragma unroll 4
    for (int i = tid; i < N4; i += OS_BLOCK) y4[i] = os_exp_scale4(x4[i], shift, inv);
}

// V3: the row lives in registers between the one read and the one write.
// Per thread: load all SLOTS float4 (independent loads, all in flight), take the thread's max m_t
// over its cache, overwrite the cache with e = exp(x - m_t) and sum it: the thread's state
// (m_t, d_t) in one exp per element. Merge the states across the block (n-ary merge: max by
// shuffles, one rescale per thread, sum by shuffles). Then y = e * exp(m_t - m_row) / d_row: one
// exp per thread, a multiply per element, no second read of x.
// exp(m_t - shift_row) is 0 for a thread that saw only -inf (m_t = -inf), so an empty thread in a
// non-empty row writes 0, and NaN rows stay NaN through 1/d = NaN.
template <int SLOTS>
__global__ void __launch_bounds__(OS_BLOCK) online_v3(const float* __restrict__ inp, float* __restrict__ out, int M, int N) {
    __shared__ float sm[OS_NWARPS], sd[OS_NWARPS];
    const int tid = threadIdx.x;
    const float4* x4 = reinterpret_cast<const float4*>(inp + (size_t)blockIdx.x * N);
    float4* y4 = reinterpret_cast<float4*>(out + (size_t)blockIdx.x * N);
    const int N4 = N / 4;  // the host guarantees N % 4 == 0 and N4 <= SLOTS * OS_BLOCK
    const float ninf = OS_NEG_INF;

    float4 c[SLOTS];
#pragma unroll
    for (int k = 0; k < SLOTS; k++) {
        const int i = tid + k * OS_BLOCK;
        c[k] = i < N4 ? x4[i] : make_float4(ninf, ninf, ninf, ninf);
    }
    float mt = ninf;
#pragma unroll
    for (int k = 0; k < SLOTS; k++) mt = fmaxf(mt, fmaxf(fmaxf(c[k].x, c[k].y), fmaxf(c[k].z, c[k].w)));
    const float st = os_safe_shift(mt);
    float d = 0.0f;
#pragma unroll
    for (int k = 0; k < SLOTS; k++) {
        c[k].x = expf(c[k].x - st);
        c[k].y = expf(c[k].y - st);
        c[k].z = expf(c[k].z - st);
        c[k].w = expf(c[k].w - st);
        d += (c[k].x + c[k].y) + (c[k].z + c[k].w);
    }
    float m = mt;
    block_md_merge_nary<OS_NWARPS>(m, d, sm, sd);
    const float f = expf(mt - os_safe_shift(m)) * os_safe_inv(d);
#pragma unroll
    for (int k = 0; k < SLOTS; k++) {
        const int i = tid + k * OS_BLOCK;
        if (i < N4) y4[i] = make_float4(c[k].x * f, c[k].y * f, c[k].z * f, c[k].w * f);
    }
}

// V3's twin, written as seed 000 §5 first wrote it: cache[count++] with a runtime count. The
// computation is V3's step for step; only the index into the cache is a run-time value, so the
// array cannot live in registers and ptxas puts it on the stack (local memory, L1-cached).
// Kept as the counter-example; correct for the same N.
template <int SLOTS>
__global__ void __launch_bounds__(OS_BLOCK) online_v3_rtidx(const float* __restrict__ inp, float* __restrict__ out, int M, int N) {
    __shared__ float sm[OS_NWARPS], sd[OS_NWARPS];
    const int tid = threadIdx.x;
    const float4* x4 = reinterpret_cast<const float4*>(inp + (size_t)blockIdx.x * N);
    float4* y4 = reinterpret_cast<float4*>(out + (size_t)blockIdx.x * N);
    const int N4 = N / 4;
    float4 cache[SLOTS];
    int count = 0;
    float mt = OS_NEG_INF;
#pragma unroll 1
    for (int i = tid; i < N4; i += OS_BLOCK) {
        const float4 v = x4[i];
        cache[count++] = v;  // runtime index -> local memory
        mt = fmaxf(mt, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    }
    const float st = os_safe_shift(mt);
    float d = 0.0f;
#pragma unroll 1
    for (int k = 0; k < count; k++) {
        float4 e = cache[k];
        e = make_float4(expf(e.x - st), expf(e.y - st), expf(e.z - st), expf(e.w - st));
        cache[k] = e;
        d += (e.x + e.y) + (e.z + e.w);
    }
    float m = mt;
    block_md_merge_nary<OS_NWARPS>(m, d, sm, sd);
    const float f = expf(mt - os_safe_shift(m)) * os_safe_inv(d);
    count = 0;
#pragma unroll 1
    for (int i = tid; i < N4; i += OS_BLOCK) {
        const float4 e = cache[count++];
        y4[i] = make_float4(e.x * f, e.y * f, e.z * f, e.w * f);
    }
}

template <bool VEC>
__global__ void __launch_bounds__(OS_BLOCK) online_v4(const float* __restrict__ inp, float* __restrict__ out, int M, int N) {
    __shared__ float sm[OS_NWARPS], sd[OS_NWARPS];
    const int tid = threadIdx.x;
    for (int row = blockIdx.x; row < M; row += gridDim.x) {
        const float* x = inp + (size_t)row * N;
        float* y = out + (size_t)row * N;
        float m = OS_NEG_INF, d = 0.0f;
        if (VEC) {
            const float4* x4 = reinterpret_cast<const float4*>(x);
            float4* y4 = reinterpret_cast<float4*>(y);
            const int N4 = N / 4;
#pragma unroll 4
            for (int i = tid; i < N4; i += OS_BLOCK) md_update4(m, d, x4[i]);
            block_md_merge<OS_NWARPS>(m, d, sm, sd);
            const float shift = os_safe_shift(m), inv = os_safe_inv(d);
#pragma unroll 4
            for (int i = tid; i < N4; i += OS_BLOCK) y4[i] = os_exp_scale4(x4[i], shift, inv);
        } else {
#pragma unroll 4
            for (int i = tid; i < N; i += OS_BLOCK) md_update(m, d, x[i]);
            block_md_merge<OS_NWARPS>(m, d, sm, sd);
            const float shift = os_safe_shift(m), inv = os_safe_inv(d);
#pragma unroll 4
            for (int i = tid; i < N; i += OS_BLOCK) y[i] = expf(x[i] - shift) * inv;
        }
        __syncthreads();  // sm/sd are rewritten by the next row's merge
    }
}
