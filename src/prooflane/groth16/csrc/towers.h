/* The fields of BN254 (alt_bn128) and BLS12-381: each curve's base field q and scalar field r (their
 * constants), the element types of Fq and of Fq2 = Fq[u] / (u^2 + 1) (both curves' twists use it) with the
 * operations curve.h asks of a coordinate field, and each curve's and twist's b. towers_init() must run
 * once before any of them is used (it sets b and one of Fq2 in Montgomery form). */
#ifndef PROOFLANE_TOWERS_H
#define PROOFLANE_TOWERS_H

#include "field.h"
#include "inverse.h"

#define BN_Q_BYTES 32  /* BN254's q: 4 limbs */
#define BLS_Q_BYTES 48 /* BLS12-381's q: 6 limbs */
#define FR_BYTES 32    /* both curves' r: 4 limbs */

static const field_t BN_Q = {
    4,
    {0x3c208c16d87cfd47ULL, 0x97816a916871ca8dULL, 0xb85045b68181585dULL, 0x30644e72e131a029ULL},
    {0xf32cfc5b538afa89ULL, 0xb5e71911d44501fbULL, 0x47ab1eff0a417ff6ULL, 0x06d89f71cab8351fULL},
    {0xd35d438dc58f0d9dULL, 0x0a78eb28f5c70b3dULL, 0x666ea36f7879462cULL, 0x0e0a77c19a07df2fULL},
    0x87d20782e4866389ULL};
static const field_t BN_R = {
    4,
    {0x43e1f593f0000001ULL, 0x2833e84879b97091ULL, 0xb85045b68181585dULL, 0x30644e72e131a029ULL},
    {0x1bb8e645ae216da7ULL, 0x53fe3ab1e35c59e3ULL, 0x8c49833d53bb8085ULL, 0x0216d0b17f4e44a5ULL},
    {0xac96341c4ffffffbULL, 0x36fc76959f60cd29ULL, 0x666ea36f7879462eULL, 0x0e0a77c19a07df2fULL},
    0xc2e1f593efffffffULL};
static const field_t BLS_Q = {6,
                              {0xb9feffffffffaaabULL, 0x1eabfffeb153ffffULL, 0x6730d2a0f6b0f624ULL,
                               0x64774b84f38512bfULL, 0x4b1ba7b6434bacd7ULL, 0x1a0111ea397fe69aULL},
                              {0xf4df1f341c341746ULL, 0x0a76e6a609d104f1ULL, 0x8de5476c4c95b6d5ULL,
                               0x67eb88a9939d83c0ULL, 0x9a793e85b519952dULL, 0x11988fe592cae3aaULL},
                              {0x760900000002fffdULL, 0xebf4000bc40c0002ULL, 0x5f48985753c758baULL,
                               0x77ce585370525745ULL, 0x5c071a97a256ec6dULL, 0x15f65ec3fa80e493ULL},
                              0x89f3fffcfffcfffdULL};
static const field_t BLS_R = {
    4,
    {0xffffffff00000001ULL, 0x53bda402fffe5bfeULL, 0x3339d80809a1d805ULL, 0x73eda753299d7d48ULL},
    {0xc999e990f3f29c6dULL, 0x2b6cedcb87925c23ULL, 0x05d314967254398fULL, 0x0748d9d99f59ff11ULL},
    {0x00000001fffffffeULL, 0x5884b7fa00034802ULL, 0x998c4fefecbc4ff5ULL, 0x1824b159acc5056fULL},
    0xfffffffeffffffffULL};

/* A base field's element type and the operations curve.h uses. */
#define DEFINE_FP(P, F, N)                                                                                         \
    typedef struct {                                                                                               \
        u64 v[N];                                                                                                  \
    } P##_t;                                                                                                       \
    static inline void P##_add(P##_t *r, const P##_t *a, const P##_t *b) { f_add(r->v, a->v, b->v, &F, N); }       \
    static inline void P##_sub(P##_t *r, const P##_t *a, const P##_t *b) { f_sub(r->v, a->v, b->v, &F, N); }       \
    static inline void P##_mul(P##_t *r, const P##_t *a, const P##_t *b) { f_mul(r->v, a->v, b->v, &F, N); }       \
    static inline void P##_sqr(P##_t *r, const P##_t *a) { f_mul(r->v, a->v, a->v, &F, N); }                       \
    static inline void P##_neg(P##_t *r, const P##_t *a) { f_neg(r->v, a->v, &F, N); }                             \
    static inline int P##_is_zero(const P##_t *a) { return limbs_is_zero(a->v, N); }                               \
    static inline int P##_eq(const P##_t *a, const P##_t *b) { return limbs_eq(a->v, b->v, N); }                   \
    static inline int P##_below(const P##_t *a) { return f_below(a->v, &F, N); }                                   \
    static inline const P##_t *P##_one(void) { return (const P##_t *)F.one; }                                      \
    static void P##_inv(P##_t *r, const P##_t *a) { f_inv(r->v, a->v, &F, N); }                                    \
    static inline void P##_from_mont(P##_t *r, const P##_t *a) { f_from_mont(r->v, a->v, &F, N); }                 \
    static inline void P##_to_mont(P##_t *r, const P##_t *a) { f_to_mont(r->v, a->v, &F, N); }

