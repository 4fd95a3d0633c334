/* The scalar fields r of both curves (4 limbs each): the element type the NTT and synthesis share, and
 * values out of Montgomery form. Values cross this header as 32-byte little-endian rows that may lie at
 * any address: they are copied in and out (memcpy), never cast. */
#ifndef PROOFLANE_FR_H
#define PROOFLANE_FR_H

#include "towers.h"

typedef struct {
    u64 v[4];
} fr_t;

_Static_assert(sizeof(fr_t) == FR_BYTES, "a scalar is 32 bytes, as the binding's buffers hold it");

/* curve 0: BN254's r, 1: BLS12-381's. */
static inline const field_t *scalar_field(int curve) { return curve == 0 ? &BN_R : &BLS_R; }

INLINE void fr_mul(fr_t *r, const fr_t *a, const fr_t *b, const field_t *f) { f_mul(r->v, a->v, b->v, f, 4); }

INLINE fr_t fr_load(const unsigned char *bytes) {
    fr_t x;
    memcpy(x.v, bytes, FR_BYTES);
    return x;
}

INLINE void fr_store(unsigned char *bytes, const fr_t *x) { memcpy(bytes, x->v, FR_BYTES); }

/* out[k] = in[k]·R^-times mod r for count 32-byte values (any below 2^256); out may alias in. */
static void fr_from_montgomery(const field_t *f, const unsigned char *in, unsigned char *out, size_t count,
                               int times) {
    for (size_t k = 0; k < count; k++) {
        fr_t x = fr_load(in + FR_BYTES * k);
        for (int i = 0; i < times; i++) f_from_mont(x.v, x.v, f, 4);
        fr_store(out + FR_BYTES * k, &x);
    }
}

#endif
