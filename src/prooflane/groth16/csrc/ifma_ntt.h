/* ntt.h's coset transforms in AVX-512 IFMA lanes, where cpu.h's kernel "ifma-ntt" runs, on both curves, in
 * ifma.h's v260 arithmetic (five 52-bit limbs, R = 2^256, the 4-limb form's own). The bound it relies on:
 * every operand of a product here is below r (values are reduced as they are read, and sums and
 * differences reduce; no unreduced v260_sum feeds a product), so a product before its last subtraction is
 * below (r² + R·r) / R < 2r, which one subtraction reduces, wherever r < R = 2^256. BN254's r has 254 bits,
 * BLS12-381's 255 (the 4r < R that v260_sum's operands need would not hold for it).
 * tests/c/test_core.c checks the bound against each r. The same butterflies, stages, threads and barriers
 * as ntt.h; only the arithmetic runs eight values at a time.
 *
 * A vector's n values live as n / 8 blocks of eight (value i in block i / 8, lane i mod 8), cut into limbs
 * once as they are read and joined once as h is written. A stage whose butterflies span 16 values or
 * more pairs whole blocks, its twiddles gathered from ntt.h's table (w^k at k = j·n/len for the eight j of
 * a block). The last three stages of the inverse transform, the coset shift and the first three of the
 * forward one (butterflies within a block) run on chunks of 64 values turned by an 8x8 transpose, so that
 * each of those butterflies pairs whole vectors again, with one twiddle a vector. */
#ifndef PROOFLANE_IFMA_NTT_H
#define PROOFLANE_IFMA_NTT_H

#include "groups.h" /* ifma.h's lanes */
#include "ntt.h"

#if HAVE_IFMA

typedef struct {
    v260 q;       /* r */
    __m512i qinv; /* -r^-1 mod 2^52 */
    v260 r2;      /* 2^512 mod r: into Montgomery form by one product */
    v260 tw8[4];  /* tw[j·n/8] for j < 4 (the 8-value stage's twiddles); tw8[2] = tw[n/4], the 4-value one's */
    v260 itw8[4]; /* tw[n/2 - j·n/8]: the inverse transform's, as dif_butterfly uses them */
} lanes_consts;

static IFMA_TARGET IFMA_AI v260 lanes_const(const u64 *value) {
    v260_limbs l;
    to52(l.l, value, 4);
    return v260_set1(&l);
}

static IFMA_TARGET void lanes_consts_init(lanes_consts *k, const coset_job *job) {
    const field_t *f = job->f;
    const size_t n = job->n;
    k->q = lanes_const(f->p);
    k->qinv = _mm512_set1_epi64((long long)ifma_qinv(f->p[0]));
    k->r2 = lanes_const(f->r2);
    for (size_t j = 0; j < 4; j++) {
        k->tw8[j] = lanes_const(job->tw[j * n / 8].v);
        k->itw8[j] = lanes_const(job->tw[n / 2 - j * n / 8].v);
    }
}

/* Twiddles tw[k] for the eight k = (j0 + lane)·2^log_step (or n/2 minus those: `inverse`). */
static IFMA_TARGET IFMA_AI v260 lanes_twiddles(const coset_job *job, size_t j0, int log_step, int inverse) {
    const __m512i lane = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    __m512i k =
        _mm512_sllv_epi64(_mm512_add_epi64(_mm512_set1_epi64((long long)j0), lane), _mm512_set1_epi64(log_step));
    if (inverse) k = _mm512_sub_epi64(_mm512_set1_epi64((long long)(job->n / 2)), k);
    return v260_gather((const u64 *)job->tw, _mm512_slli_epi64(k, 2), 0xff, 0);
}

/* dif_butterfly and dit_butterfly on whole vectors (twiddle w^-k as tw[n/2 - k], and w^k). */
static IFMA_TARGET IFMA_AI void lanes_dif(v260 *u, v260 *v, const v260 *tw, const lanes_consts *k) {
    const v260 a = *u, b = *v;
    *u = v260_add(a, b, &k->q);
    *v = v260_mul(v260_sub(b, a, &k->q), *tw, &k->q, k->qinv);
}

static IFMA_TARGET IFMA_AI void lanes_dit(v260 *u, v260 *v, const v260 *tw, const lanes_consts *k) {
    const v260 a = *u, b = v260_mul(*v, *tw, &k->q, k->qinv);
    *u = v260_add(a, b, &k->q);
    *v = v260_sub(a, b, &k->q);
}

/* A butterfly whose twiddle is 1, in either transform: (u + v, u - v). */
static IFMA_TARGET IFMA_AI void lanes_plain(v260 *u, v260 *v, const lanes_consts *k) {
    const v260 a = *u, b = *v;
    *u = v260_add(a, b, &k->q);
    *v = v260_sub(a, b, &k->q);
}

