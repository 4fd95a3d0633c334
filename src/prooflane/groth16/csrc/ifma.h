/* BN254's batched affine bucket additions (msm.h's run_batch), G1 and G2, eight at a time with AVX-512
 * IFMA, where the CPU has it: each field element of Fq as five 52-bit limbs, limb i of eight elements in one
 * vector, products by vpmadd52luq/vpmadd52huq in Montgomery form (bench_field_product.py measured them at
 * 4-5x the throughput of the 4-limb mulx product). Every value is kept below q (canonical), so each step
 * is exact. R is 2^256, the 4-limb form's own (four reduction steps by 2^52 and one by 2^48), so the rows
 * and buckets are only cut into limbs and joined again, never converted.
 *
 * The batch's terms j go to lane j mod 8, vector j / 8: the chain of products that shares one inversion is
 * eight chains, one a lane, whose eight ends are inverted together (Montgomery's trick, in the 4-limb
 * product) and handed back. G2's coordinates in Fq2 = Fq[u] / (u^2 + 1) are pairs of such vectors, their
 * products three (Karatsuba). Compiled for its functions alone (a target attribute): the module runs on
 * CPUs without AVX-512, where cpu.h's kernels "ifma-batches" and "ifma-bucket-sums" do not run.
 *
 * The first part once; the rest a template included after each of groups.h's BN254 instantiations (G and
 * E defined, after msm.h) with IFMA_K, the Fq elements of a coordinate (1 or 2). */
#ifndef PROOFLANE_IFMA_COMMON
#define PROOFLANE_IFMA_COMMON

#include <stdlib.h>

#if CPU_BUILT & CPU_IFMA
#define HAVE_IFMA 1
#include <immintrin.h>

#define IFMA_TARGET __attribute__((target("avx512f,avx512ifma")))
#define M52 0xfffffffffffffULL
#define IFMA_LANES 8
#define IFMA_VECTORS (BATCH / IFMA_LANES)

#define IFMA_AI inline __attribute__((always_inline))

/* The arithmetic of eight elements of a field below 2^(52·N), limb i of each in vector i, radix 2^52, in
 * Montgomery form with R = 2^RBITS: V for BN254's q (N = 5, R = 2^256) and for BLS12-381's (N = 8,
 * R' = 2^416). V_limbs is one element's limbs (a constant broadcast by V_set1). Every value kept below q. */
