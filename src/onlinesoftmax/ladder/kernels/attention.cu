// attention.cu -- the seeds' Stage 7 (seed 001 §5.1-5.2 and stage table row 7, seed 000 §8, seed 002 §8.2):
// attention forward O = softmax(scale * Q K^T) V, Q, K, V, O of shape [BH, S, D] contiguous, bf16 (BF16 = true) or
// fp16 in and out, fp32 arithmetic. A row with no visible key gives 0 (the -inf guard of state.cuh).
//
// attn_a0_scores<BF16>        A0 pass 1: S = scale * Q K^T written to HBM in fp32 by a plain tiled GEMM (16 x 16
//                             shared-memory tiles, one output per thread, CUDA cores); causal: -inf above the diagonal.
//                             Pass 2 is the ladder's own online_v4 softmax (online_softmax.cu) over the S x S rows
// attn_a0_pv<BF16>            A0 pass 3: O = P V, P read back from HBM in fp32 (the same plain tiled GEMM)
// attn_a1<D, BF16>            A1, online per query row: one warp per query row, K and V streamed from global memory
//                             32 keys per step, (m, d) and the output row rescaled in registers; S never stored;
//                             CUDA cores only
// attn_a2<D, BF16, CAUSAL>    A2, tiled FlashAttention-2: one CTA of 4 warps per 64-row query tile, Q fragments in
//                             registers (ldmatrix), 64-key K/V tiles double-buffered (cp.async) in XOR-swizzled shared
//                             memory, S = Q K^T and O += P V on tensor cores (mma.sync m16n8k16, fp32 accumulate),
//                             P kept in registers as the A operand, online rescale with exp2; causal: tile skipping
//                             plus a masked diagonal tile, query tiles issued longest first
//
// D is 64 or 128 (the host refuses others); any S >= 1 (tails masked, out-of-range rows zero-filled, never stored).
// NVRTC compiles without headers: bf16/fp16 travel as 16-bit integers, converted with PTX cvt (no cuda_bf16.h).
#include "common.cuh"

// ---- conversions -----------------------------------------------------------------------------

template <bool BF16>
__device__ __forceinline__ float2 att_unpack(unsigned w) {  // .x = the element at the lower address
    if constexpr (BF16) {
        return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
    } else {
        float a, b;
        asm("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;}"
            : "=f"(a), "=f"(b) : "r"(w));
        return make_float2(a, b);
    }
}

template <bool BF16>
__device__ __forceinline__ float att_to_f32(unsigned short h) {
    if constexpr (BF16) {
        return __uint_as_float(((unsigned)h) << 16);
    } else {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
        return f;
    }
}

