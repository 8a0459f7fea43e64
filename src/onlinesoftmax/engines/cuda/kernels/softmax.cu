// softmax.cu -- production softmax / log_softmax, forward and backward: fp32 / fp16 / bf16 storage, fp32 math.
// The device library (storage I/O, exponentials, merges, warp / block / cluster reductions, cluster PTX) is
// production.cuh.
//
// Template parameters shared by every kernel:
//   OP  0 softmax, 1 log_softmax, 2 softmax backward, 3 log_softmax backward
//   DT  storage type: 0 fp32, 1 fp16, 2 bf16 (converted with cvt PTX: NVRTC needs no headers)
//   W   elements per access: 16 / sizeof(elem) (one 16-byte uint4) or 1 (the scalar path, where the inputs' rows
//       start at different offsets from 16-byte boundaries, and in the split and strided regimes when unaligned)
//   P   (warp and row kernels, W > 1) 0: rows aligned, N a multiple of W; 1: the window path, any N and any common
//       offset: each row is read through the aligned accesses that cover it (production.cuh, os_shift), the
//       elements beside it masked, its first and last access stored element by element; 2: the same loads, the out
//       rows (which start at other offsets than the inputs') through windows of their own: each out access is two
//       input accesses realigned (os_realign; the next one lane + 1's), the forward's y recomputed from x; 3 (the
//       backward): the out rows start as y's, dy's rows elsewhere: dy is read through its own window and each access
//       realigned to y's before the fold (one more dy access a warp's last lane reads itself)
//
// Each regime is one __device__ body (warp_body, row_body, split_stats_body, split_apply_body, strided_body) with the
// op as a compile-time policy (op_traits: the inputs, the reduction, the outputs; 'if constexpr' where the fold
// differs), under two thin __global__ entries, fwd_<regime> for OP 0 and 1 and bwd_<regime> for OP 2 and 3, whose
// names and template parameters are what engines/cuda/plan.py instantiates:
// fwd_warp<OP,DT,W,SLOTS,RPT,P>          small N: 2^lg lanes per row (lg a run-time argument, <= 5; 32 when SLOTS > 1),
//                                        SLOTS accesses per lane and row, RPT rows per lane group, all loads issued
//                                        first; 256 threads
// fwd_row<OP,DT,W,THREADS,SLOTS,SSLOTS,C,P> one row per CTA (C == 1) or per cluster of C CTAs (partial (m, d) through
//                                        DSMEM); THREADS <= 512 threads hold SLOTS accesses each in registers and
//                                        SSLOTS more in dynamic shared memory (cp.async)
// fwd_grp<OP,DT,W,THREADS,SLOTS,SSLOTS,P> rows beyond a cluster: a group of G CTAs per row (row_body's C = 0), each
//                                        holding its share as a cluster's CTA does, the partial (m, d) through global
//                                        memory; each CTA takes its item from a ticket (the order CTAs start)
// fwd_grp_fix<OP,DT,W,P>                 after it (a programmatic launch): the shares a group's CTAs abandoned
// fwd_flat<OP,DT,SLOTS,LG,SURE>          contiguous aligned rows of any N (not whole accesses): a CTA stages R rows in
//                                        shared memory with 16-byte copies, 2^LG lanes per row (4..32; SLOTS elements
//                                        a lane, the first SURE of them inside every row) compute there, 16-byte stores
// fwd_split_stats<DT,W,WIN>              few rows, huge N, phase 1: (m, d) of each chunk of CH accesses -> workspace
//                                        (WIN: the window path, P = 1's; 0, the default, aligned or scalar rows)
// fwd_split_apply<OP,DT,W,WIN>           phase 2: merge the row's P partials, re-read the chunk (L2), write
// fwd_cols<OP,DT,W,SLOTS,SSLOTS,C>       (forward only) non-last dim of a contiguous (outer, N, inner) tensor, the
//                                        columns on chip: a cluster of C CTAs owns a strip of columns, each CTA a band
//                                        of rows in registers (+ smem); per-column (m, d) by a tree, then through DSMEM
// fwd_strided<OP,DT,W>                   the same when the columns do not fit on chip: a persistent CTA owns a strip
//                                        of columns: (m, d) down N, tree merge, second pass (re-read in L2)
// fwd_bands<OP,DT,W,U>                   the same read once: a group of G CTAs a strip, each a band of its rows (U
//                                        accesses a thread in registers, on the 16-byte path more in shared memory),
//                                        the bands' per-column pairs through global memory (a counter a strip, the
//                                        group regime's bounded wait); fwd_bands_fix after it writes those abandoned
// fwd_chan<OP,DT,W,CAP>                  a short non-last dim (N <= CAP <= 32: channels): a thread per access of W
//                                        columns (4 bytes, or one 16-bit element) holds all N rows in registers
// fwd_period<OP,DT>                      a non-last dim whose inner is not whole 16-byte vectors: the slab read as
//                                        vectors, whose g = V / gcd(inner, V) rows (a period) are whole ones, each
//                                        thread the same columns in every period: pairs per band of periods, then
//                                        each column's pair over the bands, then the outputs (a cooperative launch,
//                                        two grid barriers)
// bwd_warp / bwd_flat / bwd_row / bwd_grp / bwd_split_stats / bwd_split_apply / bwd_strided / bwd_bands / bwd_chan /
// bwd_period: the
//                                        same for OP 2, 3,
//                                        one reduction: sum(dy*y) (softmax) or sum(dy) + "row alive" (log_softmax)
//
// SASS: when the regimes were merged (issue 11), every instantiation compiled to the same sm_90 instructions as the
// separate forward and backward kernels of be1e6c1 (benchmarks/sass_diff.py); later changes say what they changed
// (unpack_x: the forward window kernels). NVVM's register numbering follows the order of
// declarations, helper calls and address arithmetic closely: where a comment below says a form is kept for the
// SASS, the other forms tried changed it.
//
// Forward arithmetic: each thread takes the max mt of its share, keeps e = exp(x - mt) (softmax; log_softmax keeps
// x) and d_t = sum e; the (m, d) states merge (one exponential per merge, common.cuh's -inf guard); the outputs are
// e * exp(mt - m) / d and (x - m) - log d. 16-bit data parked in shared memory is recomputed from x instead, and
// folds into the thread's (m, d) in one pass over the shared memory (os_fold_md). The
// warp kernels reduce the row max first, then the sum of exp(x - max) (two butterflies without exponentials in the
// merges: their rows are short, the merges' exponentials a large share of the work). The second passes of the split
// and strided regimes read with ld.global.cs and all their stores are st.global.cs (evict-first), so the data their
// first pass left in L2 stays there until it is re-read.
//
// Semantics (reference.py): an all -inf row gives softmax 0, log_softmax -inf, gradients 0; a NaN or +inf in a row
// gives NaN across the row; exponents are 2^((x - m) * log2 e), the difference first (no overflow near the dtype max);
// exp(m - m) is exactly 1, so log_softmax of a row with one finite value is exactly 0 there.
//
// Signatures (pointers are element pointers of the storage type; row strides in elements; `b` is dy for the
// backward ops and unused (0) for the forward ones):
//   warp:          (a, b, out, long long M, int N, long long sa, long long sb, long long so, int lg)
//   row:           (a, b, out, long long M, int N, long long sa, long long sb, long long so)
//   split_stats:   (a, b, float* ws, long long M, int N, long long sa, long long sb, int P, int CH)
//   split_apply:   (a, b, const float* ws, out, long long M, int N, long long sa, long long sb, long long so, int P,
//                   int CH)
//   cols, strided: (a, b, out, long long outer, int N, long long inner, long long strips, long long items)
//   bands:         (a, b, float* ws, out, long long outer, int N, long long inner, long long strips, int G, int chunk,
//                   int wait_ns); bands_fix the same without wait_ns
//   chan:          the same, strips = inner / W (the accesses of one outer index); items unused (outer * strips)
#include "production.cuh"

// Launch geometry; engines/cuda/plan.py plans with the same numbers under the same names. (An enum: namespace-scope
// constexpr variables would each become a global variable of every module.)
enum {
    WARP_THREADS = 256,     // the warp kernels' largest CTA (their launch bound; several rows per warp)
    FLAT_THREADS = 256,     // threads per CTA of the flat kernels (4..32 lanes per row)
    ROW_MAX_THREADS = 512,  // the largest CTA of the row and columns kernels
    SPLIT_THREADS = 256,
    GROUP_FIX_THREADS = 256,  // grp_fix: a CTA a row (it writes only what a group's CTAs abandoned)
    SPLIT_UNROLL = 4,  // accesses in flight per thread and loop trip
    SPLIT_CTAS_PER_SM = 4,  // split: CTAs an SM the grid aims for (the window kernels' launch bound)
    STRIDED_THREADS = 512,
    CHAN_THREADS = 256,
    BANDS_THREADS = 256,
    BANDS_CTAS_PER_SM = 2,  // the bands kernels' launch bound: <= 128 registers (U accesses of 16 bytes a thread)
    OP_CE = 4  // the cross-entropy loss and gradient (ce_row): a forward op on the row kernel
};

// ---- the op as a compile-time policy --------------------------------------------------------------------------------
// Forward: y = softmax or log_softmax of x; the row reduces (m, d).
// Backward: dx = y * (dy - sum(dy * y))                    (softmax; y = probabilities)
//           dx = dy - exp(y) * sum(dy), 0 if all y = -inf   (log_softmax; y = log-probabilities)
// The backward rows stay in registers as raw storage (y and dy), unpacked when used (no exponential to save).

// Forward output parameters from a row's final (m, d).
//  softmax:     y = e * f with e = exp(x - st) (thread shift st = shift of the thread's own max mt),
//               f = exp(mt - s) / d; or y = exp(x - s) * inv when recomputed from x.
//  log_softmax: y = (x - sh) - ld; an empty row (d == 0) gets sh = +inf, ld = 0: y = -inf. ld = log d: logf for
//               fp32 outputs; for 16-bit ones (HALF, through op_traits) os_log_approx, whose error stays below their
//               rounding but near y = 0, where d's own is of its order: logf's 25 instructions were a sixth of a
//               16-bit row of 129's (the flat kernel, 16 lanes a row), about one an element in the block kernels' 3
//               slots; the columns and strided kernels (their output's type is DT's) alike.
template <int OP, bool HALF> struct fwd_out {
    float s, inv, sh, ld;
    __device__ __forceinline__ fwd_out(float m, float d) {
        s = os_safe_shift(m);
        inv = d == 0.0f ? 0.0f : os_rcp(d);  // os_safe_inv; d is 0, NaN or in [1, N]: no slow path needed
        const bool empty = d == 0.0f;
        sh = empty ? OS_POS_INF : s;
        ld = empty ? 0.0f : HALF ? os_log_approx(d) : logf(d);
    }
    // y recomputed from x
    __device__ __forceinline__ float of_x(float x) const { return y_of_x(x, s, inv, sh, ld); }
    static __device__ __forceinline__ float y_of_x(float x, float s, float inv, float sh, float ld) {
        return OP == 0 ? os_exp_diff(x, s) * inv : (x - sh) - ld;
    }
};

// Backward: an element's contribution to the row's pair (a, b), and its dx from the row's pair.
template <int OP> __device__ __forceinline__ void bwd_acc(float y, float dy, float& a, float& b) {
    if constexpr (OP == 2) {
        a = fmaf(y, dy, a);
    } else {
        a += dy;
        // b: any y != -inf (NaN counts as alive: the row's output is NaN, as the reference's), the bits of a float
        // whose bits are the largest of bits(y) ^ bits(-inf), 0 iff every y is -inf (os_any_bits; the reductions
        // take the same unsigned max, OS_RED_SUM_ANY). Two instructions an element, without a predicate: ptxas
        // combined a compare's predicate with the access's bounds test and placed it right after that access's
        // load, so each load waited for the one before (log_softmax backward at 38-67% of copy where softmax's ran
        // at 86-100%); a 0 / 1 float from min(bits ^ -inf, 1) took four
        b = os_any_bits(b, __uint_as_float(__float_as_uint(y) ^ 0xff800000u));
    }
}

template <int OP> __device__ __forceinline__ float bwd_out(float y, float dy, float a, float b) {
    if constexpr (OP == 2) return y * (dy - a);
    else return __float_as_uint(b) != 0u ? dy - os_ex2(y * OS_LOG2E) * a : 0.0f;
}

// An element beside the row that adds nothing to the backward's pair (a, b): y * dy = 0 (softmax); dy = 0 and y = -inf,
// not alive (log_softmax).
template <int OP> __device__ __forceinline__ float bwd_pad_y() { return OP == 2 ? 0.0f : OS_NEG_INF; }

// Cross-entropy (OP_CE, the ce_row entry): the row's (m, d) as softmax's, its target logit and (label smoothing) its
// sum; the outputs are the gradient of the reduced loss and, per row, the loss and lse (ops/cross_entropy.py has
// the same formulas in torch ops, reference.cross_entropy the float64 specification). With lse = m + log d and
// p = exp(x - lse), a counted row (target != ignore) has
//     dx   = scale * ((1 + 2 z lse) p - eps / V - (1 - eps) [col == target])
//     loss = lse - (1 - eps) x[target] - (eps / V) sum x + z lse^2
// and an ignored row dx = 0, loss = 0. scale is a device scalar (1 / counted rows for "mean"): no host sync.
struct ce_args {
    const long long* target;  // (M,) class indices
    float* loss;              // (M,) per-row loss
    float* lse;               // (M,) per-row log-sum-exp
    const float* scale;       // the reduction's factor on every gradient
    long long ignore;         // ignore_index
    float eps, z, inv_v;      // label smoothing, z-loss, 1 / V
};

// A row's gradient without its target term: dx = valid ? p * gp - c0 : 0 for every element; the CTA that holds the
// target column then rewrites that one element with the term (ce_row: the row's last step), so the elements'
// stores carry no column test.
struct ce_grad {
    float gp, c0;
    bool valid;
    ce_grad() = default;
    __device__ __forceinline__ ce_grad(const ce_args& ce, float scale, bool counted, float lse) {
        valid = counted;
        gp = scale * fmaf(2.0f * ce.z, lse, 1.0f);
        c0 = scale * ce.eps * ce.inv_v;
    }
    __device__ __forceinline__ float operator()(float p) const { return valid ? fmaf(p, gp, -c0) : 0.0f; }
    // the gradient of q = p / k: k folded into gp, one multiply an element fewer (e = exp(x - mt) with k = f, or
    // exp(x - s) with k = inv)
    __device__ __forceinline__ ce_grad of(float k) const {
        ce_grad h = *this;
        h.gp *= k;
        return h;
    }
};

// The op of a forward entry (fwd_*) or a backward one (bwd_*): another op code does not compile.
template <int OP> struct fwd_op {
    static_assert(OP == 0 || OP == 1, "forward op");
    enum { value = OP };
};
template <int OP> struct bwd_op {
    static_assert(OP == 2 || OP == 3, "backward op");
    enum { value = OP };
};

// What differs between the ops in every regime, per access of W elements. The regime bodies read input a (x, or y)
// into ra[] and, backward only, input b (dy) into rb[].
template <int OP, int DT, int W, int DTO = DT> struct op_traits {
    static_assert(OP >= 0 && OP <= 4, "op: 0 softmax, 1 log_softmax, 2 and 3 their backward, 4 cross-entropy");
    static_assert(DTO == DT || (OP < 2 && DTO == 0), "another out dtype: fp32 forward outputs only");
    typedef os_io<DT, W> io;
    typedef typename io::elem elem;
    typedef typename io::raw raw;
    typedef os_out<DTO, W> out;  // the outputs' storage (DTO: fp32 out of 16-bit data, the fused cast)
    typedef typename out::elem out_elem;
    enum {
        FWD = OP < 2 || OP == OP_CE,  // inputs: x from a (forward); or y from a and dy from b
        EXP = OP == 0 || OP == OP_CE,  // outputs from p = exp(x - m) / d (softmax and the cross-entropy gradient)
        RED = FWD ? OS_RED_MD : OP == 2 ? OS_RED_SUM : OS_RED_SUM_ANY  // (m, d); sum(dy * y); sum(dy), any y alive
    };
    // The parameters of the outputs, from the row's reduced pair: forward, fwd_out; the backward needs none (its
    // dx takes the pair as it is).
    struct no_params {
        __device__ __forceinline__ no_params(float, float) {}
    };
    typedef typename os_cond<FWD, fwd_out<EXP ? 0 : 1, DTO != 0>, no_params>::type out_params;

    // Access i of the inputs at element pointers pa, pb: a into ra and, backward, b into rb. LAST: the data's last
    // read, with ld.global.cs (evict-first).
    template <bool LAST = false>
    static __device__ __forceinline__ void load(raw& ra, raw& rb, const elem* pa, const elem* pb, long long i) {
        if constexpr (LAST) {
            ra = io::load_last(pa, i);
            if constexpr (!FWD) rb = io::load_last(pb, i);
        } else {
            ra = io::load(pa, i);
            if constexpr (!FWD) rb = io::load(pb, i);
        }
    }

    // Forward: one access unpacked, its elements outside [lo, hi) (beside a window's row) set to -inf: the test
    // per element only in the first and last access of a window (lo > 0 or hi < W); the others take one test per
    // access (folded away on the aligned path: lo 0, hi W)
    static __device__ __forceinline__ void unpack_x(const raw& r, float* x, int lo, int hi) {
        io::unpack(r, x);
        if (lo <= 0 && hi >= W) return;
#pragma unroll
        for (int j = 0; j < W; j++) x[j] = j >= lo && j < hi ? x[j] : OS_NEG_INF;
    }

    // Backward: one access (y in ry, dy in rd; elements [lo, hi) of it) into the thread's sums, even and odd
    // elements in two dependency chains (a0, a1), and its dx from the row's pair (a, b).
    static __device__ __forceinline__ void bwd_fold(const raw& ry, const raw& rd, float& a0, float& a1, float& b0,
                                                    int lo = 0, int hi = W) {
        float y[W], dy[W];
        io::unpack(ry, y);
        io::unpack(rd, dy);
#pragma unroll
        for (int j = 0; j < W; j++) {
            if (j < lo || j >= hi) continue;
            if (j & 1) bwd_acc<OP>(y[j], dy[j], a1, b0);
            else bwd_acc<OP>(y[j], dy[j], a0, b0);
        }
    }
    static __device__ __forceinline__ void bwd_dx(const raw& ry, const raw& rd, float a, float b, float* dx) {
        float y[W], dy[W];
        io::unpack(ry, y);
        io::unpack(rd, dy);
#pragma unroll
        for (int j = 0; j < W; j++) dx[j] = bwd_out<OP>(y[j], dy[j], a, b);
    }
    // The out rows' own window (P = 2): the outputs of an access from its inputs (os_realign'd): forward y of_x(x)
    // for each x, backward dx from the row's pair (a, b)
    template <class OF_X>
    static __device__ __forceinline__ void out_of(const raw& ra, const raw& rb, float a, float b, OF_X of_x,
                                                  float* out) {
        if constexpr (FWD) {
            float x[W];
            io::unpack(ra, x);
#pragma unroll
            for (int j = 0; j < W; j++) out[j] = of_x(x[j]);
        } else {
            bwd_dx(ra, rb, a, b, out);
        }
    }
};