#define DEFINE_V52(V, N, RBITS)                                                                                    \
    typedef struct {                                                                                               \
        u64 l[N]; /* 52-bit limbs, little-endian */                                                                \
    } V##_limbs;                                                                                                   \
    typedef struct {                                                                                               \
        __m512i l[N];                                                                                              \
    } V;                                                                                                           \
                                                                                                                   \
    static IFMA_TARGET IFMA_AI V V##_set1(const V##_limbs *c) {                                                    \
        V r;                                                                                                       \
        for (int i = 0; i < N; i++) r.l[i] = _mm512_set1_epi64((long long)c->l[i]);                                \
        return r;                                                                                                  \
    }                                                                                                              \
                                                                                                                   \
    /* a - b, + q where a < b: both below q, so is the result. */                                                  \
    static IFMA_TARGET IFMA_AI V V##_sub(V a, V b, const V *q) {                                                   \
        const __m512i mask = _mm512_set1_epi64((long long)M52), zero = _mm512_setzero_si512();                     \
        V d, e;                                                                                                    \
        __m512i borrow = zero, carry = zero;                                                                       \
        for (int i = 0; i < N; i++) {                                                                              \
            __m512i t = _mm512_sub_epi64(_mm512_sub_epi64(a.l[i], b.l[i]), borrow);                                \
            borrow = _mm512_srli_epi64(t, 63);                                                                     \
            d.l[i] = _mm512_and_si512(t, mask);                                                                    \
        }                                                                                                          \
        const __mmask8 negative = _mm512_cmpneq_epi64_mask(borrow, zero);                                          \
        for (int i = 0; i < N; i++) {                                                                              \
            __m512i t = _mm512_add_epi64(_mm512_add_epi64(d.l[i], q->l[i]), carry);                                \
            carry = _mm512_srli_epi64(t, 52);                                                                      \
            e.l[i] = _mm512_mask_mov_epi64(d.l[i], negative, _mm512_and_si512(t, mask));                           \
        }                                                                                                          \
        return e;                                                                                                  \
    }                                                                                                              \
                                                                                                                   \
    /* a + b, not reduced (below 2q for a and b below q): an operand of V_mul, whose result stays below q \
     * for operands below 2q (4q² / R < q, so the product before its last subtraction is below 2q). */        \
    static IFMA_TARGET IFMA_AI V V##_sum(V a, V b) {                                                               \
        const __m512i mask = _mm512_set1_epi64((long long)M52);                                                    \
        V r;                                                                                                       \
        __m512i carry = _mm512_setzero_si512();                                                                    \
        for (int i = 0; i < N; i++) {                                                                              \
            __m512i t = _mm512_add_epi64(_mm512_add_epi64(a.l[i], b.l[i]), carry);                                 \
            carry = _mm512_srli_epi64(t, 52);                                                                      \
            r.l[i] = _mm512_and_si512(t, mask);                                                                    \
        }                                                                                                          \
        return r;                                                                                                  \
    }                                                                                                              \
                                                                                                                   \
    /* r - q where that does not borrow: r below 2q (its limbs normalised), the result below q. */                 \
    static IFMA_TARGET IFMA_AI V V##_reduce(V r, const V *q) {                                                     \
        const __m512i mask = _mm512_set1_epi64((long long)M52), zero = _mm512_setzero_si512();                     \
        V d;                                                                                                       \
        __m512i borrow = zero;                                                                                     \
        for (int i = 0; i < N; i++) {                                                                              \
            __m512i v = _mm512_sub_epi64(_mm512_sub_epi64(r.l[i], q->l[i]), borrow);                               \
            borrow = _mm512_srli_epi64(v, 63);                                                                     \
            d.l[i] = _mm512_and_si512(v, mask);                                                                    \
        }                                                                                                          \
        const __mmask8 keep = _mm512_cmpeq_epi64_mask(borrow, zero);                                               \
        for (int i = 0; i < N; i++) r.l[i] = _mm512_mask_mov_epi64(r.l[i], keep, d.l[i]);                          \
        return r;                                                                                                  \
    }                                                                                                              \
                                                                                                                   \
    /* a + b mod q, below q for a and b below q. */                                                                \
    static IFMA_TARGET IFMA_AI V V##_add(V a, V b, const V *q) { return V##_reduce(V##_sum(a, b), q); }            \
                                                                                                                   \
    /* a·b / R mod q (R = 2^RBITS), below q for a and b below 2q: RBITS / 52 steps of Montgomery's          \
     * reduction by 2^52, and one by 2^(RBITS mod 52) where that is not 0; then the sum over 2^RBITS. */     \
    static IFMA_TARGET IFMA_AI V V##_mul(V a, V b, const V *q, __m512i qinv) {                                     \
        const __m512i mask = _mm512_set1_epi64((long long)M52), zero = _mm512_setzero_si512();                     \
        const int steps = (RBITS) / 52, rest = (RBITS) % 52;                                                       \
        __m512i t[2 * N + 1];                                                                                      \
        for (int i = 0; i < 2 * N + 1; i++) t[i] = zero;                                                           \
        for (int i = 0; i < N; i++)                                                                                \
            for (int j = 0; j < N; j++) {                                                                          \
                t[i + j] = _mm512_madd52lo_epu64(t[i + j], a.l[i], b.l[j]);                                        \
                t[i + j + 1] = _mm512_madd52hi_epu64(t[i + j + 1], a.l[i], b.l[j]);                                \
            }                                                                                                      \
        for (int i = 0; i < steps + (rest != 0); i++) {                                                            \
            __m512i m = _mm512_madd52lo_epu64(zero, t[i], qinv);                                                   \
            if (i == steps) m = _mm512_and_si512(m, _mm512_set1_epi64((long long)((1ULL << rest) - 1)));           \
            for (int j = 0; j < N; j++) {                                                                          \
                t[i + j] = _mm512_madd52lo_epu64(t[i + j], m, q->l[j]);                                            \
                t[i + j + 1] = _mm512_madd52hi_epu64(t[i + j + 1], m, q->l[j]);                                    \
            }                                                                                                      \
            if (i < steps) t[i + 1] = _mm512_add_epi64(t[i + 1], _mm512_srli_epi64(t[i], 52));                     \
        }                                                                                                          \
        V r;                                                                                                       \
        __m512i carry = zero;                                                                                      \
        if (rest == 0) {                                                                                           \
            for (int i = 0; i < N; i++) { /* below 2q: normalise the limbs */                                      \
                __m512i v = _mm512_add_epi64(t[i + steps], carry);                                                 \
                r.l[i] = _mm512_and_si512(v, mask);                                                                \
                carry = _mm512_srli_epi64(v, 52);                                                                  \
            }                                                                                                      \
        } else { /* normalise limbs steps.., whose lowest `rest` bits are 0, then shift them by `rest` */          \
            __m512i u[N + 1];                                                                                      \
            for (int i = 0; i <= N; i++) {                                                                         \
                __m512i v = _mm512_add_epi64(i + steps < 2 * N + 1 ? t[i + steps] : zero, carry);                  \
                u[i] = _mm512_and_si512(v, mask);                                                                  \
                carry = _mm512_srli_epi64(v, 52);                                                                  \
            }                                                                                                      \
            for (int i = 0; i < N; i++)                                                                            \
                r.l[i] = _mm512_and_si512(                                                                         \
                    _mm512_or_si512(_mm512_srli_epi64(u[i], rest), _mm512_slli_epi64(u[i + 1], 52 - rest)), mask); \
        }                                                                                                          \
        return V##_reduce(r, q);                                                                                   \
    }                                                                                                              \
                                                                                                                   \
    static IFMA_TARGET IFMA_AI V V##_sqr(V a, const V *q, __m512i qinv) { return V##_mul(a, a, q, qinv); }         \
                                                                                                                   \
    /* a in the lanes of `mask`, b in the others. */                                                               \
    static IFMA_TARGET IFMA_AI V V##_select(__mmask8 mask, V a, V b) {                                             \
        for (int i = 0; i < N; i++) b.l[i] = _mm512_mask_mov_epi64(b.l[i], mask, a.l[i]);                          \
        return b;                                                                                                  \
    }                                                                                                              \
                                                                                                                   \
    /* The lanes where a = 0 (below q). */                                                                         \
    static IFMA_TARGET IFMA_AI __mmask8 V##_is_zero(V a) {                                                         \
        __m512i any = a.l[0];                                                                                      \
        for (int i = 1; i < N; i++) any = _mm512_or_si512(any, a.l[i]);                                            \
        return _mm512_cmpeq_epi64_mask(any, _mm512_setzero_si512());                                               \
    }                                                                                                              \
                                                                                                                   \
    /* The lanes where a = b (both below q: equal limbs). */                                                       \
    static IFMA_TARGET IFMA_AI __mmask8 V##_eq(V a, V b) {                                                         \
        __mmask8 m = 0xff;                                                                                         \
        for (int i = 0; i < N; i++) m &= _mm512_cmpeq_epi64_mask(a.l[i], b.l[i]);                                  \
        return m;                                                                                                  \
    }