template <bool BF16>
__device__ __forceinline__ unsigned short att_from_f32(float f) {
    unsigned short h;
    if constexpr (BF16) asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    else asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

template <bool BF16>
__device__ __forceinline__ unsigned att_pack(float lo, float hi) {  // lo at the lower address
    unsigned w;
    if constexpr (BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
}

__device__ __forceinline__ float att_ex2(float x) {  // 2^x; ex2(-inf) = 0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// ---- A0: materialised scores -----------------------------------------------------------------

#define A0_TILE 16

// S[bh, i, j] = scale * sum_d Q[bh, i, d] K[bh, j, d]  (fp32); grid (S/16, S/16, BH), block 256.
template <bool BF16>
__global__ void __launch_bounds__(A0_TILE * A0_TILE)
attn_a0_scores(const unsigned short* __restrict__ Q, const unsigned short* __restrict__ K, float* __restrict__ Sc,
               int S, int D, float scale, int causal) {
    __shared__ float qs[A0_TILE][A0_TILE + 1];
    __shared__ float ks[A0_TILE][A0_TILE + 1];
    const int tx = threadIdx.x % A0_TILE, ty = threadIdx.x / A0_TILE;
    const size_t base = (size_t)blockIdx.z * S * D;
    const int i = blockIdx.y * A0_TILE + ty;  // this thread's query row (output row, and the Q row it loads)
    const int kr = blockIdx.x * A0_TILE + ty;  // the K row it loads
    const int j = blockIdx.x * A0_TILE + tx;  // its key (output column)
    float acc = 0.0f;
    for (int d0 = 0; d0 < D; d0 += A0_TILE) {  // D % 16 == 0
        qs[ty][tx] = i < S ? att_to_f32<BF16>(Q[base + (size_t)i * D + d0 + tx]) : 0.0f;
        ks[ty][tx] = kr < S ? att_to_f32<BF16>(K[base + (size_t)kr * D + d0 + tx]) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int e = 0; e < A0_TILE; e++) acc += qs[ty][e] * ks[tx][e];
        __syncthreads();
    }
    if (i < S && j < S) Sc[((size_t)blockIdx.z * S + i) * S + j] = (causal && j > i) ? OS_NEG_INF : acc * scale;
}

// O[bh, i, n] = sum_j P[bh, i, j] V[bh, j, n]; grid (D/16, S/16, BH), block 256.
template <bool BF16>
__global__ void __launch_bounds__(A0_TILE * A0_TILE)
attn_a0_pv(const float* __restrict__ P, const unsigned short* __restrict__ V, unsigned short* __restrict__ O,
           int S, int D) {
    __shared__ float ps[A0_TILE][A0_TILE + 1];
    __shared__ float vs[A0_TILE][A0_TILE + 1];
    const int tx = threadIdx.x % A0_TILE, ty = threadIdx.x / A0_TILE;
    const size_t base = (size_t)blockIdx.z * S * D;
    const float* p = P + (size_t)blockIdx.z * S * S;
    const int i = blockIdx.y * A0_TILE + ty;
    const int n = blockIdx.x * A0_TILE + tx;
    float acc = 0.0f;
    for (int j0 = 0; j0 < S; j0 += A0_TILE) {
        ps[ty][tx] = (i < S && j0 + tx < S) ? p[(size_t)i * S + j0 + tx] : 0.0f;
        vs[ty][tx] = j0 + ty < S ? att_to_f32<BF16>(V[base + (size_t)(j0 + ty) * D + n]) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int e = 0; e < A0_TILE; e++) acc += ps[ty][e] * vs[e][tx];
        __syncthreads();
    }
    if (i < S) O[base + (size_t)i * D + n] = att_from_f32<BF16>(acc);
}

// ---- A1: online, one warp per query row --------------------------------------------------------

#define A1_WARPS 8

// One step of the transposing butterfly: lanes with bit OFF set keep the upper half of s[0, 2 OFF), the others the
// lower half, each adding its partner's copy of the half it keeps. After OFF = 16, 8, 4, 2, 1, s[0] of lane l is
// the sum over the warp of every lane's s[l]: 32 sums for 31 shuffles (a shuffle per sum and step would be 160).
template <int OFF>
__device__ __forceinline__ void att_butterfly(float* s, int lane) {
    const bool upper = lane & OFF;
#pragma unroll
    for (int i = 0; i < OFF; i++) {
        const float send = upper ? s[i] : s[i + OFF];
        const float keep = upper ? s[i + OFF] : s[i];
        s[i] = keep + __shfl_xor_sync(OS_FULL_MASK, send, OFF);
    }
}

// Lane l owns dims [l * E, l * E + E) of q and of the output row. Per step of 32 keys: each lane forms its partial
// dot with all 32 keys (coalesced K rows), a transposing butterfly leaves lane l with the full score of key j0 + l
// (31 shuffles for 32 sums), the warp's max updates m, O is rescaled once, and each key's p is broadcast for
// O += p_j V[j] (coalesced V rows). d is kept per lane (same m for all lanes) and summed at the end.
// Scores are in log2 units: q is pre-multiplied by scale * log2(e), so p = 2^(s - m).
// grid (ceil(S / 8), BH), block 256.
template <int D, bool BF16>
__global__ void __launch_bounds__(A1_WARPS * OS_WARP, 2)
attn_a1(const unsigned short* __restrict__ Q, const unsigned short* __restrict__ K,
        const unsigned short* __restrict__ V, unsigned short* __restrict__ O, int S, float scale_log2, int causal) {
    constexpr int E = D / OS_WARP;  // 2 or 4 elements per lane
    static_assert(E == 2 || E == 4, "D is 64 or 128");
    const int lane = threadIdx.x % OS_WARP;
    const int row = blockIdx.x * A1_WARPS + threadIdx.x / OS_WARP;
    if (row >= S) return;  // the whole warp
    const size_t base = (size_t)blockIdx.y * S * D;
    const unsigned short* k = K + base + lane * E;
    const unsigned short* v = V + base + lane * E;

    float q[E], o[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        q[e] = att_to_f32<BF16>(Q[base + (size_t)row * D + lane * E + e]) * scale_log2;
        o[e] = 0.0f;
    }
    float m = OS_NEG_INF, dl = 0.0f;
    const int nkeys = causal ? row + 1 : S;
    for (int j0 = 0; j0 < nkeys; j0 += OS_WARP) {
        float s[OS_WARP];
#pragma unroll
        for (int jj = 0; jj < OS_WARP; jj++) {
            const size_t j = (size_t)min(j0 + jj, S - 1);  // clamped: in bounds; masked below
            float a;
            if constexpr (E == 4) {
                const uint2 w = *reinterpret_cast<const uint2*>(k + j * D);
                const float2 x = att_unpack<BF16>(w.x), y = att_unpack<BF16>(w.y);
                a = fmaf(q[0], x.x, fmaf(q[1], x.y, fmaf(q[2], y.x, q[3] * y.y)));
            } else {
                const float2 x = att_unpack<BF16>(*reinterpret_cast<const unsigned*>(k + j * D));
                a = fmaf(q[0], x.x, q[1] * x.y);
            }
            s[jj] = a;
        }
        att_butterfly<16>(s, lane);  // transposing butterfly: lane l ends with the score of key j0 + l in s[0]
        att_butterfly<8>(s, lane);
        att_butterfly<4>(s, lane);
        att_butterfly<2>(s, lane);
        att_butterfly<1>(s, lane);
        const float x = j0 + lane < nkeys ? s[0] : OS_NEG_INF;
        const float mn = fmaxf(m, warp_allreduce_max(x));
        const float sh = os_safe_shift(mn);
        const float alpha = att_ex2(m - sh);
        const float p = att_ex2(x - sh);
        dl = fmaf(dl, alpha, p);
        m = mn;
#pragma unroll
        for (int e = 0; e < E; e++) o[e] *= alpha;
#pragma unroll
        for (int jj = 0; jj < OS_WARP; jj++) {
            const float pj = __shfl_sync(OS_FULL_MASK, p, jj);
            const size_t j = (size_t)min(j0 + jj, S - 1);  // p = 0 past nkeys
            if constexpr (E == 4) {
                const uint2 w = *reinterpret_cast<const uint2*>(v + j * D);
                const float2 x0 = att_unpack<BF16>(w.x), x1 = att_unpack<BF16>(w.y);
                o[0] = fmaf(pj, x0.x, o[0]);
                o[1] = fmaf(pj, x0.y, o[1]);
                o[2] = fmaf(pj, x1.x, o[2]);
                o[3] = fmaf(pj, x1.y, o[3]);
            } else {
                const float2 x0 = att_unpack<BF16>(*reinterpret_cast<const unsigned*>(v + j * D));
                o[0] = fmaf(pj, x0.x, o[0]);
                o[1] = fmaf(pj, x0.y, o[1]);
            }
        }
    }
    const float inv = os_safe_inv(warp_allreduce_sum(dl));
#pragma unroll
    for (int e = 0; e < E; e++) O[base + (size_t)row * D + lane * E + e] = att_from_f32<BF16>(o[e] * inv);
}

// ---- A2: tiled FlashAttention-2 on tensor cores --------------------------------------------------

#define A2_BM 64  // query rows per CTA (16 per warp)
#define A2_BN 64  // keys per K/V tile
#define A2_WARPS 4
#define A2_THREADS (A2_WARPS * OS_WARP)

__device__ __forceinline__ unsigned att_smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void att_ldsm_x4(const void* p, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(att_smem(p)) : "memory");
}