/* Fq2 = Fq[u] / (u^2 + 1) over a base field P (both curves' twists use it). */
#define DEFINE_FP2(P2, P)                                                                                          \
    typedef struct {                                                                                               \
        P##_t c0, c1;                                                                                              \
    } P2##_t;                                                                                                      \
    static P2##_t P2##_ONE;                                                                                        \
    static inline void P2##_add(P2##_t *r, const P2##_t *a, const P2##_t *b) {                                     \
        P##_add(&r->c0, &a->c0, &b->c0);                                                                           \
        P##_add(&r->c1, &a->c1, &b->c1);                                                                           \
    }                                                                                                              \
    static inline void P2##_sub(P2##_t *r, const P2##_t *a, const P2##_t *b) {                                     \
        P##_sub(&r->c0, &a->c0, &b->c0);                                                                           \
        P##_sub(&r->c1, &a->c1, &b->c1);                                                                           \
    }                                                                                                              \
    static inline void P2##_mul(P2##_t *r, const P2##_t *a, const P2##_t *b) {                                     \
        P##_t t0, t1, sa, sb;                                                                                      \
        P##_mul(&t0, &a->c0, &b->c0);                                                                              \
        P##_mul(&t1, &a->c1, &b->c1);                                                                              \
        P##_add(&sa, &a->c0, &a->c1);                                                                              \
        P##_add(&sb, &b->c0, &b->c1);                                                                              \
        P##_mul(&sa, &sa, &sb);                                                                                    \
        P##_sub(&r->c0, &t0, &t1);                                                                                 \
        P##_sub(&sa, &sa, &t0);                                                                                    \
        P##_sub(&r->c1, &sa, &t1);                                                                                 \
    }                                                                                                              \
    static inline void P2##_sqr(P2##_t *r, const P2##_t *a) {                                                      \
        P##_t s, d, m;                                                                                             \
        P##_add(&s, &a->c0, &a->c1);                                                                               \
        P##_sub(&d, &a->c0, &a->c1);                                                                               \
        P##_mul(&m, &a->c0, &a->c1);                                                                               \
        P##_mul(&r->c0, &s, &d);                                                                                   \
        P##_add(&r->c1, &m, &m);                                                                                   \
    }                                                                                                              \
    static inline void P2##_neg(P2##_t *r, const P2##_t *a) {                                                      \
        P##_neg(&r->c0, &a->c0);                                                                                   \
        P##_neg(&r->c1, &a->c1);                                                                                   \
    }                                                                                                              \
    static inline int P2##_is_zero(const P2##_t *a) { return P##_is_zero(&a->c0) && P##_is_zero(&a->c1); }         \
    static inline int P2##_eq(const P2##_t *a, const P2##_t *b) {                                                  \
        return P##_eq(&a->c0, &b->c0) && P##_eq(&a->c1, &b->c1);                                                   \
    }                                                                                                              \
    static inline int P2##_below(const P2##_t *a) { return P##_below(&a->c0) && P##_below(&a->c1); }               \
    static inline const P2##_t *P2##_one(void) { return &P2##_ONE; }                                               \
    static void P2##_inv(P2##_t *r, const P2##_t *a) {                                                             \
        P##_t n0, n1;                                                                                              \
        P##_mul(&n0, &a->c0, &a->c0);                                                                              \
        P##_mul(&n1, &a->c1, &a->c1);                                                                              \
        P##_add(&n0, &n0, &n1);                                                                                    \
        P##_inv(&n0, &n0);                                                                                         \
        P##_mul(&r->c0, &a->c0, &n0);                                                                              \
        P##_mul(&n1, &a->c1, &n0);                                                                                 \
        P##_neg(&r->c1, &n1);                                                                                      \
    }                                                                                                              \
    static inline void P2##_from_mont(P2##_t *r, const P2##_t *a) {                                                \
        P##_from_mont(&r->c0, &a->c0);                                                                             \
        P##_from_mont(&r->c1, &a->c1);                                                                             \
    }

DEFINE_FP(fqbn, BN_Q, 4)
DEFINE_FP2(fq2bn, fqbn)
DEFINE_FP(fqbls, BLS_Q, 6)
DEFINE_FP2(fq2bls, fqbls)

/* b of each curve and twist, in Montgomery form (set at import from the plain values). */
static fqbn_t g1bn_b;
static fq2bn_t g2bn_b;
static fqbls_t g1bls_b;
static fq2bls_t g2bls_b;

static void plain_to_mont(u64 *r, u64 value, const field_t *f) {
    u64 x[MAXN] = {value};
    f_mul(r, x, f->r2, f, f->n);
}

static void towers_init(void) {
    /* BN254's twist: b' = 3 / (9 + u), plain limbs */
    static const u64 bn_b2[2][4] = {
        {0x3267e6dc24a138e5ULL, 0xb5b4c5e559dbefa3ULL, 0x81be18991be06ac3ULL, 0x2b149d40ceb8aaaeULL},
        {0xe4a2bd0685c315d2ULL, 0xa74fa084e52d1852ULL, 0xcd2cafadeed8fdf4ULL, 0x009713b03af0fed4ULL},
    };
    plain_to_mont(g1bn_b.v, 3, &BN_Q);
    f_to_mont(g2bn_b.c0.v, bn_b2[0], &BN_Q, 4);
    f_to_mont(g2bn_b.c1.v, bn_b2[1], &BN_Q, 4);
    plain_to_mont(g1bls_b.v, 4, &BLS_Q);
    plain_to_mont(g2bls_b.c0.v, 4, &BLS_Q);
    plain_to_mont(g2bls_b.c1.v, 4, &BLS_Q);
    memcpy(fq2bn_ONE.c0.v, BN_Q.one, BN_Q_BYTES);
    memcpy(fq2bls_ONE.c0.v, BLS_Q.one, BLS_Q_BYTES);
}

#endif