DEFINE_V52(v260, 5, 256) /* BN254: R = 2^256, the 4-limb form's own */
DEFINE_V52(v416, 8, 416)

/* out (ceil(64·words / 52) limbs) = the value of `words` 64-bit words in 52-bit limbs. */
static inline void to52(u64 *out, const u64 *a, int words) {
    const int limbs = (64 * words + 51) / 52;
    for (int i = 0; i < limbs; i++) {
        const int bit = 52 * i, w = bit / 64, o = bit % 64;
        u64 v = a[w] >> o;
        if (o > 12 && w + 1 < words) v |= a[w + 1] << (64 - o);
        out[i] = v & M52;
    }
}

/* -p^-1 mod 2^52 for an odd p (Newton's iteration mod 2^64). */
static u64 ifma_qinv(u64 p) {
    u64 inv = 1;
    for (int i = 0; i < 6; i++) inv *= 2 - p * inv;
    return (0 - inv) & M52;
}

static v260_limbs IFMA_Q, IFMA_ONE; /* BN254: q; 2^256 mod q (one, in Montgomery form) */
static u64 IFMA_QINV;                                   /* -q^-1 mod 2^52 */
static v416_limbs IFMA381_Q, IFMA381_ONE;               /* BLS12-381: q; 2^416 mod q */
static u64 IFMA381_QINV;
static fqbls_t IFMA381_R;                               /* 2^416 mod q, plain: x·2^384 -> x·2^416 by f_mul */

static void ifma_init(void) {
    u64 x[6];
    to52(IFMA_Q.l, BN_Q.p, 4);
    to52(IFMA_ONE.l, BN_Q.one, 4);
    IFMA_QINV = ifma_qinv(BN_Q.p[0]);
    to52(IFMA381_Q.l, BLS_Q.p, 6);
    memcpy(x, BLS_Q.one, sizeof x); /* 2^384 mod q */
    for (int i = 0; i < 32; i++) f_add(x, x, x, &BLS_Q, 6);
    to52(IFMA381_ONE.l, x, 6); /* 2^416 */
    memcpy(IFMA381_R.v, x, sizeof x);
    IFMA381_QINV = ifma_qinv(BLS_Q.p[0]);
}

static IFMA_TARGET IFMA_AI v260 v260_one(void) { return v260_set1(&IFMA_ONE); }

/* Limbs k of eight 4-limb elements at base + index[lane] u64s (a gather), as five 52-bit limbs; lanes
 * outside `live` take `pad` (limb 0) and zeros. */