__device__ __forceinline__ void att_ldsm_x4_t(const void* p, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(att_smem(p)) : "memory");
}

// c (16x8, fp32) += a (16x16, row) * b (16x8, col)
template <bool BF16>
__device__ __forceinline__ void att_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    if constexpr (BF16) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// A 64 x D tile in shared memory: row r, 16-byte chunk c (8 elements) at r * (D / 8) + (c ^ (r & 7)). The XOR
// spreads the 8 rows one ldmatrix reads (same logical chunk) over 8 different 16-byte bank groups: no conflicts.
template <int D>
__device__ __forceinline__ int att_swz(int r, int c) { return r * (D / 8) + (c ^ (r & 7)); }

// Rows [r0, r0 + 64) of a [S, D] matrix into a swizzled tile with cp.async; rows >= S are zero-filled.
template <int D>
__device__ __forceinline__ void att_load_tile(uint4* tile, const unsigned short* g, int r0, int S) {
    constexpr int CH = D / 8;
    static_assert(A2_BN * CH % A2_THREADS == 0, "whole chunks per thread");
#pragma unroll
    for (int i = 0; i < A2_BN * CH / A2_THREADS; i++) {
        const int c = threadIdx.x + i * A2_THREADS;
        const int r = c / CH, ch = c % CH;
        const bool in = r0 + r < S;
        const unsigned short* src = g + (size_t)(in ? r0 + r : 0) * D + ch * 8;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     ::"r"(att_smem(tile + att_swz<D>(r, ch))), "l"(src), "r"(in ? 16 : 0) : "memory");
    }
}