/* r[j] lane i becomes r[i] lane j. */
static IFMA_TARGET IFMA_AI void lanes_transpose8(__m512i *r) {
    const __m512i pairs_lo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
    const __m512i pairs_hi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    const __m512i quads_lo = _mm512_set_epi64(11, 10, 9, 8, 3, 2, 1, 0);
    const __m512i quads_hi = _mm512_set_epi64(15, 14, 13, 12, 7, 6, 5, 4);
    __m512i a[8], b[8];
    for (int i = 0; i < 8; i += 2) {
        a[i] = _mm512_unpacklo_epi64(r[i], r[i + 1]);
        a[i + 1] = _mm512_unpackhi_epi64(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4)
        for (int j = 0; j < 2; j++) {
            b[i + j] = _mm512_permutex2var_epi64(a[i + j], pairs_lo, a[i + j + 2]);
            b[i + j + 2] = _mm512_permutex2var_epi64(a[i + j], pairs_hi, a[i + j + 2]);
        }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm512_permutex2var_epi64(b[j], quads_lo, b[j + 4]);
        r[j + 4] = _mm512_permutex2var_epi64(b[j], quads_hi, b[j + 4]);
    }
}

/* Eight blocks of eight values as eight vectors of one position each: y[p] lane b holds what was block b's
 * value p (and back: the transpose is its own inverse), limb by limb. */
static IFMA_TARGET IFMA_AI void lanes_turn(v260 *y) {
    for (int l = 0; l < 5; l++) {
        __m512i r[8];
        for (int p = 0; p < 8; p++) r[p] = y[p].l[l];
        lanes_transpose8(r);
        for (int p = 0; p < 8; p++) y[p].l[l] = r[p];
    }
}

/* Values 64·c .. 64·c + 63 of x (bit-reversed order after the wide stages of the inverse transform): its
 * stages of 8, 4 and 2 values, the coset shift (shift_at), then the forward transform's stages of 2, 4
 * and 8 values. */
static IFMA_TARGET void lanes_chunk(const coset_job *job, v260 *x, size_t c, const lanes_consts *k) {
    v260 *y = x + 8 * c;
    lanes_turn(y); /* y[p] lane b: value 64c + 8b + p */
    lanes_plain(&y[0], &y[4], k);
    for (int p = 1; p < 4; p++) lanes_dif(&y[p], &y[p + 4], &k->itw8[p], k);
    for (int g = 0; g < 8; g += 4) {
        lanes_plain(&y[g], &y[g + 2], k);
        lanes_dif(&y[g + 1], &y[g + 3], &k->tw8[2], k); /* tw[n/4] */
    }
    for (int p = 0; p < 8; p += 2) lanes_plain(&y[p], &y[p + 1], k);
    const __m512i block = _mm512_slli_epi64(_mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0), 5); /* 8 values, 32 u64 */
    for (int p = 0; p < 8; p++) {
        const __m512i at = _mm512_add_epi64(block, _mm512_set1_epi64((long long)(4 * (64 * c + (size_t)p))));
        y[p] = v260_mul(y[p], v260_gather((const u64 *)job->shift_at, at, 0xff, 0), &k->q, k->qinv);
    }
    for (int p = 0; p < 8; p += 2) lanes_plain(&y[p], &y[p + 1], k);
    for (int g = 0; g < 8; g += 4) {
        lanes_plain(&y[g], &y[g + 2], k);
        lanes_dit(&y[g + 1], &y[g + 3], &k->tw8[2], k);
    }
    lanes_plain(&y[0], &y[4], k);
    for (int p = 1; p < 4; p++) lanes_dit(&y[p], &y[p + 4], &k->tw8[p], k);
    lanes_turn(y);
}

/* The stage of len values (len >= 16) on the groups within values [base, base + block) of x. */
static IFMA_TARGET void lanes_block_stage(const coset_job *job, v260 *x, size_t len, size_t base, size_t block,
                                          int inverse, const lanes_consts *k) {
    const size_t half = len / 8 / 2; /* blocks */
    const int log_step = job->log_n - __builtin_ctzll((unsigned long long)len);
    for (size_t j = 0; j < half; j++) {
        const v260 tw = lanes_twiddles(job, 8 * j, log_step, inverse);
        for (size_t s = base / 8; s < (base + block) / 8; s += len / 8) {
            if (inverse)
                lanes_dif(&x[s + j], &x[s + j + half], &tw, k);
            else
                lanes_dit(&x[s + j], &x[s + j + half], &tw, k);
        }
    }
}

/* The stage of len values wider than a thread's block: thread t's share of its pairs of blocks, then the
 * barrier. */