// ---- warp: small N, several rows per warp ---------------------------------------------------------------------------
// 2^lg lanes per row (lg a run-time argument, <= 5; 32 when SLOTS > 1), SLOTS accesses per lane and row, RPT rows
// per lane group, all loads issued first; CTAs of the plan's size (plan.py's warp_geometry, at most WARP_THREADS),
// read from blockDim.x. The forward reduces the row max, then the sum of exp(x - max): two butterflies without
// exponentials cost fewer instructions than one of (m, d) pairs, whose every merge takes an exponential, and short
// rows are as much instruction- as memory-bound.
template <int OP, int DT, int W, int SLOTS, int RPT, int P, int DTO>
__device__ __forceinline__ void warp_body(const void* __restrict__ a, const void* __restrict__ b,
                                          void* __restrict__ out, long long M, int N, long long sa, long long sb,
                                          long long so, int lg) {
    typedef op_traits<OP, DT, W, DTO> op;
    typedef typename op::elem elem;
    typedef typename op::raw raw;
    static_assert(P != 2 || (W > 1 && DTO == DT), "the out rows' own window: 16-byte accesses, the inputs' type");
    static_assert(P != 3 || (W > 1 && !op::FWD), "dy's own window: the backward's, 16-byte accesses");
    constexpr int E = SLOTS * W;
    // lanes per row (<= 32) and row groups per CTA; the plan gives a lane several slots only for rows of more
    // than 32 accesses, so TPR is the compile-time 32 then (immediate load offsets)
    const int lgt = SLOTS > 1 ? 5 : lg;  // log2 lanes per row
    const int TPR = 1 << lgt, GROUPS = blockDim.x >> lgt;
    const int lane = threadIdx.x & (TPR - 1);
    const long long row0 = (long long)blockIdx.x * (GROUPS * RPT) + (threadIdx.x >> lgt);

    // the accesses of inputs a and b (x; or y and dy) as loaded: slot k of row q at q * SLOTS + k. Slot k of row q
    // exists iff k * TPR < lim[q]; on the window path (P) row q starts sh[q] elements into its first access, and
    // element j of slot k is the row's iff lo <= j < hi (BOUNDS; the constants 0 and W on the aligned path).
    raw ra[RPT * SLOTS], rb[RPT * SLOTS];
    bool ok[RPT];
    int sh[RPT], lim[RPT];
    // P = 3, dy's own window (row_body's): y access lane + k * TPR takes dy accesses lane + k * TPR - rud and the
    // next from element rsd[q] on; the next is lane + 1's, lane 0's next slot's for the last lane, and after the
    // last slot dn[q], which the last lane reads itself
    raw dn[P == 3 ? RPT : 1];
    int rsd[P == 3 ? RPT : 1];
#define BOUNDS(q, k)                                         \
    const int lo = P ? sh[q] - (lane + (k) * TPR) * W : 0; \
    const int hi = P ? lo + N : W
#pragma unroll
    for (int q = 0; q < RPT; q++) {
        const long long row = row0 + (long long)q * GROUPS;
        ok[q] = row < M;
        const elem* in_a = static_cast<const elem*>(a) + row * sa;
        sh[q] = P ? os_shift<DT, W>(in_a) : 0;
        lim[q] = (P ? (sh[q] + N + W - 1) / W : N / W) - lane;
        in_a += lane * W - sh[q];
        const os_dy_window dw = os_dy_window_of<DT, W, P>(static_cast<const elem*>(b) + row * sb, sh[q], N);
        if constexpr (P == 3) rsd[q] = dw.s;
        const int rud = dw.u, endd = dw.end;  // endd: dy's accesses
        const elem* in_b = static_cast<const elem*>(b) + row * sb + lane * W - (P == 3 ? rud * W + dw.sh : sh[q]);
#pragma unroll
        for (int k = 0; k < SLOTS; k++) {
            if constexpr (P == 3) {  // dy: also one past the row's accesses (the access before's next)
                const int i = k * TPR, u = lane + i - rud;
                if (ok[q] && i < lim[q]) ra[q * SLOTS + k] = op::io::load(in_a, i);
                rb[q * SLOTS + k] = raw{};
                if (ok[q] && i <= lim[q] && u >= 0 && u < endd) rb[q * SLOTS + k] = op::io::load(in_b, i);
            } else if (ok[q] && k * TPR < lim[q]) {
                op::load(ra[q * SLOTS + k], rb[q * SLOTS + k], in_a, in_b, k * TPR);
            }
        }
        if constexpr (P == 3) {
            const int i = (SLOTS - 1) * TPR;
            dn[q] = raw{};
            if (ok[q] && lane == TPR - 1 && i < lim[q] && lane + i - rud + 1 < endd) {
                dn[q] = op::io::load(in_b, i + 1);
            }
        }
    }
    // the rows' pairs: forward (max, sum of exp(x - max)), v the row's x unpacked; backward the sums and the flags
    float v[RPT][op::FWD && P != 2 ? E : 1];
    float pa[RPT], pb[RPT];
    if constexpr (op::FWD && P == 2) {  // one pass, access by access (os_fold_md): the stores realign ra
#pragma unroll
        for (int q = 0; q < RPT; q++) {
            pa[q] = OS_NEG_INF;
            pb[q] = 0.0f;
#pragma unroll
            for (int k = 0; k < SLOTS; k++) {
                if (ok[q] && k * TPR < lim[q]) {
                    BOUNDS(q, k);
                    float x[W];
                    op::unpack_x(ra[q * SLOTS + k], x, lo, hi);
                    os_fold_md<W>(pa[q], pb[q], x);
                }
            }
        }
        os_rows_reduce<OS_RED_MD, RPT, SLOTS>(pa, pb, TPR);
    } else if constexpr (op::FWD) {
#pragma unroll
        for (int q = 0; q < RPT; q++) {
#pragma unroll
            for (int k = 0; k < SLOTS; k++) {
                if (ok[q] && k * TPR < lim[q]) {
                    BOUNDS(q, k);
                    op::unpack_x(ra[q * SLOTS + k], &v[q][k * W], lo, hi);
                } else {
#pragma unroll
                    for (int j = 0; j < W; j++) v[q][k * W + j] = OS_NEG_INF;
                }
            }
            pa[q] = os_max_of<E>(v[q]);
        }
        os_rows_reduce<OS_RED_MAX, RPT, SLOTS>(pa, pb, TPR);
#pragma unroll
        for (int q = 0; q < RPT; q++) {
            const float s = os_safe_shift(pa[q]);
            if constexpr (OP == 0) {
#pragma unroll
                for (int j = 0; j < E; j++) v[q][j] = os_exp_diff(v[q][j], s);
                pb[q] = os_sum_of<E>(v[q]);
            } else {  // v keeps x - s: the output is then one subtraction, (x - s) - log d
                float e[E];
#pragma unroll
                for (int j = 0; j < E; j++) {
                    v[q][j] -= s;
                    e[j] = os_ex2(v[q][j] * OS_LOG2E);
                }
                pb[q] = os_sum_of<E>(e);
            }
        }
        os_rows_reduce<OS_RED_SUM, RPT, SLOTS>(pb, pa, TPR);
    } else {
        if constexpr (P == 3) {  // dy realigned to y's accesses (each slot shuffled before it is realigned)
#pragma unroll
            for (int q = 0; q < RPT; q++) {
#pragma unroll
                for (int k = 0; k < SLOTS; k++) {
                    const int ka = q * SLOTS + k;
                    raw nb = os_shfl(rb[ka], lane + 1, TPR);
                    if (k + 1 < SLOTS) {
                        const raw l0 = os_shfl(rb[ka + 1], 0, TPR);
                        if (lane == TPR - 1) nb = l0;
                    } else if (lane == TPR - 1) {
                        nb = dn[q];
                    }
                    rb[ka] = os_realign<DT>(rb[ka], nb, rsd[q]);
                }
            }
        }
#pragma unroll
        for (int q = 0; q < RPT; q++) {
            float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f;
#pragma unroll
            for (int k = 0; k < SLOTS; k++) {
                if (ok[q] && k * TPR < lim[q]) {
                    BOUNDS(q, k);
                    op::bwd_fold(ra[q * SLOTS + k], rb[q * SLOTS + k], a0, a1, b0, lo, hi);
                }
            }
            pa[q] = a0 + a1;
            pb[q] = b0;
        }
        os_rows_reduce<op::RED, RPT, SLOTS>(pa, pb, TPR);
    }
#pragma unroll
    for (int q = 0; q < RPT; q++) {
        const long long row = row0 + (long long)q * GROUPS;
        const typename op::out_params o(pa[q], pb[q]);
        typename op::out_elem* const orow = static_cast<typename op::out_elem*>(out) + row * so;
        if constexpr (P == 2) {
            // the out row's own window (os_realign; row_body's): out access lane + ru + k * TPR from input accesses
            // lane + k * TPR and the next one, lane + 1's (lane 0's next slot for the row's last lane); the
            // forward's y recomputed from x
            // (os_realign_from's ru and rs written out: through the helper this kernel compiled to other SASS than the
            // form tested on the GPU, benchmarks/sass_diff.py)
            const int sho = os_shift<DT, W>(orow), ru = sh[q] < sho, rs = sh[q] - sho + ru * W;
            typename op::out_elem* const ro = orow + (lane + ru) * W - sho;
            auto store = [&](const raw& xa, const raw& xb, const raw& ma, const raw& mb, int i) {
                float y[W];
                op::out_of(os_realign<DT>(xa, ma, rs), os_realign<DT>(xb, mb, rs), pa[q], pb[q],
                           [&](float x) {
                               if constexpr (op::FWD) return o.of_x(x);
                               else return x;
                           },
                           y);
                const int lo = sho - (lane + ru + i) * W;
                op::out::store_part(ro, i, y, lo, lo + N);
            };
#pragma unroll
            for (int k = 0; k < SLOTS; k++) {
                const int ka = q * SLOTS + k, kn = k + 1 < SLOTS ? ka + 1 : ka;  // the last lane's: lane 0's next
                raw ma = os_shfl(ra[ka], lane + 1, TPR), mb = op::FWD ? ma : os_shfl(rb[ka], lane + 1, TPR);
                if (k + 1 < SLOTS) {  // (shuffled, then selected: a select of two slots indexed ra in local memory)
                    const raw la = os_shfl(ra[kn], 0, TPR), lb = op::FWD ? la : os_shfl(rb[kn], 0, TPR);
                    if (lane == TPR - 1) {
                        ma = la;
                        mb = lb;
                    }
                }
                if (ok[q] && k * TPR < lim[q]) store(ra[ka], rb[ka], ma, mb, k * TPR);
            }
            if (ok[q] && ru && lane == 0) {  // out access 0, before input access 0
                store(ra[q * SLOTS], rb[q * SLOTS], ra[q * SLOTS], rb[q * SLOTS], -1);
            }
        } else {
            typename op::out_elem* dst = orow + lane * W - sh[q];
#pragma unroll
            for (int k = 0; k < SLOTS; k++) {
                BOUNDS(q, k);
                if constexpr (op::FWD) {
                    float y[W];
#pragma unroll
                    for (int j = 0; j < W; j++) {
                        const float x = v[q][k * W + j];  // e (softmax) or x - s (log_softmax; -inf in an empty row)
                        y[j] = OP == 0 ? x * o.inv : x - o.ld;
                    }
                    if (ok[q] && k * TPR < lim[q]) op::out::store_part(dst, k * TPR, y, lo, hi);
                } else if (ok[q] && k * TPR < lim[q]) {  // inline: bwd_dx would change the scalar log_softmax SASS
                    float y[W], dy[W], dx[W];
                    op::io::unpack(ra[q * SLOTS + k], y);
                    op::io::unpack(rb[q * SLOTS + k], dy);
#pragma unroll
                    for (int j = 0; j < W; j++) dx[j] = bwd_out<OP>(y[j], dy[j], pa[q], pb[q]);
                    op::out::store_part(dst, k * TPR, dx, lo, hi);
                }
            }
        }
    }
#undef BOUNDS
}

// 4 CTAs of 256 threads an SM (64 registers); the out rows' own window (P = 2) holds its rows' raw accesses until
// the stores and takes 3 (85): no spills
template <int OP, int DT, int W, int SLOTS, int RPT, int P, int DTO = DT>
__global__ void __launch_bounds__(WARP_THREADS, P == 2 ? 3 : 4)
fwd_warp(const void* __restrict__ a, const void* __restrict__ b, void* __restrict__ out, long long M, int N,
         long long sa, long long sb, long long so, int lg) {
    warp_body<fwd_op<OP>::value, DT, W, SLOTS, RPT, P, DTO>(a, b, out, M, N, sa, sb, so, lg);
}

template <int OP, int DT, int W, int SLOTS, int RPT, int P, int DTO = DT>
__global__ void __launch_bounds__(WARP_THREADS, P == 2 ? 3 : 4)
bwd_warp(const void* __restrict__ a, const void* __restrict__ b, void* __restrict__ out, long long M, int N,
         long long sa, long long sb, long long so, int lg) {
    warp_body<bwd_op<OP>::value, DT, W, SLOTS, RPT, P, DTO>(a, b, out, M, N, sa, sb, so, lg);
}

// ---- flat: contiguous rows staged in shared memory ------------------------------------------------------------------
// Every tensor is one block of M x N elements, rows N apart, each starting on a 16-byte boundary; N is any length
// (the plan takes rows that are not a whole number of 16-byte accesses). A CTA takes R rows, R x N elements a whole
// number of accesses (the plan's R), copies them to shared memory with 16-byte cp.async, L = 2^LG lanes per row
// compute there (lane l takes elements l, l + L, ...: SLOTS >= N / L of them; a warp 32 / L rows at once) and write
// the outputs over the inputs, and the CTA stores the chunk with 16-byte stores. Only the tensor's last few elements
// (past its last whole access) go element by element: rows of any length start and end inside accesses without
// masks, windows or scalar loads. Short rows take fewer lanes (plan.py's flat_config): on 32 lanes with 2-4 elements
// each, the 2 x 5 shuffle steps of the butterflies were most of a row's instructions (bf16 forward at N = 63: 55% of
// copy on the H200, fp32 91-97%). Forward: the row's values in registers (max, then the sum of exp(x - max), as the
// warp kernels); backward: two passes over shared memory (the sums, then dx).
// One row of a flat forward pass, in place in shared memory: lane l of the row's L takes elements l, l + L, ...; those
// past len (the row's length, or 0 for a row past the chunk) read as -inf and are not written, but in the first SURE
// slots (SURE > 0: L x SURE < len), which are not tested. The max, then the sum of exp(x - max), as the warp kernels.
// Tested elements cost a compare, a -inf and predicated loads and stores each: with every element tested, 16-bit rows of
// 1023 and 1025 ran at 86-88% of copy (fp32 97%: half the elements a byte), 93-94% with SURE (h200-flat-sure-9f876fa.txt).
template <int OP, int DT, int SLOTS, int L, int SURE>
__device__ __forceinline__ void flat_fwd_row(typename os_elem<DT>::type* ra, int len, int lane) {
    typedef op_traits<OP, DT, 16 / sizeof(typename os_elem<DT>::type)> op;
    auto has = [&](int k) { return k < SURE || lane + L * k < len; };
    float v[SLOTS];
#pragma unroll
    for (int k = 0; k < SLOTS; k++) v[k] = has(k) ? os_to_f<DT>(ra[lane + L * k]) : OS_NEG_INF;
    float m = os_max_of<SLOTS>(v), d, unused = 0.0f;
    os_xor_reduce<OS_RED_MAX, L>(m, unused);
    const float s = os_safe_shift(m);
    if constexpr (OP == 0) {
#pragma unroll
        for (int k = 0; k < SLOTS; k++) v[k] = os_exp_diff(v[k], s);
        d = os_sum_of<SLOTS>(v);
    } else {  // v keeps x - s: the output is then one subtraction, (x - s) - log d
        float e[SLOTS];
#pragma unroll
        for (int k = 0; k < SLOTS; k++) {
            v[k] -= s;
            e[k] = os_ex2(v[k] * OS_LOG2E);
        }
        d = os_sum_of<SLOTS>(e);
    }
    os_xor_reduce<OS_RED_SUM, L>(d, unused);
    const typename op::out_params o(m, d);
#pragma unroll
    for (int k = 0; k < SLOTS; k++) {
        if (has(k)) ra[lane + L * k] = os_from_f<DT>(OP == 0 ? v[k] * o.inv : v[k] - o.ld);
    }
}

template <int OP, int DT, int SLOTS, int LG, int SURE>
__device__ __forceinline__ void flat_body(const void* __restrict__ a, const void* __restrict__ b,
                                          void* __restrict__ out, long long M, int N, int R) {
    static_assert(LG >= 2 && LG <= 5, "flat: 4..32 lanes per row");
    typedef op_traits<OP, DT, 16 / sizeof(typename os_elem<DT>::type)> op;
    typedef typename op::elem elem;
    constexpr int W = 16 / sizeof(elem), L = 1 << LG;
    extern __shared__ uint4 smem_flat[];  // the chunk of a (x; or y), then of b (dy) at R x N elements
    elem* const sa = reinterpret_cast<elem*>(smem_flat);
    elem* const sb = sa + (long long)R * N;
    const long long row0 = (long long)blockIdx.x * R;
    const int rows = (int)min((long long)R, M - row0);
    const int n = rows * N, nv = n / W, tail = n - nv * W;  // the last CTA's chunk may end inside an access
    const elem* ga = static_cast<const elem*>(a) + row0 * N;
    const elem* gb = static_cast<const elem*>(b) + row0 * N;
    elem* go = static_cast<elem*>(out) + row0 * N;
    for (int v = threadIdx.x; v < nv; v += FLAT_THREADS) {
        os_cp_async16(sa + v * W, ga + v * W);
        if constexpr (!op::FWD) os_cp_async16(sb + v * W, gb + v * W);
    }
    os_cp_async_commit();
    if (threadIdx.x < tail) {
        sa[nv * W + threadIdx.x] = ga[nv * W + threadIdx.x];
        if constexpr (!op::FWD) sb[nv * W + threadIdx.x] = gb[nv * W + threadIdx.x];
    }
    os_cp_async_wait_all();
    __syncthreads();

    // Passes of FLAT_THREADS / L rows: row r = p + slot, the thread's row slot. The loop runs while the warp's first
    // row exists (p + first < rows, first its first slot: the same test in every lane), so every lane of the warp
    // takes every full-mask shuffle of the butterflies; a slot past the last row (the last pass, L < 32) reduces a
    // row of length 0 (the neutral -inf / 0) and reads and writes nothing.
    const int lane = threadIdx.x & (L - 1), slot = threadIdx.x >> LG, first = slot & ~(31 >> LG);
    for (int p = 0; p + first < rows; p += FLAT_THREADS >> LG) {
        const int r = p + slot, len = r < rows ? N : 0;
        elem* ra = sa + r * N;
        if constexpr (op::FWD) {
            // a pass whose rows all exist (every pass but a chunk's last, most often) reads and writes its first SURE
            // slots without a mask (the plan's slots keep L x SURE < N); the last pass tests every element
            if (p + (FLAT_THREADS >> LG) <= rows) flat_fwd_row<OP, DT, SLOTS, L, SURE>(ra, N, lane);
            else flat_fwd_row<OP, DT, SLOTS, L, 0>(ra, len, lane);
        } else {
            const elem* rb = sb + r * N;
            float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f;
#pragma unroll 8  // 16 loads in flight: unrolled whole, the fp32 softmax's held 2 x 16 and more and spilled
            for (int k = 0; k < SLOTS; k++) {  // the elements past the row padded, not skipped: predicated loads, no branch
                const int j = lane + L * k;
                const float y = j < len ? os_to_f<DT>(ra[j]) : bwd_pad_y<OP>(), dy = j < len ? os_to_f<DT>(rb[j]) : 0.0f;
                bwd_acc<OP>(y, dy, k & 1 ? a1 : a0, b0);
            }
            float s = a0 + a1;
            os_xor_reduce<op::RED, L>(s, b0);
#pragma unroll 8
            for (int k = 0; k < SLOTS; k++) {
                const int j = lane + L * k;
                const float y = j < len ? os_to_f<DT>(ra[j]) : bwd_pad_y<OP>(), dy = j < len ? os_to_f<DT>(rb[j]) : 0.0f;
                const float dx = bwd_out<OP>(y, dy, s, b0);
                if (j < len) ra[j] = os_from_f<DT>(dx);
            }
        }
    }
    __syncthreads();
    for (int v = threadIdx.x; v < nv; v += FLAT_THREADS)
        *reinterpret_cast<uint4*>(go + v * W) = *reinterpret_cast<const uint4*>(sa + v * W);
    if (threadIdx.x < tail) go[nv * W + threadIdx.x] = sa[nv * W + threadIdx.x];
}

// The flat kernels' CTAs per SM: 16-bit data 6 (40 registers; 6 chunks of 32 KB fit an SM's shared memory), but the
// forward beyond 12 slots a lane (fp16 in 16 spilled 8 bytes at 40 registers), and fp32 4. ncu at 4 (bf16 softmax
// 1040447 x 129, h200-ncu-misses-4651798.txt): 64 registers, 8 warps a scheduler, 57% of issue slots, stalls mostly on
// shared-memory loads, 85% of copy. At 6, A/B on the H200 (h200-ab-flat-ctas-4651798.txt, 16-bit, every op, N =
// 33-255): a median of +5.3 points of copy, 127 / 129 softmax 88 / 85 -> 94 / 92, their softmax backward 98 / 91 ->
// 99 / 99.
template <bool FWD, int DT, int SLOTS> __host__ __device__ constexpr int flat_ctas() {
    return DT != 0 && (!FWD || SLOTS <= 12) ? 6 : 4;
}

template <int OP, int DT, int SLOTS, int LG, int SURE>
__global__ void __launch_bounds__(FLAT_THREADS, flat_ctas<true, DT, SLOTS>())
fwd_flat(const void* __restrict__ a, const void* __restrict__ b, void* __restrict__ out, long long M, int N, int R) {
    flat_body<fwd_op<OP>::value, DT, SLOTS, LG, SURE>(a, b, out, M, N, R);
}

template <int OP, int DT, int SLOTS, int LG>
__global__ void __launch_bounds__(FLAT_THREADS, flat_ctas<false, DT, SLOTS>())
bwd_flat(const void* __restrict__ a, const void* __restrict__ b, void* __restrict__ out, long long M, int N, int R) {
    flat_body<bwd_op<OP>::value, DT, SLOTS, LG, 0>(a, b, out, M, N, R);
}

// ---- row: one row per CTA or per cluster ----------------------------------------------------------------------------
// One row per CTA (C == 1) or per cluster of C CTAs (the partial pairs through DSMEM), or per group of grp.size CTAs
// anywhere on the chip (C == 0: the group regime, the pairs through global memory); THREADS <= 512 threads hold
// SLOTS accesses each in registers and SSLOTS more in dynamic shared memory (cp.async).

