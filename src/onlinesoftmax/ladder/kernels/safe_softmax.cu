// safe_softmax.cu -- safe (max-shifted) softmax, fp32, rows of length N (seed 003 kernel1..4, seed 001 exp 2).
//
// safe_k1           one thread per row (seed 003 kernel1): max loop, exp+sum loop writing y, divide loop
// safe_k2           one block per row, per-thread partials reduced through a shared-memory tree (kernel2)
// safe_k3           one warp (32 threads) per row, __shfl_down_sync reductions, lane 0 broadcast (kernel3)
// safe_k4           warp shuffles + inter-warp reduction through 2*warps floats of shared memory (kernel4)
// pass1_row_max     3-pass, kernel 1 of 3 (seed 001 exp 2): row max -> row_max[M]
// pass2_row_sum     3-pass, kernel 2 of 3: sum exp(x - max) -> row_sum[M]
// pass3_normalize   3-pass, kernel 3 of 3: y = exp(x - max) / sum
//
// Launch shapes (host side, ladder/cuda.py): safe_k1 256 threads/block, grid ceil(M/256);
// safe_k2 and safe_k4 512 threads/block (seed 003's benchmark block size), grid M; safe_k2 takes
// 512 floats of dynamic shared memory; safe_k3 32 threads, grid M; the 3-pass kernels 256 threads,
// grid M (seed 001). Kernels 1..4 keep seed 003's memory traffic: y is written with exp(x - max),
// then re-read for the sum and re-read/re-written for the normalisation.
//
// Deviations from the seeds, for the semantics every variant must meet (reference.py):
// - the max shift is 0 for an all -inf row (exp(-inf - -inf) would be NaN) and 1/sum is 0 for
//   sum == 0, so such a row gives 0 (os_safe_shift / os_safe_inv in common.cuh);
// - expf, not __expf (seed 001 uses the approximate one; its error grows with |x - max|);
// - identity -inf, not -FLT_MAX (a row of -inf must not look like a row of -FLT_MAX);
// - 64-bit row offsets; seed 003's `out /= sum` becomes `out *= 1/sum`.
// Signatures: (const float* x, float* y, int M, int N), 3-pass as listed below.
#include "common.cuh"

__global__ void __launch_bounds__(1024) safe_k1(const float* __restrict__ inp, float* __restrict__ out, int M, int N) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;
    const float* x = inp + (size_t)row * N;
    float* y = out + (size_t)row * N;
    float maxval = OS_NEG_INF;
    for (int j = 0; j < N; j++) maxval = fmaxf(maxval, x[j]);
    const float shift = os_safe_shift(maxval);
    float sum = 0.0f;
    for (int j = 0; j < N; j++) {
        const float e = expf(x[j] - shift);
        y[j] = e;
        sum += e;
    }
    const float inv = os_safe_inv(sum);
    for (int j = 0; j < N; j++) y[j] *= inv;
}

// Block-wide tree reductions through shared memory; blockDim.x a power of 2 (seed 003 kernel2).
__device__ __forceinline__ float smem_tree_max(float* shared, float v) {
    const int tid = threadIdx.x;
    shared[tid] = v;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride >= 1; stride /= 2) {
        if (tid < stride) shared[tid] = fmaxf(shared[tid], shared[tid + stride]);
        __syncthreads();
    }
    const float r = shared[0];
    __syncthreads();  // shared[] is reused by the next reduction
    return r;
}

__device__ __forceinline__ float smem_tree_sum(float* shared, float v) {
    const int tid = threadIdx.x;
    shared[tid] = v;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride >= 1; stride /= 2) {
        if (tid < stride) shared[tid] += shared[tid + stride];
        __syncthreads();
    }
    const float r = shared[0];
    __syncthreads();
    return r;
}

__global__ void __launch_bounds__(1024) safe_k2(const float* __restrict__ inp, float* __restrict__ out, int M, int N) {
    extern __shared__ float shared[];  // blockDim.x floats
    const int tid = threadIdx.x, bs = blockDim.x;
    const float* x = inp + (size_t)blockIdx.x * N;
    float* y = out + (size_t)blockIdx.x * N;
    float maxval = OS_NEG_INF;
    for (int i = tid; i < N; i += bs) maxval = fmaxf(maxval, x[i]);
    const float shift = os_safe_shift(smem_tree_max(shared, maxval));
    for (int i = tid; i < N; i += bs) y[i] = expf(x[i] - shift);
    float sumval = 0.0f;
    for (int i = tid; i < N; i += bs) sumval += y[i];  // each thread re-reads what it wrote
    const float inv = os_safe_inv(smem_tree_sum(shared, sumval));
    for (int i = tid; i < N; i += bs) y[i] *= inv;
}