static IFMA_TARGET void lanes_shared_stage(coset_job *job, v260 *x, size_t len, int t, int inverse,
                                           const lanes_consts *k) {
    const size_t half = len / 8 / 2, per = job->n / 16 / (size_t)job->threads;
    const int log_step = job->log_n - __builtin_ctzll((unsigned long long)len);
    for (size_t u = (size_t)t * per; u < (size_t)(t + 1) * per; u++) {
        const size_t group = u / half, j = u % half, s = group * (len / 8);
        const v260 tw = lanes_twiddles(job, 8 * j, log_step, inverse);
        if (inverse)
            lanes_dif(&x[s + j], &x[s + j + half], &tw, k);
        else
            lanes_dit(&x[s + j], &x[s + j + half], &tw, k);
    }
    pthread_barrier_wait(&job->barrier);
}

/* Values [lo, hi) of input v as blocks (any 32 bytes, taken below r; a into Montgomery form), and of the
 * result out of them. lo and hi are multiples of 8. */
static IFMA_TARGET void lanes_read(const coset_job *job, v260 *x, int v, size_t lo, size_t hi,
                                   const lanes_consts *k) {
    const field_t *f = job->f;
    u64 *raw = (u64 *)x; /* value i, limb l at raw[40·(i / 8) + 8·l + i mod 8] */
    for (size_t i = lo; i < hi; i++) {
        fr_t y = {{0, 0, 0, 0}};
        if (i < job->m) {
            y = fr_load(job->in[v] + FR_BYTES * i);
            while (!f_below(y.v, f, 4)) limbs_sub(y.v, y.v, f->p, 4);
        }
        u64 l[5];
        to52(l, y.v, 4);
        for (int j = 0; j < 5; j++) raw[40 * (i / 8) + 8 * (size_t)j + i % 8] = l[j];
    }
    if (v == 0)
        for (size_t b = lo / 8; b < hi / 8; b++) x[b] = v260_mul(x[b], k->r2, &k->q, k->qinv);
}

static IFMA_TARGET void lanes_write_h(const coset_job *job, v260 *const *x, size_t lo, size_t hi,
                                      const lanes_consts *k) {
    for (size_t b = lo / 8; b < hi / 8; b++) {
        const v260 h = v260_sub(v260_mul(x[0][b], x[1][b], &k->q, k->qinv), x[2][b], &k->q);
        u64 l[5][8];
        for (int j = 0; j < 5; j++) _mm512_storeu_si512((void *)l[j], h.l[j]);
        for (int lane = 0; lane < 8; lane++) {
            const fr_t y = {{l[0][lane] | l[1][lane] << 52, l[1][lane] >> 12 | l[2][lane] << 40,
                             l[2][lane] >> 24 | l[3][lane] << 28, l[3][lane] >> 36 | l[4][lane] << 16}};
            fr_store(job->h + FR_BYTES * (8 * b + (size_t)lane), &y);
        }
    }
}

static IFMA_TARGET void coset_lanes(coset_job *job, int t, size_t lo, size_t hi) {
    const size_t n = job->n, T = (size_t)job->threads, block = n / T, base = (size_t)t * block;
    lanes_consts k;
    pthread_barrier_wait(&job->barrier); /* the twiddles and shifts, all threads' */
    lanes_consts_init(&k, job);
    v260 *x[3];
    for (int v = 0; v < 3; v++) x[v] = job->lanes[v];
    for (int v = 0; v < 3; v++) {
        lanes_read(job, x[v], v, lo, hi, &k);
        pthread_barrier_wait(&job->barrier);
        for (size_t len = n; len > block; len >>= 1) lanes_shared_stage(job, x[v], len, t, 1, &k);
        for (size_t len = block; len >= 16; len >>= 1) lanes_block_stage(job, x[v], len, base, block, 1, &k);
        for (size_t c = base / 64; c < (base + block) / 64; c++) lanes_chunk(job, x[v], c, &k);
        for (size_t len = 16; len <= block; len <<= 1) lanes_block_stage(job, x[v], len, base, block, 0, &k);
        pthread_barrier_wait(&job->barrier);
        for (size_t len = 2 * block; len <= n; len <<= 1) lanes_shared_stage(job, x[v], len, t, 0, &k);
    }
    lanes_write_h(job, x, lo, hi, &k);
}

/* Blocks for the three vectors where the lanes run: IFMA active, and every thread's block at least one
 * chunk of 64 values. 0, or -1 when memory ran out. */
static int coset_lanes_alloc(coset_job *job, int threads) {
    if (!kernel_runs(KERNEL_IFMA_NTT) || job->n < 64 * (size_t)threads) return 0;
    for (int v = 0; v < 3; v++) {
        job->lanes[v] = aligned_alloc(64, job->n / 8 * sizeof(v260));
        if (job->lanes[v] == NULL) return -1;
    }
    return 0;
}

#else

static void coset_lanes(coset_job *job, int t, size_t lo, size_t hi) { (void)job, (void)t, (void)lo, (void)hi; }

static int coset_lanes_alloc(coset_job *job, int threads) {
    (void)job, (void)threads;
    return 0;
}

#endif /* HAVE_IFMA */
#endif /* PROOFLANE_IFMA_NTT_H */