static IFMA_TARGET IFMA_AI v260 v260_gather(const u64 *base, __m512i index, __mmask8 live, long long pad) {
    const __m512i mask = _mm512_set1_epi64((long long)M52), zero = _mm512_setzero_si512();
    __m512i a[4];
    for (int k = 0; k < 4; k++) {
        const __m512i src = k == 0 ? _mm512_set1_epi64(pad) : zero;
        a[k] = _mm512_mask_i64gather_epi64(src, live, _mm512_add_epi64(index, _mm512_set1_epi64(k)), base, 8);
    }
    v260 r;
    r.l[0] = _mm512_and_si512(a[0], mask);
    r.l[1] = _mm512_and_si512(_mm512_or_si512(_mm512_srli_epi64(a[0], 52), _mm512_slli_epi64(a[1], 12)), mask);
    r.l[2] = _mm512_and_si512(_mm512_or_si512(_mm512_srli_epi64(a[1], 40), _mm512_slli_epi64(a[2], 24)), mask);
    r.l[3] = _mm512_and_si512(_mm512_or_si512(_mm512_srli_epi64(a[2], 28), _mm512_slli_epi64(a[3], 36)), mask);
    r.l[4] = _mm512_srli_epi64(a[3], 16);
    return r;
}

/* The inverse: five 52-bit limbs (a value below 2^256) as 4-limb elements at base + index[lane], live lanes. */
static IFMA_TARGET IFMA_AI void v260_scatter(u64 *base, __m512i index, __mmask8 live, v260 v) {
    __m512i a[4];
    a[0] = _mm512_or_si512(v.l[0], _mm512_slli_epi64(v.l[1], 52));
    a[1] = _mm512_or_si512(_mm512_srli_epi64(v.l[1], 12), _mm512_slli_epi64(v.l[2], 40));
    a[2] = _mm512_or_si512(_mm512_srli_epi64(v.l[2], 24), _mm512_slli_epi64(v.l[3], 28));
    a[3] = _mm512_or_si512(_mm512_srli_epi64(v.l[3], 36), _mm512_slli_epi64(v.l[4], 16));
    for (int k = 0; k < 4; k++)
        _mm512_mask_i64scatter_epi64(base, live, _mm512_add_epi64(index, _mm512_set1_epi64(k)), a[k], 8);
}

/* Fq2 = Fq[u] / (u^2 + 1) over one of the fields above, eight elements: c0 + c1·u, each part below q. */
#define DEFINE_V52X2(V)                                                                                            \
    typedef struct {                                                                                               \
        V c0, c1;                                                                                                  \
    } V##x2;                                                                                                       \
                                                                                                                   \
    static IFMA_TARGET IFMA_AI V##x2 V##x2_sub(V##x2 a, V##x2 b, const V *q) {                                     \
        return (V##x2){V##_sub(a.c0, b.c0, q), V##_sub(a.c1, b.c1, q)};                                            \
    }                                                                                                              \
                                                                                                                   \
    static IFMA_TARGET IFMA_AI V##x2 V##x2_add(V##x2 a, V##x2 b, const V *q) {                                     \
        return (V##x2){V##_add(a.c0, b.c0, q), V##_add(a.c1, b.c1, q)};                                            \
    }                                                                                                              \
                                                                                                                   \
    /* Karatsuba: (a0 + a1·u)(b0 + b1·u) = a0·b0 - a1·b1 + ((a0 + a1)(b0 + b1) - a0·b0 - a1·b1)·u. */              \
    static IFMA_TARGET IFMA_AI V##x2 V##x2_mul(V##x2 a, V##x2 b, const V *q, __m512i qinv) {                       \
        const V t0 = V##_mul(a.c0, b.c0, q, qinv), t1 = V##_mul(a.c1, b.c1, q, qinv);                              \
        const V t2 = V##_mul(V##_sum(a.c0, a.c1), V##_sum(b.c0, b.c1), q, qinv);                                   \
        return (V##x2){V##_sub(t0, t1, q), V##_sub(V##_sub(t2, t0, q), t1, q)};                                    \
    }                                                                                                              \
                                                                                                                   \
    /* (a0 + a1·u)^2 = (a0 + a1)(a0 - a1) + 2·a0·a1·u */                                                           \
    static IFMA_TARGET IFMA_AI V##x2 V##x2_sqr(V##x2 a, const V *q, __m512i qinv) {                                \
        return (V##x2){V##_mul(V##_sum(a.c0, a.c1), V##_sub(a.c0, a.c1, q), q, qinv),                              \
                       V##_mul(V##_sum(a.c0, a.c0), a.c1, q, qinv)};                                               \
    }                                                                                                              \
                                                                                                                   \
    static IFMA_TARGET IFMA_AI __mmask8 V##x2_eq(V##x2 a, V##x2 b) {                                               \
        return V##_eq(a.c0, b.c0) & V##_eq(a.c1, b.c1);                                                            \
    }                                                                                                              \
                                                                                                                   \
    static IFMA_TARGET IFMA_AI V##x2 V##x2_select(__mmask8 mask, V##x2 a, V##x2 b) {                               \
        return (V##x2){V##_select(mask, a.c0, b.c0), V##_select(mask, a.c1, b.c1)};                                \
    }                                                                                                              \
                                                                                                                   \
    static IFMA_TARGET IFMA_AI __mmask8 V##x2_is_zero(V##x2 a) { return V##_is_zero(a.c0) & V##_is_zero(a.c1); }

