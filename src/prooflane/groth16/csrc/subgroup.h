/* BLS12-381's subgroups of order r, tested point by point by an endomorphism (M. Scott, "A note on group
 * membership tests for G1, G2 and GT on BLS pairing-friendly curves", 2021), with x = -0xd201000000010000
 * the curve's parameter:
 *
 *   G1: P in E(Fq) lies in G1 if and only if φ(P) = [-x²]P, where φ(x, y) = (ωx, y), ω = 2^((q-1)/3) mod q
 *       (BLS_OMEGA, groups.h)
 *       (a cube root of unity; on G1 φ is multiplication by -x², a cube root of unity mod r);
 *   G2: Q in E'(Fq2) lies in G2 if and only if ψ(Q) = [x]Q, where ψ(x, y) = (cx·conj(x), cy·conj(y)),
 *       cx = 1/(u+1)^((q-1)/3), cy = 1/(u+1)^((q-1)/2) (the untwist-Frobenius-twist map).
 *
 * On the subgroup both equations hold because φ and ψ act there as those scalars. The converse (no point
 * outside the subgroup satisfies them) is what the note proves for BLS12-381, from its cofactors; the tests
 * check it against [r]P = 0 on random points of the curve and twist and on subgroup points with small-order
 * components added. Each test is one scalar multiplication by a 128-bit (G1) or 64-bit (G2) constant where
 * [r]P = 0 takes 255 bits. Rows as msm.h reads them (affine, Montgomery form), already on the curve. */
#ifndef PROOFLANE_SUBGROUP_H
#define PROOFLANE_SUBGROUP_H

#include "groups.h"

static const u64 BLS_X_ABS[1] = {0xd201000000010000ULL};                         /* |x|, x < 0 */
static const u64 BLS_X_SQUARED[2] = {0x0000000100000000ULL, 0xac45a4010001a402ULL}; /* x² */

static const fqbls_t BLS_PSI_X1 = {{0x890dc9e4867545c3ULL, 0x2af322533285a5d5ULL, 0x50880866309b7e2cULL,
                                    0xa20d1b8c7e881024ULL, 0x14e4f04fe2db9068ULL, 0x14e56d3f1564853aULL}};
static const fq2bls_t BLS_PSI_Y = {
    {{0x3e2f585da55c9ad1ULL, 0x4294213d86c18183ULL, 0x382844c88b623732ULL, 0x92ad2afd19103e18ULL,
      0x1d794e4fac7cf0b9ULL, 0x0bd592fc7d825ec8ULL}},
    {{0x7bcfa7a25aa30fdaULL, 0xdc17dec12a927e7cULL, 0x2f088dd86b4ebef1ULL, 0xd1ca2087da74d4a7ULL,
      0x2da2596696cebc1dULL, 0x0e2b7eedbbfd87d2ULL}}};

/* r = [k]p for a k of `limbs` limbs (its top bit set), p affine and not infinity: double and add from the
 * top, each addition a mixed one with p. */
#define DEFINE_MUL_CONST(G)                                                                                 \
    static void G##_mul_const(G##_jac *r, const G##_aff *p, const u64 *k, int limbs) {                    \
        G##_set_inf(r);                                                                                   \
        G##_add_aff(r, r, p);                                                                             \
        int top = 64 * limbs - 1;                                                                         \
        while (!((k[top / 64] >> (top % 64)) & 1)) top--;                                                 \
        for (int bit = top - 1; bit >= 0; bit--) {                                                        \
            G##_dbl(r, r);                                                                                \
            if ((k[bit / 64] >> (bit % 64)) & 1) G##_add_aff(r, r, p);                                    \
        }                                                                                                 \
    }
DEFINE_MUL_CONST(g1bls)
DEFINE_MUL_CONST(g2bls)

/* Whether p (on E, not infinity) is in G1: [x²]p + φ(p) = 0. */
static int g1bls_in_subgroup(const g1bls_aff *p) {
    g1bls_jac acc;
    g1bls_mul_const(&acc, p, BLS_X_SQUARED, 2);
    g1bls_aff phi = *p;
    fqbls_mul(&phi.x, &phi.x, &BLS_OMEGA);
    g1bls_add_aff(&acc, &acc, &phi);
    return g1bls_is_inf(&acc);
}

/* Whether q (on E', not infinity) is in G2: [|x|]q + ψ(q) = 0, as x = -|x|. */
static int g2bls_in_subgroup(const g2bls_aff *q) {
    g2bls_jac acc;
    g2bls_mul_const(&acc, q, BLS_X_ABS, 1);
    g2bls_aff psi;
    /* conj(x) = x0 - x1·u and cx = cx1·u, so cx·conj(x) = x1·cx1 + x0·cx1·u */
    fqbls_mul(&psi.x.c0, &q->x.c1, &BLS_PSI_X1);
    fqbls_mul(&psi.x.c1, &q->x.c0, &BLS_PSI_X1);
    fq2bls_t y = q->y;
    fqbls_neg(&y.c1, &y.c1);
    fq2bls_mul(&psi.y, &y, &BLS_PSI_Y);
    g2bls_add_aff(&acc, &acc, &psi);
    return g2bls_is_inf(&acc);
}