__global__ void __launch_bounds__(32) safe_k3(const float* __restrict__ inp, float* __restrict__ out, int M, int N) {
    const int tid = threadIdx.x;  // blockDim.x == 32
    const float* x = inp + (size_t)blockIdx.x * N;
    float* y = out + (size_t)blockIdx.x * N;
    float maxval = OS_NEG_INF;
    for (int i = tid; i < N; i += OS_WARP) maxval = fmaxf(maxval, x[i]);
    maxval = warp_reduce_max(maxval);
    const float shift = os_safe_shift(__shfl_sync(OS_FULL_MASK, maxval, 0));
    for (int i = tid; i < N; i += OS_WARP) y[i] = expf(x[i] - shift);
    float sumval = 0.0f;
    for (int i = tid; i < N; i += OS_WARP) sumval += y[i];
    sumval = warp_reduce_sum(sumval);
    const float inv = os_safe_inv(__shfl_sync(OS_FULL_MASK, sumval, 0));
    for (int i = tid; i < N; i += OS_WARP) y[i] *= inv;
}

__global__ void __launch_bounds__(1024) safe_k4(const float* __restrict__ inp, float* __restrict__ out, int M, int N) {
    __shared__ float maxvals[32];
    __shared__ float sumvals[32];
    const int tid = threadIdx.x, bs = blockDim.x;
    const int warp_id = tid / OS_WARP, lane = tid % OS_WARP, warps = bs / OS_WARP;
    const float* x = inp + (size_t)blockIdx.x * N;
    float* y = out + (size_t)blockIdx.x * N;

    float maxval = OS_NEG_INF;
    for (int i = tid; i < N; i += bs) maxval = fmaxf(maxval, x[i]);
    maxval = warp_reduce_max(maxval);
    if (lane == 0) maxvals[warp_id] = maxval;
    __syncthreads();
    if (tid == 0) {  // inter-warp reduction by one thread, as in seed 003
        float v = maxvals[0];
        for (int w = 1; w < warps; w++) v = fmaxf(v, maxvals[w]);
        maxvals[0] = v;
    }
    __syncthreads();
    const float shift = os_safe_shift(maxvals[0]);

    for (int i = tid; i < N; i += bs) y[i] = expf(x[i] - shift);
    float sumval = 0.0f;
    for (int i = tid; i < N; i += bs) sumval += y[i];
    sumval = warp_reduce_sum(sumval);
    if (lane == 0) sumvals[warp_id] = sumval;
    __syncthreads();
    if (tid == 0) {
        float v = sumvals[0];
        for (int w = 1; w < warps; w++) v += sumvals[w];
        sumvals[0] = v;
    }
    __syncthreads();
    const float inv = os_safe_inv(sumvals[0]);
    for (int i = tid; i < N; i += bs) y[i] *= inv;
}

// ---- 3-pass: three separate kernels, two M-length buffers between them (seed 001 exp 2) -------

// Block-wide max / sum: warp shuffles, one smem slot per warp, warp 0 finishes; result in thread 0.
template <bool IS_MAX>
__device__ __forceinline__ float block_reduce_to_thread0(float v) {
    __shared__ float s_warp[32];
    const int lane = threadIdx.x % OS_WARP, wid = threadIdx.x / OS_WARP;
    v = IS_MAX ? warp_reduce_max(v) : warp_reduce_sum(v);
    if (lane == 0) s_warp[wid] = v;
    __syncthreads();
    if (wid == 0) {
        const float ident = IS_MAX ? OS_NEG_INF : 0.0f;
        v = lane < (int)(blockDim.x / OS_WARP) ? s_warp[lane] : ident;
        v = IS_MAX ? warp_reduce_max(v) : warp_reduce_sum(v);
    }
    return v;
}

__global__ void __launch_bounds__(1024) pass1_row_max(const float* __restrict__ input, float* __restrict__ row_max, int M, int N) {
    const int row = blockIdx.x;
    const float* x = input + (size_t)row * N;
    float local_max = OS_NEG_INF;
    for (int col = threadIdx.x; col < N; col += blockDim.x) local_max = fmaxf(local_max, x[col]);
    local_max = block_reduce_to_thread0<true>(local_max);
    if (threadIdx.x == 0) row_max[row] = local_max;
}

__global__ void __launch_bounds__(1024) pass2_row_sum(const float* __restrict__ input, const float* __restrict__ row_max,
                              float* __restrict__ row_sum, int M, int N) {
    const int row = blockIdx.x;
    const float* x = input + (size_t)row * N;
    const float shift = os_safe_shift(row_max[row]);
    float local_sum = 0.0f;
    for (int col = threadIdx.x; col < N; col += blockDim.x) local_sum += expf(x[col] - shift);
    local_sum = block_reduce_to_thread0<false>(local_sum);
    if (threadIdx.x == 0) row_sum[row] = local_sum;
}

__global__ void __launch_bounds__(1024) pass3_normalize(const float* __restrict__ input, const float* __restrict__ row_max,
                                const float* __restrict__ row_sum, float* __restrict__ output, int M, int N) {
    const int row = blockIdx.x;
    const float* x = input + (size_t)row * N;
    float* y = output + (size_t)row * N;
    const float shift = os_safe_shift(row_max[row]);
    const float inv = os_safe_inv(row_sum[row]);
    for (int col = threadIdx.x; col < N; col += blockDim.x) y[col] = expf(x[col] - shift) * inv;
}