// Every shared-memory slot a row kernel's thread holds, as fn(j, lo, hi), j its slot: on the window path each one is a
// whole access of the row but the row's last (the thread's slot jt, if it holds it: -1 otherwise), which runs after
// the others with its bounds (lo_last, lo_last + N); the others take the constants 0 and W, so that no mask is made.
// ptxas had if-converted the masks into every slot: 62% more instructions a slot, and the 16-bit forward of N = 32001
// (P = 1) ran at 84% of copy where 32768 (P = 0, the same geometry) ran at 93%.
template <int P, int W, int THREADS, int SLOTS, int SSLOTS, class F>
__device__ __forceinline__ void row_slots(int lim, int jt, int lo_last, int N, const F& fn) {
#pragma unroll 1
    for (int j = 0; j < SSLOTS; j++) {
        if ((SLOTS + j) * THREADS < lim && j != jt) fn(j, 0, W);
    }
    if (P && jt >= 0) fn(jt, lo_last, lo_last + N);
}

template <int OP, int DT, int W, int THREADS, int SLOTS, int SSLOTS, int C, int P, int DTO>
__device__ __forceinline__ void row_body(const void* __restrict__ a, const void* __restrict__ b, void* __restrict__ out,
                                         int N, long long sa, long long sb, long long so, const ce_args& ce = {},
                                         const os_group& grp = {}) {
    typedef op_traits<OP, DT, W, DTO> op;
    typedef typename op::elem elem;
    typedef typename op::raw raw;
    static_assert(SSLOTS == 0 || W > 1, "shared-memory slots need 16-byte accesses");
    static_assert(C >= 0 && C <= 16 && (C & (C - 1)) == 0, "cluster: power of 2 <= 16 (0: a group, grp)");
    static_assert(C != 0 || (P <= 1 && OP != OP_CE), "a group: the aligned rows and the window (P <= 1), softmax ops");
    static_assert(THREADS % 32 == 0 && THREADS <= ROW_MAX_THREADS, "threads: warps, <= 512");
    static_assert(P != 2 || (W > 1 && DTO == DT && THREADS >= 64),
                  "the out rows' own window: 16-byte accesses, the inputs' type, xch read after a block barrier");
    static_assert(P != 3 || (W > 1 && !op::FWD), "dy's own window: the backward's, 16-byte accesses");
    constexpr int E = SLOTS * W;
    constexpr int CAP = THREADS * (SLOTS + SSLOTS);  // accesses one CTA holds
    constexpr int IN = op::FWD ? 1 : 2;              // inputs per access: x; or y and dy
    __shared__ float red_a[THREADS / 32], red_b[THREADS / 32], part[2];
    extern __shared__ uint4 smem_slots[];  // [SSLOTS][IN][THREADS] vectors: x; or y then dy
    long long row;
    int rank;
    if constexpr (C == 0) {
        row = grp.row;
        rank = grp.rank;
    } else {
        os_cluster_item<C>(row, rank);
    }
    const int CS = C == 0 ? grp.size : C;  // CTAs a row
    const int t = threadIdx.x;
    // A cluster's CTAs share the row evenly: CH accesses each (the last one the rest), CH the accesses of the
    // longest window a row of N can take (N + W - 1 elements) over C; the plan sizes the shared memory for CH (a
    // CTA filled to CAP before the next one starts left the last CTAs idle and the cluster waiting on the first).
    const int CH = C == 1 ? CAP : ((P ? N + 2 * W - 2 : N) / W + CS - 1) / CS;
    const int first = rank * CH + t;  // the thread's first access in the row; slot k is at first + k * THREADS
    // the window path (P): the row starts sh elements into its first access; element j of the access i accesses
    // past `first` is the row's iff lo <= j < hi (BOUNDS; the constants 0 and W on the aligned path)
    const elem* in_a = static_cast<const elem*>(a) + row * sa;
    const int sh = P ? os_shift<DT, W>(in_a) : 0;
    const int end = P ? (sh + N + W - 1) / W : N / W;                 // the row's accesses
    const int lim = (C == 1 ? end : min(end, rank * CH + CH)) - first;  // slot k exists iff k * THREADS < lim
    in_a += (long long)first * W - sh;
    // P = 3, dy's own window: dy's row starts dw.sh elements into its first access; y access first + i takes dy
    // accesses first + i - rud and the next from element rsd on (os_realign), the next one lane + 1's: a warp's last
    // lane copies its own (dnb) with the loads, so that no barrier waits for the next warp's
    const os_dy_window dw = os_dy_window_of<DT, W, P>(static_cast<const elem*>(b) + row * sb, sh, N);
    const int rud = dw.u, rsd = dw.s, endd = dw.end;  // endd: dy's accesses
    const elem* in_b = static_cast<const elem*>(b) + row * sb + (long long)first * W - (P == 3 ? rud * W + dw.sh : sh);
#define BOUNDS(i)                                        \
    const int lo = P ? sh - (first + (i)) * W : 0; \
    const int hi = P ? lo + N : W
    // P = 2, the out row's own window (os_realign): it starts sho elements into its first access; out access
    // first + ru + i takes input accesses first + i and first + i + 1 from element rs on
    const int sho = P == 2 ? os_shift<DT, W>(static_cast<const elem*>(out) + row * so) : 0;
    const os_window_step wo = os_realign_from<W>(sh, sho);
    const int ru = wo.u, rs = wo.s;
    // A warp's last lane's next access is not lane + 1's but the next warp's lane 0's: lane 0 leaves its accesses
    // in xch ([input][slot][warp]; REG_OUTS: its register slots' outputs, [slot][warp]). A cluster's CTA ends its
    // share anywhere: the next CTA's first access (its inputs) is copied to xch's end (XN) with the loads.
    // REG_OUTS (P = 2, the row in registers): the register slots' outputs are realigned, packed as their inputs were
    // read (one exponential a forward element, one access to realign and shuffle, not the backward's two): 16-bit
    // x[:, 1:] of 32768 x 4097, 74 -> 82% of copy forward, 91 -> 96% backward. With shared-memory slots the inputs
    // are, as the slots' are: there the outputs' barrier cost 2-6 points (h200-ab-realign-outputs-463c65c.txt).
    constexpr bool REG_OUTS = P == 2 && SSLOTS == 0;
    const bool last_lane = (t & 31) == 31;
    constexpr int NW = THREADS / 32, XN = (REG_OUTS ? 1 : IN) * SLOTS * NW;
    // P = 3: xch holds each warp's last lane's own copy of the dy access after each of its slots (dnb, [slot][warp])
    __shared__ raw xch[P == 2 ? XN + IN : P == 3 ? (SLOTS + SSLOTS) * NW : 1];
    raw* const dnb = xch;

    raw ra[SLOTS], rb[SLOTS];
#pragma unroll
    for (int k = 0; k < SLOTS; k++) {
        if constexpr (P == 3) {
            // dy: the thread's access (first + k * THREADS - rud) also one past the share's, the access before's next
            const int i = k * THREADS, u = first + i - rud;
            if (i < lim) ra[k] = op::io::load(in_a, i);
            rb[k] = raw{};
            if (i <= lim && u >= 0 && u < endd) rb[k] = op::io::load(in_b, i);
        } else if (k * THREADS < lim) {
            op::load(ra[k], rb[k], in_a, in_b, k * THREADS);
        }
    }
    if constexpr (P == 3) {  // a group of its own, waited for before the register slots' realignment
        if (last_lane) {
#pragma unroll
            for (int k = 0; k < SLOTS; k++) {
                const int i = k * THREADS;
                if (i < lim && first + i - rud + 1 < endd) os_cp_async16(&dnb[k * NW + (t >> 5)], in_b + (i + 1) * W);
            }
        }
        os_cp_async_commit();
    }
    if constexpr (P == 2 && C > 1) {
        if (t == 0 && CH < end - first) {
            os_cp_async16(&xch[XN], in_a + (long long)CH * W);
            if constexpr (!op::FWD) os_cp_async16(&xch[XN + 1], in_b + (long long)CH * W);
        }
        os_cp_async_commit();
    }
    if constexpr (SSLOTS > 0) {
#pragma unroll
        for (int j = 0; j < SSLOTS; j++) {
            const int i = (SLOTS + j) * THREADS;
            if constexpr (P == 3) {
                const int u = first + i - rud;
                if (i < lim) os_cp_async16(&smem_slots[IN * j * THREADS + t], in_a + i * W);
                if (i <= lim && u >= 0 && u < endd) {
                    os_cp_async16(&smem_slots[(IN * j + 1) * THREADS + t], in_b + i * W);
                }
                if (last_lane && i < lim && u + 1 < endd) {
                    os_cp_async16(&dnb[(SLOTS + j) * NW + (t >> 5)], in_b + (i + 1) * W);
                }
            } else if (i < lim) {
                os_cp_async16(&smem_slots[IN * j * THREADS + t], in_a + i * W);
                if constexpr (!op::FWD) os_cp_async16(&smem_slots[(IN * j + 1) * THREADS + t], in_b + i * W);
            }
        }
        os_cp_async_commit();
    }
    // the row's last access, counted from the thread's first, if the thread holds it in shared memory: its slot jt
    const int e_last = end - 1 - first;
    const int jt = P && e_last >= SLOTS * THREADS && e_last < lim && e_last % THREADS == 0 ? e_last / THREADS - SLOTS
                                                                                            : -1;
    const int lo_last = sh - (end - 1) * W;  // BOUNDS' lo of the row's last access
    // cross-entropy: every thread reads the row's target, after issuing the row's loads (its latency hides behind
    // theirs). The CTA holding the target column (rank 0 when the row is ignored or the target out of range) is the
    // row's owner: its thread 0 reads the target logit now, before any CTA of the row writes a gradient (after the
    // row's reduction, which this CTA joins later), and at the end writes the row's loss and lse and the target's
    // gradient term. The scale comes from ce_targets, the kernel before this one (ce_row may be launched while it
    // still runs: its loads of the row, made before ce_targets, are already in flight): waited for here. (P = 2:
    // the owner is the CTA whose thread stores the target's out access, after the realignment.)
    long long tgt = 0;
    bool counted = false, hit = false, owner = false;
    float xt = 0.0f, sx = 0.0f;  // the target logit, the thread's sum of x (label smoothing)
    float scale = 0.0f;          // the reduction's factor: read now, used after the row's reduction
    if constexpr (OP == OP_CE) {
        os_grid_wait();
        scale = os_ld_after_wait(ce.scale);
        tgt = ce.target[row];
        counted = tgt != ce.ignore;
        hit = counted && tgt >= 0 && tgt < N;
        owner = t == 0 && (hit ? (P == 2 ? (int)((tgt + sho) / W) - ru : (int)((tgt + sh) / W)) / CH : 0) == rank;
        if (owner && hit) xt = os_to_f<DT>(static_cast<const elem*>(a)[row * sa + tgt]);
    }
    // the thread's pair (pa, pb): forward (mt, d), mt the max of its share, v its x (softmax: then e); backward
    // the sums of even and odd elements (a0, a1: two dependency chains) and the flag b0. (a0, a1, b0 declared
    // first: declared in the backward branch, they swap registers in the softmax backward kernels.)
    float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f;
    float v[op::FWD && (P != 2 || REG_OUTS) ? E : 1], mt, pa, pb;
    if constexpr (op::FWD && P == 2 && !REG_OUTS) {
        // the out rows' own window with shared-memory slots (REG_OUTS false): one pass, access by access
        // (os_fold_md); the stores realign ra and the slots, and recompute y from them
        float d = 0.0f;
        mt = OS_NEG_INF;
        auto fold = [&](const raw& r, int i) {
            BOUNDS(i);
            float x[W];
            op::unpack_x(r, x, lo, hi);
            os_fold_md<W>(mt, d, x);
            if constexpr (OP == OP_CE) {
                if (ce.eps != 0.0f) {  // the row's sum (label smoothing), its elements only
#pragma unroll
                    for (int u = 0; u < W; u++) sx += u >= lo && u < hi ? x[u] : 0.0f;
                }
            }
        };
#pragma unroll
        for (int k = 0; k < SLOTS; k++) {
            if (k * THREADS < lim) fold(ra[k], k * THREADS);
        }
        if constexpr (SSLOTS > 0) {
            os_cp_async_wait_all();
#pragma unroll 1
            for (int j = 0; j < SSLOTS; j++) {
                if ((SLOTS + j) * THREADS < lim) fold(smem_slots[IN * j * THREADS + t], (SLOTS + j) * THREADS);
            }
        }
        pa = mt;
        pb = d;
    } else if constexpr (op::FWD) {
        // The window's masks (P = 1) under each slot's unpack split the loop into blocks, and ptxas placed each
        // slot's load in its block, after the earlier slots' unpacking: 2-5 memory latencies a row in 4 slots or 8
        // where P = 0 pays one (benchmarks/sass_loads.py). APART: unpack whole accesses, then mask the row's first
        // and last access in a loop of their own; every load issues at the start. Only in one CTA a row, and with
        // shared-memory slots only in 16 bits (fp32 measured 1-4 points slower: cp.async already in flight at the
        // start), and not in the tightly bound kernels (up to 16 elements a thread, bound to 2048 threads an SM: fp32
        // in 3 or 4 slots; the 16-bit log-softmax in 3): ptxas spilled in fp32's 4 slots and log-softmax's 3, and
        // fp32 in 3 slots measured level.
        // The 16-bit log-softmax in register slots alone puts every access through the selects, masked or not: a
        // branch around them left its predicate live across the reduction's barrier (4 slots at 48 registers: 8
        // bytes spilled). Elsewhere the branch stays: without it the 16-bit softmax ran 1-6 points slower
        // (h200-log-rows-lean-d6c7663.txt), fp32 moved 2 of 8 loads late again, and cross-entropy spilled.
        constexpr bool APART =
            P && C == 1 && (SSLOTS == 0 || DT != 0) && SLOTS * W > 16 && !(OP == 1 && DT != 0 && SLOTS <= 3);
#pragma unroll
        for (int k = 0; k < SLOTS; k++) {
            if (k * THREADS < lim) {
                BOUNDS(k * THREADS);
                op::unpack_x(ra[k], &v[k * W], APART ? 0 : lo, APART ? W : hi);
            } else {
#pragma unroll
                for (int j = 0; j < W; j++) v[k * W + j] = OS_NEG_INF;
            }
        }
        if constexpr (APART) {
#pragma unroll
            for (int k = 0; k < SLOTS; k++) {
                BOUNDS(k * THREADS);
                if ((OP == 1 && DT != 0 && SSLOTS == 0) || (k * THREADS < lim && (lo > 0 || hi < W))) {
#pragma unroll
                    for (int j = 0; j < W; j++) v[k * W + j] = j >= lo && j < hi ? v[k * W + j] : OS_NEG_INF;
                }
            }
        }
        mt = os_max_of<E>(v);
        if constexpr (OP == OP_CE) {
            if (ce.eps != 0.0f) {  // the row's sum (label smoothing), its elements only
#pragma unroll
                for (int k = 0; k < SLOTS; k++) {
                    BOUNDS(k * THREADS);
#pragma unroll
                    for (int j = 0; j < W; j++) sx += k * THREADS < lim && j >= lo && j < hi ? v[k * W + j] : 0.0f;
                }
            }
        }
        // 16-bit data in shared memory (FOLD): its outputs are recomputed from x, and each access folds into the
        // thread's pair as it comes (os_fold_md, from the registers' max on): one pass over the shared memory, not a
        // pass for the max and one for the exponentials, each unpacking the data (the registers' exponentials then
        // take the share's max as their shift). A/B on the H200 (h200-ab-fwd-fold-73f0fca.txt), 16-bit forward at
        // 32001-262144: +0.6 to +3.9 points of copy. fp32 keeps the two passes (softmax writes its e back over x, one
        // exponential an element; its unpacking costs nothing, and the fold's merges cost exponentials).
        constexpr bool FOLD = DT != 0;
        float d, ds = 0.0f;  // ds: the shared-memory accesses' sum of exp(x - mt) (their fold's)
        if constexpr (SSLOTS > 0) {
            os_cp_async_wait_all();  // each thread reads back only the vectors it copied itself
            row_slots<P, W, THREADS, SLOTS, SSLOTS>(lim, jt, lo_last, N, [&](int j, int lo, int hi) {
                float f[W];
                op::unpack_x(smem_slots[IN * j * THREADS + t], f, lo, hi);
                if constexpr (!FOLD) mt = fmaxf(mt, os_max_of<W>(f));
                else os_fold_md<W>(mt, ds, f);
                if constexpr (OP == OP_CE) {
                    if (ce.eps != 0.0f) {
#pragma unroll
                        for (int u = 0; u < W; u++) sx += u >= lo && u < hi ? f[u] : 0.0f;
                    }
                }
            });
        }
        const float st = os_safe_shift(mt);
        if constexpr (op::EXP) {
#pragma unroll
            for (int j = 0; j < E; j++) v[j] = os_exp_diff(v[j], st);
            d = os_sum_of<E>(v);
        } else {
            // log-softmax: v keeps x - st, the exponentials' own difference, so that each output is one subtraction
            // (reg_y). Each exponential summed as it comes: summed from an array of them, the 16-bit log-softmax in
            // 4 slots spilled 4-16 bytes at 48 registers
            float d0 = 0.0f, d1 = 0.0f;
#pragma unroll
            for (int j = 0; j < E; j += 2) {
                v[j] -= st;
                d0 += os_ex2(v[j] * OS_LOG2E);
                if (j + 1 < E) {
                    v[j + 1] -= st;
                    d1 += os_ex2(v[j + 1] * OS_LOG2E);
                }
            }
            d = d0 + d1;
        }
        if constexpr (SSLOTS > 0 && FOLD) d += ds;
        if constexpr (SSLOTS > 0 && !FOLD) {
            row_slots<P, W, THREADS, SLOTS, SSLOTS>(lim, jt, lo_last, N, [&](int j, int lo, int hi) {
                float f[W];
                op::unpack_x(smem_slots[IN * j * THREADS + t], f, lo, hi);
#pragma unroll
                for (int u = 0; u < W; u++) f[u] = os_exp_diff(f[u], st);
                d += os_sum_of<W>(f);
                // fp32 softmax keeps e in place (one exponential per element)
                if constexpr (op::EXP) smem_slots[IN * j * THREADS + t] = os_io<0, 4>::pack(f);
            });
        }
        pa = mt;
        pb = d;
    } else {
        // P = 3: dy's register slots realigned to y's (the shared-memory slots' copies may still run), all of them
        // before the fold (16-bit log-softmax at 4096: 86 against 79% of copy each before its own); with shared-memory
        // slots each one before its own fold (all first, ptxas spilled 4-8 bytes in 11 of their instantiations at 64
        // registers: fp32's, and fp16's in one slot)
        constexpr bool EACH = SSLOTS > 0;
        // dy access r realigned to y's with the next one, lane + 1's (a warp's last lane's: its own copy, `next`)
#define DY_REALIGN(r, next)                  \
    {                                        \
        raw nb = os_shfl(r, t + 1);          \
        if (last_lane) nb = next;            \
        r = os_realign<DT>(r, nb, rsd);      \
    }
        if constexpr (P == 3) os_cp_async_wait_group<(SSLOTS > 0 ? 1 : 0)>();
        if constexpr (P == 3 && !EACH) {
#pragma unroll
            for (int k = 0; k < SLOTS; k++) DY_REALIGN(rb[k], dnb[k * NW + (t >> 5)]);
        }
#pragma unroll
        for (int k = 0; k < SLOTS; k++) {
            if constexpr (P == 3 && EACH) DY_REALIGN(rb[k], dnb[k * NW + (t >> 5)]);
            if (k * THREADS < lim) {
                BOUNDS(k * THREADS);
                op::bwd_fold(ra[k], rb[k], a0, a1, b0, lo, hi);
            }
        }
        if constexpr (SSLOTS > 0) {
            os_cp_async_wait_all();
            if constexpr (P == 3) {  // and its shared-memory slots, in place (each thread reads back only its own;
                                     // DY_REALIGN on a copy compiled to other SASS than this, the form tested)
#pragma unroll 1
                for (int j = 0; j < SSLOTS; j++) {
                    if ((SLOTS + j) * THREADS >= lim + (t & 31)) break;  // warp-uniform: the shuffle's lanes all here
                    raw& s = smem_slots[(IN * j + 1) * THREADS + t];
                    const raw own = s;
                    raw nb = os_shfl(own, t + 1);
                    if (last_lane) nb = dnb[(SLOTS + j) * NW + (t >> 5)];
                    s = os_realign<DT>(own, nb, rsd);
                }
            }
            row_slots<P, W, THREADS, SLOTS, SSLOTS>(lim, jt, lo_last, N, [&](int j, int lo, int hi) {
                op::bwd_fold(smem_slots[IN * j * THREADS + t], smem_slots[(IN * j + 1) * THREADS + t], a0, a1, b0, lo,
                             hi);
            });
        }
        pa = a0 + a1;
        pb = b0;
    }
    if constexpr (P == 2) {
        if (!REG_OUTS && (t & 31) == 0) {  // (REG_OUTS: lane 0 leaves the outputs, after the reduction)
#pragma unroll
            for (int k = 0; k < SLOTS; k++) {
                xch[k * NW + (t >> 5)] = ra[k];
                if constexpr (!op::FWD) xch[(SLOTS + k) * NW + (t >> 5)] = rb[k];
            }
        }
        if constexpr (C > 1 && SSLOTS == 0) os_cp_async_wait_all();  // (with slots: waited for before their reads)
    }
    os_block_reduce<op::RED, (THREADS & (THREADS - 1)) == 0>(pa, pb, red_a, red_b);
    if constexpr (C > 1) os_cluster_reduce<op::RED, C>(pa, pb, part);
    if constexpr (C == 0) {
        if (!os_group_reduce<op::RED>(pa, pb, grp)) return;  // its share abandoned: grp_fix writes it
    }

    const typename op::out_params o(pa, pb);
    float f;  // softmax: y = e * f, e = exp(x - mt) in v
    if constexpr (op::FWD) f = os_exp_diff(mt, o.s) * o.inv;
    typename op::out_elem* dst = static_cast<typename op::out_elem*>(out) + row * so + (long long)first * W - sh;
    // cross-entropy: the row's sum of x (a second reduction, only with label smoothing: eps is uniform), the
    // per-row loss and lse, the gradient's coefficients
    ce_grad g, ge, gx;  // the gradient of p; of e in registers (and fp32 smem); of exp(x - s) (16-bit smem)
    float gt = 0.0f;    // the owner's: the target element's gradient, term included
    if constexpr (OP == OP_CE) {
        const float lse = o.s + logf(pb);
        // a counted target out of range: the row's gradient NaN, as its loss (the op raises TargetError once the
        // host has read the check's flag, possibly after this gradient reached .grad: nothing silently wrong)
        g = ce_grad(ce, counted && !hit ? __int_as_float(0x7fffffff) : scale, counted, lse);
        ge = g.of(f);
        gx = g.of(o.inv);
        if (ce.eps != 0.0f) {
            __shared__ float ce_red[2][THREADS / 32], ce_part[2];
            float unused = 0.0f;
            os_block_reduce<OS_RED_SUM, (THREADS & (THREADS - 1)) == 0>(sx, unused, ce_red[0], ce_red[1]);
            if constexpr (C > 1) {
                os_cluster_wait();  // the (m, d) reduction's second barrier, before the next one's first
                os_cluster_reduce<OS_RED_SUM, C>(sx, unused, ce_part);
            }
        }
        if (owner) {  // a counted target out of range: a NaN loss (the op raises TargetError)
            const float loss = lse - (1.0f - ce.eps) * xt - ce.eps * ce.inv_v * sx + ce.z * lse * lse;
            ce.loss[row] = counted ? (hit ? loss : __int_as_float(0x7fffffff)) : 0.0f;
            ce.lse[row] = lse;
            gt = g(os_exp_diff(xt, lse)) - scale * (1.0f - ce.eps);
        }
    }
    // the forward's outputs of register slot k, from v (softmax: its exponentials; log-softmax: x - st, st the
    // thread's shift, so y = (x - st) - lc with lc = (sh - st) + ld, both terms <= 0 <= lc: one subtraction an
    // element, where (x - sh) - ld took two; an empty row's lc is +inf, an empty thread's v -inf: y = -inf)
    float lc = 0.0f;
    if constexpr (OP == 1) lc = (o.sh - os_safe_shift(mt)) + o.ld;
    auto reg_y = [&](int k, float* y) {
        if constexpr (op::FWD) {
#pragma unroll
            for (int j = 0; j < W; j++) {
                if constexpr (OP == OP_CE) y[j] = ge(v[k * W + j]);
                else y[j] = OP == 0 ? v[k * W + j] * f : v[k * W + j] - lc;
            }
        }
    };
    if constexpr (P == 2) {
        // the out row's own window: out access first + ru + i (at ro + i * W) from accesses i and i + 1, realigned
        // (REG_OUTS: the register slots' outputs; else, and always the shared-memory slots', their inputs, then y
        // recomputed from x). Every lane shuffles (lane + 1's access); the last lane takes its next one from shared
        // memory (xch, or the slots'); so does the one whose next access is the next CTA's (its inputs).
        auto of_x = [&](float x) {
            if constexpr (OP == OP_CE) return gx(os_exp_diff(x, o.s));
            else if constexpr (op::FWD) return o.of_x(x);
            else return x;
        };
        typename op::out_elem* const ro = dst + (long long)(sh + ru * W - sho);
        auto store_in = [&](const raw& xa, const raw& xb, const raw& ma, const raw& mb, int i) {  // from inputs
            float y[W];
            op::out_of(os_realign<DT>(xa, ma, rs), os_realign<DT>(xb, mb, rs), pa, pb, of_x, y);
            const int lo = sho - (first + ru + i) * W;
            op::out::store_part(ro, i, y, lo, lo + N);
        };
        auto store_out = [&](const raw& ya, const raw& ma, int i) {  // from outputs (packed)
            const int lo = sho - (first + ru + i) * W;
            op::io::store_raw_part(ro, i, os_realign<DT>(ya, ma, rs), lo, lo + N);
        };
        auto out_raw = [&](const raw& xa, const raw& xb) {  // an access's outputs from its inputs, packed
            float y[W];
            op::out_of(xa, xb, pa, pb, of_x, y);
            return op::io::pack(y);
        };
        // REG_OUTS: the slots' outputs packed (into ra) before one barrier, lane 0's into xch: all of up to 4 slots;
        // fp32's 8 in rounds of 2 (ptxas, at 64 registers: all 8 at once spilled in 97 kernels, rounds of 4 in 6 of
        // them, rounds of 3 in 4, of 2 in none). Each round packs the next one's first slot too (the last warp's last
        // lane takes warp 0's).
        constexpr int HOLD = REG_OUTS && SLOTS > 4 ? 2 : SLOTS;
#pragma unroll
        for (int k0 = 0; k0 < SLOTS; k0 += HOLD) {
            if constexpr (REG_OUTS) {
#pragma unroll
                for (int k = k0 == 0 ? 0 : k0 + 1; k < k0 + HOLD + 1 && k < SLOTS; k++) {
                    if constexpr (op::FWD) {
                        float y[W];
                        reg_y(k, y);
                        ra[k] = op::io::pack(y);
                    } else {
                        ra[k] = out_raw(ra[k], rb[k]);
                    }
                    if ((t & 31) == 0) xch[k * NW + (t >> 5)] = ra[k];
                }
                __syncthreads();
            }
#pragma unroll
            for (int k = k0; k < k0 + HOLD && k < SLOTS; k++) {
                const int i = k * THREADS;
                raw ma = os_shfl(ra[k], t + 1), mb = REG_OUTS || op::FWD ? ma : os_shfl(rb[k], t + 1);
                if (i + 1 >= lim) {  // the next CTA's (C > 1), or past the row
                    if (C > 1 && i + 1 < end - first) {
                        if constexpr (REG_OUTS) ma = out_raw(xch[XN], xch[XN + IN - 1]);
                        else ma = xch[XN], mb = xch[XN + IN - 1];
                    }
                } else if (last_lane) {
                    const int w = (t >> 5) + 1, kn = w < NW ? k : k + 1;  // the next warp's lane 0, or warp 0's next
                    if (kn < SLOTS) {
                        ma = xch[kn * NW + (w < NW ? w : 0)];
                        if constexpr (!REG_OUTS && !op::FWD) mb = xch[(SLOTS + kn) * NW + (w < NW ? w : 0)];
                    } else if (SSLOTS > 0) {  // thread 0's first shared-memory slot
                        ma = smem_slots[0];
                        mb = smem_slots[(IN - 1) * THREADS];
                    }
                }
                if constexpr (REG_OUTS) {
                    if (i < lim) store_out(ra[k], ma, i);
                    if (k == 0 && ru && first == 0) store_out(ra[0], ra[0], -1);  // out access 0, before input 0
                } else {
                    if (i < lim) store_in(ra[k], rb[k], ma, mb, i);
                    if (k == 0 && ru && first == 0) store_in(ra[0], rb[0], ra[0], rb[0], -1);
                }
            }
        }
        if constexpr (SSLOTS > 0) {
#pragma unroll 1
            for (int j = 0; j < SSLOTS; j++) {
                const int i = (SLOTS + j) * THREADS;
                if (i >= lim + (t & 31)) break;  // warp-uniform: no lane of the warp holds access i, nor a later one
                const int at = IN * j * THREADS + t;
                const raw xa = smem_slots[at], xb = op::FWD ? xa : smem_slots[at + THREADS];
                raw ma = os_shfl(xa, t + 1), mb = op::FWD ? ma : os_shfl(xb, t + 1);
                if (i + 1 >= lim) {  // the next CTA's (C > 1), or past the row
                    if (C > 1 && i + 1 < end - first) {
                        ma = xch[XN];
                        if constexpr (!op::FWD) mb = xch[XN + 1];
                    }
                } else if (last_lane) {  // this CTA's (every thread's copies landed before the reduction)
                    const int nx = t + 1 < THREADS ? at + 1 : IN * (j + 1) * THREADS;
                    ma = smem_slots[nx];
                    if constexpr (!op::FWD) mb = smem_slots[nx + THREADS];
                }
                if (i < lim) store_in(xa, xb, ma, mb, i);
            }
        }
    } else {
#pragma unroll
        for (int k = 0; k < SLOTS; k++) {
            BOUNDS(k * THREADS);
            if constexpr (op::FWD) {
                float y[W];
                reg_y(k, y);
                if (k * THREADS < lim) op::out::store_part(dst, k * THREADS, y, lo, hi);
            } else if (k * THREADS < lim) {
                float dx[W];
                op::bwd_dx(ra[k], rb[k], pa, pb, dx);
                op::out::store_part(dst, k * THREADS, dx, lo, hi);
            }
        }
        if constexpr (SSLOTS > 0) {
            row_slots<P, W, THREADS, SLOTS, SSLOTS>(lim, jt, lo_last, N, [&](int j, int lo, int hi) {
                float y[W];
                if constexpr (op::FWD) {
                    float x[W];
                    op::io::unpack(smem_slots[IN * j * THREADS + t], x);
#pragma unroll
                    for (int u = 0; u < W; u++) {
                        if constexpr (OP == OP_CE) y[u] = DT == 0 ? ge(x[u]) : gx(os_exp_diff(x[u], o.s));
                        else if constexpr (op::EXP && DT == 0) y[u] = x[u] * f;  // x holds e here
                        else y[u] = o.of_x(x[u]);
                    }
                } else {
                    op::bwd_dx(smem_slots[IN * j * THREADS + t], smem_slots[(IN * j + 1) * THREADS + t], pa, pb, y);
                }
                op::out::store_part(dst, (SLOTS + j) * THREADS, y, lo, hi);
            });
        }
    }
    if constexpr (OP == OP_CE) {
        // the owner's last step, after every thread of its CTA stored its elements: the target's element rewritten
        // with the target term (the target re-read: a cache hit, cheaper than a 64-bit register held this long)
        __syncthreads();
        if (owner && hit) static_cast<elem*>(out)[row * so + ce.target[row]] = os_from_f<DT>(gt);
    }
    if constexpr (C > 1) os_cluster_wait();
#undef BOUNDS
#undef DY_REALIGN
}

