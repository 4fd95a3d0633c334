/* Prime fields in Montgomery form: n 64-bit limbs, little-endian, R = 2^(64n) (the form a .zkey stores).
 *
 * Every function takes the limb count as a constant argument and is always inlined, so that each call
 * site with n = 4 or n = 6 compiles to straight-line code (the loops unrolled, no branches on n).
 * Values are kept fully reduced (below p) between operations. */
#ifndef PROOFLANE_FIELD_H
#define PROOFLANE_FIELD_H

#include "cpu.h"
#include "limbs.h"

/* The assembly (mont_x86.h: mulx/adcx/adox products, 4- and 6-limb sums and differences) is compiled in where
 * cpu.h's CPU_BUILT says (x86-64 with a GNU compiler, unless PROOFLANE_NO_ASM); its sums and differences
 * run on every x86-64 CPU, its products (and the 6-limb difference, which takes adcx) where the kernel
 * "mulx-products" runs (cpu.h). */
#if CPU_BUILT & CPU_MULX
#include "mont_x86.h"
#define HAVE_MONT_ASM 1
#else
#define HAVE_MONT_ASM 0
#endif

typedef struct {
    int n;          /* limbs */
    u64 p[MAXN];    /* the modulus */
    u64 r2[MAXN];   /* R^2 mod p: to Montgomery form by one multiplication */
    u64 one[MAXN];  /* R mod p: one in Montgomery form */
    u64 inv;        /* -p^-1 mod 2^64 */
} field_t;

/* Whether a < p (a canonical representative). */
INLINE int f_below(const u64 *a, const field_t *f, const int n) {
    u64 t[MAXN];
    return (int)limbs_sub(t, a, f->p, n);
}

INLINE void f_add(u64 *r, const u64 *a, const u64 *b, const field_t *f, const int n) {
#if HAVE_MONT_ASM
    if (n == 4) {
        mod_add4_asm(r, a, b, f->p);
        return;
    }
    if (n == 6) {
        mod_add6_asm(r, a, b, f->p);
        return;
    }
#endif
    u64 t[MAXN], d[MAXN], carry = 0;
    for (int j = 0; j < n; j++) {
        u128 s = (u128)a[j] + b[j] + carry;
        t[j] = (u64)s;
        carry = (u64)(s >> 64);
    }
    u64 borrow = limbs_sub(d, t, f->p, n);
    const u64 *src = (carry || !borrow) ? d : t;
    for (int j = 0; j < n; j++) r[j] = src[j];
}

INLINE void f_sub(u64 *r, const u64 *a, const u64 *b, const field_t *f, const int n) {
#if HAVE_MONT_ASM
    if (n == 4) {
        mod_sub4_asm(r, a, b, f->p);
        return;
    }
    if (n == 6 && kernel_runs(KERNEL_MULX)) {
        mod_sub6_asm(r, a, b, f->p);
        return;
    }
#endif
    u64 t[MAXN];
    if (limbs_sub(t, a, b, n)) {
        u64 carry = 0;
        for (int j = 0; j < n; j++) {
            u128 s = (u128)t[j] + f->p[j] + carry;
            t[j] = (u64)s;
            carry = (u64)(s >> 64);
        }
    }
    for (int j = 0; j < n; j++) r[j] = t[j];
}

INLINE void f_neg(u64 *r, const u64 *a, const field_t *f, const int n) {
    if (limbs_is_zero(a, n)) {
        for (int j = 0; j < n; j++) r[j] = 0;
        return;
    }
    limbs_sub(r, f->p, a, n);
}

/* Montgomery multiplication, CIOS: r = a·b·R^-1 mod p. r may alias a or b. */
INLINE void f_mul(u64 *r, const u64 *a, const u64 *b, const field_t *f, const int n) {
#if HAVE_MONT_ASM
    if (n == 4 && kernel_runs(KERNEL_MULX)) {
        mont_mul4_adx(r, a, b, f->p, f->inv);
        return;
    }
    if (n == 6 && kernel_runs(KERNEL_MULX)) {
        mont_mul6_adx(r, a, b, f->p, f->inv);
        return;
    }
#endif
    u64 t[MAXN + 2];
    for (int j = 0; j < n + 2; j++) t[j] = 0;
    for (int i = 0; i < n; i++) {
        u64 carry = 0;
        for (int j = 0; j < n; j++) {
            u128 s = (u128)a[j] * b[i] + t[j] + carry;
            t[j] = (u64)s;
            carry = (u64)(s >> 64);
        }
        u128 s = (u128)t[n] + carry;
        t[n] = (u64)s;
        t[n + 1] = (u64)(s >> 64);
        u64 m = t[0] * f->inv;
        s = (u128)m * f->p[0] + t[0];
        carry = (u64)(s >> 64);
        for (int j = 1; j < n; j++) {
            s = (u128)m * f->p[j] + t[j] + carry;
            t[j - 1] = (u64)s;
            carry = (u64)(s >> 64);
        }
        s = (u128)t[n] + carry;
        t[n - 1] = (u64)s;
        t[n] = t[n + 1] + (u64)(s >> 64);
    }
    u64 d[MAXN];
    u64 borrow = limbs_sub(d, t, f->p, n);
    const u64 *src = (t[n] || !borrow) ? d : t;
    for (int j = 0; j < n; j++) r[j] = src[j];
}

/* a^e for an exponent of n limbs (square and multiply, from the top bit). */
INLINE void f_pow(u64 *r, const u64 *a, const u64 *e, const field_t *f, const int n) {
    u64 acc[MAXN], base[MAXN];
    memcpy(acc, f->one, sizeof(u64) * n);
    memcpy(base, a, sizeof(u64) * n);
    for (int i = 64 * n - 1; i >= 0; i--) {
        f_mul(acc, acc, acc, f, n);
        if ((e[i / 64] >> (i % 64)) & 1) f_mul(acc, acc, base, f, n);
    }
    memcpy(r, acc, sizeof(u64) * n);
}

INLINE void f_to_mont(u64 *r, const u64 *a, const field_t *f, const int n) { f_mul(r, a, f->r2, f, n); }

INLINE void f_from_mont(u64 *r, const u64 *a, const field_t *f, const int n) {
    u64 unit[MAXN] = {1};
    f_mul(r, a, unit, f, n);
}

#endif