DEFINE_V52X2(v260) /* BN254's, the twist's coordinates in the batches */

static IFMA_TARGET IFMA_AI v260x2 v260x2_one(void) {
    const v260_limbs zero = {{0}};
    return (v260x2){v260_set1(&IFMA_ONE), v260_set1(&zero)};
}

/* An Fq2 element is its two Fq elements, 4 limbs each, one after the other. */
static IFMA_TARGET IFMA_AI v260x2 v260x2_gather(const u64 *base, __m512i index, __mmask8 live, long long pad) {
    return (v260x2){v260_gather(base, index, live, pad), v260_gather(base + 4, index, live, 0)};
}

static IFMA_TARGET IFMA_AI void v260x2_scatter(u64 *base, __m512i index, __mmask8 live, v260x2 v) {
    v260_scatter(base, index, live, v.c0);
    v260_scatter(base + 4, index, live, v.c1);
}

DEFINE_V52X2(v416) /* BLS12-381's, the twist's coordinates in subgroup.h's G2 test */

/* Eight elements of BLS12-381's Fq (Montgomery form, R = 2^384; lanes past n repeat the first) as a v416. */
static IFMA_TARGET IFMA_AI v416 v416_stage(const fqbls_t *const *e, int n) {
    u64 staged[8][IFMA_LANES]; /* limb, lane */
    for (int lane = 0; lane < IFMA_LANES; lane++) {
        fqbls_t v;
        u64 limbs[8];
        fqbls_mul(&v, e[lane < n ? lane : 0], &IFMA381_R); /* x·2^384 -> x·2^416 */
        to52(limbs, v.v, 6);
        for (int i = 0; i < 8; i++) staged[i][lane] = limbs[i];
    }
    v416 r;
    for (int i = 0; i < 8; i++) r.l[i] = _mm512_loadu_si512(staged[i]);
    return r;
}

static IFMA_TARGET IFMA_AI v416x2 v416x2_stage(const fq2bls_t *const *e, int n) {
    const fqbls_t *c0[IFMA_LANES], *c1[IFMA_LANES];
    for (int lane = 0; lane < IFMA_LANES; lane++) {
        c0[lane] = &e[lane < n ? lane : 0]->c0;
        c1[lane] = &e[lane < n ? lane : 0]->c1;
    }
    return (v416x2){v416_stage(c0, IFMA_LANES), v416_stage(c1, IFMA_LANES)};
}

static IFMA_TARGET IFMA_AI v416 v416_zero(void) {
    const v416_limbs zero = {{0}};
    return v416_set1(&zero);
}

static IFMA_TARGET IFMA_AI v416x2 v416x2_zero(void) { return (v416x2){v416_zero(), v416_zero()}; }

static IFMA_TARGET IFMA_AI v416 v416_one(void) { return v416_set1(&IFMA381_ONE); }

static IFMA_TARGET IFMA_AI v416x2 v416x2_one(void) { return (v416x2){v416_one(), v416_zero()}; }

#else
#define HAVE_IFMA 0
static void ifma_init(void) {}
#endif /* HAVE_IFMA */
#endif /* PROOFLANE_IFMA_COMMON */

/* The template: G's batches. */
#if HAVE_IFMA
#if IFMA_K == 1
#define VE v260
#define VF(name) v260_##name
#elif IFMA_K == 2
#define VE v260x2
#define VF(name) v260x2_##name
#else
#error "IFMA_K: the Fq elements of a coordinate, 1 or 2"
#endif
#define ROW_U64 (8 * IFMA_K) /* a row, x then y, in u64s */
#define EF(name) CAT(CAT(E, _), name)
#define GF(name) CAT(CAT(G, _), name)

typedef struct {
    VE px[IFMA_VECTORS], py[IFMA_VECTORS], bx[IFMA_VECTORS], by[IFMA_VECTORS];
    VE den[IFMA_VECTORS], before[IFMA_VECTORS];
} GF(ifma_scratch);

/* The u64 offsets of the buckets of vector v's terms (lanes past `left`: 0, never read or written). */
static IFMA_TARGET IFMA_AI __m512i GF(bucket_offsets)(const GF(batcher) *s, int v, int left) {
    long long at[IFMA_LANES];
    for (int lane = 0; lane < IFMA_LANES; lane++)
        at[lane] = lane < left ? (long long)ROW_U64 * s->bucket[IFMA_LANES * v + lane] : 0;
    return _mm512_loadu_si512(at);
}

