/* The four groups (BN254 G1 and G2, BLS12-381 G1 and G2): curve.h's group law and msm.h's Pippenger
 * instantiated for each, and the two operations over rows the binding calls, by curve (0 = BN254,
 * 1 = BLS12-381) and group (1 over Fq, 2 over Fq2). A row is a point's affine (x, y) in Montgomery form,
 * little-endian, as a .zkey section stores it (all zero: the point at infinity). */
#ifndef PROOFLANE_GROUPS_H
#define PROOFLANE_GROUPS_H

#include "glv.h"
#include "towers.h"

/* The cube roots of unity in Fq (Montgomery form) whose maps φ(x, y) = (βx, y) act on each group as the
 * λ of glv.h: BN254 G1 takes ω and G2 ω², BLS12-381 G1 ω² and G2 ω, where ω = 2^((q-1)/3) mod q on both
 * curves (BLS12-381's is also the ω of M. Scott's G1 test, subgroup.h, where φ with ω is [-x²]). */
static const fqbn_t BN_OMEGA = {
    {0x3350c88e13e80b9cULL, 0x7dce557cdb5e56b9ULL, 0x6001b4b8b615564aULL, 0x2682e617020217e0ULL}};
static const fqbn_t BN_OMEGA2 = {
    {0x71930c11d782e155ULL, 0xa6bb947cffbe3323ULL, 0xaa303344d4741444ULL, 0x2c3b3f0d26594943ULL}};
static const fqbls_t BLS_OMEGA = {{0x30f1361b798a64e8ULL, 0xf3b8ddab7ece5a2aULL, 0x16a8ca3ac61577f7ULL,
                                   0xc26a2ff874fd029bULL, 0x3636b76660701c6eULL, 0x051ba4ab241b6160ULL}};
static const fqbls_t BLS_OMEGA2 = {{0xcd03c9e48671f071ULL, 0x5dab22461fcda5d2ULL, 0x587042afd3851b95ULL,
                                    0x8eb60ebe01bacb9eULL, 0x03f97d6e83d050d2ULL, 0x18f0206554638741ULL}};

#define G g1bn
#define E fqbn
#define GB g1bn_b
#include "curve.h"
/* φ(x, y) = (βx, y), multiplication by glv.h's λ on the subgroup */
static inline void g1bn_endo(g1bn_aff *p) { fqbn_mul(&p->x, &p->x, &BN_OMEGA); }
#include "msm.h"
#define IFMA_K 1
#include "ifma.h" /* g1bn_fast_batch */
#undef G
#undef E
#undef GB

#define G g2bn
#define E fq2bn
#define GB g2bn_b
#include "curve.h"
/* φ(x, y) = (βx, y), multiplication by glv.h's λ on the subgroup */
static inline void g2bn_endo(g2bn_aff *p) {
    fqbn_mul(&p->x.c0, &p->x.c0, &BN_OMEGA2);
    fqbn_mul(&p->x.c1, &p->x.c1, &BN_OMEGA2);
}
#include "msm.h"
#define IFMA_K 2
#include "ifma.h" /* g2bn_fast_batch */
#undef G
#undef E
#undef GB

#define G g1bls
#define E fqbls
#define GB g1bls_b
#include "curve.h"
/* φ(x, y) = (βx, y), multiplication by glv.h's λ on the subgroup */
static inline void g1bls_endo(g1bls_aff *p) { fqbls_mul(&p->x, &p->x, &BLS_OMEGA2); }
#include "msm.h"
NO_FAST_BATCH(g1bls)
#undef G
#undef E
#undef GB

#define G g2bls
#define E fq2bls
#define GB g2bls_b
#include "curve.h"
/* φ(x, y) = (βx, y), multiplication by glv.h's λ on the subgroup */
static inline void g2bls_endo(g2bls_aff *p) {
    fqbls_mul(&p->x.c0, &p->x.c0, &BLS_OMEGA);
    fqbls_mul(&p->x.c1, &p->x.c1, &BLS_OMEGA);
}
#include "msm.h"
NO_FAST_BATCH(g2bls)
#undef G
#undef E
#undef GB

