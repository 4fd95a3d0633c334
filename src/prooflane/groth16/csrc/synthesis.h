/* Synthesis over a key's terms: a = A·w, b = B·w and c = a∘b, from (matrix, row, wire, value) terms (matrix
 * 0 for A, 1 for B; values plain) and the witness w. Every buffer may lie at any address: the terms are
 * read by memcpy, never through typed pointers. */
#ifndef PROOFLANE_SYNTHESIS_H
#define PROOFLANE_SYNTHESIS_H

#include <stdlib.h>

#include "fr.h"

#define SYNTH_MAX_ROWS ((int64_t)1 << 30) /* rows of one synthesis: at most the NTT's largest domain */

typedef struct {
    const unsigned char *matrix; /* terms x u32 */
    const unsigned char *rows;   /* terms x i64 */
    const unsigned char *wires;  /* terms x i64 */
    const unsigned char *values; /* terms x 32 bytes, plain */
    size_t terms;
} synth_terms;

static inline uint32_t synth_matrix(const synth_terms *t, size_t k) {
    uint32_t x;
    memcpy(&x, t->matrix + 4 * k, 4);
    return x;
}

static inline int64_t synth_row(const synth_terms *t, size_t k) {
    int64_t x;
    memcpy(&x, t->rows + 8 * k, 8);
    return x;
}

static inline int64_t synth_wire(const synth_terms *t, size_t k) {
    int64_t x;
    memcpy(&x, t->wires + 8 * k, 8);
    return x;
}

/* The index of the first of n_wires witness values not below r, or -1. */
static int64_t synth_first_bad_witness(const field_t *f, const unsigned char *witness, size_t n_wires) {
    for (size_t i = 0; i < n_wires; i++) {
        fr_t w = fr_load(witness + FR_BYTES * i);
        if (!f_below(w.v, f, 4)) return (int64_t)i;
    }
    return -1;
}

/* The index of the first term whose matrix is not 0 or 1, or whose row or wire is out of range, or -1. */
static int64_t synth_first_bad_term(const synth_terms *t, int64_t n_rows, int64_t n_wires) {
    for (size_t k = 0; k < t->terms; k++) {
        const int64_t row = synth_row(t, k), wire = synth_wire(t, k);
        if (synth_matrix(t, k) > 1 || row < 0 || row >= n_rows || wire < 0 || wire >= n_wires) return (int64_t)k;
    }
    return -1;
}

/* out (3 x n_rows 32-byte values: a, b, c) from terms checked by synth_first_bad_term and a witness checked
 * by synth_first_bad_witness. Returns 0, or -1 when memory ran out. */
static int synth_rows(const field_t *f, const synth_terms *t, const unsigned char *witness, size_t n_rows,
                      unsigned char *out) {
    fr_t *acc = calloc(2 * n_rows + 1, sizeof(fr_t));
    if (acc == NULL) return -1;
    for (size_t k = 0; k < t->terms; k++) {
        /* to Montgomery form, then one Montgomery product with w: the plain product */
        fr_t v = fr_load(t->values + FR_BYTES * k), w = fr_load(witness + FR_BYTES * (size_t)synth_wire(t, k));
        /* a value may be any 32 bytes: below r first (the Montgomery product takes its inputs below r; at
         * most five subtractions, 2^256 / r) */
        while (!f_below(v.v, f, 4)) limbs_sub(v.v, v.v, f->p, 4);
        f_to_mont(v.v, v.v, f, 4);
        fr_mul(&v, &v, &w, f);
        fr_t *slot = &acc[synth_matrix(t, k) * n_rows + (size_t)synth_row(t, k)];
        f_add(slot->v, slot->v, v.v, f, 4);
    }
    for (size_t i = 0; i < n_rows; i++) {
        fr_t am, c;
        f_to_mont(am.v, acc[i].v, f, 4);
        fr_mul(&c, &am, &acc[n_rows + i], f);
        fr_store(out + FR_BYTES * i, &acc[i]);
        fr_store(out + FR_BYTES * (n_rows + i), &acc[n_rows + i]);
        fr_store(out + FR_BYTES * (2 * n_rows + i), &c);
    }
    free(acc);
    return 0;
}

#endif