// The forward row kernels' CTAs per SM (their launch bound). 16-bit log_softmax in 3 register slots: as many CTAs as
// leave a thread softmax's registers, 16 + SLOTS * W (ptxas divides an SM's registers among its 4 schedulers, each
// taking a quarter of the warps, rounded up, in steps of 8 registers). Unbound it took 55-56 registers where softmax
// takes 39-40 (x kept unpacked, and its exponentials only summed: ptxas hoists them all), 6 CTAs of 192 threads an SM
// instead of 8. In 4 slots, one CTA a row, the same (48 registers at 416 threads: 3 CTAs instead of 2) since its
// exponentials are summed as they come (row_body); in a cluster that bound spilled. The 16-bit softmax in up to 4
// slots, one CTA a row, takes the same bound (in a cluster it spilled): with row_body's masks APART its odd rows took
// 47 registers (3 slots, 7 CTAs of 192 instead of 8) and 52-54 (4 slots, 2 CTAs of 416 instead of 3); bound, 40 and
// 48, no spills, every load still at the start (N = 4095 / 4097: 90% of copy unbound, 94.5% bound;
// h200-window-masks-ab-154ead7.txt). The out rows' own window (P = 2) in registers alone, its outputs realigned
// (REG_OUTS), takes it too: 39-40 registers, no spills.
template <int OP, int DT, int W, int THREADS, int SLOTS, int SSLOTS, int C, int P>
__host__ __device__ constexpr int fwd_row_ctas() {
    if ((OP == 1 && SLOTS <= 3 || OP <= 1 && SLOTS <= 4 && C == 1) && DT != 0 && SSLOTS == 0) {
        int c = 2048 / THREADS;
        while (c > 1 && 16384 / (32 * ((c * THREADS / 32 + 3) / 4)) / 8 * 8 < 16 + SLOTS * W) c--;
        return c;
    }
    return (W > 1 && SSLOTS == 0 && SLOTS * W <= 16 && P != 2 ? 2048 : 1024) / THREADS;
}

template <int OP, int DT, int W, int THREADS, int SLOTS, int SSLOTS, int C, int P, int DTO = DT>
__global__ void __launch_bounds__(THREADS, (fwd_row_ctas<OP, DT, W, THREADS, SLOTS, SSLOTS, C, P>()))
fwd_row(const void* __restrict__ a, const void* __restrict__ b, void* __restrict__ out, long long M, int N,
        long long sa, long long sb, long long so) {
    row_body<fwd_op<OP>::value, DT, W, THREADS, SLOTS, SSLOTS, C, P, DTO>(a, b, out, N, sa, sb, so);
}

template <int OP, int DT, int W, int THREADS, int SLOTS, int SSLOTS, int C, int P, int DTO = DT>
__global__ void __launch_bounds__(THREADS, 1024 / THREADS)
bwd_row(const void* __restrict__ a, const void* __restrict__ b, void* __restrict__ out, long long M, int N,
        long long sa, long long sb, long long so) {
    row_body<bwd_op<OP>::value, DT, W, THREADS, SLOTS, SSLOTS, C, P, DTO>(a, b, out, N, sa, sb, so);
}

// ---- group: a row per group of G CTAs anywhere on the chip ----------------------------------------------------------
// Rows longer than a cluster holds: G CTAs share each row as a cluster's do (row_body with C = 0), their pairs meeting
// through global memory (os_group_reduce) instead of DSMEM, so a group is as wide as a row needs and its CTAs sit on
// any SM. One read and one write an element, where the split regime reads twice (its second read from L2 at best).
// A group's CTAs wait for one another, so each takes its item (row * G + rank) from a ticket counter in the order
// the CTAs start, not from blockIdx: every group but the last begun then has all of its CTAs started, and completes,
// whatever order the CTAs are scheduled in, as long as G CTAs fit the device at once (plan.group_form, run.py's
// occupancy check). Several group kernels running at once (streams of their own, a graph's branches) can each hold
// G - 1 waiting CTAs of a partly started group until no slot is left for any: the waits are bounded (wait_ns,
// os_group_reduce), a CTA that waited that long abandons its share and exits, and the kernel after (grp_fix) writes
// the abandoned shares. (Written by the group's last CTA at its end, they made ptxas spill 4-8 bytes in a few
// log-softmax backward kernels, whichever way the values were kept apart.) The grid is M * G CTAs, streamed as the row kernels' are (the first form, a
// cooperative launch in waves of what the chip holds, each wave's reads then its writes, ran at 58-69% of copy:
// session 68, an H100). ws: the ticket (2 words), then each row's block of os_group_words(G); zeroed before the launch.
template <int OP, int DT, int W, int THREADS, int SLOTS, int SSLOTS, int P>
__device__ __forceinline__ void grp_body(const void* a, const void* b, float* ws, void* out, int N, long long sa,
                                         long long sb, long long so, int G, int wait_ns) {
    os_launch_dependents();  // grp_fix may be scheduled once every CTA has started: none then waits for a slot
    __shared__ os_group_shared gs;
    if (threadIdx.x == 0) gs.ticket = atomicAdd(reinterpret_cast<unsigned*>(ws), 1u);
    __syncthreads();
    const unsigned ticket = gs.ticket;
    const long long row = ticket / (unsigned)G;
    row_body<OP, DT, W, THREADS, SLOTS, SSLOTS, 0, P, DT>(
        a, b, out, N, sa, sb, so, ce_args{},
        os_group{row, (int)(ticket % (unsigned)G), G, ws + 2 + os_group_words(G) * row, (unsigned)wait_ns, &gs});
}

template <int OP, int DT, int W, int THREADS, int SLOTS, int SSLOTS, int P>
__global__ void __launch_bounds__(THREADS, (fwd_row_ctas<OP, DT, W, THREADS, SLOTS, SSLOTS, 0, P>()))
fwd_grp(const void* __restrict__ a, const void* __restrict__ b, float* __restrict__ ws, void* __restrict__ out,
        long long M, int N, long long sa, long long sb, long long so, int G, int wait_ns) {
    grp_body<fwd_op<OP>::value, DT, W, THREADS, SLOTS, SSLOTS, P>(a, b, ws, out, N, sa, sb, so, G, wait_ns);
}

template <int OP, int DT, int W, int THREADS, int SLOTS, int SSLOTS, int P>
__global__ void __launch_bounds__(THREADS, 1024 / THREADS)
bwd_grp(const void* __restrict__ a, const void* __restrict__ b, float* __restrict__ ws, void* __restrict__ out,
        long long M, int N, long long sa, long long sb, long long so, int G, int wait_ns) {
    grp_body<bwd_op<OP>::value, DT, W, THREADS, SLOTS, SSLOTS, P>(a, b, ws, out, N, sa, sb, so, G, wait_ns);
}

// The shares of a group kernel's rows that their CTAs abandoned (os_group_reduce), written from the inputs, which no
// CTA has written (in place too), and the row's pair folded from the workspace: a programmatic launch after the
// group kernel (it starts once every group CTA has, then waits for the kernel's end), a CTA a row, which returns at
// once where no share was abandoned (alone on the device, none is). Rank r's accesses as row_body cuts the row (CH a
// CTA), an access a thread at a time.
template <int OP, int DT, int W, int P>
__device__ __forceinline__ void grp_fix_body(const void* a, const void* b, const float* ws, void* out, int N,
                                             long long sa, long long sb, long long so, int G) {
    typedef op_traits<OP, DT, W> op;
    typedef typename op::elem elem;
    typedef typename op::raw raw;
    const long long row = blockIdx.x;
    const float* const blk = ws + 2 + os_group_words(G) * row;
    os_grid_wait();  // the group kernel's end: every count, pair and abandoned rank written
    const unsigned gone = __float_as_uint(os_ld_after_wait(blk)) >> 16;
    if (gone == 0) return;
    __shared__ float pair[2];
    if (threadIdx.x < 32) {
        float pa, pb;
        os_group_fold<op::RED>(blk, G, pa, pb);
        if (threadIdx.x == 0) {
            pair[0] = pa;
            pair[1] = pb;
        }
    }
    __syncthreads();
    const float pa = pair[0], pb = pair[1];
    const typename op::out_params o(pa, pb);
    const elem* in_a = static_cast<const elem*>(a) + row * sa;
    const int sh = P ? os_shift<DT, W>(in_a) : 0;  // the row's offset in its first access (dy's and out's the same)
    const int end = P ? (sh + N + W - 1) / W : N / W;
    const int CH = ((P ? N + 2 * W - 2 : N) / W + G - 1) / G;
    in_a -= sh;
    const elem* in_b = static_cast<const elem*>(b) + row * sb - sh;
    elem* dst = static_cast<elem*>(out) + row * so - sh;
    for (unsigned k = 0; k < gone; k++) {
        const int r = (int)__float_as_uint(os_ld_after_wait(blk + 2 + 2 * G + k)) - 1;
        for (int i = r * CH + (int)threadIdx.x; i < min(end, r * CH + CH); i += blockDim.x) {
            raw ra, rb;
            float y[W];
            op::load(ra, rb, in_a, in_b, i);
            op::out_of(ra, rb, pa, pb, [&](float x) {
                if constexpr (op::FWD) return o.of_x(x);
                else return x;
            }, y);
            if (P && (i == 0 || i == end - 1)) op::io::store_part(dst, i, y, sh - i * W, sh - i * W + N);
            else op::io::store(dst, i, y);
        }
    }
}

template <int OP, int DT, int W, int P>
__global__ void __launch_bounds__(GROUP_FIX_THREADS)
fwd_grp_fix(const void* __restrict__ a, const void* __restrict__ b, const float* __restrict__ ws,
            void* __restrict__ out, long long M, int N, long long sa, long long sb, long long so, int G) {
    grp_fix_body<fwd_op<OP>::value, DT, W, P>(a, b, ws, out, N, sa, sb, so, G);
}