#if HAVE_IFMA
/* g1bls_in_subgroup for eight points at once with AVX-512 IFMA (ifma.h's v416: 8 limbs of 52 bits, R' = 2^416),
 * lane by lane the same chain: [x²]p by doubling and mixed additions from the top bit, then the comparison
 * [x²]p = -φ(p) on the Jacobian coordinates (X = ωx·Z², Y = -y·Z³, Z ≠ 0). A lane whose chain meets a case
 * the formulas do not cover (the accumulator at infinity, or equal to ±p in an addition: never so for a point
 * of G1, whose multiples [k]p for 1 < k < r are neither infinity nor ±p) is left to g1bls_in_subgroup.
 * Returns the lanes inside; *unsure gets those left. n: the points (1..8; the rest of the lanes repeat the
 * first). */
static IFMA_TARGET __mmask8 ifma_g1bls_in_subgroup(const g1bls_aff *const *p, int n, __mmask8 *unsure) {
    u64 staged[2][8][IFMA_LANES]; /* x, y: limb, lane */
    for (int lane = 0; lane < IFMA_LANES; lane++) {
        const g1bls_aff *point = p[lane < n ? lane : 0];
        for (int c = 0; c < 2; c++) {
            fqbls_t v;
            u64 limbs[8];
            fqbls_mul(&v, c == 0 ? &point->x : &point->y, &IFMA381_R); /* x·2^384 -> x·2^416 */
            to52(limbs, v.v, 6);
            for (int i = 0; i < 8; i++) staged[c][i][lane] = limbs[i];
        }
    }
    v416 x, y;
    for (int i = 0; i < 8; i++) {
        x.l[i] = _mm512_loadu_si512(staged[0][i]);
        y.l[i] = _mm512_loadu_si512(staged[1][i]);
    }
    const v416_limbs nought = {{0}};
    const v416 q = v416_set1(&IFMA381_Q), zero = v416_set1(&nought);
    const __m512i qinv = _mm512_set1_epi64((long long)IFMA381_QINV);
    v416 X = x, Y = y, Z = v416_set1(&IFMA381_ONE);
    __mmask8 odd = 0;
    for (int bit = 126 - __builtin_clzll(BLS_X_SQUARED[1]); bit >= 0; bit--) { /* below the top bit (x² > 2^64) */
        /* doubling (a = 0): A = X², B = Y², C = B², D = 2((X + B)² - A - C), E = 3A, X' = E² - 2D,
         * Y' = E(D - X') - 8C, Z' = 2YZ */
        const v416 A = v416_sqr(X, &q, qinv), B = v416_sqr(Y, &q, qinv), C = v416_sqr(B, &q, qinv);
        v416 D = v416_sub(v416_sub(v416_sqr(v416_sum(X, B), &q, qinv), A, &q), C, &q);
        D = v416_add(D, D, &q);
        const v416 E = v416_add(v416_add(A, A, &q), A, &q);
        const v416 X2 = v416_sub(v416_sub(v416_sqr(E, &q, qinv), D, &q), D, &q);
        const v416 C2 = v416_add(C, C, &q), C4 = v416_add(C2, C2, &q), C8 = v416_add(C4, C4, &q);
        const v416 Y2 = v416_sub(v416_mul(E, v416_sub(D, X2, &q), &q, qinv), C8, &q);
        Z = v416_mul(v416_sum(Y, Y), Z, &q, qinv);
        X = X2;
        Y = Y2;
        if (!((BLS_X_SQUARED[bit / 64] >> (bit % 64)) & 1)) continue;
        /* mixed addition of (x, y): U = x·Z², S = y·Z³, H = U - X, r = 2(S - Y), I = 4H², J = H·I,
         * V = X·I, X' = r² - J - 2V, Y' = r(V - X') - 2Y·J, Z' = (Z + H)² - Z² - H² */
        const v416 ZZ = v416_sqr(Z, &q, qinv);
        const v416 U = v416_mul(x, ZZ, &q, qinv), S = v416_mul(y, v416_mul(Z, ZZ, &q, qinv), &q, qinv);
        const v416 H = v416_sub(U, X, &q), HH = v416_sqr(H, &q, qinv);
        odd |= v416_eq(H, zero) | v416_eq(Z, zero);
        const v416 HH2 = v416_add(HH, HH, &q), I = v416_add(HH2, HH2, &q), J = v416_mul(H, I, &q, qinv);
        const v416 r = v416_add(v416_sub(S, Y, &q), v416_sub(S, Y, &q), &q), V = v416_mul(X, I, &q, qinv);
        const v416 X3 = v416_sub(v416_sub(v416_sub(v416_sqr(r, &q, qinv), J, &q), V, &q), V, &q);
        const v416 YJ = v416_mul(Y, J, &q, qinv);
        Y = v416_sub(v416_sub(v416_mul(r, v416_sub(V, X3, &q), &q, qinv), YJ, &q), YJ, &q);
        Z = v416_sub(v416_sub(v416_sqr(v416_sum(Z, H), &q, qinv), ZZ, &q), HH, &q);
        X = X3;
    }
    /* inside: [x²]p = -φ(p) = (ωx, -y) */
    v416_limbs omega_limbs;
    fqbls_t omega;
    fqbls_mul(&omega, &BLS_OMEGA, &IFMA381_R);
    to52(omega_limbs.l, omega.v, 6);
    const v416 ZZ = v416_sqr(Z, &q, qinv);
    const v416 wx = v416_mul(v416_set1(&omega_limbs), x, &q, qinv);
    const __mmask8 on_x = v416_eq(X, v416_mul(wx, ZZ, &q, qinv));
    const __mmask8 on_y = v416_eq(Y, v416_sub(zero, v416_mul(y, v416_mul(Z, ZZ, &q, qinv), &q, qinv), &q));
    const __mmask8 lanes = n >= IFMA_LANES ? 0xff : (__mmask8)((1u << n) - 1);
    odd |= v416_eq(Z, zero);
    *unsure = odd & lanes;
    return on_x & on_y & (__mmask8)~odd & lanes;
}
#endif

