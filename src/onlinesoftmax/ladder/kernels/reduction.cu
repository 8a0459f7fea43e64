// reduction.cu -- Mark Harris' parallel sum reduction ladder (seed 001 §1.2, experiment 1), fp32.
//
// reduce_k0    interleaved addressing, `tid % (2*s)` picks the active threads: divergent warps, modulo
// reduce_k1    interleaved addressing with a strided index (index = 2*s*tid): no divergence, bank conflicts
// reduce_k2    sequential addressing (s = blockDim/2 .. 1, tid < s): no divergence, no bank conflicts
// reduce_k3    K2 + first add during the global load: each block reduces 2*blockDim elements
// reduce_k4    K3 + the last warp unrolled on volatile shared memory (no __syncthreads for s < 32)
// reduce_k5    K4 fully unrolled with the block size as a template parameter (reduce_k5<256>)
// reduce_k6    warp shuffle (__shfl_down_sync): grid-stride accumulation in registers, 5 SHFL per warp,
//              one shared-memory slot per warp; launched on a capped grid (Harris' "multiple adds per thread")
//
// Every kernel writes one partial sum per block to out[blockIdx.x]. The host finishes by launching
// the SAME kernel again on the partials until a single value remains (written straight into the
// caller's output): 32M floats -> 131072 -> 512 -> 2 -> 1 for K0..K2 at 256 threads. No atomics, so
// the result is deterministic. The partials' traffic is counted in the variants' bytes model.
//
// K0..K4 take their shared memory dynamically (blockDim.x floats); blockDim.x must be a power of 2
// (the host uses 256). K5 and K6 use static shared memory.
// Signature of every kernel: (const float* in, float* out, long long n).
#include "common.cuh"

__global__ void reduce_k0(const float* __restrict__ in, float* __restrict__ out, long long n) {
    extern __shared__ float sdata[];
    const unsigned tid = threadIdx.x;
    const long long i = (long long)blockIdx.x * blockDim.x + tid;
    sdata[tid] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned s = 1; s < blockDim.x; s *= 2) {
        if (tid % (2 * s) == 0) sdata[tid] += sdata[tid + s];  // divergent: every other thread idles
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

__global__ void reduce_k1(const float* __restrict__ in, float* __restrict__ out, long long n) {
    extern __shared__ float sdata[];
    const unsigned tid = threadIdx.x;
    const long long i = (long long)blockIdx.x * blockDim.x + tid;
    sdata[tid] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned s = 1; s < blockDim.x; s *= 2) {
        const unsigned index = 2 * s * tid;  // active threads contiguous, but strided smem: bank conflicts
        if (index < blockDim.x) sdata[index] += sdata[index + s];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

__global__ void reduce_k2(const float* __restrict__ in, float* __restrict__ out, long long n) {
    extern __shared__ float sdata[];
    const unsigned tid = threadIdx.x;
    const long long i = (long long)blockIdx.x * blockDim.x + tid;
    sdata[tid] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];  // threads 0..s-1, consecutive addresses
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

// First add during load: a block covers 2*blockDim.x elements.
__device__ __forceinline__ float load_pair(const float* __restrict__ in, long long n) {
    const long long i = (long long)blockIdx.x * (blockDim.x * 2) + threadIdx.x;
    float v = i < n ? in[i] : 0.0f;
    if (i + blockDim.x < n) v += in[i + blockDim.x];
    return v;
}

__global__ void reduce_k3(const float* __restrict__ in, float* __restrict__ out, long long n) {
    extern __shared__ float sdata[];
    const unsigned tid = threadIdx.x;
    sdata[tid] = load_pair(in, n);
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

// The last warp without __syncthreads. Harris' original relies on warp lock-step; since Volta
// (independent thread scheduling) that is not guaranteed, so each step reads, __syncwarp()s,
// then writes. The shared memory stays volatile as in the original. Needs blockDim.x >= 64.
__device__ __forceinline__ void warp_tail(volatile float* sdata, unsigned tid) {
    float v = sdata[tid];
#pragma unroll
    for (unsigned s = 32; s > 0; s >>= 1) {
        v += sdata[tid + s];
        __syncwarp();
        sdata[tid] = v;
        __syncwarp();
    }
}

__global__ void reduce_k4(const float* __restrict__ in, float* __restrict__ out, long long n) {
    extern __shared__ float sdata[];
    const unsigned tid = threadIdx.x;
    sdata[tid] = load_pair(in, n);
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 32; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid < 32) warp_tail(sdata, tid);
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

template <unsigned BLOCK>
__global__ void __launch_bounds__(BLOCK) reduce_k5(const float* __restrict__ in, float* __restrict__ out,
                                                   long long n) {
    static_assert(BLOCK >= 64 && BLOCK <= 1024 && (BLOCK & (BLOCK - 1)) == 0, "power of 2 in [64, 1024]");
    __shared__ float sdata[BLOCK];
    const unsigned tid = threadIdx.x;
    sdata[tid] = load_pair(in, n);
    __syncthreads();
    if (BLOCK >= 1024) { if (tid < 512) sdata[tid] += sdata[tid + 512]; __syncthreads(); }
    if (BLOCK >= 512) { if (tid < 256) sdata[tid] += sdata[tid + 256]; __syncthreads(); }
    if (BLOCK >= 256) { if (tid < 128) sdata[tid] += sdata[tid + 128]; __syncthreads(); }
    if (BLOCK >= 128) { if (tid < 64) sdata[tid] += sdata[tid + 64]; __syncthreads(); }
    if (tid < 32) warp_tail(sdata, tid);
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

// Warp shuffle + many elements per thread. Grid-stride over the array with 4 independent loads
// in flight per iteration, then 5 SHFL.DOWN per warp, one smem slot per warp, warp 0 finishes.
__global__ void __launch_bounds__(1024) reduce_k6(const float* __restrict__ in, float* __restrict__ out,
                                                  long long n) {
    __shared__ float warp_sums[32];
    const unsigned tid = threadIdx.x;
    const unsigned lane = tid % OS_WARP, wid = tid / OS_WARP;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + tid;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    for (; i + 3 * stride < n; i += 4 * stride) {
        a0 += in[i];
        a1 += in[i + stride];
        a2 += in[i + 2 * stride];
        a3 += in[i + 3 * stride];
    }
    for (; i < n; i += stride) a0 += in[i];
    float v = (a0 + a1) + (a2 + a3);
    v = warp_reduce_sum(v);
    if (lane == 0) warp_sums[wid] = v;
    __syncthreads();
    if (wid == 0) {
        v = lane < blockDim.x / OS_WARP ? warp_sums[lane] : 0.0f;
        v = warp_reduce_sum(v);
        if (lane == 0) out[blockIdx.x] = v;
    }
}