__device__ __forceinline__ void att_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void att_cp_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4): A regs {(g, 2t..), (g+8, 2t..), (g, 2t+8..),
// (g+8, 2t+8..)}; B regs {(k 2t.., n g), (k 2t+8.., n g)}; C {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}.
// S = Q K^T takes K rows as B without a transpose (ldmatrix); the C fragments of two adjacent 8-key tiles are
// exactly the A fragment of P for 16 keys, so P never leaves registers; V is B through ldmatrix.trans.
// grid (ceil(S / 64), BH), block 128, dynamic shared memory 5 * 64 * D * 2 bytes (Q, then 2 stages of K, V).
template <int D, bool BF16, bool CAUSAL>
__global__ void __launch_bounds__(A2_THREADS)
attn_a2(const unsigned short* __restrict__ Q, const unsigned short* __restrict__ K,
        const unsigned short* __restrict__ V, unsigned short* __restrict__ O, int S, float scale_log2) {
    static_assert(D == 64 || D == 128, "D is 64 or 128");
    constexpr int CH = D / 8;
    constexpr int TILE = A2_BN * CH;  // uint4 per tile
    constexpr int KC = D / 16;  // k-steps of Q K^T
    constexpr int NT = A2_BN / 8;  // 8-key tiles of S per warp
    constexpr int DT = D / 8;  // 8-column tiles of O per warp
    extern __shared__ uint4 att_smem_tiles[];
    uint4* sQ = att_smem_tiles;
    uint4* sKV = att_smem_tiles + TILE;  // stage s: K at sKV + 2 s TILE, V after it

    const int lane = threadIdx.x % OS_WARP, warp = threadIdx.x / OS_WARP;
    const int g = lane >> 2, t = lane & 3;
    const int nq = (S + A2_BM - 1) / A2_BM;
    const int qt = CAUSAL ? nq - 1 - (int)blockIdx.x : (int)blockIdx.x;  // causal: the longest tiles first
    const int q0 = qt * A2_BM;
    const size_t base = (size_t)blockIdx.y * S * D;
    const int nkv = CAUSAL ? qt + 1 : (S + A2_BN - 1) / A2_BN;  // causal: keys <= q0 + 63 only

    att_load_tile<D>(sQ, Q + base, q0, S);
    att_load_tile<D>(sKV, K + base, 0, S);
    att_load_tile<D>(sKV + TILE, V + base, 0, S);
    att_cp_commit();
    att_cp_wait_all();
    __syncthreads();

    unsigned qf[KC][4];
    {
        const int r = warp * 16 + (lane & 15);
#pragma unroll
        for (int kc = 0; kc < KC; kc++)
            att_ldsm_x4(sQ + att_swz<D>(r, 2 * kc + (lane >> 4)), qf[kc][0], qf[kc][1], qf[kc][2], qf[kc][3]);
    }
    float o[DT][4];
#pragma unroll
    for (int n = 0; n < DT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {OS_NEG_INF, OS_NEG_INF}, l[2] = {0.0f, 0.0f};  // rows g and g + 8; m in log2 units

    for (int it = 0; it < nkv; it++) {
        if (it + 1 < nkv) {  // the next tile streams in while this one is used
            uint4* nxt = sKV + 2 * TILE * ((it + 1) & 1);
            att_load_tile<D>(nxt, K + base, (it + 1) * A2_BN, S);
            att_load_tile<D>(nxt + TILE, V + base, (it + 1) * A2_BN, S);
        }
        att_cp_commit();
        const uint4* sK = sKV + 2 * TILE * (it & 1);
        const uint4* sV = sK + TILE;

        float s[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < KC; kc++) {
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {  // 16 keys per ldmatrix.x4
                const int key = np * 16 + (lane & 7) + ((lane >> 4) << 3);
                unsigned b0, b1, b2, b3;
                att_ldsm_x4(sK + att_swz<D>(key, 2 * kc + ((lane >> 3) & 1)), b0, b1, b2, b3);
                att_mma<BF16>(s[2 * np], qf[kc], b0, b1);
                att_mma<BF16>(s[2 * np + 1], qf[kc], b2, b3);
            }
        }
        const int k0 = it * A2_BN;
        if (k0 + A2_BN > S || (CAUSAL && it == qt)) {  // the tail tile and the diagonal tile
#pragma unroll
            for (int n = 0; n < NT; n++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = k0 + n * 8 + 2 * t + (e & 1);
                    const int row = q0 + warp * 16 + g + (e >> 1) * 8;
                    if (key >= S || (CAUSAL && key > row)) s[n][e] = OS_NEG_INF;
                }
            }
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = OS_NEG_INF;
#pragma unroll
            for (int n = 0; n < NT; n++) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(OS_FULL_MASK, mx, 1));  // the 4 lanes of a row
            mx = fmaxf(mx, __shfl_xor_sync(OS_FULL_MASK, mx, 2));
            const float mn = fmaxf(m[r], mx * scale_log2);
            const float sh = os_safe_shift(mn);
            const float alpha = att_ex2(m[r] - sh);
            m[r] = mn;
            float sum = 0.0f;
#pragma unroll
            for (int n = 0; n < NT; n++) {
                s[n][2 * r] = att_ex2(fmaf(s[n][2 * r], scale_log2, -sh));
                s[n][2 * r + 1] = att_ex2(fmaf(s[n][2 * r + 1], scale_log2, -sh));
                sum += s[n][2 * r] + s[n][2 * r + 1];
            }
            l[r] = fmaf(l[r], alpha, sum);
#pragma unroll
            for (int n = 0; n < DT; n++) {
                o[n][2 * r] *= alpha;
                o[n][2 * r + 1] *= alpha;
            }
        }
#pragma unroll
        for (int kc = 0; kc < A2_BN / 16; kc++) {  // O += P V, 16 keys per step
            const unsigned a[4] = {att_pack<BF16>(s[2 * kc][0], s[2 * kc][1]),
                                   att_pack<BF16>(s[2 * kc][2], s[2 * kc][3]),
                                   att_pack<BF16>(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                                   att_pack<BF16>(s[2 * kc + 1][2], s[2 * kc + 1][3])};
            const int key = kc * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
            for (int dp = 0; dp < DT / 2; dp++) {  // 16 output columns per ldmatrix.x4.trans
                unsigned b0, b1, b2, b3;
                att_ldsm_x4_t(sV + att_swz<D>(key, 2 * dp + (lane >> 4)), b0, b1, b2, b3);
                att_mma<BF16>(o[2 * dp], a, b0, b1);
                att_mma<BF16>(o[2 * dp + 1], a, b2, b3);
            }
        }
        att_cp_wait_all();  // the next tile has landed ...
        __syncthreads();  // ... for every warp, and nobody still reads the stage the next loads overwrite
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        float d = l[r];
        d += __shfl_xor_sync(OS_FULL_MASK, d, 1);
        d += __shfl_xor_sync(OS_FULL_MASK, d, 2);
        const float inv = os_safe_inv(d);
        const int row = q0 + warp * 16 + g + r * 8;
        if (row < S) {
            unsigned* out = reinterpret_cast<unsigned*>(O + base + (size_t)row * D + 2 * t);
#pragma unroll
            for (int n = 0; n < DT; n++) out[n * 4] = att_pack<BF16>(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        }
    }
}