#define SUBGROUP_CHUNK 256

typedef struct {
    const unsigned char *rows;
    size_t count;
    int group;
    size_t next;  /* the next chunk's first row (atomic) */
    size_t first; /* the first row found outside so far, count when none (atomic) */
} subgroup_job;

/* Row k is outside: the job's first, unless one before it was found. */
static void subgroup_found(subgroup_job *job, size_t k) {
    size_t seen = __atomic_load_n(&job->first, __ATOMIC_RELAXED);
    while (k < seen && !__atomic_compare_exchange_n(&job->first, &seen, k, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

#if HAVE_IFMA
/* Rows lo..hi of a G1 job eight at a time (ifma_g1bls_in_subgroup; infinity is inside), the unsure lanes by
 * g1bls_in_subgroup; stops at the first row outside. */
static void g1bls_first_outside_ifma(subgroup_job *job, size_t lo, size_t hi) {
    const g1bls_aff *rows = (const g1bls_aff *)job->rows;
    size_t k = lo;
    while (k < hi) {
        const g1bls_aff *p[IFMA_LANES];
        size_t at[IFMA_LANES];
        int n = 0;
        for (; k < hi && n < IFMA_LANES; k++)
            if (!g1bls_aff_is_inf(&rows[k])) {
                at[n] = k;
                p[n++] = &rows[k];
            }
        if (n == 0) return;
        __mmask8 unsure;
        const __mmask8 inside = ifma_g1bls_in_subgroup(p, n, &unsure);
        for (int lane = 0; lane < n; lane++)
            if (!((inside >> lane) & 1) && !(((unsure >> lane) & 1) && g1bls_in_subgroup(p[lane]))) {
                subgroup_found(job, at[lane]);
                return; /* later rows of this chunk cannot come first */
            }
    }
}
#endif

static void *subgroup_worker(void *arg) {
    subgroup_job *job = arg;
    for (;;) {
        size_t lo = __atomic_fetch_add(&job->next, SUBGROUP_CHUNK, __ATOMIC_RELAXED);
        if (lo >= job->count || lo >= __atomic_load_n(&job->first, __ATOMIC_RELAXED)) break;
        size_t hi = lo + SUBGROUP_CHUNK < job->count ? lo + SUBGROUP_CHUNK : job->count;
#if HAVE_IFMA
        if (job->group == 1 && ifma_active) {
            g1bls_first_outside_ifma(job, lo, hi);
            continue;
        }
#endif
        for (size_t k = lo; k < hi; k++) {
            int inside;
            if (job->group == 1) {
                g1bls_aff p;
                memcpy(&p, job->rows + k * sizeof p, sizeof p);
                inside = g1bls_aff_is_inf(&p) || g1bls_in_subgroup(&p);
            } else {
                g2bls_aff q;
                memcpy(&q, job->rows + k * sizeof q, sizeof q);
                inside = g2bls_aff_is_inf(&q) || g2bls_in_subgroup(&q);
            }
            if (!inside) {
                subgroup_found(job, k);
                break; /* later rows of this chunk cannot come first */
            }
        }
    }
    return NULL;
}

/* The index of the first of count BLS12-381 rows of `group` (on the curve, as first_off_curve checks) outside
 * the subgroup of order r, or -1; the point at infinity (an all-zero row) is inside. On `threads` threads. */
static int64_t bls_first_outside_subgroup(int group, const unsigned char *rows, size_t count, int threads) {
    subgroup_job job = {rows, count, group, 0, count};
    const size_t chunks = (count + SUBGROUP_CHUNK - 1) / SUBGROUP_CHUNK;
    const int units = chunks > (size_t)MAX_THREADS ? MAX_THREADS : (int)chunks;
    if (units > 0) run_threads(subgroup_worker, &job, threads_clamp(threads), units);
    return job.first < count ? (int64_t)job.first : -1;
}

#endif
