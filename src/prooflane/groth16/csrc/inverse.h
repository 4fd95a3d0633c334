/* Field inversion by Bernstein and Yang's divsteps ("safegcd", https://eprint.iacr.org/2019/266), in the
 * variable-time form: 62 divsteps at a time on the low words of f and g give a 2x2 matrix, applied to the
 * full f, g (towards gcd = ±1) and to d, e (the coefficients with f = d·x, g = e·x mod p). About 1 µs for
 * a 254-bit p, where Fermat's a^(p-2) takes some 380 multiplications (7 µs): the batched MSM buckets pay one
 * inversion per batch.
 *
 * Numbers here are signed, in limbs of 62 bits (all but the top limb in [0, 2^62), the top one signed), so
 * that a limb times a matrix entry (|entry| <= 2^62) plus two more fits a signed 128-bit sum. Variable time
 * is right for the prover: its MSMs' memory accesses follow the scalars already. */
#ifndef PROOFLANE_INVERSE_H
#define PROOFLANE_INVERSE_H

#include "field.h"

typedef __int128 i128;
typedef int64_t i64;

#define S62_BITS 62
#define S62_MASK (((u64)1 << S62_BITS) - 1)
#define S62_LIMBS(n) ((64 * (n) + S62_BITS) / S62_BITS) /* 64n bits and a sign */
#define S62_MAX S62_LIMBS(MAXN)

/* -f^-1 mod 16 for odd f, indexed by (f mod 16) / 2. */
static const uint8_t NEG_INV16[8] = {15, 5, 3, 9, 7, 13, 11, 1};

/* 62 divsteps on the low bits of f (odd) and g, starting from eta (= -delta); t = (u, v, q, r) such that
 * 2^62·(f', g') = (u·f + v·g, q·f + r·g). Returns eta after them. Entries are kept as unsigned words
 * (wrapping), read as signed: each row's absolute values sum to at most 2^62. */
static inline i64 s62_divsteps(i64 eta, u64 f, u64 g, i64 t[4]) {
    u64 u = 1, v = 0, q = 0, r = 1, tmp;
    int i = S62_BITS;
    for (;;) {
        int zeros = g ? __builtin_ctzll(g) : 64;
        if (zeros > i) zeros = i;
        eta -= zeros;
        i -= zeros;
        g >>= zeros;
        u <<= zeros;
        v <<= zeros;
        if (i == 0) break;
        if (eta < 0) { /* g odd: swap, negating the old f */
            eta = -eta;
            tmp = f, f = g, g = -tmp;
            tmp = u, u = q, q = -tmp;
            tmp = v, v = r, r = -tmp;
        }
        int limit = (int)(eta + 1 < i ? eta + 1 : i);
        if (limit > 4) limit = 4;
        const u64 w = (g * NEG_INV16[(f & 15) >> 1]) & (((u64)1 << limit) - 1);
        g += w * f; /* its low `limit` bits now zero */
        q += w * u;
        r += w * v;
    }
    t[0] = (i64)u, t[1] = (i64)v, t[2] = (i64)q, t[3] = (i64)r;
    return eta;
}

/* (f, g) = (u·f + v·g, q·f + r·g) / 2^62, an exact division. */
INLINE void s62_update_fg(i64 *f, i64 *g, const i64 t[4], const int l) {
    i128 cf = (i128)t[0] * f[0] + (i128)t[1] * g[0];
    i128 cg = (i128)t[2] * f[0] + (i128)t[3] * g[0];
    cf >>= S62_BITS;
    cg >>= S62_BITS;
    for (int j = 1; j < l; j++) {
        cf += (i128)t[0] * f[j] + (i128)t[1] * g[j];
        cg += (i128)t[2] * f[j] + (i128)t[3] * g[j];
        f[j - 1] = (i64)((u64)cf & S62_MASK);
        g[j - 1] = (i64)((u64)cg & S62_MASK);
        cf >>= S62_BITS;
        cg >>= S62_BITS;
    }
    f[l - 1] = (i64)cf;
    g[l - 1] = (i64)cg;
}

/* (d, e) = (u·d + v·e, q·d + r·e) / 2^62 mod p: a multiple of p (below 2^62·p) added to each sum first
 * clears its low 62 bits. With d, e in [0, p) the results lie in (-2p, 2p). */