template <int OP, int DT, int W, int P>
__global__ void __launch_bounds__(GROUP_FIX_THREADS)
bwd_grp_fix(const void* __restrict__ a, const void* __restrict__ b, const float* __restrict__ ws,
            void* __restrict__ out, long long M, int N, long long sa, long long sb, long long so, int G) {
    grp_fix_body<bwd_op<OP>::value, DT, W, P>(a, b, ws, out, N, sa, sb, so, G);
}

// Cross-entropy on the row kernel (one row per CTA or per cluster): x the logits (a), the gradient (out; it may be x
// itself), the per-row outputs and options in ce_args (see ce_grad). ce_loss, launched next, may be scheduled once
// every CTA has started (os_launch_dependents): it waits for the whole grid before reading the rows' losses.
template <int DT, int W, int THREADS, int SLOTS, int SSLOTS, int C, int P>
__global__ void __launch_bounds__(THREADS, 1024 / THREADS)
ce_row(const void* __restrict__ x, const long long* __restrict__ target, void* __restrict__ grad,
       float* __restrict__ loss, float* __restrict__ lse, const float* __restrict__ scale, long long M, int N,
       long long sx, long long sg, long long ignore, float eps, float z, float inv_v) {
    os_launch_dependents();
    row_body<OP_CE, DT, W, THREADS, SLOTS, SSLOTS, C, P, DT>(x, nullptr, grad, N, sx, 0, sg,
                                                             ce_args{target, loss, lse, scale, ignore, eps, z, inv_v});
}

// ---- cross-entropy around ce_row: the targets' check and the reduction's scale, the loss's sum, the backward's
// grad_output. Small launches on the eager hot path (prepared cuLaunchKernel, no Triton launcher).

// info[0..2] (fp32) <- (the gradient's scale: 1 / counted rows when `mean`, else 1; the counted rows (target !=
// ignore); 1.0 if a counted target is out of [0, V), else 0), and the same into `host` unless it is null: pinned
// host memory the device addresses directly (unified addressing), the flag last, which the host polls for (its
// slot holds a sentinel until then), no copy. One CTA (no atomics, nothing to zero first), each thread with 4
// targets in flight per trip. ce_row, launched next, may start at once (os_launch_dependents): it waits for these
// values only after issuing its row's loads.
__global__ void __launch_bounds__(1024) ce_targets(const long long* __restrict__ target, float* __restrict__ info,
                                                   float* __restrict__ host, long long M, int V, long long ignore,
                                                   int mean) {
    os_launch_dependents();
    __shared__ int counts[32], flags[32];
    int count = 0, bad = 0;
    for (long long base = threadIdx.x; base < M; base += 4 * 1024) {
        long long v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = base + u * 1024 < M ? target[base + u * 1024] : ignore;
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const bool counted = v[u] != ignore;
            count += counted;
            bad |= counted && (v[u] < 0 || v[u] >= V);
        }
    }
    count = __reduce_add_sync(OS_FULL_MASK, count);
    bad = __reduce_or_sync(OS_FULL_MASK, bad);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) {
        counts[wid] = count;
        flags[wid] = bad;
    }
    __syncthreads();
    if (wid == 0) {
        count = __reduce_add_sync(OS_FULL_MASK, lane < nw ? counts[lane] : 0);
        bad = __reduce_or_sync(OS_FULL_MASK, lane < nw ? flags[lane] : 0);
        if (lane == 0) {
            const float scale = mean ? 1.0f / (float)count : 1.0f, rows = (float)count, flag = bad ? 1.0f : 0.0f;
            info[0] = scale;
            info[1] = rows;
            info[2] = flag;
            if (host) {
                host[0] = scale;
                host[1] = rows;
                __threadfence_system();  // the values before the flag that ends the host's wait
                host[2] = flag;
            }
        }
    }
}

// out (a scalar of the logits' dtype) <- the sum of the M per-row losses, times the scale when `mean`: one CTA, a
// fixed order (deterministic). Launched programmatically after ce_row: it waits for ce_row's grid first.
template <int DT>
__global__ void __launch_bounds__(1024) ce_loss(const float* __restrict__ rows, const float* __restrict__ buf,
                                                void* __restrict__ out, long long M, int mean) {
    __shared__ float red_a[32], red_b[32];
    os_grid_wait();  // rows: ce_row's, written while this kernel may already run: coherent loads after the wait
    float a = 0.0f, b = 0.0f;
    for (long long i = threadIdx.x; i < M; i += blockDim.x) a += os_ld_after_wait(rows + i);
    os_block_reduce<OS_RED_SUM>(a, b, red_a, red_b);
    if (threadIdx.x == 0)
        *static_cast<typename os_elem<DT>::type*>(out) = os_from_f<DT>(mean ? a * os_ld_after_wait(buf) : a);
}

// The backward: g (M rows of N, row stride sg) *= grad_output (go: one factor when sgo == 0, else one per row, in
// g's dtype), rows whose factor is 1 left untouched: the usual loss.backward() passes 1 and costs this launch
// only. W: 16-byte accesses (g aligned, N and sg multiples of the vector) or scalars.
template <int DT, int W>
__global__ void __launch_bounds__(512) ce_scale(void* __restrict__ g, const void* __restrict__ go, long long M, int N,
                                                long long sg, long long sgo) {
    typedef os_io<DT, W> io;
    typedef typename io::elem elem;
    const elem* f = static_cast<const elem*>(go);
    if (sgo == 0 && os_to_f<DT>(f[0]) == 1.0f) return;
    for (long long row = blockIdx.x; row < M; row += gridDim.x) {
        const float s = os_to_f<DT>(f[row * sgo]);
        if (s == 1.0f) continue;
        elem* p = static_cast<elem*>(g) + row * sg;
        for (int i = threadIdx.x; i < N / W; i += blockDim.x) {
            float v[W];
            io::unpack(io::load(p, i), v);
#pragma unroll
            for (int j = 0; j < W; j++) v[j] *= s;
            io::store(p, i, v);
        }
    }
}

// ---- split: few rows, huge N ----------------------------------------------------------------------------------------
// Phase 1: the pair of chunk p (accesses [p*CH, p*CH + CH)) of row `row` -> ws[2*(row*P+p)]. Phase 2: merge the
// row's P pairs, re-read the chunk (an L2 hit for the sizes the plan sends here) and write its outputs. Phase 2 is a
// programmatic launch (run.py): it is launched once every phase-1 CTA has started (each triggers at its start), its
// CTAs take the SMs' free slots while phase 1 still runs, issue their chunk's first loads, then wait for phase 1 to
// complete (os_grid_wait) before they read the partials or write; what it hides is a launch's latency, most of a
// few-row call's time.
// WIN (W > 1): the window path, any N and any offset the inputs and out rows share (the row kernels' P = 1): the row
// is read through the aligned accesses that cover it; only its first and last access can hold elements beside it,
// masked (forward -inf, backward a neutral pair) and stored element by element. Before it such rows (odd vocabularies
// of a million) took the scalar path whole.

// One trip of the split loop: accesses base + u * SPLIT_THREADS of the row that are below end.
template <bool LAST, class op, int U>
__device__ __forceinline__ void split_trip(typename op::raw (&ra)[U], typename op::raw (&rb)[U],
                                           const typename op::elem* in_a, const typename op::elem* in_b, int base,
                                           int end) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int i = base + u * SPLIT_THREADS;
        if (i < end) op::template load<LAST>(ra[u], rb[u], in_a, in_b, i);
    }
}

template <int OP, int DT, int W, int WIN>
__device__ __forceinline__ void split_stats_body(const void* __restrict__ a, const void* __restrict__ b,
                                                 float* __restrict__ ws, int N, long long sa, long long sb, int P,
                                                 int CH) {
    typedef op_traits<OP, DT, W> op;
    typedef typename op::elem elem;
    typedef typename op::raw raw;
    static_assert(!WIN || W > 1, "the window path reads 16-byte accesses");
    constexpr int U = SPLIT_UNROLL;
    __shared__ float red_a[SPLIT_THREADS / 32], red_b[SPLIT_THREADS / 32];
    os_launch_dependents();  // phase 2 may launch once every CTA of this one has started (it waits for all to end)
    const long long row = blockIdx.x / P;
    const int p = blockIdx.x % P;
    const elem* in_a = static_cast<const elem*>(a) + row * sa;
    const int sh = WIN ? os_shift<DT, W>(in_a) : 0;  // the row starts sh elements into its first access
    const int nv = WIN ? (sh + N + W - 1) / W : N / W;
    const int end = min(p * CH + CH, nv);
    in_a -= sh;
    const elem* in_b = static_cast<const elem*>(b) + row * sb - sh;
    // the thread's pair: backward, sums of even and odd elements (two dependency chains) and the flag; forward (m, d)
    float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f, m = OS_NEG_INF, d = 0.0f;
#pragma unroll 1
    for (int base = p * CH + threadIdx.x; base < end; base += SPLIT_THREADS * U) {
        raw ra[U], rb[U];
        split_trip<false, op>(ra, rb, in_a, in_b, base, end);
        if constexpr (op::FWD) {  // the max of the trip's U accesses first: one rescale per trip
            float v[U * W];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int i = base + u * SPLIT_THREADS;
                if (i < end) {
                    if constexpr (WIN) op::unpack_x(ra[u], &v[u * W], sh - i * W, sh - i * W + N);
                    else op::io::unpack(ra[u], &v[u * W]);
                } else {
#pragma unroll
                    for (int j = 0; j < W; j++) v[u * W + j] = OS_NEG_INF;
                }
            }
            const float mn = fmaxf(m, os_max_of<U * W>(v));
            const float s = os_safe_shift(mn);
#pragma unroll
            for (int j = 0; j < U * W; j++) v[j] = os_exp_diff(v[j], s);
            d = d * os_exp_diff(m, s) + os_sum_of<U * W>(v);
            m = mn;
        } else {
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int i = base + u * SPLIT_THREADS;
                if constexpr (WIN) {
                    if (i < end) op::bwd_fold(ra[u], rb[u], a0, a1, b0, sh - i * W, sh - i * W + N);
                } else if (i < end) {  // inline: op::bwd_fold would change the scalar log_softmax SASS
                    float y[W], dy[W];
                    op::io::unpack(ra[u], y);
                    op::io::unpack(rb[u], dy);
#pragma unroll
                    for (int j = 0; j < W; j++) {
                        if (j & 1) bwd_acc<OP>(y[j], dy[j], a1, b0);
                        else bwd_acc<OP>(y[j], dy[j], a0, b0);
                    }
                }
            }
        }
    }
    if constexpr (!op::FWD) {
        m = a0 + a1;
        d = b0;
    }
    os_block_reduce<op::RED>(m, d, red_a, red_b);
    if (threadIdx.x == 0) {
        ws[2 * (long long)blockIdx.x] = m;
        ws[2 * (long long)blockIdx.x + 1] = d;
    }
}

template <int OP, int DT, int W, int WIN>
__device__ __forceinline__ void split_apply_body(const void* __restrict__ a, const void* __restrict__ b,
                                                 const float* __restrict__ ws, void* __restrict__ out, int N,
                                                 long long sa, long long sb, long long so, int P, int CH) {
    typedef op_traits<OP, DT, W> op;
    typedef typename op::elem elem;
    typedef typename op::raw raw;
    constexpr int U = SPLIT_UNROLL;
    const long long row = blockIdx.x / P;
    const int p = blockIdx.x % P;
    // the row (and its out row) starts sh elements into its first access
    const int sh = WIN ? os_shift<DT, W>(static_cast<const elem*>(a) + row * sa) : 0;
    const int nv = WIN ? (sh + N + W - 1) / W : N / W;
    const int end = min(p * CH + CH, nv);
    const elem* in_a = static_cast<const elem*>(a) + row * sa - sh;
    const elem* in_b = static_cast<const elem*>(b) + row * sb - sh;
    elem* dst = static_cast<elem*>(out) + row * so - sh;
    float pa, pb;
    // one trip's outputs: accesses base + u * SPLIT_THREADS below end
    auto trip = [&](const raw (&ra)[U], const raw (&rb)[U], int base, const typename op::out_params& o) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = base + u * SPLIT_THREADS;
            if (i < end) {
                float x[W], y[W];
                op::io::unpack(ra[u], x);  // x, or y for the backward
                if constexpr (op::FWD) {
#pragma unroll
                    for (int j = 0; j < W; j++) y[j] = o.of_x(x[j]);
                } else {  // inline: op::bwd_dx would change the scalar log_softmax SASS
                    float dy[W];
                    op::io::unpack(rb[u], dy);
#pragma unroll
                    for (int j = 0; j < W; j++) y[j] = bwd_out<OP>(x[j], dy[j], pa, pb);
                }
                if (WIN && (i == 0 || i == nv - 1)) op::io::store_part(dst, i, y, sh - i * W, sh - i * W + N);
                else op::io::store_stream(dst, i, y);
            }
        }
    };
    // the first trip peeled: its loads go before the wait (the inputs are the kernel before phase 1's: ready). A
    // loop that skipped its first trip's loads kept them live across its back edge: the 16-bit softmax backward
    // spilled 16 bytes at 48 registers.
    const int first = p * CH + threadIdx.x;
    raw ra[U], rb[U];
    split_trip<true, op>(ra, rb, in_a, in_b, first, end);
    os_grid_wait();  // phase 1's partials (and, where out is x, every read of x before the first write)
    os_fold_partials<op::RED>(ws + 2 * row * P, P, pa, pb);
    const typename op::out_params o(pa, pb);
    trip(ra, rb, first, o);
#pragma unroll 1
    for (int base = first + SPLIT_THREADS * U; base < end; base += SPLIT_THREADS * U) {
        raw ra[U], rb[U];
        split_trip<true, op>(ra, rb, in_a, in_b, base, end);
        trip(ra, rb, base, o);
    }
}

// The forward phase 1 is the same for softmax and log_softmax. WIN defaults to 0: the aligned and scalar entries keep
// their names.
template <int DT, int W, int WIN = 0>
__global__ void __launch_bounds__(SPLIT_THREADS, WIN ? SPLIT_CTAS_PER_SM : 0)
fwd_split_stats(const void* __restrict__ a, const void* __restrict__ b, float* __restrict__ ws, long long M, int N,
                long long sa, long long sb, int P, int CH) {
    split_stats_body<0, DT, W, WIN>(a, b, ws, N, sa, sb, P, CH);
}

template <int OP, int DT, int W, int WIN = 0>
__global__ void __launch_bounds__(SPLIT_THREADS, WIN ? SPLIT_CTAS_PER_SM : 0)
bwd_split_stats(const void* __restrict__ a, const void* __restrict__ b, float* __restrict__ ws, long long M, int N,
                long long sa, long long sb, int P, int CH) {
    split_stats_body<bwd_op<OP>::value, DT, W, WIN>(a, b, ws, N, sa, sb, P, CH);
}

template <int OP, int DT, int W, int WIN = 0>
__global__ void __launch_bounds__(SPLIT_THREADS, WIN ? SPLIT_CTAS_PER_SM : 0)
fwd_split_apply(const void* __restrict__ a, const void* __restrict__ b, const float* __restrict__ ws,
                void* __restrict__ out, long long M, int N, long long sa, long long sb, long long so, int P, int CH) {
    split_apply_body<fwd_op<OP>::value, DT, W, WIN>(a, b, ws, out, N, sa, sb, so, P, CH);
}

template <int OP, int DT, int W, int WIN = 0>
__global__ void __launch_bounds__(SPLIT_THREADS, WIN ? SPLIT_CTAS_PER_SM : 0)
bwd_split_apply(const void* __restrict__ a, const void* __restrict__ b, const float* __restrict__ ws,
                void* __restrict__ out, long long M, int N, long long sa, long long sb, long long so, int P, int CH) {
    split_apply_body<bwd_op<OP>::value, DT, W, WIN>(a, b, ws, out, N, sa, sb, so, P, CH);
}

// Work item `item` of the kernels over a strip of lanes * W columns of a contiguous (outer, N, inner) tensor (columns,
// strided, bands): outer index item / strips, strip item % strips. Thread tx's first column col: the element offset
// of (outer index, row 0, col), and whether col < inner (the last strip's lanes past it hold nothing).
template <int W>
__device__ __forceinline__ long long os_strip_column(long long item, long long strips, int lanes, int tx, int N,
                                                     long long inner, bool& active) {
    const long long o = item / strips;
    const long long col = ((item - o * strips) * lanes + tx) * W;
    active = col < inner;
    return o * (long long)N * inner + col;
}

// Per column, the pairs of a (lanes, rows) CTA's thread rows merged down a tree in shared memory (the columns and
// bands kernels): row 0's slots end with the CTA's pair of each of its columns (slot tx * W + j), and each thread's
// pa / pb with its subtree's. rows is a power of 2.
template <int RED, int W>
__device__ __forceinline__ void column_tree(float (&pa)[W], float (&pb)[W], float* sh_a, float* sh_b, int lanes,
                                           int rows) {
    const int me = threadIdx.y * lanes + threadIdx.x;
#pragma unroll
    for (int j = 0; j < W; j++) {
        sh_a[me * W + j] = pa[j];
        sh_b[me * W + j] = pb[j];
    }
    __syncthreads();
#pragma unroll 1
    for (int h = rows >> 1; h > 0; h >>= 1) {
        if ((int)threadIdx.y < h) {
            const int other = (me + h * lanes) * W;
#pragma unroll
            for (int j = 0; j < W; j++) {
                os_combine<RED>(pa[j], pb[j], sh_a[other + j], sh_b[other + j]);
                sh_a[me * W + j] = pa[j];
                sh_b[me * W + j] = pb[j];
            }
        }
        __syncthreads();
    }
}