/* Bytes of a row: two coordinates of `group` field elements of the curve's q. */
#define ROW_BYTES(curve, group) ((size_t)((curve) == 0 ? BN_Q_BYTES : BLS_Q_BYTES) * 2 * (size_t)(group))
#define MAX_ROW_BYTES ROW_BYTES(1, 2)

_Static_assert(sizeof(g1bn_aff) == ROW_BYTES(0, 1), "a BN254 G1 row is the struct g1bn_aff");
_Static_assert(sizeof(g2bn_aff) == ROW_BYTES(0, 2), "a BN254 G2 row is the struct g2bn_aff");
_Static_assert(sizeof(g1bls_aff) == ROW_BYTES(1, 1), "a BLS12-381 G1 row is the struct g1bls_aff");
_Static_assert(sizeof(g2bls_aff) == ROW_BYTES(1, 2), "a BLS12-381 G2 row is the struct g2bls_aff");
_Static_assert(ROW_BYTES(0, 1) == 64 && ROW_BYTES(0, 2) == 128 && ROW_BYTES(1, 1) == 96 && ROW_BYTES(1, 2) == 192,
               "rows as a .zkey stores them");

static inline int group_exists(int curve, int group) {
    return (curve == 0 || curve == 1) && (group == 1 || group == 2);
}

/* out (ROW_BYTES(curve, group) bytes) = sum of scalars[k]·P_k, plain (not Montgomery) affine coordinates,
 * all zero for the point at infinity; the P_k in `tables` tables of count rows (msm.h's msm_tables: one
 * table is the rows themselves). `endo`: split the scalars by the endomorphism (glv.h), for rows known to
 * lie in the subgroup of order r (a checked key's). Returns 0, -1 when memory ran out, -2 when a scalar
 * is too wide for the tables. */
static int groups_msm(int curve, int group, const unsigned char *rows, const unsigned char *scalars, size_t count,
                      int threads, int window, int tables, int stride, int endo, unsigned char *out) {
    const glv_t *glv = !endo ? NULL : curve == 0 ? &BN_GLV : &BLS_GLV;
    int status;
    if (curve == 0 && group == 1) {
        g1bn_jac s;
        g1bn_aff a;
        status = g1bn_msm_tables(&s, rows, scalars, count, threads, window, tables, stride, glv);
        g1bn_to_plain(&a, &s);
        memcpy(out, &a, sizeof a);
    } else if (curve == 0) {
        g2bn_jac s;
        g2bn_aff a;
        status = g2bn_msm_tables(&s, rows, scalars, count, threads, window, tables, stride, glv);
        g2bn_to_plain(&a, &s);
        memcpy(out, &a, sizeof a);
    } else if (group == 1) {
        g1bls_jac s;
        g1bls_aff a;
        status = g1bls_msm_tables(&s, rows, scalars, count, threads, window, tables, stride, glv);
        g1bls_to_plain(&a, &s);
        memcpy(out, &a, sizeof a);
    } else {
        g2bls_jac s;
        g2bls_aff a;
        status = g2bls_msm_tables(&s, rows, scalars, count, threads, window, tables, stride, glv);
        g2bls_to_plain(&a, &s);
        memcpy(out, &a, sizeof a);
    }
    return status;
}

/* table (tables·count rows) = msm.h's fixed_table of count rows. Returns 0, or -1 when memory ran out. */
static int groups_fixed_table(int curve, int group, unsigned char *table, const unsigned char *rows, size_t count,
                              int shift, int tables, int threads) {
    if (curve == 0)
        return group == 1 ? g1bn_fixed_table(table, rows, count, shift, tables, threads)
                          : g2bn_fixed_table(table, rows, count, shift, tables, threads);
    return group == 1 ? g1bls_fixed_table(table, rows, count, shift, tables, threads)
                      : g2bls_fixed_table(table, rows, count, shift, tables, threads);
}

/* The index of the first of count rows not on the curve, or -1. */
static int64_t groups_first_off_curve(int curve, int group, const unsigned char *rows, size_t count) {
    if (curve == 0) return group == 1 ? g1bn_first_off_curve(rows, count) : g2bn_first_off_curve(rows, count);
    return group == 1 ? g1bls_first_off_curve(rows, count) : g2bls_first_off_curve(rows, count);
}

#endif