INLINE void s62_update_de(i64 *d, i64 *e, const i64 t[4], const i64 *p, const u64 p_inv, const int l) {
    const u64 xd = (u64)t[0] * (u64)d[0] + (u64)t[1] * (u64)e[0];
    const u64 xe = (u64)t[2] * (u64)d[0] + (u64)t[3] * (u64)e[0];
    const i64 md = (i64)((0 - xd * p_inv) & S62_MASK), me = (i64)((0 - xe * p_inv) & S62_MASK);
    i128 cd = (i128)t[0] * d[0] + (i128)t[1] * e[0] + (i128)md * p[0];
    i128 ce = (i128)t[2] * d[0] + (i128)t[3] * e[0] + (i128)me * p[0];
    cd >>= S62_BITS;
    ce >>= S62_BITS;
    for (int j = 1; j < l; j++) {
        cd += (i128)t[0] * d[j] + (i128)t[1] * e[j] + (i128)md * p[j];
        ce += (i128)t[2] * d[j] + (i128)t[3] * e[j] + (i128)me * p[j];
        d[j - 1] = (i64)((u64)cd & S62_MASK);
        e[j - 1] = (i64)((u64)ce & S62_MASK);
        cd >>= S62_BITS;
        ce >>= S62_BITS;
    }
    d[l - 1] = (i64)cd;
    e[l - 1] = (i64)ce;
}

/* r = a + sign·b (sign ±1), carries normalised to 62-bit limbs. */
INLINE void s62_add(i64 *r, const i64 *a, const i64 *b, const int sign, const int l) {
    i64 carry = 0;
    for (int j = 0; j < l - 1; j++) {
        i64 s = a[j] + sign * b[j] + carry;
        r[j] = (i64)((u64)s & S62_MASK);
        carry = s >> S62_BITS;
    }
    r[l - 1] = a[l - 1] + sign * b[l - 1] + carry;
}

/* x from (-2p, 2p) into [0, p). */
INLINE void s62_reduce(i64 *x, const i64 *p, const int l) {
    i64 t[S62_MAX];
    while (x[l - 1] < 0) s62_add(x, x, p, 1, l);
    for (;;) {
        s62_add(t, x, p, -1, l);
        if (t[l - 1] < 0) break;
        memcpy(x, t, sizeof(i64) * l);
    }
}

INLINE void s62_from_limbs(i64 *out, const u64 *a, const int n, const int l) {
    u128 acc = 0;
    int bits = 0, k = 0;
    for (int j = 0; j < l; j++) {
        if (bits < S62_BITS && k < n) {
            acc |= (u128)a[k++] << bits;
            bits += 64;
        }
        out[j] = (i64)((u64)acc & S62_MASK);
        acc >>= S62_BITS;
        bits -= S62_BITS;
    }
}

/* x in [0, 2^(64n)) from non-negative 62-bit limbs. */
INLINE void s62_to_limbs(u64 *out, const i64 *x, const int n, const int l) {
    u128 acc = 0;
    int bits = 0, j = 0;
    for (int k = 0; k < n; k++) {
        while (bits < 64 && j < l) {
            acc |= (u128)(u64)x[j++] << bits;
            bits += S62_BITS;
        }
        out[k] = (u64)acc;
        acc >>= 64;
        bits -= 64;
    }
}

/* r = a^-1 in Montgomery form (a·R and r = a^-1·R); zero stays zero. r may alias a. */
INLINE void f_inv(u64 *r, const u64 *a, const field_t *fd, const int n) {
    const int l = S62_LIMBS(n);
    const u64 p_inv = (0 - fd->inv) & S62_MASK; /* p^-1 mod 2^62 (fd->inv is -p^-1 mod 2^64) */
    i64 p[S62_MAX], f[S62_MAX], g[S62_MAX], d[S62_MAX] = {0}, e[S62_MAX] = {1}, t[4];
    s62_from_limbs(p, fd->p, n, l);
    memcpy(f, p, sizeof(i64) * l);
    s62_from_limbs(g, a, n, l);
    i64 eta = -1;
    for (;;) {
        u64 any = 0;
        for (int j = 0; j < l; j++) any |= (u64)g[j];
        if (any == 0) break;
        eta = s62_divsteps(eta, (u64)f[0] | ((u64)f[1] << S62_BITS), (u64)g[0] | ((u64)g[1] << S62_BITS), t);
        s62_update_de(d, e, t, p, p_inv, l);
        s62_update_fg(f, g, t, l);
        s62_reduce(d, p, l);
        s62_reduce(e, p, l);
    }
    /* f = ±1 = d·a·R (mod p) when a is not zero; a = 0 leaves d = 0 */
    if (f[l - 1] < 0) {
        s62_add(d, p, d, -1, l);
        s62_reduce(d, p, l);
    }
    u64 y[MAXN];
    s62_to_limbs(y, d, n, l);
    /* y = (a·R)^-1 = a^-1·R^-1; two products with R^2 make it a^-1·R */
    f_mul(y, y, fd->r2, fd, n);
    f_mul(r, y, fd->r2, fd, n);
}

#endif