// ---- columns: a non-last dim with the columns on chip (forward only) ------------------------------------------------
// 1 read + 1 write. A cluster of C CTAs (C == 1: one CTA) owns item = (o, strip): the LANES * W columns
// [strip * LANES * W, ...) of outer index o, all N rows of them. CTA `rank` holds the band of rows
// [rank * B, rank * B + B), B = ceil(N / C) rounded up to ROWS; thread (tx, ty) of the (LANES, ROWS) block holds W
// columns of rows rank * B + ty + k * ROWS: SLOTS in registers, SSLOTS in dynamic shared memory. Per column: (m, d) of
// the thread, a tree over ROWS in shared memory, the C partials through DSMEM; then the outputs from chip. A warp
// reads ROWS-adjacent rows in pieces of LANES * 16 bytes.
template <int OP, int DT, int W, int SLOTS, int SSLOTS, int C>
__global__ void __launch_bounds__(ROW_MAX_THREADS, 2)
fwd_cols(const void* __restrict__ a, const void* __restrict__ b, void* __restrict__ out, long long outer, int N,
         long long inner, long long strips, long long items) {
    static_assert(OP == 0 || OP == 1, "forward op");
    typedef os_io<DT, W> io;
    typedef typename io::elem elem;
    typedef typename io::raw raw;
    static_assert(SSLOTS == 0 || W > 1, "shared-memory slots need 16-byte accesses");
    static_assert(C >= 1 && C <= 16 && (C & (C - 1)) == 0, "cluster: power of 2 <= 16");
    __shared__ float red_m[ROW_MAX_THREADS * W], red_d[ROW_MAX_THREADS * W];
    __shared__ float fin_m[32 * W], fin_d[32 * W];  // LANES <= 32
    extern __shared__ uint4 smem_slots[];  // SSLOTS * 512 vectors
    const int lanes = blockDim.x, rows = blockDim.y;
    const int tx = threadIdx.x, ty = threadIdx.y, t = ty * lanes + tx;
    long long item;
    int rank;
    os_cluster_item<C>(item, rank);
    bool active;
    const long long base = os_strip_column<W>(item, strips, lanes, tx, N, inner, active);
    // the CTA's band: ceil(N / C) rows rounded up to the thread rows (the plan makes SLOTS + SSLOTS cover it)
    const int band = ((N + C - 1) / C + rows - 1) / rows * rows;
    const int n_first = rank * band + ty;  // slot k holds row n_first + k * rows
    const int n_end = min(N, rank * band + band);
    const elem* src = static_cast<const elem*>(a) + base;

    raw r[SLOTS];
#pragma unroll
    for (int k = 0; k < SLOTS; k++) {
        if (active && n_first + k * rows < n_end) r[k] = io::load(src + (long long)(n_first + k * rows) * inner, 0);
    }
    if constexpr (SSLOTS > 0) {
#pragma unroll
        for (int j = 0; j < SSLOTS; j++) {
            const int n = n_first + (SLOTS + j) * rows;
            if (active && n < n_end) os_cp_async16(&smem_slots[j * ROW_MAX_THREADS + t], src + (long long)n * inner);
        }
        os_cp_async_commit();
    }
    float v[SLOTS][W], mt[W], d[W];
#pragma unroll
    for (int j = 0; j < W; j++) mt[j] = OS_NEG_INF;
#pragma unroll
    for (int k = 0; k < SLOTS; k++) {
        if (active && n_first + k * rows < n_end) {
            io::unpack(r[k], v[k]);
        } else {
#pragma unroll
            for (int j = 0; j < W; j++) v[k][j] = OS_NEG_INF;
        }
#pragma unroll
        for (int j = 0; j < W; j++) mt[j] = fmaxf(mt[j], v[k][j]);
    }
    if constexpr (SSLOTS > 0) {
        os_cp_async_wait_all();  // each thread reads back only the vectors it copied itself
#pragma unroll 1
        for (int i = 0; i < SSLOTS; i++) {
            if (active && n_first + (SLOTS + i) * rows < n_end) {
                float f[W];
                io::unpack(smem_slots[i * ROW_MAX_THREADS + t], f);
#pragma unroll
                for (int j = 0; j < W; j++) mt[j] = fmaxf(mt[j], f[j]);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < W; j++) {
        const float st = os_safe_shift(mt[j]);
        d[j] = 0.0f;
#pragma unroll
        for (int k = 0; k < SLOTS; k++) {
            const float e = os_exp_diff(v[k][j], st);
            d[j] += e;
            if constexpr (OP == 0) v[k][j] = e;
        }
    }
    if constexpr (SSLOTS > 0) {
#pragma unroll 1
        for (int i = 0; i < SSLOTS; i++) {
            if (active && n_first + (SLOTS + i) * rows < n_end) {
                float f[W];
                io::unpack(smem_slots[i * ROW_MAX_THREADS + t], f);
#pragma unroll
                for (int j = 0; j < W; j++) {
                    f[j] = os_exp_diff(f[j], os_safe_shift(mt[j]));
                    d[j] += f[j];
                }
                // fp32 softmax keeps e in place (one exponential per element); 16-bit data is recomputed.
                if constexpr (OP == 0 && DT == 0) smem_slots[i * ROW_MAX_THREADS + t] = os_io<0, 4>::pack(f);
            }
        }
    }
    // the CTA's (m, d) per column: a tree over the rows of threads
    float m[W], dd[W];
#pragma unroll
    for (int j = 0; j < W; j++) {
        m[j] = mt[j];
        dd[j] = d[j];
    }
    column_tree<OS_RED_MD, W>(m, dd, red_m, red_d, lanes, rows);
    // the cluster's (m, d) per column: thread c < LANES * W folds column c's C partials (row 0 of each CTA's tree)
    const int ncols = lanes * W;
    if constexpr (C > 1) {
        os_cluster_publish();
        os_cluster_wait();
        if (t < ncols) {
            float pm = OS_NEG_INF, pd = 0.0f;
#pragma unroll
            for (int q = 0; q < C; q++)
                os_combine<OS_RED_MD>(pm, pd, os_ld_dsmem(&red_m[t], q), os_ld_dsmem(&red_d[t], q));
            fin_m[t] = pm;
            fin_d[t] = pd;
        }
        os_cluster_arrive();  // waited on before exit: no CTA leaves while another may read its red_m / red_d
        __syncthreads();
    } else {
        if (t < ncols) {
            fin_m[t] = red_m[t];
            fin_d[t] = red_d[t];
        }
        __syncthreads();
    }
    float f[W], sh[W], ld[W], s[W], inv[W];
#pragma unroll
    for (int j = 0; j < W; j++) {
        const fwd_out<OP, DT != 0> q(fin_m[tx * W + j], fin_d[tx * W + j]);
        s[j] = q.s;
        inv[j] = q.inv;
        sh[j] = q.sh;
        ld[j] = q.ld;
        f[j] = os_exp_diff(mt[j], q.s) * q.inv;
    }
    elem* dst = static_cast<elem*>(out) + base;
#pragma unroll
    for (int k = 0; k < SLOTS; k++) {
        const int n = n_first + k * rows;
        float y[W];
#pragma unroll
        for (int j = 0; j < W; j++) y[j] = OP == 0 ? v[k][j] * f[j] : (v[k][j] - sh[j]) - ld[j];
        if (active && n < n_end) io::store(dst + (long long)n * inner, 0, y);
    }
    if constexpr (SSLOTS > 0) {
#pragma unroll 1
        for (int i = 0; i < SSLOTS; i++) {
            const int n = n_first + (SLOTS + i) * rows;
            if (active && n < n_end) {
                float x[W], y[W];
                io::unpack(smem_slots[i * ROW_MAX_THREADS + t], x);
#pragma unroll
                for (int j = 0; j < W; j++) {
                    if constexpr (OP == 0 && DT == 0) y[j] = x[j] * f[j];  // x holds e here
                    else if constexpr (OP == 0) y[j] = os_exp_diff(x[j], s[j]) * inv[j];
                    else y[j] = (x[j] - sh[j]) - ld[j];
                }
                io::store(dst + (long long)n * inner, 0, y);
            }
        }
    }
    if constexpr (C > 1) os_cluster_wait();
}

// ---- chan: a short non-last dim (channels) --------------------------------------------------------------------------
// The middle dim of a contiguous (outer, N, inner) tensor with N <= G x CAP (CAP a multiple of 4, up to 32; G threads
// a column, G a power of 2 up to 8): thread (g, c) owns the W adjacent columns of access c of its outer index and
// holds their rows [g x CAP, g x CAP + CAP) in registers, its loads issued back to back (a warp's load is 64 or 128
// contiguous bytes of one row; W = 2 packs two 16-bit columns in a word where inner is even and the data aligned).
// Per column the max, then the sum of exp(x - max) (as the warp kernels), then the stores. Backward: the column's sum
// (and log_softmax's "alive"), then dx. G = 1: no shared memory and no barrier; G > 1: the bands' pairs merge once
// through shared memory (chan_merge).

// The G threads of a column (COLS = CHAN_THREADS / G apart in the CTA, one per band) merge their pairs in band
// order: every thread of the column ends with the same pair, bitwise.
template <int RED, int W, int G>
__device__ __forceinline__ void chan_merge(float (&a)[W], float (&b)[W]) {
    constexpr int COLS = CHAN_THREADS / G;
    __shared__ float sa[CHAN_THREADS * W], sb[CHAN_THREADS * W];
#pragma unroll
    for (int j = 0; j < W; j++) {
        sa[threadIdx.x * W + j] = a[j];
        sb[threadIdx.x * W + j] = b[j];
    }
    __syncthreads();
    const int c = threadIdx.x % COLS;
#pragma unroll
    for (int j = 0; j < W; j++) {
        a[j] = sa[c * W + j];
        b[j] = sb[c * W + j];
#pragma unroll
        for (int q = 1; q < G; q++) os_combine<RED>(a[j], b[j], sa[(q * COLS + c) * W + j], sb[(q * COLS + c) * W + j]);
    }
}

template <int OP, int DT, int W, int CAP, int G>
__device__ __forceinline__ void chan_body(const void* __restrict__ a, const void* __restrict__ b,
                                          void* __restrict__ out, long long outer, int N, long long inner,
                                          long long strips) {
    typedef op_traits<OP, DT, W> op;
    typedef typename op::elem elem;
    typedef typename op::raw raw;
    constexpr int COLS = CHAN_THREADS / G;
    const int g = G == 1 ? 0 : threadIdx.x / COLS;  // the compiler does not know threadIdx.x < CHAN_THREADS
    const long long t = (long long)blockIdx.x * COLS + (G == 1 ? threadIdx.x : threadIdx.x % COLS);
    // the band's rows: N at G = 1 (CAP >= N; min(CAP, N) there made the log_softmax backward 8-17% longer, fp32
    // CAP = 24 at 138 registers, one CTA an SM: 67% of copy at C = 21 where N ran at 94%); a thread past the last
    // access (G > 1: it still meets the barrier) or past the last row has none
    int n = G == 1 ? N : min(CAP, N - g * CAP);
    if (t >= outer * strips) {
        if constexpr (G == 1) return;
        n = 0;
    }
    const long long o = t / strips;
    const long long base = o * N * inner + (t - o * strips) * W + (long long)(g * CAP) * inner;
    const elem* in_a = static_cast<const elem*>(a) + base;
    const elem* in_b = static_cast<const elem*>(b) + base;
    elem* dst = static_cast<elem*>(out) + base;
    // rows one 32-bit step of accesses apart (the plan keeps N x inner below 2^31): the step is the same for every
    // thread, so the rows' offsets need no registers of the thread's own, and each address is formed as its access
    // is issued (64-bit offsets: ptxas computed every row's address before the first load, two registers a row)
    const unsigned step = (unsigned)(inner / W);
    const raw* pa = reinterpret_cast<const raw*>(in_a);
    const raw* pb = reinterpret_cast<const raw*>(in_b);
    raw* po = reinterpret_cast<raw*>(dst);
    // rows past n hold a neutral value (x or log_softmax's y = -inf, softmax's y = 0, dy = 0), so that no fold or
    // output tests n: only the loads and the final stores do. A test of N in the folds gave ptxas a predicate per row
    // to combine with each row's own test (log_softmax's y != -inf), placed right after that row's load: every
    // load's latency in turn (log_softmax backward fp32 at 38% of copy); a branch around each row's output
    // serialised the exponentials (22%)
    raw pad;
    {
        float f[W];
#pragma unroll
        for (int j = 0; j < W; j++) f[j] = OP == 2 ? 0.0f : OS_NEG_INF;
        pad = op::io::pack(f);
    }
    raw ra[CAP], rb[CAP];
#pragma unroll
    for (int r = 0; r < CAP; r++) {
        ra[r] = r < n ? pa[r * step] : pad;
        if constexpr (!op::FWD) rb[r] = r < n ? pb[r * step] : raw();
    }
    if constexpr (op::FWD) {
        // the raw accesses stay in registers (one word a row), unpacked on each use: softmax takes exp(x - max) again
        // for its output rather than keeping e (twice the registers in 16 bits)
        float m[W], d[W];
#pragma unroll
        for (int j = 0; j < W; j++) {
            m[j] = OS_NEG_INF;
            d[j] = 0.0f;
        }
#pragma unroll
        for (int r = 0; r < CAP; r++) {
            float x[W];
            op::io::unpack(ra[r], x);
#pragma unroll
            for (int j = 0; j < W; j++) m[j] = fmaxf(m[j], x[j]);
        }
#pragma unroll
        for (int j = 0; j < W; j++) m[j] = os_safe_shift(m[j]);  // the shift s of each column (of the band: G > 1)
#pragma unroll
        for (int r = 0; r < CAP; r++) {
            float x[W];
            op::io::unpack(ra[r], x);
#pragma unroll
            for (int j = 0; j < W; j++) d[j] += os_exp_diff(x[j], m[j]);
        }
        if constexpr (G > 1) {
            // the band's (m, d): s is its max, except for an empty band (d = 0; d >= 1 otherwise), whose s = 0
            // must not count as a max
#pragma unroll
            for (int j = 0; j < W; j++) m[j] = d[j] == 0.0f ? OS_NEG_INF : m[j];
            chan_merge<op::RED, W, G>(m, d);
        }
#pragma unroll
        for (int j = 0; j < W; j++) {  // d becomes the column's output factor (softmax) or offset (log_softmax)
            const typename op::out_params q(m[j], d[j]);
            m[j] = q.s;
            d[j] = OP == 0 ? q.inv : q.ld;
        }
#pragma unroll
        for (int r = 0; r < CAP; r++) {
            float x[W], y[W];
            op::io::unpack(ra[r], x);
#pragma unroll
            for (int j = 0; j < W; j++) y[j] = OP == 0 ? os_exp_diff(x[j], m[j]) * d[j] : (x[j] - m[j]) - d[j];
            ra[r] = op::io::pack(y);
        }
    } else {
        float pa[W], pb[W];
#pragma unroll
        for (int j = 0; j < W; j++) pa[j] = pb[j] = 0.0f;
#pragma unroll
        for (int r = 0; r < CAP; r++) {
            float y[W], dy[W];
            op::io::unpack(ra[r], y);
            op::io::unpack(rb[r], dy);
#pragma unroll
            for (int j = 0; j < W; j++) bwd_acc<OP>(y[j], dy[j], pa[j], pb[j]);
        }
        if constexpr (G > 1) chan_merge<op::RED, W, G>(pa, pb);
#pragma unroll
        for (int r = 0; r < CAP; r++) {
            float y[W], dy[W], dx[W];
            op::io::unpack(ra[r], y);
            op::io::unpack(rb[r], dy);
#pragma unroll
            for (int j = 0; j < W; j++) dx[j] = bwd_out<OP>(y[j], dy[j], pa[j], pb[j]);
            ra[r] = op::io::pack(dx);
        }
    }
#pragma unroll
    for (int r = 0; r < CAP; r++) {
        if (r < n) po[r * step] = ra[r];
    }
}

// The CTAs per SM each forward is compiled for, the most at which ptxas makes no spill (engines/cuda/compiled.py):
// 4 (64 registers) holds every fp32 column and up to 24 rows of 16-bit pairs; 28 rows of pairs at 3, 32 at 2.
// Unbound, ptxas took 82-95 registers for 20-24 rows of pairs (2-3 CTAs): 16-bit log_softmax at 66-74% of copy at
// C = 19 and 21, 83-91% at 4 CTAs (benchmarks/results/h200-chan-ctas-ae6cea6.txt). The merge of G > 1 bands costs
// a few registers: 4 CTAs up to 28 rows (3 at 32), and up to 20 rows of pairs (2 beyond: at 3, 24 rows spilled).
template <int W, int CAP, int G> __host__ __device__ constexpr int chan_fwd_ctas() {
    if (G == 1) return W == 1 || CAP <= 24 ? 4 : CAP <= 28 ? 3 : 2;
    return W == 1 ? (CAP <= 28 ? 4 : 3) : (CAP <= 20 ? 4 : 2);
}

template <int OP, int DT, int W, int CAP, int G>
__global__ void __launch_bounds__(CHAN_THREADS, chan_fwd_ctas<W, CAP, G>())
fwd_chan(const void* __restrict__ a, const void* __restrict__ b, void* __restrict__ out, long long outer, int N,
         long long inner, long long strips, long long items) {
    chan_body<fwd_op<OP>::value, DT, W, CAP, G>(a, b, out, outer, N, inner, strips);
}

// The backward's CTAs per SM: ptxas forms the rows' addresses before the loads and, under a bound, spilled (16-bit
// pairs, 20 rows and more at 3 CTAs) or matched the unbound speed (2 CTAs); unbound, about 3.5 registers a row, so
// that bands of 24 rows and more took 134-185 registers: one CTA an SM (fp32 log_softmax at C = 21, 136 registers:
// 67% of copy at 3211f09, 94% at 128 registers before 0bd7b11 added 8). Bound to 2 CTAs (128 registers) where ptxas
// then makes no spill: one element a thread up to 32 rows (28 when G > 1; 32 spilled 8 bytes in fp32), pairs of
// 16-bit columns at 20-24 rows when G > 1 (28 and more spilled 8-124 bytes; G = 1 stays within 128 up to 28; at 20
// rows of 8 bands the log_softmax took 132 registers unbound: 72% of copy at C = 150 against the softmax's 96%).
template <int W, int CAP, int G> __host__ __device__ constexpr int chan_bwd_ctas() {
    return (W == 1 ? CAP >= 24 && (G == 1 || CAP <= 28) : CAP >= 20 && CAP <= 24 && G > 1) ? 2 : 1;
}

template <int OP, int DT, int W, int CAP, int G>
__global__ void __launch_bounds__(CHAN_THREADS, chan_bwd_ctas<W, CAP, G>())
bwd_chan(const void* __restrict__ a, const void* __restrict__ b, void* __restrict__ out, long long outer, int N,
         long long inner, long long strips, long long items) {
    chan_body<bwd_op<OP>::value, DT, W, CAP, G>(a, b, out, outer, N, inner, strips);
}

// ---- strided: a non-last dim whose columns do not fit on chip -------------------------------------------------------
// The middle dim of a contiguous (outer, N, inner) tensor. blockDim = (lanes, rows): thread (tx, ty) owns columns
// [col, col + W) of a strip of lanes * W columns and rows ty, ty + rows, ... of N. Persistent: the CTA walks work
// items (o, strip) with a grid stride; both passes over a strip run back to back, so the second read of the strip
// hits L2 when the plan keeps grid * N * strip bytes inside the cache. Per column the threads of a column fold their
// rows, a tree over the CTA's rows in shared memory merges them, and the second pass writes the outputs.

// One trip of a strided pass: rows n0 + u * rows (< N) of the thread's columns, inner elements apart.
template <bool LAST, class op, int U>
__device__ __forceinline__ void strided_trip(typename op::raw (&ra)[U], typename op::raw (&rb)[U],
                                             const typename op::elem* in_a, const typename op::elem* in_b, bool active,
                                             int n0, int rows, int N, long long inner) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int n = n0 + u * rows;
        if (active && n < N) op::template load<LAST>(ra[u], rb[u], in_a + n * inner, in_b + n * inner, 0);
    }
}

// A forward trip's U accesses unpacked into x, -inf where read(u) says access u was not read
template <class op, int U, int W, class Read>
__device__ __forceinline__ void unpack_trip(const typename op::raw (&ra)[U], Read read, float (&x)[U][W]) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (read(u)) {
            op::io::unpack(ra[u], x[u]);
        } else {
#pragma unroll
            for (int j = 0; j < W; j++) x[u][j] = OS_NEG_INF;
        }
    }
}

// A forward trip's U rows of W columns (x: -inf where a row was not read) folded into the columns' (m, d): per
// column the max of the trip's rows first, one rescale a trip (the strided and period kernels)
template <int U, int W>
__device__ __forceinline__ void fold_trip(const float (&x)[U][W], float (&pa)[W], float (&pb)[W]) {
#pragma unroll
    for (int j = 0; j < W; j++) {
        float mx = x[0][j];
#pragma unroll
        for (int u = 1; u < U; u++) mx = fmaxf(mx, x[u][j]);
        const float mn = fmaxf(pa[j], mx);
        const float s = os_safe_shift(mn);
        float e = 0.0f;
#pragma unroll
        for (int u = 0; u < U; u++) e += os_exp_diff(x[u][j], s);
        pb[j] = pb[j] * os_exp_diff(pa[j], s) + e;
        pa[j] = mn;
    }
}

// CTAs an SM of the strided kernels (their launch bound; plan.py's strided_ctas) and accesses a thread has in flight
// a trip. 16-bit 16-byte accesses (W = 8): one CTA of 128 registers holding 8 forward and 4 backward (two inputs),
// whose strips wait on the memory's latency a trip at a time (two CTAs of 64 registers held 2 and 2: dim 0 of 8192^2
// bf16 forward 177 -> 153 us, channels C = 1000 backward 105 -> 91 us on an H100, session 78, strided forced). The
// rest two CTAs of 64 registers: 4 forward, backward 2 for fp32 vectors and 4 for the scalar path (W = 1). The scalar
// path with 16 and 8 in one CTA lost (4097 x 1001 dim 0 fp32 forward 38 -> 42 us, (16, 300, 45, 45) dim 1 47 -> 77 us).
__host__ __device__ constexpr int strided_ctas(int W) { return W == 8 ? 1 : 2; }
__host__ __device__ constexpr int strided_unroll(int W, bool fwd) {
    return W == 8 ? (fwd ? 8 : 4) : (fwd || W == 1) ? 4 : 2;
}

