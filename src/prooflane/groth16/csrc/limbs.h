/* Multi-precision integers as arrays of 64-bit limbs, little-endian: the types and the comparisons every
 * other header uses. No Python, no allocation. */
#ifndef PROOFLANE_LIMBS_H
#define PROOFLANE_LIMBS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef uint64_t u64;
typedef unsigned __int128 u128;

#define MAXN 6 /* the widest field here: BLS12-381's q, 6 limbs */
#define INLINE static inline __attribute__((always_inline))

/* a - b over n limbs into r; returns the borrow (1 when a < b). r may alias a or b. */
INLINE u64 limbs_sub(u64 *r, const u64 *a, const u64 *b, const int n) {
    u64 borrow = 0;
    for (int j = 0; j < n; j++) {
        u128 s = (u128)a[j] - b[j] - borrow;
        r[j] = (u64)s;
        borrow = (u64)(s >> 64) & 1;
    }
    return borrow;
}

INLINE int limbs_is_zero(const u64 *a, const int n) {
    u64 acc = 0;
    for (int j = 0; j < n; j++) acc |= a[j];
    return acc == 0;
}

INLINE int limbs_eq(const u64 *a, const u64 *b, const int n) {
    u64 acc = 0;
    for (int j = 0; j < n; j++) acc |= a[j] ^ b[j];
    return acc == 0;
}

#endif
