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
static const fq2bls_t BLS_PSI_Y = {{{0x3e2f585da55c9ad1ULL, 0x4294213d86c18183ULL, 0x382844c88b623732ULL,
                                     0x92ad2afd19103e18ULL, 0x1d794e4fac7cf0b9ULL, 0x0bd592fc7d825ec8ULL}},
                                   {{0x7bcfa7a25aa30fdaULL, 0xdc17dec12a927e7cULL, 0x2f088dd86b4ebef1ULL,
                                     0xd1ca2087da74d4a7ULL, 0x2da2596696cebc1dULL, 0x0e2b7eedbbfd87d2ULL}}};

/* r = [k]p for a k of `limbs` limbs (its top bit set), p affine and not infinity: double and add from the
 * top, each addition a mixed one with p. */
#define DEFINE_MUL_CONST(G)                                                                                        \
    static void G##_mul_const(G##_jac *r, const G##_aff *p, const u64 *k, int limbs) {                             \
        G##_set_inf(r);                                                                                            \
        G##_add_aff(r, r, p);                                                                                      \
        int top = 64 * limbs - 1;                                                                                  \
        while (!((k[top / 64] >> (top % 64)) & 1)) top--;                                                          \
        for (int bit = top - 1; bit >= 0; bit--) {                                                                 \
            G##_dbl(r, r);                                                                                         \
            if ((k[bit / 64] >> (bit % 64)) & 1) G##_add_aff(r, r, p);                                             \
        }                                                                                                          \
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
#define G g1bls
#define E fqbls
#define IFMA_K 1
#include "ifma_subgroup.h" /* g1bls_lanes_mul_is */
#undef G
#undef E
#define G g2bls
#define E fq2bls
#define IFMA_K 2
#include "ifma_subgroup.h" /* g2bls_lanes_mul_is */
#undef G
#undef E
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
/* The targets of the eight-lane tests (ifma_subgroup.h), [k]p = t: G1 -φ(p) = (ωx, -y) for k = x²; G2
 * -ψ(q) for k = |x|. */
static void g1bls_target(g1bls_aff *t, const g1bls_aff *p) {
    fqbls_mul(&t->x, &p->x, &BLS_OMEGA);
    fqbls_neg(&t->y, &p->y);
}

static void g2bls_target(g2bls_aff *t, const g2bls_aff *q) {
    fqbls_mul(&t->x.c0, &q->x.c1, &BLS_PSI_X1); /* as g2bls_in_subgroup's ψ */
    fqbls_mul(&t->x.c1, &q->x.c0, &BLS_PSI_X1);
    fq2bls_t y = q->y;
    fqbls_neg(&y.c1, &y.c1);
    fq2bls_mul(&t->y, &y, &BLS_PSI_Y);
    fq2bls_neg(&t->y, &t->y);
}

/* G_first_outside_ifma(job, lo, hi): rows lo..hi of a job eight at a time (infinity is inside), the unsure
 * lanes by the one-point test; stops at the first row outside. The rows are copied (they may lie at any
 * address: a mapped section's, a caller's buffer), never read through a pointer of their type. */
#define DEFINE_FIRST_OUTSIDE_IFMA(G, K, LIMBS)                                                                     \
    static void G##_first_outside_ifma(subgroup_job *job, size_t lo, size_t hi) {                                  \
        size_t k = lo;                                                                                             \
        while (k < hi) {                                                                                           \
            G##_aff row[IFMA_LANES], t[IFMA_LANES];                                                                \
            const G##_aff *p[IFMA_LANES];                                                                          \
            size_t at[IFMA_LANES];                                                                                 \
            int n = 0;                                                                                             \
            for (; k < hi && n < IFMA_LANES; k++) {                                                                \
                memcpy(&row[n], job->rows + k * sizeof row[n], sizeof row[n]);                                     \
                if (G##_aff_is_inf(&row[n])) continue;                                                             \
                at[n] = k;                                                                                         \
                G##_target(&t[n], &row[n]);                                                                        \
                p[n] = &row[n];                                                                                    \
                n++;                                                                                               \
            }                                                                                                      \
            if (n == 0) return;                                                                                    \
            __mmask8 unsure;                                                                                       \
            const __mmask8 inside = G##_lanes_mul_is(p, t, n, K, LIMBS, &unsure);                                  \
            for (int lane = 0; lane < n; lane++)                                                                   \
                if (!((inside >> lane) & 1) && !(((unsure >> lane) & 1) && G##_in_subgroup(p[lane]))) {            \
                    subgroup_found(job, at[lane]);                                                                 \
                    return; /* later rows of this chunk cannot come first */                                       \
                }                                                                                                  \
        }                                                                                                          \
    }
DEFINE_FIRST_OUTSIDE_IFMA(g1bls, BLS_X_SQUARED, 2)
DEFINE_FIRST_OUTSIDE_IFMA(g2bls, BLS_X_ABS, 1)
#endif

static void *subgroup_worker(void *arg) {
    subgroup_job *job = arg;
    for (;;) {
        size_t lo = __atomic_fetch_add(&job->next, SUBGROUP_CHUNK, __ATOMIC_RELAXED);
        if (lo >= job->count || lo >= __atomic_load_n(&job->first, __ATOMIC_RELAXED)) break;
        size_t hi = lo + SUBGROUP_CHUNK < job->count ? lo + SUBGROUP_CHUNK : job->count;
#if HAVE_IFMA
        if (kernel_runs(KERNEL_IFMA_SUBGROUP)) {
            if (job->group == 1)
                g1bls_first_outside_ifma(job, lo, hi);
            else
                g2bls_first_outside_ifma(job, lo, hi);
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