template <int OP, int DT, int W>
__device__ __forceinline__ void strided_body(const void* __restrict__ a, const void* __restrict__ b,
                                             void* __restrict__ out, int N, long long inner, long long strips,
                                             long long items) {
    typedef op_traits<OP, DT, W> op;
    typedef typename op::elem elem;
    typedef typename op::raw raw;
    constexpr int U = strided_unroll(W, op::FWD);
    // per column: forward (m, d); backward the sum, and log_softmax's "alive" flags as one bit mask per thread
    __shared__ float sh_a[STRIDED_THREADS * W];
    __shared__ typename os_cond<op::FWD, float, unsigned>::type sh_b[op::FWD ? STRIDED_THREADS * W : STRIDED_THREADS];
    const int lanes = blockDim.x, rows = blockDim.y;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int me = ty * lanes + tx, slot = me * W;  // the thread's index and its columns' in the tree
#pragma unroll 1
    for (long long item = blockIdx.x; item < items; item += gridDim.x) {
        bool active;
        const long long base = os_strip_column<W>(item, strips, lanes, tx, N, inner, active);
        const elem* in_a = static_cast<const elem*>(a) + base;
        const elem* in_b = static_cast<const elem*>(b) + base;
        // the thread's pair per column: forward (m, d) in (pa, pb); backward the sum in pa, and for log_softmax the
        // alive flags of the W columns as bits of `live`
        float pa[W], pb[W];
#pragma unroll
        for (int j = 0; j < W; j++) {
            if constexpr (op::FWD) pa[j] = OS_NEG_INF;
            else pa[j] = 0.0f;
            pb[j] = 0.0f;
        }
        unsigned live = 0;
#pragma unroll 1
        for (int n0 = ty; n0 < N; n0 += rows * U) {
            raw ra[U], rb[U];
            strided_trip<false, op>(ra, rb, in_a, in_b, active, n0, rows, N, inner);
            if constexpr (op::FWD) {  // per column the max of the trip's U rows first: one rescale per trip
                float x[U][W];
                unpack_trip<op, U, W>(ra, [&](int u) { return active && n0 + u * rows < N; }, x);
                fold_trip<U, W>(x, pa, pb);
            } else {
#pragma unroll
                for (int u = 0; u < U; u++) {
                    if (active && n0 + u * rows < N) {
                        float y[W], dy[W];
                        op::io::unpack(ra[u], y);
                        op::io::unpack(rb[u], dy);
#pragma unroll
                        for (int j = 0; j < W; j++) {
                            if constexpr (OP == 2) {
                                pa[j] = fmaf(y[j], dy[j], pa[j]);
                            } else {
                                pa[j] += dy[j];
                                live |= (y[j] != OS_NEG_INF ? 1u : 0u) << j;  // NaN counts as alive
                            }
                        }
                    }
                }
            }
        }
        // a tree over the rows of the CTA, in shared memory
#pragma unroll
        for (int j = 0; j < W; j++) {
            sh_a[slot + j] = pa[j];
            if constexpr (op::FWD) sh_b[slot + j] = pb[j];
        }
        if constexpr (OP == 3) sh_b[me] = live;
        __syncthreads();
#pragma unroll 1
        for (int h = rows >> 1; h > 0; h >>= 1) {
            if (ty < h) {
                // the thread h rows of threads down; the forward and the backward address its columns in the two
                // forms they had as separate kernels (either one in both changes the SASS of the other)
                const int other = me + h * lanes;
                const int other_slot = slot + h * lanes * W;
#pragma unroll
                for (int j = 0; j < W; j++) {
                    if constexpr (op::FWD) {
                        os_combine<OS_RED_MD>(pa[j], pb[j], sh_a[other_slot + j], sh_b[other_slot + j]);
                    } else {
                        pa[j] += sh_a[other * W + j];
                    }
                    sh_a[slot + j] = pa[j];
                    if constexpr (op::FWD) sh_b[slot + j] = pb[j];
                }
                if constexpr (OP == 3) {
                    live |= sh_b[other];
                    sh_b[me] = live;
                }
            }
            __syncthreads();
        }
        // the columns' results (row 0 of the tree): forward the output parameters (fwd_out's fields, apart: an array
        // of fwd_out changes the SASS), backward the sums and the flags
        float s[W], inv[W], sh[W], ld[W];
#pragma unroll
        for (int j = 0; j < W; j++) {
            if constexpr (op::FWD) {
                const fwd_out<OP, DT != 0> q(sh_a[tx * W + j], sh_b[tx * W + j]);
                s[j] = q.s;
                inv[j] = q.inv;
                sh[j] = q.sh;
                ld[j] = q.ld;
            } else {
                pa[j] = sh_a[tx * W + j];
            }
        }
        if constexpr (OP == 3) live = sh_b[tx];
        elem* dst = static_cast<elem*>(out) + base;
#pragma unroll 1
        for (int n0 = ty; n0 < N; n0 += rows * U) {
            raw ra[U], rb[U];
            strided_trip<true, op>(ra, rb, in_a, in_b, active, n0, rows, N, inner);
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int n = n0 + u * rows;
                if (active && n < N) {
                    float x[W], y[W];
                    op::io::unpack(ra[u], x);  // x, or y for the backward
                    if constexpr (op::FWD) {
#pragma unroll
                        for (int j = 0; j < W; j++)
                            y[j] = fwd_out<OP, DT != 0>::y_of_x(x[j], s[j], inv[j], sh[j], ld[j]);
                    } else {
                        float dy[W];
                        op::io::unpack(rb[u], dy);
#pragma unroll
                        for (int j = 0; j < W; j++) y[j] = bwd_out<OP>(x[j], dy[j], pa[j], (float)((live >> j) & 1u));
                    }
                    op::io::store_stream(dst + (long long)n * inner, 0, y);
                }
            }
        }
        __syncthreads();  // the next item rewrites sh_a / sh_b
    }
}

template <int OP, int DT, int W>
__global__ void __launch_bounds__(STRIDED_THREADS, strided_ctas(W))
fwd_strided(const void* __restrict__ a, const void* __restrict__ b, void* __restrict__ out, long long outer, int N,
            long long inner, long long strips, long long items) {
    strided_body<fwd_op<OP>::value, DT, W>(a, b, out, N, inner, strips, items);
}

template <int OP, int DT, int W>
__global__ void __launch_bounds__(STRIDED_THREADS, strided_ctas(W))
bwd_strided(const void* __restrict__ a, const void* __restrict__ b, void* __restrict__ out, long long outer, int N,
            long long inner, long long strips, long long items) {
    strided_body<bwd_op<OP>::value, DT, W>(a, b, out, N, inner, strips, items);
}

// ---- bands: a non-last dim read once, each strip's rows in bands of a group of CTAs ---------------------------------
// The middle dim of a contiguous (outer, N, inner) tensor, with one read and one write an element where the strided
// kernel reads twice (its second read from DRAM wherever the grid's strips outgrow the L2). A CTA of (lanes, rows)
// threads holds a band of chunk = rows * (U + S) rows of a strip of lanes * W columns: thread (tx, ty) columns [col,
// col + W), the band's rows ty + u * rows, u < U in registers and U <= u < U + S in shared memory (16-byte accesses
// copied by cp.async, each thread's own: [S][IN][BANDS_THREADS] vectors, x; or y then dy; S from the plan, which
// sizes the G = ceil(N / chunk) bands of a strip evenly). The bands of a strip are a group, whose item is (outer
// index, strip). Per column: the thread's pair over its U + S rows, a tree over the CTA's rows in shared memory (the
// band's pair), the G bands' pairs through global memory (os_group_arrive: the group regime's bounded wait), folded
// by every CTA of the group in one order (the same bits), then the outputs from the band's accesses. As in
// grp_body, each CTA takes its (item, rank) from a ticket in the order CTAs start, and a CTA that waited wait_ns
// abandons its band to bands_fix, launched after it. ws: the ticket (2 words), each item's arrival word (zeroed
// before the launch: os_bands_head words in all), then each item's block of os_bands_block(G, cols) words: G x cols
// pairs (rank-major) and the abandoned ranks (+ 1).
__host__ __device__ constexpr long long os_bands_head(long long items) { return 2 + 2 * ((items + 1) / 2); }
__host__ __device__ constexpr long long os_bands_block(int G, int cols) { return 2LL * G * cols + 2 * ((G + 1) / 2); }

// The group's pair of each of the thread's columns: thread row ty folds ranks ty, ty + rows, ... of the block's pairs
// (after the completed count's acquire, ordered before by the caller's barrier), then the tree; every thread ends with
// its columns' pairs, and the shared memory is free again. The same in every CTA of the group and in bands_fix.
template <int RED, int W>
__device__ __forceinline__ void bands_group_pairs(float (&pa)[W], float (&pb)[W], const float* blk, int G, int cols,
                                                  float* sh_a, float* sh_b, int lanes, int rows) {
    const int tx = threadIdx.x;
#pragma unroll
    for (int j = 0; j < W; j++) {
        pa[j] = os_id_a<RED>();
        pb[j] = 0.0f;
    }
#pragma unroll 1
    for (int r = threadIdx.y; r < G; r += rows) {
#pragma unroll
        for (int j = 0; j < W; j++) {
            float a2, b2;
            asm volatile("ld.relaxed.gpu.global.v2.f32 {%0, %1}, [%2];"
                         : "=f"(a2), "=f"(b2) : "l"(blk + 2 * ((long long)r * cols + tx * W + j)) : "memory");
            os_combine<RED>(pa[j], pb[j], a2, b2);
        }
    }
    column_tree<RED, W>(pa, pb, sh_a, sh_b, lanes, rows);
#pragma unroll
    for (int j = 0; j < W; j++) {
        pa[j] = sh_a[tx * W + j];
        pb[j] = sh_b[tx * W + j];
    }
    __syncthreads();  // the slots are read before anyone reuses them
}

// The band's rows n0 + u * rows (< N): U into registers, then S (16-byte accesses only) copied into the thread's
// shared-memory slots (`slots`: its first, BANDS_THREADS vectors apart), committed as one group.
template <class op, int U>
__device__ __forceinline__ void bands_load(typename op::raw (&ra)[U], typename op::raw (&rb)[U], uint4* slots, int S,
                                           const typename op::elem* in_a, const typename op::elem* in_b, bool active,
                                           int n0, int rows, int N, long long inner) {
    strided_trip<true, op>(ra, rb, in_a, in_b, active, n0, rows, N, inner);
    if constexpr (sizeof(typename op::raw) == 16) {
#pragma unroll 4
        for (int s = 0; s < S; s++) {
            const int n = n0 + (U + s) * rows;
            if (active && n < N) {
                os_cp_async16(&slots[(op::FWD ? s : 2 * s) * BANDS_THREADS], in_a + n * inner);
                if constexpr (!op::FWD) os_cp_async16(&slots[(2 * s + 1) * BANDS_THREADS], in_b + n * inner);
            }
        }
        os_cp_async_commit();
    }
}

// f(a, b, u) for each of the band's accesses u in rows n0 + u * rows (< N), a (x or y) and b (dy; forward: a again):
// the registers unrolled, then the shared-memory slots in a loop (their copies waited for first; with S a template
// parameter and this loop unrolled, ptxas spilled 16-88 bytes at the launch bound).
template <class op, int U, class F>
__device__ __forceinline__ void bands_each(const typename op::raw (&ra)[U], const typename op::raw (&rb)[U],
                                           const uint4* slots, int S, bool active, int n0, int rows, int N, F f) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (active && n0 + u * rows < N) f(ra[u], rb[u], u);
    }
    if constexpr (sizeof(typename op::raw) == 16) {
        os_cp_async_wait_all();
#pragma unroll 1
        for (int s = 0; s < S; s++) {
            if (active && n0 + (U + s) * rows < N) {
                const uint4 a = slots[(op::FWD ? s : 2 * s) * BANDS_THREADS];
                f(a, op::FWD ? a : slots[(2 * s + 1) * BANDS_THREADS], U + s);
            }
        }
    }
}

// The outputs of the band's rows n0 + u * rows (< N) from its accesses and the group's pairs of its columns.
template <class op, int OP, int DT, int W, int U>
__device__ __forceinline__ void bands_store(const typename op::raw (&ra)[U], const typename op::raw (&rb)[U],
                                            const uint4* slots, int S, typename op::elem* dst, bool active, int n0,
                                            int rows, int N, long long inner, const float (&pa)[W],
                                            const float (&pb)[W]) {
    typedef typename op::raw raw;
    float s[W], inv[W], sh[W], ld[W];
    if constexpr (op::FWD) {
#pragma unroll
        for (int j = 0; j < W; j++) {
            const fwd_out<OP, DT != 0> q(pa[j], pb[j]);
            s[j] = q.s;
            inv[j] = q.inv;
            sh[j] = q.sh;
            ld[j] = q.ld;
        }
    }
    bands_each<op, U>(ra, rb, slots, S, active, n0, rows, N, [&](const raw& xa, const raw& xb, int u) {
        float x[W], y[W];
        op::io::unpack(xa, x);  // x, or y for the backward
        if constexpr (op::FWD) {
#pragma unroll
            for (int j = 0; j < W; j++) y[j] = fwd_out<OP, DT != 0>::y_of_x(x[j], s[j], inv[j], sh[j], ld[j]);
        } else {
            float dy[W];
            op::io::unpack(xb, dy);
#pragma unroll
            for (int j = 0; j < W; j++) y[j] = bwd_out<OP>(x[j], dy[j], pa[j], pb[j]);
        }
        op::io::store_stream(dst + (n0 + u * rows) * inner, 0, y);
    });
}

// FIX false: the group kernel (fwd_bands / bwd_bands); FIX true: bands_fix, a CTA an item, after it.
template <int OP, int DT, int W, int U, bool FIX>
__device__ __forceinline__ void bands_body(const void* __restrict__ a, const void* __restrict__ b, float* ws,
                                           void* __restrict__ out, int N, long long inner, long long strips,
                                           long long items, int G, int chunk, int wait_ns) {
    typedef op_traits<OP, DT, W> op;
    typedef typename op::elem elem;
    typedef typename op::raw raw;
    __shared__ float sh_a[BANDS_THREADS * W], sh_b[BANDS_THREADS * W];
    __shared__ os_group_shared gs;
    extern __shared__ uint4 smem_slots[];  // [S][IN][BANDS_THREADS] vectors
    const int lanes = blockDim.x, rows = blockDim.y, cols = lanes * W;
    const int tx = threadIdx.x, ty = threadIdx.y;
    uint4* const slots = smem_slots + ty * lanes + tx;
    const int S = chunk / rows - U;  // the thread's accesses in shared memory
    long long item;
    unsigned rank = 0, gone = 0;
    if constexpr (FIX) {
        item = blockIdx.x;
        os_grid_wait();  // the group kernel's end: every count, pair and abandoned rank written
        gone = __float_as_uint(os_ld_after_wait(ws + 2 + item)) >> 16;
        if (gone == 0) return;
    } else {
        os_launch_dependents();  // bands_fix may be scheduled once every CTA has started
        if (tx == 0 && ty == 0) gs.ticket = atomicAdd(reinterpret_cast<unsigned*>(ws), 1u);
        __syncthreads();
        item = gs.ticket / (unsigned)G;
        rank = gs.ticket % (unsigned)G;
    }
    float* const blk = ws + os_bands_head(items) + os_bands_block(G, cols) * item;
    bool active;
    const long long base = os_strip_column<W>(item, strips, lanes, tx, N, inner, active);
    const elem* in_a = static_cast<const elem*>(a) + base;
    const elem* in_b = static_cast<const elem*>(b) + base;
    elem* dst = static_cast<elem*>(out) + base;
    float pa[W], pb[W];
    raw ra[U], rb[U];
    if constexpr (!FIX) {
        const int n0 = (int)rank * chunk + ty;
        bands_load<op, U>(ra, rb, slots, S, in_a, in_b, active, n0, rows, N, inner);
        // the thread's pair of each column over its U + S rows: forward (m, d) from the rows' max; backward the sum
        // (and log-softmax's alive flag); the slots' copies waited for after the registers' first use
#pragma unroll
        for (int j = 0; j < W; j++) {
            pa[j] = os_id_a<op::RED>();
            pb[j] = 0.0f;
        }
        if constexpr (op::FWD) {  // the max of the rows, then the sum of exponentials: each access unpacked twice
            bands_each<op, U>(ra, rb, slots, S, active, n0, rows, N, [&](const raw& xa, const raw&, int) {
                float x[W];
                op::io::unpack(xa, x);
#pragma unroll
                for (int j = 0; j < W; j++) pa[j] = fmaxf(pa[j], x[j]);
            });
            float st[W];
#pragma unroll
            for (int j = 0; j < W; j++) st[j] = os_safe_shift(pa[j]);
            bands_each<op, U>(ra, rb, slots, S, active, n0, rows, N, [&](const raw& xa, const raw&, int) {
                float x[W];
                op::io::unpack(xa, x);
#pragma unroll
                for (int j = 0; j < W; j++) pb[j] += os_exp_diff(x[j], st[j]);
            });
        } else {
            bands_each<op, U>(ra, rb, slots, S, active, n0, rows, N, [&](const raw& ya, const raw& yb, int) {
                float y[W], dy[W];
                op::io::unpack(ya, y);
                op::io::unpack(yb, dy);
#pragma unroll
                for (int j = 0; j < W; j++) bwd_acc<OP>(y[j], dy[j], pa[j], pb[j]);
            });
        }
        column_tree<op::RED, W>(pa, pb, sh_a, sh_b, lanes, rows);
        if (ty == 0) {  // the band's pairs at its rank
#pragma unroll
            for (int j = 0; j < W; j++) {
                asm volatile("st.global.v2.f32 [%0], {%1, %2};"
                             ::"l"(blk + 2 * ((long long)rank * cols + tx * W + j)), "f"(pa[j]), "f"(pb[j]) : "memory");
            }
        }
        __syncthreads();  // every pair stored before thread 0's release
        if (tx == 0 && ty == 0) {
            gs.own = os_group_arrive(reinterpret_cast<unsigned*>(ws + 2 + item),
                                     reinterpret_cast<unsigned*>(blk + 2LL * G * cols), G, (int)rank, wait_ns);
        }
        __syncthreads();
        if (!gs.own) return;  // abandoned: bands_fix writes the band
    }
    bands_group_pairs<op::RED, W>(pa, pb, blk, G, cols, sh_a, sh_b, lanes, rows);
    if constexpr (FIX) {
        for (unsigned k = 0; k < gone; k++) {
            const int r = (int)__float_as_uint(os_ld_after_wait(blk + 2LL * G * cols + k)) - 1;
            const int n0 = r * chunk + ty;
            bands_load<op, U>(ra, rb, slots, S, in_a, in_b, active, n0, rows, N, inner);
            bands_store<op, OP, DT, W, U>(ra, rb, slots, S, dst, active, n0, rows, N, inner, pa, pb);
        }
    } else {
        bands_store<op, OP, DT, W, U>(ra, rb, slots, S, dst, active, (int)rank * chunk + ty, rows, N, inner, pa, pb);
    }
}

template <int OP, int DT, int W, int U>
__global__ void __launch_bounds__(BANDS_THREADS, BANDS_CTAS_PER_SM)
fwd_bands(const void* __restrict__ a, const void* __restrict__ b, float* __restrict__ ws, void* __restrict__ out,
          long long outer, int N, long long inner, long long strips, int G, int chunk, int wait_ns) {
    bands_body<fwd_op<OP>::value, DT, W, U, false>(a, b, ws, out, N, inner, strips, outer * strips, G, chunk,
                                                     wait_ns);
}

template <int OP, int DT, int W, int U>
__global__ void __launch_bounds__(BANDS_THREADS, BANDS_CTAS_PER_SM)
bwd_bands(const void* __restrict__ a, const void* __restrict__ b, float* __restrict__ ws, void* __restrict__ out,
          long long outer, int N, long long inner, long long strips, int G, int chunk, int wait_ns) {
    bands_body<bwd_op<OP>::value, DT, W, U, false>(a, b, ws, out, N, inner, strips, outer * strips, G, chunk,
                                                     wait_ns);
}

template <int OP, int DT, int W, int U>
__global__ void __launch_bounds__(BANDS_THREADS)
fwd_bands_fix(const void* __restrict__ a, const void* __restrict__ b, float* __restrict__ ws, void* __restrict__ out,
              long long outer, int N, long long inner, long long strips, int G, int chunk) {
    bands_body<fwd_op<OP>::value, DT, W, U, true>(a, b, ws, out, N, inner, strips, outer * strips, G, chunk, 0);
}

template <int OP, int DT, int W, int U>
__global__ void __launch_bounds__(BANDS_THREADS)
bwd_bands_fix(const void* __restrict__ a, const void* __restrict__ b, float* __restrict__ ws, void* __restrict__ out,
              long long outer, int N, long long inner, long long strips, int G, int chunk) {
    bands_body<bwd_op<OP>::value, DT, W, U, true>(a, b, ws, out, N, inner, strips, outer * strips, G, chunk, 0);
}

// ---- period: a non-last dim whose inner is not whole vectors, read as the slab's 16-byte vectors -----------------
// The slab of one outer index (N x inner elements in a row) read as 16-byte vectors of V elements: g = V / gcd(inner,
// V) rows are Q = g * inner / V whole vectors (a period), and vector t of every period holds the same V slots: element
// e = t * V + j of a period is column e % inner. A thread reading vector t of each period keeps one pair per slot, and
// a warp reads 512 contiguous bytes an access, where the strided kernel reads one element an access (a warp: 4 rows
// of 32 bytes, where inner is odd). One cooperative launch (every CTA resident: plan.py gives it at most a CTA an
// SM), its CTAs looping over the items of three phases, a grid barrier between them:
//   stats  an item (band, chunk, outer index): chunk = T consecutive vectors of the period, band = PB periods; the
//          pairs of its slots folded down its periods, its T x V pairs stored to shared memory and each column's
//          merged by one thread, L pairs to the workspace
//   merge  an item (PERIOD_MCOLS columns, outer index), the CTA's threads over the bands: each column's pairs over
//          the bands and the chunks that hold it, to `fin`
//   apply  the stats' items: its slots' column pairs from fin, the band re-read and its outputs written
// Where each CTA has one item, the stats keep the band's first K periods (plan.period_keep: as many as 227 KB of shared
// memory holds, PERIOD_SMEM) for the apply, which re-reads only the rest (from L2, where half of it missed: ncu,
// session 80). Three launches in the first form (session 79: stats, then the merge and the apply as programmatic
// launches, each apply re-reading its whole band) measured level with this one on an H100 before the kept periods,
// which took fp32 3-9% lower (16-bit forward 1 us higher: the memset of the counter and the barriers; session 80).
// The grid barriers are the driver's (os_grid_sync): no counter in the workspace, no memset before the launch (2.4 us
// of the H100's 4097 x 1001 dim 0: session 81's stamps). Workspace (fp32, plan.period_workspace): outer x bands x
// chunks x L pairs, then outer x inner pairs (fin). The slab of each outer index starts on a 16-byte boundary (plan:
// outer 1, or N x inner whole vectors); the slab's last vector, where N x inner is not whole vectors, is read and
// written element by element.
enum { PERIOD_THREADS = 512 };

