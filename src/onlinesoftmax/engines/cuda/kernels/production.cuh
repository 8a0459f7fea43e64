// production.cuh -- the device library of the production kernels (softmax.cu): storage types and their
// conversions, cache-hinted loads and stores, exponentials, the (m, d) merge and the other pair reductions over
// a warp, a block and a cluster, and the sm_90 cluster / async-copy PTX.
//
// Included textually by the Python runtime (runtime/nvrtc.py inlines local #include "x.cuh"), like state.cuh,
// whose -inf, full mask and safe shift it uses. Its names carry state.cuh's prefix, os_ / OS_ (online softmax).
#pragma once

#include "../../../state.cuh"

#define OS_LOG2E 1.4426950408889634f
#define OS_LN2 0.6931471805599453f
#define OS_POS_INF __int_as_float(0x7f800000)

// ---- types and conversions -------------------------------------------------------------------

template <bool B, class T, class F> struct os_cond { typedef T type; };
template <class T, class F> struct os_cond<false, T, F> { typedef F type; };
template <int DT> struct os_elem { typedef unsigned short type; };
template <> struct os_elem<0> { typedef float type; };

template <int DT> __device__ __forceinline__ float os_to_f(float v) { return v; }
template <int DT> __device__ __forceinline__ float os_to_f(unsigned short h) {
    if constexpr (DT == 1) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
        return f;
    } else {
        return __uint_as_float(((unsigned)h) << 16);
    }
}

template <int DT> __device__ __forceinline__ typename os_elem<DT>::type os_from_f(float f) {
    if constexpr (DT == 0) {
        return f;
    } else {
        unsigned short h;
        if constexpr (DT == 1) asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
        else asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
        return h;
    }
}

// Two 16-bit values packed in a word (low half first in memory).
template <int DT> __device__ __forceinline__ void os_unpack2(unsigned w, float& lo, float& hi) {
    if constexpr (DT == 1) {
        asm("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;}"
            : "=f"(lo), "=f"(hi) : "r"(w));
    } else {
        lo = __uint_as_float(w << 16);
        hi = __uint_as_float(w & 0xffff0000u);
    }
}

template <int DT> __device__ __forceinline__ unsigned os_pack2(float lo, float hi) {
    unsigned w;
    if constexpr (DT == 1) asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    else asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
}