_Static_assert(sizeof(GF(aff)) == ROW_U64 * sizeof(u64) && sizeof(EF(t)) == 4 * IFMA_K * sizeof(u64),
               "a row: x then y, each IFMA_K elements of 4 limbs");

/* run_batch for G (s->size terms, 2..BATCH): returns 1 when done here, 0 to leave it to the 4-limb code
 * (no scratch memory). */
static IFMA_TARGET int GF(ifma_batch)(GF(batcher) *s) {
    if (s->scratch == NULL && (s->scratch = aligned_alloc(64, sizeof(GF(ifma_scratch)))) == NULL) return 0;
    GF(ifma_scratch) *w = s->scratch; /* the batcher's (its worker frees it) */
    const int n = s->size, vectors = (n + IFMA_LANES - 1) / IFMA_LANES;
    const v260 q = v260_set1(&IFMA_Q);
    const __m512i qinv = _mm512_set1_epi64((long long)IFMA_QINV);
    const __m512i rows = _mm512_setr_epi64(0, ROW_U64, 2 * ROW_U64, 3 * ROW_U64, 4 * ROW_U64, 5 * ROW_U64,
                                           6 * ROW_U64, 7 * ROW_U64); /* u64s from a term's p to the next */
    const u64 *p = (const u64 *)s->p, *buckets = (const u64 *)s->buckets;
    VE acc = VF(one)();
    for (int v = 0; v < vectors; v++) {
        /* padding lanes: p = (1, 0), bucket (0, 0): a non-zero denominator, a result not stored */
        const int left = n - IFMA_LANES * v;
        const __mmask8 live = left >= IFMA_LANES ? 0xff : (__mmask8)((1u << left) - 1);
        const __m512i at = _mm512_add_epi64(rows, _mm512_set1_epi64((long long)ROW_U64 * IFMA_LANES * v));
        const __m512i bucket = GF(bucket_offsets)(s, v, left);
        w->px[v] = VF(gather)(p, at, live, 1);
        w->py[v] = VF(gather)(p + 4 * IFMA_K, at, live, 0);
        w->bx[v] = VF(gather)(buckets, bucket, live, 0);
        w->by[v] = VF(gather)(buckets + 4 * IFMA_K, bucket, live, 0);
        w->den[v] = VF(sub)(w->px[v], w->bx[v], &q);
        w->before[v] = acc;
        acc = VF(mul)(acc, w->den[v], &q, qinv);
    }
    /* the eight chains' ends, inverted together in the 4-limb form */
    EF(t) ends[IFMA_LANES], prefix[IFMA_LANES], inv, t, all = *EF(one)();
#define E_U64 (4 * IFMA_K) /* an element of E */
    const __m512i lanes =
        _mm512_setr_epi64(0, E_U64, 2 * E_U64, 3 * E_U64, 4 * E_U64, 5 * E_U64, 6 * E_U64, 7 * E_U64);
#undef E_U64
    VF(scatter)((u64 *)ends, lanes, 0xff, acc);
    for (int lane = 0; lane < IFMA_LANES; lane++) {
        prefix[lane] = all;
        EF(mul)(&all, &all, &ends[lane]);
    }
    EF(inv)(&inv, &all);
    for (int lane = IFMA_LANES - 1; lane >= 0; lane--) {
        EF(mul)(&t, &inv, &prefix[lane]); /* 1 / end[lane] */
        EF(mul)(&inv, &inv, &ends[lane]);
        ends[lane] = t;
    }
    VE vinv = VF(gather)((const u64 *)ends, lanes, 0xff, 0);
    u64 *out = (u64 *)s->buckets;
    for (int v = vectors - 1; v >= 0; v--) {
        const int left = n - IFMA_LANES * v;
        const __mmask8 live = left >= IFMA_LANES ? 0xff : (__mmask8)((1u << left) - 1);
        const __m512i bucket = GF(bucket_offsets)(s, v, left);
        const VE tv = VF(mul)(vinv, w->before[v], &q, qinv); /* 1 / den */
        vinv = VF(mul)(vinv, w->den[v], &q, qinv);
        const VE lambda = VF(mul)(VF(sub)(w->py[v], w->by[v], &q), tv, &q, qinv);
        const VE x3 = VF(sub)(VF(sub)(VF(sqr)(lambda, &q, qinv), w->bx[v], &q), w->px[v], &q);
        const VE y3 = VF(sub)(VF(mul)(VF(sub)(w->bx[v], x3, &q), lambda, &q, qinv), w->by[v], &q);
        VF(scatter)(out, bucket, live, x3);
        VF(scatter)(out + 4 * IFMA_K, bucket, live, y3);
    }
    return 1;
}

