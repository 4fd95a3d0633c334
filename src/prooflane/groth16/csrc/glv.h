/* The GLV split of a scalar (Gallant, Lambert and Vanstone, "Faster point multiplication on elliptic curves
 * with efficient endomorphisms", CRYPTO 2001). Both curves have j = 0, so φ(x, y) = (βx, y), β a cube root
 * of unity in Fq, maps E (and the twist E') to itself; on the subgroup of order r it is multiplication by
 * a cube root of unity λ mod r. Each scalar k splits into k1 + k2·λ ≡ k (mod r) with |k1|, |k2| < 2^128,
 * so that k·P = k1·P + k2·φ(P): twice the terms, half the windows.
 *
 * The split rounds k's coordinates in the lattice basis {v1 = (a1, b1), v2 = (a2, b2)} of the vectors
 * (x, y) with x + y·λ ≡ 0 (mod r), found by the extended Euclidean algorithm on (r, λ): with
 * D = a1·b2 - a2·b1 = ±r, c1 = round(k·b2 / D), c2 = round(-k·b1 / D), and then (k1, k2) = (k, 0) - c1·v1 -
 * c2·v2, a vector of the lattice's translate whose length is at most about |v1| + |v2| (2^127 or 2^128 on
 * both curves). The divisions are products by g1 = round(2^256·b2 / D) and g2 = round(-2^256·b1 / D)
 * (both non-negative here), shifted right by 256: the rounding error moves c1 and c2 by at most one, and
 * so k1 and k2 by at most |v1| + |v2|. The congruence k1 + k2·λ ≡ k holds whatever c1 and c2 are; only the
 * lengths depend on their accuracy, and the MSM takes its windows from the longest split it meets.
 *
 * Only for points of the subgroup: off it, φ is not multiplication by λ, and the split would compute
 * another sum. The MSM uses it only when told that its rows are a checked key's (msm.h, groups.h). The
 * constants were derived by the extended Euclidean algorithm and checked on 20,000 random scalars and the
 * edges (docs/groth16.md); the tests compare every MSM so made with the plain one and the libraries'. */
#ifndef PROOFLANE_GLV_H
#define PROOFLANE_GLV_H

#include "limbs.h"

typedef struct {
    u64 r[4];                       /* the scalar field's modulus */
    u64 g1[4], g2[4];               /* round(2^256·b2 / D), round(-2^256·b1 / D) */
    u64 a1[4], b1[4], a2[4], b2[4]; /* the basis, two's complement mod 2^256 */
} glv_t;

/* BN254: λ = 0x30644e72e131a029048b6e193fd84104cc37a73fec2bc5e9b8ca0b2d36636f23. */
static const glv_t BN_GLV = {
    {0x43e1f593f0000001ULL, 0x2833e84879b97091ULL, 0xb85045b68181585dULL, 0x30644e72e131a029ULL},
    {0x5398fd0300ff6565ULL, 0x4ccef014a773d2d2ULL, 0x0000000000000002ULL, 0},
    {0xd91d232ec7e0b3d7ULL, 0x0000000000000002ULL, 0, 0},
    {0x8211bbeb7d4f1128ULL, 0x6f4d8248eeb859fcULL, 0, 0},
    {0x762cda976b2dec1dULL, 0xffffffffffffffffULL, 0xffffffffffffffffULL, 0xffffffffffffffffULL},
    {0x89d3256894d213e3ULL, 0, 0, 0},
    {0x0be4e1541221250bULL, 0x6f4d8248eeb859fdULL, 0, 0},
};

/* BLS12-381: λ = x² - 1 = 0xac45a4010001a40200000000ffffffff (x the curve's parameter). */
static const glv_t BLS_GLV = {
    {0xffffffff00000001ULL, 0x53bda402fffe5bfeULL, 0x3339d80809a1d805ULL, 0x73eda753299d7d48ULL},
    {0x0000000000000002ULL, 0, 0, 0},
    {0x63f6e522f6cfee30ULL, 0x7c6becf1e01faaddULL, 0x0000000000000001ULL, 0},
    {0x0000000000000001ULL, 0, 0, 0},
    {0x0000000100000000ULL, 0xac45a4010001a402ULL, 0, 0},
    {0x00000000ffffffffULL, 0xac45a4010001a402ULL, 0, 0},
    {0xffffffffffffffffULL, 0xffffffffffffffffULL, 0xffffffffffffffffULL, 0xffffffffffffffffULL},
};

/* r = a·b mod 2^256 (two's complement products are the same bits). */
static void glv_mul_lo(u64 *r, const u64 *a, const u64 *b) {
    u64 out[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        u64 carry = 0;
        for (int j = 0; i + j < 4; j++) {
            u128 t = (u128)a[i] * b[j] + out[i + j] + carry;
            out[i + j] = (u64)t;
            carry = (u64)(t >> 64);
        }
    }
    memcpy(r, out, sizeof out);
}

/* r = round(k·g / 2^256) for k, g below 2^256. */
static void glv_round(u64 *r, const u64 *k, const u64 *g) {
    u64 out[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        u64 carry = 0;
        for (int j = 0; j < 4; j++) {
            u128 t = (u128)k[i] * g[j] + out[i + j] + carry;
            out[i + j] = (u64)t;
            carry = (u64)(t >> 64);
        }
        out[i + 4] = carry;
    }
    u64 carry = out[3] >> 63; /* the rounding bit */
    for (int j = 4; j < 8; j++) {
        u128 t = (u128)out[j] + carry;
        r[j - 4] = (u64)t;
        carry = (u64)(t >> 64);
    }
}

static void glv_neg(u64 *a) {
    u64 carry = 1;
    for (int j = 0; j < 4; j++) {
        u128 t = (u128)~a[j] + carry;
        a[j] = (u64)t;
        carry = (u64)(t >> 64);
    }
}

/* k (any value below 2^256) ≡ s1·k1 + s2·k2·λ (mod r), with k1, k2 their magnitudes (below 2^192 for any
 * k, below 2^128 for the constants here) and s1, s2 the signs (bit 0 of the result: k1 is negative; bit
 * 1: k2 is). */
static int glv_split(const glv_t *g, const u64 *scalar, u64 *k1, u64 *k2) {
    u64 k[4], c1[4], c2[4], t[4];
    memcpy(k, scalar, sizeof k);
    for (;;) { /* k mod r: at most six subtractions for any k below 2^256 */
        u64 d[4];
        if (limbs_sub(d, k, g->r, 4)) break;
        memcpy(k, d, sizeof k);
    }
    glv_round(c1, k, g->g1);
    glv_round(c2, k, g->g2);
    memcpy(k1, k, sizeof k);
    glv_mul_lo(t, c1, g->a1);
    limbs_sub(k1, k1, t, 4);
    glv_mul_lo(t, c2, g->a2);
    limbs_sub(k1, k1, t, 4);
    glv_mul_lo(k2, c1, g->b1);
    glv_mul_lo(t, c2, g->b2);
    glv_neg(k2);
    limbs_sub(k2, k2, t, 4);
    int signs = 0;
    if (k1[3] >> 63) {
        glv_neg(k1);
        signs |= 1;
    }
    if (k2[3] >> 63) {
        glv_neg(k2);
        signs |= 2;
    }
    return signs;
}

#endif