// accesses a thread has in flight a trip: 2 for the 16-bit backward (two inputs, 8 pairs) and the fp32 backward's
// apply, 4 otherwise (set at 64 registers in the three-launch form; 8 fp32 and 6 16-bit forward, 4 backward, in
// this one's 128 registers measured level: session 80)
__host__ __device__ constexpr int period_unroll(int OP, int DT, bool apply) {
    return OP >= 2 && (DT != 0 || apply) ? 2 : 4;
}

// the period of a slab: rows g, vectors Q, a chunk's threads T and its pairs L (plan.period_geometry)
template <int V> struct period_geo {
    int g, Q, T, L;
    __device__ __forceinline__ explicit period_geo(int inner) {
        g = V >> min(__ffs(inner) - 1, __ffs(V) - 1);  // V / gcd(inner, V): V and gcd are powers of 2
        Q = g * (inner / V) + g * (inner % V) / V;     // g * inner / V without the product's overflow
        T = min((int)PERIOD_THREADS, (Q + 31) / 32 * 32);
        L = min(inner, T * V);
    }
};

// Whether vector vi of the slab, the thread's in period k, is read: a valid thread, inside its band (k1) and the
// slab's whole vectors
__device__ __forceinline__ bool period_in(bool valid, int k, int k1, long long vi, long long full) {
    return valid && k < k1 && vi < full;
}

// The thread's vector t of periods k .. k + U - 1 read (ok[u]: period_in); LAST: the inputs' last read (the apply's,
// evict-first)
template <class op, bool LAST, int U>
__device__ __forceinline__ void period_trip(typename op::raw (&ra)[U], typename op::raw (&rb)[U], bool (&ok)[U],
                                            const typename op::elem* A, const typename op::elem* B, bool valid, int k,
                                            int k1, int Q, int t, long long full) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const long long vi = (long long)(k + u) * Q + t;
        ok[u] = period_in(valid, k + u, k1, vi, full);
        if (ok[u]) op::template load<LAST>(ra[u], rb[u], A, B, vi);
    }
}

// The thread's trip of U periods (ok[u]: inside its band and the slab's whole vectors) folded into its slots' pairs.
template <int OP, int DT, int U, int V>
__device__ __forceinline__ void period_fold(const typename op_traits<OP, DT, V>::raw (&ra)[U],
                                            const typename op_traits<OP, DT, V>::raw (&rb)[U], const bool (&ok)[U],
                                            float (&pa)[V], float (&pb)[V]) {
    typedef op_traits<OP, DT, V> op;
    if constexpr (op::FWD) {
        float x[U][V];
        unpack_trip<op, U, V>(ra, [&](int u) { return ok[u]; }, x);
        fold_trip<U, V>(x, pa, pb);
    } else {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (ok[u]) {
                float y[V], dy[V];
                op::io::unpack(ra[u], y);
                op::io::unpack(rb[u], dy);
#pragma unroll
                for (int j = 0; j < V; j++) bwd_acc<OP>(y[j], dy[j], pa[j], pb[j]);
            }
        }
    }
}

// The slab's last vector where N x inner is not whole vectors: its first n elements one by one, the rest as
// elements beside the slab (forward -inf; backward y padded, dy 0: nothing added to a pair).
template <int OP, int DT, int V>
__device__ __forceinline__ void period_load_tail(typename op_traits<OP, DT, V>::raw& ra,
                                                 typename op_traits<OP, DT, V>::raw& rb,
                                                 const typename op_traits<OP, DT, V>::elem* pa,
                                                 const typename op_traits<OP, DT, V>::elem* pb, long long vi, int n) {
    typedef op_traits<OP, DT, V> op;
    typedef typename op::elem elem;
    union {
        elem e[V];
        typename op::raw r;
    } ua, ub;
#pragma unroll
    for (int j = 0; j < V; j++) {
        ua.e[j] = j < n ? pa[vi * V + j] : os_from_f<DT>(op::FWD ? OS_NEG_INF : bwd_pad_y<OP>());
        ub.e[j] = j < n && !op::FWD ? pb[vi * V + j] : os_from_f<DT>(0.0f);
    }
    ra = ua.r;
    rb = ub.r;
}

// The band's first K periods kept in shared memory from the stats to the apply (plan.period_keep): after the chunk's
// T x V pairs (the stats' merge), period j of the band at [j][thread] (and dy's K x T after, backward).
template <class op, int V>
__device__ __forceinline__ typename op::raw* period_kept(float2* sh_pairs, const period_geo<V>& geo) {
    return reinterpret_cast<typename op::raw*>(sh_pairs + geo.T * V);
}
// The stats' trip of periods j .. j + U - 1 of the band into the kept ones (those read, below K) ...
template <class op, int U>
__device__ __forceinline__ void period_keep(const typename op::raw (&ra)[U], const typename op::raw (&rb)[U],
                                            const bool (&ok)[U], typename op::raw* kept, int j, int K, int T) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (ok[u] && j + u < K) {
            kept[(j + u) * T + threadIdx.x] = ra[u];
            if constexpr (!op::FWD) kept[(K + j + u) * T + threadIdx.x] = rb[u];
        }
    }
}
// ... and the apply's trip read back from them (every period of the trip below K: those read, ok[u])
template <class op, int U>
__device__ __forceinline__ void period_unkeep(typename op::raw (&ra)[U], typename op::raw (&rb)[U],
                                              const bool (&ok)[U], const typename op::raw* kept, int j, int K, int T) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (ok[u]) {
            ra[u] = kept[(j + u) * T + threadIdx.x];
            if constexpr (!op::FWD) rb[u] = kept[(K + j + u) * T + threadIdx.x];
        }
    }
}

// (band, chunk, outer index) of a stats or apply item
struct period_cta {
    int band, chunk;
    long long o;
    __device__ __forceinline__ period_cta(long long item, int bands, int chunks) {
        band = (int)(item % bands);
        const long long rest = item / bands;
        chunk = (int)(rest % chunks);
        o = rest / chunks;
    }
};

template <int OP, int DT>
__device__ __forceinline__ void period_stats_body(const void* __restrict__ a, const void* __restrict__ b,
                                                  float* __restrict__ ws, long long outer, int N, int inner, int bands,
                                                  int chunks, int PB, long long item, int K) {
    constexpr int V = 16 / sizeof(typename os_elem<DT>::type), U = period_unroll(OP, DT, false);
    typedef op_traits<OP, DT, V> op;
    typedef typename op::elem elem;
    typedef typename op::raw raw;
    extern __shared__ float2 sh_pairs[];
    const period_geo<V> geo(inner);
    const period_cta c(item, bands, chunks);
    const int t = c.chunk * geo.T + threadIdx.x;  // the thread's vector of the period
    const bool valid = t < geo.Q;
    const long long E = (long long)N * inner, full = E / V;
    const elem* A = static_cast<const elem*>(a) + c.o * E;
    const elem* B = static_cast<const elem*>(b) + c.o * E;
    float pa[V], pb[V];
#pragma unroll
    for (int j = 0; j < V; j++) {
        pa[j] = os_id_a<op::RED>();
        pb[j] = 0.0f;
    }
    const int periods = (N + geo.g - 1) / geo.g;
    const int k0 = c.band * PB, k1 = min(k0 + PB, periods);
#pragma unroll 1
    for (int k = k0; k < k1; k += U) {
        raw ra[U], rb[U];
        bool ok[U];
        period_trip<op, false, U>(ra, rb, ok, A, B, valid, k, k1, geo.Q, t, full);
        period_keep<op, U>(ra, rb, ok, period_kept<op>(sh_pairs, geo), k - k0, K, geo.T);
        period_fold<OP, DT, U, V>(ra, rb, ok, pa, pb);
    }
    if (E % V != 0 && valid && t == full % geo.Q && full / geo.Q >= k0 && full / geo.Q < k1) {
        raw ra[1], rb[1];
        const bool ok[1] = {true};
        period_load_tail<OP, DT, V>(ra[0], rb[0], A, B, full, (int)(E - full * V));
        period_fold<OP, DT, 1, V>(ra, rb, ok, pa, pb);
    }
    // the chunk's pairs merged column by column: chunk element el (thread el / V's slot el % V) is column
    // (chunk * T * V + el) % inner, at place el % inner. Every thread stores its V pairs at el, from slot rot on (a
    // half-warp's 16 stores on 16 distinct banks, where in order they fell V x 8 bytes apart), and after one barrier
    // each place's pairs, el = place + p x inner below span, are folded in order by one thread and written out;
    // places no element reaches ([span, L) of a short last chunk) take the identity. (Session 81's form merged
    // in place, a pass and a barrier per row of places: 3 passes in fp32 and 5 in 16-bit at inner 1001, 2.0 and
    // 3.7 us of its stamps, taken after a barrier at the loads' end.)
    const int el0 = threadIdx.x * V, span = min(geo.T, geo.Q - c.chunk * geo.T) * V;
    const int rot = (threadIdx.x & 15) / (16 / V);
    if (valid) {
#pragma unroll
        for (int u = 0; u < V; u++) {
            const int j = (u + rot) & (V - 1);
            float2 own = make_float2(pa[0], pb[0]);
#pragma unroll
            for (int i = 1; i < V; i++) {
                if (j == i) own = make_float2(pa[i], pb[i]);
            }
            sh_pairs[el0 + j] = own;
        }
    }
    __syncthreads();
    float2* dst = reinterpret_cast<float2*>(ws) + ((c.o * bands + c.band) * chunks + c.chunk) * geo.L;
    for (int i = threadIdx.x; i < geo.L; i += blockDim.x) {
        float2 s = i < span ? sh_pairs[i] : make_float2(os_id_a<op::RED>(), 0.0f);
        for (int el = i + inner; el < span; el += inner) {
            const float2 o = sh_pairs[el];
            os_combine<op::RED>(s.x, s.y, o.x, o.y);
        }
        dst[i] = s;
    }
}

// The item's PERIOD_MCOLS columns (blk: outer index x column blocks), each over the bands and the chunks that hold it:
// thread (ty, tx) column tx of parts ty, ty + R, ... (part q: band q / chunks, chunk q % chunks; R rows of the CTA's T
// threads), a batch of loads in flight at once, then the R rows folded: a warp's four by shuffles, the warps' by the
// first warp from the stats' pairs in shared memory (T / 4 of their T x V places; one barrier where a tree of static
// shared memory took one a level: 7 at 512 threads). (32 columns an item, a warp a band at a time with a load and a
// fold in turn, took 4 us at 4097 x 1001: 32 CTAs of 132 at work, nine L2 trips each; session 81.)
enum { PERIOD_MCOLS = 8 };
// A warp's rows of the item's columns folded (lanes tx, tx + 8, tx + 16, tx + 24): every lane ends with its column's
// state over the warp
template <int RED> __device__ __forceinline__ void period_warp_rows(float& a, float& b) {
    static_assert(32 % PERIOD_MCOLS == 0, "a warp holds whole rows of the item's columns");
#pragma unroll
    for (int off = PERIOD_MCOLS; off < 32; off *= 2) os_xor_merge<RED>(a, b, off);
}
template <int OP, int DT>
__device__ __forceinline__ void period_merge_body(float* __restrict__ ws, long long outer, int inner, int bands,
                                                  int chunks, long long blk) {
    constexpr int V = 16 / sizeof(typename os_elem<DT>::type), RED = op_traits<OP, DT, V>::RED;
    constexpr int B = 4;
    extern __shared__ float2 sh_pairs[];  // the stats' pairs: a warp's row of columns at [warp x PERIOD_MCOLS]
    const period_geo<V> geo(inner);
    const int tx = threadIdx.x % PERIOD_MCOLS, ty = threadIdx.x / PERIOD_MCOLS, R = blockDim.x / PERIOD_MCOLS;
    const int blocks = (inner + PERIOD_MCOLS - 1) / PERIOD_MCOLS, parts = bands * chunks;
    const long long o = blk / blocks;
    const int col = (int)(blk % blocks) * PERIOD_MCOLS + tx;
    const float2* pairs = reinterpret_cast<const float2*>(ws) + o * parts * geo.L;
    float pa = os_id_a<RED>(), pb = 0.0f;
#pragma unroll 1
    for (int q0 = ty; col < inner && q0 < parts; q0 += B * R) {
        float2 v[B];
        bool ok[B];
#pragma unroll
        for (int u = 0; u < B; u++) {
            const int q = q0 + u * R;
            int lc = col - (int)((long long)(q % chunks) * geo.T * V % inner);  // the column's place in the pairs
            if (lc < 0) lc += inner;
            ok[u] = q < parts && lc < geo.L;
            if (ok[u]) v[u] = os_ld2_after_wait(pairs + (long long)q * geo.L + lc);
        }
#pragma unroll
        for (int u = 0; u < B; u++) {
            if (ok[u]) os_combine<RED>(pa, pb, v[u].x, v[u].y);
        }
    }
    period_warp_rows<RED>(pa, pb);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane < PERIOD_MCOLS) sh_pairs[warp * PERIOD_MCOLS + lane] = make_float2(pa, pb);
    __syncthreads();
    if (warp != 0) return;
    pa = os_id_a<RED>(), pb = 0.0f;
    for (int w = lane / PERIOD_MCOLS; w < (int)blockDim.x / 32; w += 32 / PERIOD_MCOLS) {
        const float2 s = sh_pairs[w * PERIOD_MCOLS + tx];
        os_combine<RED>(pa, pb, s.x, s.y);
    }
    period_warp_rows<RED>(pa, pb);
    if (lane < PERIOD_MCOLS && col < inner) {
        float2* fin = reinterpret_cast<float2*>(ws) + outer * parts * geo.L;
        fin[o * inner + col] = make_float2(pa, pb);
    }
}

template <int OP, int DT>
__device__ __forceinline__ void period_apply_body(const void* __restrict__ a, const void* __restrict__ b,
                                                  float* __restrict__ ws, void* __restrict__ out, long long outer,
                                                  int N, int inner, int bands, int chunks, int PB, long long item,
                                                  int K) {
    constexpr int V = 16 / sizeof(typename os_elem<DT>::type), U = period_unroll(OP, DT, true);
    typedef op_traits<OP, DT, V> op;
    typedef typename op::elem elem;
    typedef typename op::raw raw;
    const period_geo<V> geo(inner);
    const period_cta c(item, bands, chunks);
    extern __shared__ float2 sh_pairs[];
    const int t = c.chunk * geo.T + threadIdx.x;
    const long long E = (long long)N * inner, full = E / V;
    const elem* A = static_cast<const elem*>(a) + c.o * E;
    const elem* B = static_cast<const elem*>(b) + c.o * E;
    elem* D = static_cast<elem*>(out) + c.o * E;
    const int periods = (N + geo.g - 1) / geo.g;
    const int k0 = c.band * PB, k1 = min(k0 + PB, periods);
    // the chunk's L column pairs, each read once a CTA in order (place lc is column (e0 + lc) % inner, as the stats
    // placed them): a pair a slot read from global memory by every thread took the forward's apply on 1025 x 1001
    // bf16 to 13 us, 8 reads of the same 8 KB a thread
    const float2* fin = reinterpret_cast<const float2*>(ws) + outer * bands * chunks * geo.L + c.o * inner;
    const int e0 = (int)((long long)c.chunk * geo.T * V % inner);
    for (int i = threadIdx.x; i < geo.L; i += blockDim.x) {
        const int col = e0 + i < inner ? e0 + i : e0 + i - inner;
        sh_pairs[i] = os_ld2_after_wait(fin + col);
    }
    __syncthreads();
    if (t >= geo.Q) return;
    float s[V], inv[V], sh[V], ld[V], ca[V], cb[V];
#pragma unroll
    for (int j = 0; j < V; j++) {
        const float2 f = sh_pairs[(threadIdx.x * V + j) % inner];
        if constexpr (op::FWD) {
            const typename op::out_params q(f.x, f.y);
            s[j] = q.s;
            inv[j] = q.inv;
            sh[j] = q.sh;
            ld[j] = q.ld;
        } else {
            ca[j] = f.x;
            cb[j] = f.y;
        }
    }
    auto outputs = [&](const raw& r, const raw& rd, float* y) {
        float x[V];
        op::io::unpack(r, x);  // x, or y for the backward
        if constexpr (op::FWD) {
#pragma unroll
            for (int j = 0; j < V; j++) y[j] = op::out_params::y_of_x(x[j], s[j], inv[j], sh[j], ld[j]);
        } else {
            float dy[V];
            op::io::unpack(rd, dy);
#pragma unroll
            for (int j = 0; j < V; j++) y[j] = bwd_out<OP>(x[j], dy[j], ca[j], cb[j]);
        }
    };
#pragma unroll 1
    for (int k = k0; k < k1; k += U) {
        raw ra[U], rb[U];
        bool ok[U];
        if (k - k0 + U <= K) {  // the trip's periods kept by the stats (the same ok as its loads)
#pragma unroll
            for (int u = 0; u < U; u++) ok[u] = period_in(true, k + u, k1, (long long)(k + u) * geo.Q + t, full);
            period_unkeep<op, U>(ra, rb, ok, period_kept<op>(sh_pairs, geo), k - k0, K, geo.T);
        } else {
            period_trip<op, true, U>(ra, rb, ok, A, B, true, k, k1, geo.Q, t, full);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (ok[u]) {
                float y[V];
                outputs(ra[u], rb[u], y);
                op::io::store_stream(D, (long long)(k + u) * geo.Q + t, y);
            }
        }
    }
    if (E % V != 0 && t == full % geo.Q && full / geo.Q >= k0 && full / geo.Q < k1) {
        const int n = (int)(E - full * V);
        raw r, rd;
        period_load_tail<OP, DT, V>(r, rd, A, B, full, n);
        float y[V];
        outputs(r, rd, y);
#pragma unroll
        for (int j = 0; j < V; j++) {
            if (j < n) D[full * V + j] = os_from_f<DT>(y[j]);
        }
    }
}

// The three phases in one grid of resident CTAs (a cooperative launch): each CTA loops over a phase's items, then
// waits at the grid barrier (os_grid_sync) for every CTA's.
// A CTA's threads meet at __syncthreads() between items (the shared memory is the next item's). The apply's threads
// past the period (t >= Q) return from its body only: they still reach the barrier of the next item.
template <int OP, int DT>
__device__ __forceinline__ void period_body(const void* __restrict__ a, const void* __restrict__ b,
                                            float* __restrict__ w, void* __restrict__ out, long long outer, int N,
                                            int inner, int bands, int chunks, int PB, int keep) {
    const long long items = outer * bands * chunks, blks = outer * ((inner + PERIOD_MCOLS - 1) / PERIOD_MCOLS);
    const int K = items <= gridDim.x ? keep : 0;  // a CTA's one item kept from its stats to its apply
#pragma unroll 1
    for (long long it = blockIdx.x; it < items; it += gridDim.x) {
        period_stats_body<OP, DT>(a, b, w, outer, N, inner, bands, chunks, PB, it, K);
        __syncthreads();
    }
    os_grid_sync();
#pragma unroll 1
    for (long long bk = blockIdx.x; bk < blks; bk += gridDim.x) {
        period_merge_body<OP, DT>(w, outer, inner, bands, chunks, bk);
        __syncthreads();
    }
    os_grid_sync();
#pragma unroll 1
    for (long long it = blockIdx.x; it < items; it += gridDim.x) {
        period_apply_body<OP, DT>(a, b, w, out, outer, N, inner, bands, chunks, PB, it, K);
        __syncthreads();
    }
}

// The entries: 512-thread CTAs, one an SM (plan.py's grid; 128 registers: at 64, two an SM, the loops over items
// spilled 8-48 bytes in 8 of the 12 instantiations)
template <int OP, int DT>
__global__ void __launch_bounds__(PERIOD_THREADS, 1)
fwd_period(const void* __restrict__ a, const void* __restrict__ b, float* __restrict__ ws, void* __restrict__ out,
           long long outer, int N, long long inner, int bands, int chunks, int PB, int keep) {
    period_body<fwd_op<OP>::value, DT>(a, b, ws, out, outer, N, (int)inner, bands, chunks, PB, keep);
}

template <int OP, int DT>
__global__ void __launch_bounds__(PERIOD_THREADS, 1)
bwd_period(const void* __restrict__ a, const void* __restrict__ b, float* __restrict__ ws, void* __restrict__ out,
           long long outer, int N, long long inner, int bands, int chunks, int PB, int keep) {
    period_body<bwd_op<OP>::value, DT>(a, b, ws, out, outer, N, (int)inner, bands, chunks, PB, keep);
}