static int GF(fast_batch)(GF(batcher) *s) {
    return kernel_runs(KERNEL_IFMA_BATCHES) && s->size >= 2 * IFMA_LANES && GF(ifma_batch)(s);
}

/* unit_batched's weighted bucket sum, sum of (b + 1)·bucket b, in the lanes: lane i runs the running sums
 * over the buckets of its segment, b = i·seg + j (seg = nb / 8), from the top, to R_i = sum of the
 * segment's buckets and T_i = sum of (j + 1)·bucket; the sum is then sum of T_i + seg·(sum of i·R_i), in
 * the 4-limb form. A bucket with an overflow (rare: the waiting room takes most repeats) is left out of the
 * lanes and added as (b + 1)·bucket by double-and-add. Returns 0, leaving the sum to unit_batched's loop,
 * where more than nb / 32 buckets have an overflow, or where a lane's addition meets equal x (a doubling
 * or a cancellation, which these formulas do not cover; never so for independent points): the buckets
 * are only read, so the loop starts over from them. */
typedef struct {
    VE x, y, z;
} GF(lanes_jac); /* eight Jacobian points */

static IFMA_TARGET IFMA_AI GF(lanes_jac) GF(lanes_select)(__mmask8 mask, GF(lanes_jac) a, GF(lanes_jac) b) {
    return (GF(lanes_jac)){VF(select)(mask, a.x, b.x), VF(select)(mask, a.y, b.y), VF(select)(mask, a.z, b.z)};
}

/* X3 and Y3 of add-2007-bl and madd-2007-bl alike, from U1, S1 (X1 and Y1 for a mixed addition), H = U2 - U1
 * and D = S2 - S1: I = (2H)², J = H·I, r = 2D, V = U1·I, X3 = r² - J - 2V, Y3 = r(V - X3) - 2·S1·J. */
static IFMA_TARGET IFMA_AI void GF(lanes_join)(VE u1, VE s1, VE h, VE d, VE *x3, VE *y3, const v260 *q,
                                               __m512i qinv) {
    const VE i = VF(sqr)(VF(add)(h, h, q), q, qinv), jj = VF(mul)(h, i, q, qinv);
    const VE rr = VF(add)(d, d, q), v = VF(mul)(u1, i, q, qinv), sj = VF(mul)(s1, jj, q, qinv);
    *x3 = VF(sub)(VF(sub)(VF(sqr)(rr, q, qinv), jj, q), VF(add)(v, v, q), q);
    *y3 = VF(sub)(VF(mul)(rr, VF(sub)(v, *x3, q), q, qinv), VF(add)(sj, sj, q), q);
}

/* Lane i's point to out[i] in the 4-limb form. */
static IFMA_TARGET IFMA_AI void GF(lanes_store)(GF(jac) *out, GF(lanes_jac) p) {
    _Static_assert(sizeof(GF(jac)) == 3 * 4 * IFMA_K * sizeof(u64), "a Jacobian point: x, y, z");
    long long at[IFMA_LANES];
    for (int lane = 0; lane < IFMA_LANES; lane++) at[lane] = (long long)(3 * 4 * IFMA_K * lane);
    const __m512i jac = _mm512_loadu_si512(at);
    VF(scatter)((u64 *)out, jac, 0xff, p.x);
    VF(scatter)((u64 *)out + 4 * IFMA_K, jac, 0xff, p.y);
    VF(scatter)((u64 *)out + 8 * IFMA_K, jac, 0xff, p.z);
}