// Loads of data used for the last time (ld.global.cs) and stores of outputs (st.global.cs): evict-first in L2,
// so the second passes of the split and strided regimes do not push the first pass's data out of L2 before it
// is re-read.
__device__ __forceinline__ uint4 os_ldcs(const uint4* p) {
    uint4 v;
    asm("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ float os_ldcs(const float* p) {
    float v;
    asm("ld.global.cs.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ unsigned short os_ldcs(const unsigned short* p) {
    unsigned short v;
    asm("ld.global.cs.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ void os_stcs(uint4* p, uint4 v) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}
__device__ __forceinline__ void os_stcs(float* p, float v) {
    asm volatile("st.global.cs.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}
__device__ __forceinline__ void os_stcs(unsigned short* p, unsigned short v) {
    asm volatile("st.global.cs.u16 [%0], %1;" ::"l"(p), "h"(v) : "memory");
}

// One access of W elements: a uint4 (16 bytes), one scalar element, or (16-bit data, the chan kernels) a word of two.
template <int DT, int W> struct os_io {
    typedef typename os_elem<DT>::type elem;
    static_assert(W == 1 || W * sizeof(elem) == 16 || (DT != 0 && W == 2), "W is 1, one 16-byte vector or a word");
    typedef typename os_cond<W == 1, elem, typename os_cond<W == 2, unsigned, uint4>::type>::type raw;

    // element i*W .. i*W+W-1 of the row at p (p aligned to 16 bytes when W > 1)
    static __device__ __forceinline__ raw load(const elem* p, long long i) {
        return *reinterpret_cast<const raw*>(p + i * W);
    }
    static __device__ __forceinline__ void unpack(const raw& r, float* f) {
        if constexpr (W == 1) {
            f[0] = os_to_f<DT>(r);
        } else if constexpr (W == 2) {
            os_unpack2<DT>(r, f[0], f[1]);
        } else if constexpr (DT == 0) {
            f[0] = __uint_as_float(r.x);
            f[1] = __uint_as_float(r.y);
            f[2] = __uint_as_float(r.z);
            f[3] = __uint_as_float(r.w);
        } else {
            os_unpack2<DT>(r.x, f[0], f[1]);
            os_unpack2<DT>(r.y, f[2], f[3]);
            os_unpack2<DT>(r.z, f[4], f[5]);
            os_unpack2<DT>(r.w, f[6], f[7]);
        }
    }
    static __device__ __forceinline__ raw pack(const float* f) {
        raw r;
        if constexpr (W == 1) {
            r = os_from_f<DT>(f[0]);
        } else if constexpr (W == 2) {
            r = os_pack2<DT>(f[0], f[1]);
        } else if constexpr (DT == 0) {
            r = make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
        } else {
            r = make_uint4(os_pack2<DT>(f[0], f[1]), os_pack2<DT>(f[2], f[3]), os_pack2<DT>(f[4], f[5]),
                           os_pack2<DT>(f[6], f[7]));
        }
        return r;
    }
    static __device__ __forceinline__ void store(elem* p, long long i, const float* f) {
        *reinterpret_cast<raw*>(p + i * W) = pack(f);
    }
    // Elements j in [lo, hi) of access i only: the whole vector when lo <= 0 and hi >= W (folded away on the aligned
    // path, whose bounds are the constants 0 and W), else element by element (the first and last access of a window).
    static __device__ __forceinline__ void store_part(elem* p, long long i, const float* f, int lo, int hi) {
        if (lo <= 0 && hi >= W) {
            store(p, i, f);
        } else {
#pragma unroll
            for (int j = 0; j < W; j++) {
                if (j >= lo && j < hi) p[i * W + j] = os_from_f<DT>(f[j]);
            }
        }
    }
    // The same from an access already packed (16-byte accesses: the realigned outputs of the out rows' own window)
    static __device__ __forceinline__ void store_raw_part(elem* p, long long i, const raw& r, int lo, int hi) {
        static_assert(W * sizeof(elem) == 16, "a 16-byte access");
        if (lo <= 0 && hi >= W) {
            *reinterpret_cast<raw*>(p + i * W) = r;
            return;
        }
        const unsigned u[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int j = 0; j < W; j++) {
            if (j >= lo && j < hi) {
                if constexpr (DT == 0) p[i * W + j] = __uint_as_float(u[j]);
                else p[i * W + j] = (unsigned short)(u[j / 2] >> (j & 1) * 16);
            }
        }
    }
    static __device__ __forceinline__ raw load_last(const elem* p, long long i) {
        return os_ldcs(reinterpret_cast<const raw*>(p + i * W));
    }
    static __device__ __forceinline__ void store_stream(elem* p, long long i, const float* f) {
        os_stcs(reinterpret_cast<raw*>(p + i * W), pack(f));
    }
};

// Outputs of one access of W elements stored as DTO: DTO's own access (os_io), or, for fp32 out of a 16-bit access
// (the fused cast: softmax(x16, dtype=torch.float32)), two 16-byte stores; element by element as os_io's store_part.
template <int DTO, int W> struct os_out {
    typedef typename os_elem<DTO>::type elem;
    static __device__ __forceinline__ void store_part(elem* p, long long i, const float* f, int lo, int hi) {
        if constexpr (W * sizeof(elem) <= 16) {
            os_io<DTO, W>::store_part(p, i, f, lo, hi);
        } else if (lo <= 0 && hi >= W) {
            static_assert(DTO == 0 && W == 8, "two 16-byte stores: fp32 out of a 16-bit access");
            os_io<0, 4>::store(p, 2 * i, f);
            os_io<0, 4>::store(p, 2 * i + 1, f + 4);
        } else {
#pragma unroll
            for (int j = 0; j < W; j++) {
                if (j >= lo && j < hi) p[i * W + j] = f[j];
            }
        }
    }
};

// The window path: a row whose first element lies `sh` elements past a 16-byte boundary is read as the aligned
// accesses that cover it, elements [-sh, N) rounded out to whole vectors; access v holds elements v*W - sh + j
// (j < W), the row's iff lo <= j < hi with lo = sh - v*W, hi = lo + N. The first and last access read up to 15
// bytes beside the row (the neighbouring row's, or the rest of the allocation's 16-byte granule), never used.
template <int DT, int W> __device__ __forceinline__ int os_shift(const void* p) {
    return (int)((unsigned long long)p / sizeof(typename os_elem<DT>::type)) & (W - 1);
}

// One window read for another's accesses: a row that starts `from` elements into its first access, read for a row
// that starts `to` elements into its own. Access i of the `to` row's window takes accesses i - u and i - u + 1 of the
// `from` row's, from element s on (os_realign): u = 1 where the `from` row starts earlier in its access, and
// 0 <= s < W. P = 2: the inputs' accesses for the out row's; P = 3: dy's for y's.
struct os_window_step {
    int u, s;
};
template <int W> __device__ __forceinline__ os_window_step os_realign_from(int from, int to) {
    const int u = from < to;
    return {u, from - to + u * W};
}

// P = 3, dy's own window (the backward's dy starting at another offset than y, as dy[:, 1:] beside a fresh y): dy's
// row starts sh elements into its first access, y's y_sh into its own; y access i takes dy accesses i - u and
// i - u + 1 from element s on (os_realign_from), and dy's row covers `end` accesses. All 0 for the other windows.
struct os_dy_window {
    int sh, u, s, end;
};
template <int DT, int W, int P>
__device__ __forceinline__ os_dy_window os_dy_window_of(const void* dy_row, int y_sh, int N) {
    if constexpr (P == 3) {
        const int sh = os_shift<DT, W>(dy_row);
        const os_window_step w = os_realign_from<W>(sh, y_sh);
        return {sh, w.u, w.s, (sh + N + W - 1) / W};
    } else {
        return {0, 0, 0, 0};
    }
}

// The out rows' own window (P = 2: they start at other offsets than the inputs', as x[:, 1:] into a fresh tensor).
// With the input row sh and the out row sho elements into their first accesses, D = sh - sho, out access u holds the
// elements of input accesses u and u + 1 (D >= 0; u - 1 and u when D < 0) from element s = D mod W on: the two
// vectors as one of 2W elements, shifted down by s (two select stages for whole words, a funnel shift for a 16-bit
// half). Whole 16-byte stores then, instead of one store per element (a warp's 16 two-byte stores to the same
// 512 bytes: 28-31% of copy, 16-bit x[:, 1:] at 024b3f3).
template <int DT> __device__ __forceinline__ uint4 os_realign(const uint4& a, const uint4& b, int s) {
    constexpr int ES = sizeof(typename os_elem<DT>::type);
    const int ws = s * ES / 4;  // whole words
    unsigned c[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 6; i++) c[i] = ws & 2 ? c[i + 2] : c[i];
#pragma unroll
    for (int i = 0; i < 5; i++) c[i] = ws & 1 ? c[i + 1] : c[i];
    if constexpr (ES == 4) return make_uint4(c[0], c[1], c[2], c[3]);
    const int bits = (s & 1) * 16;  // an odd number of 16-bit elements: half a word more
    return make_uint4(__funnelshift_r(c[0], c[1], bits), __funnelshift_r(c[1], c[2], bits),
                      __funnelshift_r(c[2], c[3], bits), __funnelshift_r(c[3], c[4], bits));
}

// A lane's vector from lane src of its group of `width` lanes (a power of 2 <= 32; src modulo width).
__device__ __forceinline__ uint4 os_shfl(const uint4& v, int src, int width = 32) {
    return make_uint4(__shfl_sync(OS_FULL_MASK, v.x, src, width), __shfl_sync(OS_FULL_MASK, v.y, src, width),
                      __shfl_sync(OS_FULL_MASK, v.z, src, width), __shfl_sync(OS_FULL_MASK, v.w, src, width));
}

// ---- exponentials and the reductions ---------------------------------------------------------

__device__ __forceinline__ float os_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// 1/d for d in [1, 2^31] or NaN (a row's normaliser): the approximate reciprocal is within 1 ulp.
__device__ __forceinline__ float os_rcp(float d) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
    return r;
}

// log d for d in [1, 2^31] or NaN (a row's normaliser; +inf for +inf) through lg2.approx: an absolute error of
// 2^-22 in log2 d below d = 2, a relative one of 2^-22 above; d, an fp32 sum whose largest term is 1, is already
// 2^-24 off near 1 for each term. Held at 0 from below (d >= 1: an error below 0 would make the row's largest
// log-probability positive), NaN kept. A few instructions where logf takes about 25 (16-bit outputs only).
__device__ __forceinline__ float os_log_approx(float d) {
    float l;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(l) : "f"(d));
    asm("max.NaN.f32 %0, %1, 0f00000000;" : "=f"(l) : "f"(l * OS_LN2));
    return l;
}

// exp(x - s) = 2^((x - s) * log2 e): the difference first, so x and s near FLT_MAX cannot overflow;
// exp(-inf) = 0 and exp(0) = 1 exactly.
__device__ __forceinline__ float os_exp_diff(float x, float s) { return os_ex2((x - s) * OS_LOG2E); }

// The float whose bits are the larger of a's and b's as unsigned integers: PTX, as NVVM may turn an unsigned max
// into a compare and a select (a predicate; see softmax.cu's bwd_acc). Such a flag's bits may read as a NaN, a
// subnormal or -0.0: it is only moved, shuffled, selected and tested as bits, never compared or computed as a float.
__device__ __forceinline__ float os_any_bits(float a, float b) {
    unsigned r;
    asm("max.u32 %0, %1, %2;" : "=r"(r) : "r"(__float_as_uint(a)), "r"(__float_as_uint(b)));
    return __uint_as_float(r);
}

// The pair (a, b) every reduction carries, by kind RED:
//   OS_RED_MD       (m, d): online-softmax states, merged as below; identity (-inf, 0)
//   OS_RED_SUM      (sum, unused): b is neither shuffled nor combined
//   OS_RED_SUM_ANY  (sum, flag): a sums, b keeps the largest bits (os_any_bits: "any" of flags whose bits are 0 or
//                   not; the identity 0.0f); the butterflies of a width known at compile time do not shuffle the
//                   flags: one vote (os_group_any) ends them
//   OS_RED_MAX      (max, unused)
enum { OS_RED_MD, OS_RED_SUM, OS_RED_SUM_ANY, OS_RED_MAX };
template <int RED> __device__ __forceinline__ float os_id_a() {
    return RED == OS_RED_MD || RED == OS_RED_MAX ? OS_NEG_INF : 0.0f;
}

// (a, b) <- (a, b) (+) (a2, b2). For (m, d) this is the ladder's md_merge (ladder/kernels/common.cuh) with one exponential instead of two:
// the larger state keeps its d, the smaller one is scaled by exp(-|m1 - m2|). Guard: both -inf -> (-inf, 0).
// +inf - +inf = NaN makes d NaN (as torch); a NaN d (a NaN in the row) stays NaN.
template <int RED> __device__ __forceinline__ void os_combine(float& a, float& b, float a2, float b2) {
    if constexpr (RED == OS_RED_MD) {
        const float mn = fmaxf(a, a2);
        const float e = mn == OS_NEG_INF ? 0.0f : os_ex2(-fabsf(a - a2) * OS_LOG2E);
        b = a >= a2 ? fmaf(b2, e, b) : fmaf(b, e, b2);
        a = mn;
    } else if constexpr (RED == OS_RED_MAX) {
        a = fmaxf(a, a2);
    } else {
        a += a2;
        if constexpr (RED == OS_RED_SUM_ANY) b = os_any_bits(b, b2);
    }
}

// One access of W values folded into a thread's (m, d): its own max and sum of exponentials (W), then one merge
// (one more). The window path's out rows of their own (P = 2) take the row in one such pass: its outputs are
// recomputed from the raw accesses, which it keeps for the stores, so the row is not also held unpacked.
template <int W> __device__ __forceinline__ void os_fold_md(float& m, float& d, const float* x) {
    float am = x[0];
#pragma unroll
    for (int u = 1; u < W; u++) am = fmaxf(am, x[u]);
    const float st = os_safe_shift(am);
    float e = 0.0f;
#pragma unroll
    for (int u = 0; u < W; u++) e += os_exp_diff(x[u], st);
    os_combine<OS_RED_MD>(m, d, am, e);
}

// "Any" of the flags (bits 0 or not) over each aligned group of `width` lanes (a power of 2 <= 32) of a converged
// warp: one vote where a butterfly took a shuffle and an unsigned max a step; the result's bits are the group's
// votes, 0 iff every flag of the group is 0.
__device__ __forceinline__ float os_group_any(float b, int width) {
    const unsigned votes = __ballot_sync(OS_FULL_MASK, __float_as_uint(b) != 0u);
    const unsigned group = width >= 32 ? ~0u : ((1u << width) - 1u) << ((threadIdx.x & 31) & ~(width - 1));
    return __uint_as_float(votes & group);
}

// One butterfly step: the state of the lane at distance `off` merged into this lane's. VOTED (OS_RED_SUM_ANY): the
// sums only, the butterfly's end takes the flags' vote (os_group_any).
template <int RED, bool VOTED = false> __device__ __forceinline__ void os_xor_merge(float& a, float& b, int off) {
    const float a2 = __shfl_xor_sync(OS_FULL_MASK, a, off);
    float b2 = 0.0f;
    if constexpr (RED == OS_RED_MD || (RED == OS_RED_SUM_ANY && !VOTED)) b2 = __shfl_xor_sync(OS_FULL_MASK, b, off);
    os_combine<RED == OS_RED_SUM_ANY && VOTED ? OS_RED_SUM : RED>(a, b, a2, b2);
}

// Butterfly over WIDTH lanes (aligned groups): every lane of a group ends with the group's state, bitwise equal.
template <int RED, int WIDTH> __device__ __forceinline__ void os_xor_reduce(float& a, float& b) {
#pragma unroll
    for (int off = WIDTH / 2; off > 0; off >>= 1) os_xor_merge<RED, true>(a, b, off);
    if constexpr (RED == OS_RED_SUM_ANY && WIDTH > 1) b = os_group_any(b, WIDTH);
}

// Butterflies over a run-time width (a power of 2 <= 32: the warp kernels' lanes per row, the block's warp count)
// for R independent states at once (the warp kernels' rows per lane group): their shuffles interleave.
template <int RED, int R> __device__ __forceinline__ void os_xor_reduce_rt(float* a, float* b, int width) {
#pragma unroll 1
    for (int off = width >> 1; off > 0; off >>= 1) {
#pragma unroll
        for (int q = 0; q < R; q++) os_xor_merge<RED>(a[q], b[q], off);
    }
}

// The warp kernels' reduction: the run-time width for one slot per lane, the unrolled 32-lane butterfly otherwise.
template <int RED, int R, int SLOTS> __device__ __forceinline__ void os_rows_reduce(float* a, float* b, int width) {
    if constexpr (SLOTS > 1) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
#pragma unroll
            for (int q = 0; q < R; q++) os_xor_merge<RED, true>(a[q], b[q], off);
        }
        if constexpr (RED == OS_RED_SUM_ANY) {
#pragma unroll
            for (int q = 0; q < R; q++) b[q] = os_group_any(b[q], 32);
        }
    } else {
        os_xor_reduce_rt<RED, R>(a, b, width);
    }
}

// Block reduction: warps by shuffles, the warp states through shared memory, then every warp folds them (lane l
// reads state l % nw, so every lane ends with the block's state, bitwise equal). sa/sb hold nw floats, used once.
// blockDim.x is a multiple of 32 with a power-of-2 warp count.
// POW2: the block's warps are a power of 2 (a butterfly over them); else the lanes past the warps take the identity
// and the butterfly spans 32 lanes.
template <int RED, bool POW2 = true>
__device__ __forceinline__ void os_block_reduce(float& a, float& b, float* sa, float* sb) {
    os_xor_reduce<RED, 32>(a, b);
    const int nw = blockDim.x >> 5;
    if (nw > 1) {
        const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
        if (lane == 0) {
            sa[wid] = a;
            sb[wid] = b;
        }
        __syncthreads();
        if constexpr (POW2) {
            a = sa[lane & (nw - 1)];
            b = sb[lane & (nw - 1)];
            os_xor_reduce_rt<RED, 1>(&a, &b, nw);
        } else {
            a = lane < nw ? sa[lane] : os_id_a<RED>();
            b = lane < nw ? sb[lane] : 0.0f;
            os_xor_reduce<RED, 32>(a, b);
        }
    }
}

template <int n> __device__ __forceinline__ float os_max_of(const float* v) {
    float m0 = OS_NEG_INF, m1 = OS_NEG_INF;
#pragma unroll
    for (int i = 0; i < n; i += 2) {
        m0 = fmaxf(m0, v[i]);
        if (i + 1 < n) m1 = fmaxf(m1, v[i + 1]);
    }
    return fmaxf(m0, m1);
}

template <int n> __device__ __forceinline__ float os_sum_of(const float* v) {
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int i = 0; i < n; i += 2) {
        s0 += v[i];
        if (i + 1 < n) s1 += v[i + 1];
    }
    return s0 + s1;
}

// ---- cluster / async-copy PTX (sm_90) --------------------------------------------------------

__device__ __forceinline__ unsigned os_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned os_cluster_id() {
    unsigned r;
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
    return r;
}
// The cluster barrier's arrive without release semantics: a release by every thread compiles to MEMBAR.ALL.GPU in
// every warp. os_cluster_publish() makes this CTA's shared-memory writes (the caller's, or all its threads' after a
// __syncthreads) visible to the cluster with one fence by thread 0 before the arrive. The fence releases only
// shared::cta operations (PTX 8.6's sync_restrict), all a partial is: MEMBAR.ALL.CTA, where fence.acq_rel.cluster
// compiled to MEMBAR.ALL.GPU with ERRBAR, CGAERRBAR and CCTL.IVALL.
__device__ __forceinline__ void os_cluster_arrive() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void os_cluster_publish() {
    if (threadIdx.x == 0) asm volatile("fence.release.sync_restrict::shared::cta.cluster;" ::: "memory");
    os_cluster_arrive();
}
__device__ __forceinline__ void os_cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The work item of this CTA's cluster of C CTAs (its cluster id) and the CTA's rank in it; without clusters
// (C == 1) the block index and rank 0.
template <int C> __device__ __forceinline__ void os_cluster_item(long long& item, int& rank) {
    if constexpr (C > 1) {
        item = os_cluster_id();
        rank = (int)os_cluster_rank();
    } else {
        item = blockIdx.x;
        rank = 0;
    }
}
// A float in CTA `rank`'s shared memory at the address of the local variable p.
__device__ __forceinline__ float os_ld_dsmem(const float* p, unsigned rank) {
    const unsigned local = (unsigned)__cvta_generic_to_shared(p);
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
}
__device__ __forceinline__ void os_cp_async16(void* dst, const void* src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
// Programmatic dependent launch (sm_90): a kernel launched with programmatic stream serialization may start while
// the kernel before it in the stream still runs, once that one's CTAs have all called os_launch_dependents() (or
// exited). os_grid_wait() blocks until the kernel before has completed and its writes are visible; without the
// launch attribute it returns at once.
__device__ __forceinline__ void os_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void os_grid_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
// A value the kernel before wrote, read after os_grid_wait(): a coherent load that stays after the wait. A plain read
// through a const __restrict__ pointer compiles to ld.global.nc, data read-only for the kernel's whole life, which
// ptxas moved above the wait: ce_row read the reduction's scale before ce_targets wrote it (SASS: LDG.E.CONSTANT
// before ACQBULK in every ce_row instantiation; under load on the H200 the gradients of a call took the scale of the
// call before, whose buffer the allocator had handed on).
__device__ __forceinline__ float os_ld_after_wait(const float* p) {
    float v;
    asm volatile("ld.relaxed.gpu.global.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}
// The same for a pair of floats (the period kernels' column pairs)
__device__ __forceinline__ float2 os_ld2_after_wait(const float2* p) {
    float2 v;
    asm volatile("ld.relaxed.gpu.global.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "l"(p) : "memory");
    return v;
}
// A grid barrier of a cooperative launch (every CTA resident at once), on the barrier word of the workspace the
// driver gives every cooperative launch (its address in %envreg1:%envreg2, the word after its size: the ABI of
// cooperative_groups' grid.sync(), whose headers NVRTC does not carry). Nothing is zeroed before the launch: CTA 0
// adds 2^31 - (grid - 1) and every other CTA 1, so the word's top bit flips once all have arrived, whatever it held;
// each CTA's add releases its threads' writes and its wait acquires them. OS_GRID_SYNC_NO_WAIT (defined by the tests'
// known-wrong build only) arrives without waiting.
__device__ __forceinline__ void os_grid_sync() {
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned hi, lo, old, now;
        asm("mov.u32 %0, %%envreg1;" : "=r"(hi));
        asm("mov.u32 %0, %%envreg2;" : "=r"(lo));
        const unsigned long long bar = ((static_cast<unsigned long long>(hi) << 32) | lo) + 4;
        const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
        asm volatile("atom.add.release.gpu.u32 %0, [%1], %2;" : "=r"(old) : "l"(bar), "r"(add) : "memory");
#ifndef OS_GRID_SYNC_NO_WAIT
        do {
            __nanosleep(32);
            asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(now) : "l"(bar) : "memory");
        } while (((old ^ now) & 0x80000000u) == 0);
#endif
    }
    __syncthreads();
}
__device__ __forceinline__ void os_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void os_cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
// All but the N groups committed last have landed (this thread's copies).
template <int N> __device__ __forceinline__ void os_cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// The cluster's state from each CTA's block state: thread 0 parks it in `part`, the cluster barrier publishes it,
// every lane reads CTA (lane % C)'s and the warp folds them (every CTA ends with the same bits). Ends with the
// arrive of the second barrier: the caller waits on it before exiting, so no CTA leaves while another may still
// read its shared memory.
template <int RED, int C> __device__ __forceinline__ void os_cluster_reduce(float& a, float& b, float* part) {
    if (threadIdx.x == 0) {
        part[0] = a;
        part[1] = b;
    }
    os_cluster_publish();
    os_cluster_wait();
    const unsigned src = (threadIdx.x & 31) % C;
    a = os_ld_dsmem(&part[0], src);
    b = os_ld_dsmem(&part[1], src);
    os_xor_reduce<RED, C>(a, b);
    os_cluster_arrive();
}

// A group of G CTAs anywhere on the chip sharing a row (the group regime: softmax.cu's grp_body), and the row's
// block of the call's workspace (zeroed before the launch; os_group_words): its arrival word (the CTAs counted in,
// low 16 bits, and the shares abandoned, high 16; then a word unused), a pair of floats for each of its G CTAs, then
// the ranks of the abandoned shares (+ 1) in the order they were abandoned.
struct os_group_shared {  // the CTA's: its ticket, then what os_group_reduce gives every thread
    unsigned ticket, own;
    float a, b;
};
struct os_group {
    long long row;
    int rank;
    int size;  // G
    float* ws;  // the row's block
    unsigned wait_ns;  // how long a CTA waits for its group before it abandons its share (plan.GROUP_WAIT_NS)
    os_group_shared* s;
};
__host__ __device__ constexpr long long os_group_words(int G) { return 2 + 2 * G + 2 * ((G + 1) / 2); }
// The global timer's low 32 bits (ns): differences modulo 2^32 measure waits up to 4 s, in one register.
__device__ __forceinline__ unsigned os_globaltimer_lo() {
    unsigned t;
    asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t));
    return t;
}
// The G pairs of a group's row block, folded by a warp: lane-strided relaxed loads (after the caller's acquire of the
// completed count), then a butterfly, in the same order wherever it runs: the same bits.
template <int RED> __device__ __forceinline__ void os_group_fold(const float* blk, int G, float& a, float& b) {
    a = os_id_a<RED>();
    b = 0.0f;
    for (int j = threadIdx.x & 31; j < G; j += 32) {
        float a2, b2;
        asm volatile("ld.relaxed.gpu.global.v2.f32 {%0, %1}, [%2];" : "=f"(a2), "=f"(b2) : "l"(blk + 2 + 2 * j) : "memory");
        os_combine<RED>(a, b, a2, b2);
    }
    os_xor_reduce<RED, 32>(a, b);
}
// A group's CTA counted in by one thread, after the CTA's pairs are stored: an acq_rel add on the arrival word cnt
// (the pairs visible before the count), then, unless this count completes the group, a wait of at most wait_ns for
// the G-th count (an acquire). Past the wait the CTA abandons its share: a compare-and-swap that counts it abandoned
// while the group is still incomplete (none is abandoned once the group is complete), then its rank + 1 into the
// list `gone` at the abandoned count before it. 1 where the group completed, 0 where the share was abandoned
// (1 or 0: unsigned, one exit, as os_group_reduce had it inline; a bool with early returns changed the group
// kernels' SASS, their fold duplicated in some.)
__device__ __forceinline__ unsigned os_group_arrive(unsigned* cnt, unsigned* gone, unsigned G, int rank,
                                                    unsigned wait_ns) {
    unsigned c, own = 1;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(c) : "l"(cnt) : "memory");
    if ((c & 0xffffu) + 1 < G) {
        const unsigned t0 = os_globaltimer_lo();
        for (;;) {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(c) : "l"(cnt) : "memory");
            if ((c & 0xffffu) == G) break;
            if (os_globaltimer_lo() - t0 >= wait_ns && atomicCAS(cnt, c, c + 0x10000u) == c) {
                asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(gone + (c >> 16)), "r"(rank + 1) : "memory");
                own = 0;
                break;
            }
        }
    }
    return own;
}
// The row's state from each CTA's block state through global memory: thread 0 stores its pair at its rank and counts
// it in (acq_rel: the pair is visible before the count). The CTA whose count completes the group goes on; every
// other one's thread 0 waits, at most wait_ns, for the G-th count (an acquire), then abandons its share: a
// compare-and-swap that counts it abandoned while the group is still incomplete, and its rank into the row's list
// (no share is abandoned once the group is complete). A group's CTAs may wait on one another for want of room
// (several group kernels at once, each holding CTAs of a partly started group): an abandoned CTA exits, its slot
// goes to a CTA not yet started, and no CTA waits without bound; the kernel after (grp_fix) writes the abandoned
// shares. Returns false to an abandoning CTA (it writes nothing). Every CTA that goes on folds the G pairs (warp 0,
// each lane after its own acquire of the completed count: all end with the same bits).
template <int RED> __device__ __forceinline__ bool os_group_reduce(float& a, float& b, const os_group& g) {
    unsigned* const cnt = reinterpret_cast<unsigned*>(g.ws);
    const unsigned G = g.size;
    if (threadIdx.x < 32) {
        if (threadIdx.x == 0) {
            asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(g.ws + 2 + 2 * g.rank), "f"(a), "f"(b) : "memory");
            g.s->own = os_group_arrive(cnt, reinterpret_cast<unsigned*>(g.ws + 2 + 2 * G), G, g.rank, g.wait_ns);
        }
        __syncwarp();
        if (g.s->own) {
            unsigned c;
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(c) : "l"(cnt) : "memory");
            } while ((c & 0xffffu) < G);
            os_group_fold<RED>(g.ws, g.size, a, b);
            if (threadIdx.x == 0) {
                g.s->a = a;
                g.s->b = b;
            }
        }
    }
    __syncthreads();
    a = g.s->a;
    b = g.s->b;
    return g.s->own;
}

// The row's P partial states, folded by every warp (lane-strided, then a butterfly): every thread of every CTA
// of the row ends with the same bits. They come from the kernel before, read after os_grid_wait() (the split apply
// is a programmatic launch), by loads that stay after it: plain ones (ld.global, cached in L1 for the CTA's other
// warps). Read with os_ld_after_wait's ld.relaxed.gpu, each from L2, one row of 1000003 (489 partials, every warp of
// 489 CTAs) ran at 8% of copy where it had run at 19% (h100 A/B, session 67).
__device__ __forceinline__ float os_ld_plain(const float* p) {
    float v;
    asm volatile("ld.global.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}
template <int RED> __device__ __forceinline__ void os_fold_partials(const float* wr, int P, float& a, float& b) {
    a = os_id_a<RED>();
    b = 0.0f;
    for (int j = threadIdx.x & 31; j < P; j += 32) {
        os_combine<RED>(a, b, os_ld_plain(wr + 2 * j), os_ld_plain(wr + 2 * j + 1));
    }
    os_xor_reduce<RED, 32>(a, b);
}