static IFMA_TARGET int GF(ifma_sums)(const GF(batcher) *s, size_t nb, GF(jac) *sum) {
    size_t heavy = 0;
    for (size_t b = 0; b < nb; b++) heavy += !GF(is_inf)(&s->overflow[b]);
    if (heavy > nb / 32) return 0;
    const size_t seg = nb / IFMA_LANES;
    const v260 q = v260_set1(&IFMA_Q);
    const __m512i qinv = _mm512_set1_epi64((long long)IFMA_QINV);
    const u64 *buckets = (const u64 *)s->buckets;
    long long first[IFMA_LANES];
    for (int lane = 0; lane < IFMA_LANES; lane++) first[lane] = (long long)(ROW_U64 * seg * (size_t)lane);
    const __m512i segments = _mm512_loadu_si512(first);
    const VE one = VF(one)();
    GF(lanes_jac) r = {one, one, one}, t = r; /* the running sums and the totals */
    __mmask8 r_live = 0, t_live = 0;         /* the lanes where they are not infinity yet */
    for (size_t j = seg; j-- > 0;) {
        __mmask8 full = 0;
        for (int lane = 0; lane < IFMA_LANES; lane++) {
            const size_t b = (size_t)lane * seg + j;
            if (s->full[b] && GF(is_inf)(&s->overflow[b])) full |= (__mmask8)(1u << lane);
        }
        if (full) { /* running += bucket (affine): madd-2007-bl, or set where running is infinity */
            const __m512i at = _mm512_add_epi64(segments, _mm512_set1_epi64((long long)(ROW_U64 * j)));
            const GF(lanes_jac) bucket = {VF(gather)(buckets, at, full, 1),
                                          VF(gather)(buckets + 4 * IFMA_K, at, full, 0), one};
            const __mmask8 add = full & r_live;
            if (add) {
                const VE z1z1 = VF(sqr)(r.z, &q, qinv), u2 = VF(mul)(bucket.x, z1z1, &q, qinv);
                const VE s2 = VF(mul)(VF(mul)(bucket.y, r.z, &q, qinv), z1z1, &q, qinv);
                const VE h = VF(sub)(u2, r.x, &q);
                if (VF(is_zero)(h) & add) return 0;
                GF(lanes_jac) sum3;
                GF(lanes_join)(r.x, r.y, h, VF(sub)(s2, r.y, &q), &sum3.x, &sum3.y, &q, qinv);
                sum3.z = VF(mul)(VF(add)(r.z, r.z, &q), h, &q, qinv); /* 2·Z1·H */
                r = GF(lanes_select)(add, sum3, r);
            }
            r = GF(lanes_select)(full & ~r_live, bucket, r);
            r_live |= full;
        }
        const __mmask8 add = r_live & t_live;
        if (add) { /* total += running: add-2007-bl */
            const VE z1z1 = VF(sqr)(t.z, &q, qinv), z2z2 = VF(sqr)(r.z, &q, qinv);
            const VE u1 = VF(mul)(t.x, z2z2, &q, qinv), u2 = VF(mul)(r.x, z1z1, &q, qinv);
            const VE s1 = VF(mul)(VF(mul)(t.y, r.z, &q, qinv), z2z2, &q, qinv);
            const VE s2 = VF(mul)(VF(mul)(r.y, t.z, &q, qinv), z1z1, &q, qinv);
            const VE h = VF(sub)(u2, u1, &q);
            if (VF(is_zero)(h) & add) return 0;
            GF(lanes_jac) sum3;
            GF(lanes_join)(u1, s1, h, VF(sub)(s2, s1, &q), &sum3.x, &sum3.y, &q, qinv);
            sum3.z = VF(mul)(VF(mul)(VF(add)(t.z, t.z, &q), r.z, &q, qinv), h, &q, qinv); /* 2·Z1·Z2·H */
            t = GF(lanes_select)(add, sum3, t);
        }
        t = GF(lanes_select)(r_live & ~t_live, r, t);
        t_live |= r_live;
    }
    GF(jac) running[IFMA_LANES], total[IFMA_LANES];
    GF(lanes_store)(running, r);
    GF(lanes_store)(total, t);
    GF(jac) run, acc;
    GF(set_inf)(&run);
    GF(set_inf)(&acc);
    for (int lane = IFMA_LANES - 1; lane >= 1; lane--) { /* acc = sum of i·R_i */
        if (r_live >> lane & 1) GF(add)(&run, &run, &running[lane]);
        GF(add)(&acc, &acc, &run);
    }
    for (size_t k = 1; k < seg; k <<= 1) GF(dbl)(&acc, &acc); /* seg: a power of two */
    for (int lane = 0; lane < IFMA_LANES; lane++)
        if (t_live >> lane & 1) GF(add)(&acc, &acc, &total[lane]);
    for (size_t b = 0; heavy > 0 && b < nb; b++) {
        if (GF(is_inf)(&s->overflow[b])) continue;
        heavy--;
        GF(jac) bucket = s->overflow[b], m;
        if (s->full[b]) GF(add_aff)(&bucket, &bucket, &s->buckets[b]);
        GF(set_inf)(&m);
        const u64 w = b + 1;
        for (int bit = 63 - __builtin_clzll(w); bit >= 0; bit--) {
            GF(dbl)(&m, &m);
            if (w >> bit & 1) GF(add)(&m, &m, &bucket);
        }
        GF(add)(&acc, &acc, &m);
    }
    *sum = acc;
    return 1;
}

static int GF(fast_sums)(const GF(batcher) *s, size_t nb, GF(jac) *sum) {
    return kernel_runs(KERNEL_IFMA_SUMS) && nb >= 8 * IFMA_LANES && GF(ifma_sums)(s, nb, sum);
}

#undef VE
#undef VF
#undef ROW_U64
#undef EF
#undef GF
#else
#define IFMA_NO_FAST_BATCH(G_) NO_FAST_BATCH(G_) /* one more expansion: G's name, not the letter */
IFMA_NO_FAST_BATCH(G)
#undef IFMA_NO_FAST_BATCH
#endif
#undef IFMA_K
