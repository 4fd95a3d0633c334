/* The quotient's values on the coset: h = a·b - c on the odd coset w_2n·<w_n>, from the values of a, b
 * and c on <w_n>, with snarkjs' roots. Per vector, in place and without a permutation: an inverse NTT by
 * decimation in frequency (natural order in, bit-reversed out), the coset shift and 1/n as one product by a
 * table kept in that bit-reversed order, then an NTT by decimation in time (bit-reversed in, natural out).
 * Radix 2, threads per stage; a butterfly whose twiddle is 1 multiplies by nothing.
 *
 * The values stay as they came (not in Montgomery form): a Montgomery product with a constant in
 * Montgomery form is the plain product, so the transforms and the shift keep them plain. Only a is taken
 * into Montgomery form, so that the pointwise a·b (a Montgomery product) is plain too, and h is plain.
 * Values cross as 32-byte little-endian rows at any address (copied, never cast). */
#ifndef PROOFLANE_NTT_H
#define PROOFLANE_NTT_H

#include <pthread.h>
#include <stdlib.h>

#include "fr.h"
#include "threads.h"

#define NTT_MAX_LOG 30 /* domains up to 2^30 */

static inline uint32_t bit_reverse(uint32_t x, int log_n) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
    x = (x >> 16) | (x << 16);
    return log_n ? x >> (32 - log_n) : 0;
}

typedef struct {
    const field_t *f;
    size_t n, m;                  /* domain size; rows given per vector (m <= n) */
    int log_n, threads;
    const unsigned char *in[3];   /* a, b, c: m 32-byte values each */
    fr_t *out[3], *tw, *shift_at; /* tw: w^k for k < n/2; shift_at[i]: w_2n^bitrev(i) / n */
    fr_t w, inv_n, shift;         /* w_n; n^-1; w_2n (Montgomery form) */
    unsigned char *h;             /* the result, n canonical 32-byte values */
    pthread_barrier_t barrier;
    int next_thread;
    pthread_mutex_t gate; /* the started threads wait here until `threads` is known */
    pthread_cond_t opened;
    int open;
    void *lanes[3]; /* a, b, c as ifma_ntt.h's blocks of eight, where its lanes run; else NULL */
} coset_job;

/* ifma_ntt.h: thread t's whole share of the work in AVX-512 IFMA lanes, once the tables are begun; and the
 * blocks it needs, allocated where the lanes run (0, or -1 when memory ran out). */
static void coset_lanes(coset_job *job, int t, size_t lo, size_t hi);
static int coset_lanes_alloc(coset_job *job, int threads);

static void powers(fr_t *out, const fr_t *start, const fr_t *step, size_t lo, size_t hi, const field_t *f) {
    fr_t acc = *start;
    u64 e[4] = {lo, 0, 0, 0};
    f_pow(acc.v, step->v, e, f, 4);
    fr_mul(&acc, &acc, start, f);
    for (size_t k = lo; k < hi; k++) {
        out[k - lo] = acc;
        fr_mul(&acc, &acc, step, f);
    }
}

/* The inverse transform's butterfly at (x[i], x[i + half]), twiddle w^-k: (u + v, (u - v)·w^-k), with
 * w^-k = -w^(n/2 - k) for 0 < k < n/2, so (v - u)·tw[n/2 - k]. */
INLINE void dif_butterfly(fr_t *x, size_t i, size_t half, size_t k, const coset_job *job) {
    const field_t *f = job->f;
    fr_t u = x[i], v = x[i + half];
    f_add(x[i].v, u.v, v.v, f, 4);
    if (k == 0) {
        f_sub(x[i + half].v, u.v, v.v, f, 4);
    } else {
        f_sub(v.v, v.v, u.v, f, 4);
        fr_mul(&x[i + half], &v, &job->tw[job->n / 2 - k], f);
    }
}

/* The forward transform's butterfly at (x[i], x[i + half]), twiddle w^k: (u + v·w^k, u - v·w^k). */
INLINE void dit_butterfly(fr_t *x, size_t i, size_t half, size_t k, const coset_job *job) {
    const field_t *f = job->f;
    fr_t u = x[i], v = x[i + half];
    if (k) fr_mul(&v, &v, &job->tw[k], f);
    f_add(x[i].v, u.v, v.v, f, 4);
    f_sub(x[i + half].v, u.v, v.v, f, 4);
}

/* Stage len's butterflies within x[base .. base + block) (a block holds whole groups of len). */
#define BLOCK_STAGE(butterfly)                                                                                     \
    do {                                                                                                           \
        const size_t half = len / 2, step = n / len;                                                               \
        for (size_t s = base; s < base + block; s += len)                                                          \
            for (size_t j = 0; j < half; j++) butterfly(x, s + j, half, j * step, job);                            \
    } while (0)

/* Stage len's butterflies b of thread t's share (the stages wider than a thread's block). */
#define SHARED_STAGE(butterfly)                                                                                    \
    do {                                                                                                           \
        const size_t half = len / 2, step = n / len, per = n / 2 / T;                                              \
        for (size_t b = (size_t)t * per; b < (size_t)(t + 1) * per; b++)                                           \
            butterfly(x, (b / half) * len + b % half, half, (b % half) * step, job);                               \
        pthread_barrier_wait(&job->barrier);                                                                       \
    } while (0)

/* x (natural order) becomes n·(its inverse NTT) in bit-reversed order, by thread t of T: the stages wider
 * than a thread's block first, split by butterflies with a barrier after each, then those within the
 * thread's block (no barrier: the block is the thread's until the forward transform's wide stages). */
static void dif_stages(coset_job *job, fr_t *x, int t) {
    const size_t n = job->n, T = (size_t)job->threads, block = n / T, base = (size_t)t * block;
    for (size_t len = n; len > block; len >>= 1) SHARED_STAGE(dif_butterfly);
    for (size_t len = block; len >= 2; len >>= 1) BLOCK_STAGE(dif_butterfly);
}

/* x (bit-reversed order) becomes its NTT in natural order: the reverse of dif_stages' split. */
static void dit_stages(coset_job *job, fr_t *x, int t) {
    const size_t n = job->n, T = (size_t)job->threads, block = n / T, base = (size_t)t * block;
    for (size_t len = 2; len <= block; len <<= 1) BLOCK_STAGE(dit_butterfly);
    pthread_barrier_wait(&job->barrier);
    for (size_t len = 2 * block; len <= n; len <<= 1) SHARED_STAGE(dit_butterfly);
}

static void *coset_worker(void *arg) {
    coset_job *job = arg;
    const int t = __atomic_fetch_add(&job->next_thread, 1, __ATOMIC_RELAXED);
    if (t >= job->threads) return NULL; /* a thread beyond the power of two that runs */
    const field_t *f = job->f;
    const size_t n = job->n, T = (size_t)job->threads, lo = n * t / T, hi = n * (t + 1) / T;
    fr_t one;
    memcpy(one.v, f->one, 32);
    if (n > 1) powers(job->tw + (n / 2) * t / T, &one, &job->w, (n / 2) * t / T, (n / 2) * (t + 1) / T, f);
    {
        fr_t acc; /* w_2n^j / n for j in [lo, hi), each at its bit-reversed place */
        u64 e[4] = {lo, 0, 0, 0};
        f_pow(acc.v, job->shift.v, e, f, 4);
        fr_mul(&acc, &acc, &job->inv_n, f);
        for (size_t j = lo; j < hi; j++) {
            job->shift_at[bit_reverse((uint32_t)j, job->log_n)] = acc;
            fr_mul(&acc, &acc, &job->shift, f);
        }
    }
    if (job->lanes[0] != NULL) {
        coset_lanes(job, t, lo, hi);
        return NULL;
    }
    for (int v = 0; v < 3; v++) {
        fr_t *x = job->out[v];
        for (size_t i = lo; i < hi; i++) {
            fr_t y = {{0, 0, 0, 0}};
            if (i < job->m) {
                y = fr_load(job->in[v] + FR_BYTES * i);
                /* any 32 bytes: below r first (the Montgomery product takes its inputs below r) */
                while (!f_below(y.v, f, 4)) limbs_sub(y.v, y.v, f->p, 4);
                if (v == 0) f_to_mont(y.v, y.v, f, 4);
            }
            x[i] = y;
        }
        pthread_barrier_wait(&job->barrier); /* the tables and the values, all threads' */
        dif_stages(job, x, t);
        for (size_t i = lo; i < hi; i++) fr_mul(&x[i], &x[i], &job->shift_at[i], f);
        dit_stages(job, x, t); /* values on the coset, natural order */
    }
    for (size_t i = lo; i < hi; i++) {
        fr_t y;
        fr_mul(&y, &job->out[0][i], &job->out[1][i], f);
        f_sub(y.v, y.v, job->out[2][i].v, f, 4);
        fr_store(job->h + FR_BYTES * i, &y);
    }
    return NULL;
}

/* A started thread: waits at the gate until the caller has fixed the number of threads, then works. */
static void *coset_thread(void *arg) {
    coset_job *job = arg;
    pthread_mutex_lock(&job->gate);
    while (!job->open) pthread_cond_wait(&job->opened, &job->gate);
    pthread_mutex_unlock(&job->gate);
    return coset_worker(job);
}

/* h (n values) = a·b - c on the coset, from in[0..2] (a, b, c: m canonical values each, m <= n; missing
 * values are zero); roots: w_n, w_2n and n^-1 (plain, 32 bytes each). n is a power of two up to 2^30.
 * Returns 0, or -1 when memory ran out. Runs on up to `threads` threads (a power of two, clamped). */
static int ntt_coset_h(const field_t *f, const unsigned char *const in[3], size_t m, size_t n,
                       const unsigned char *roots, int threads, unsigned char *h) {
    coset_job job;
    memset(&job, 0, sizeof job);
    threads = threads_clamp(threads);
    job.f = f;
    job.n = n;
    job.m = m;
    job.log_n = __builtin_ctzll((unsigned long long)n);
    int t = 1;
    while (2 * t <= threads && (size_t)(4 * t) <= job.n)
        t *= 2; /* a power of two, each block >= 2: the threads wanted (job.threads: those that run) */
    for (int v = 0; v < 3; v++) job.in[v] = in[v];
    job.w = fr_load(roots);
    job.shift = fr_load(roots + FR_BYTES);
    job.inv_n = fr_load(roots + 2 * FR_BYTES);
    f_to_mont(job.w.v, job.w.v, f, 4);
    f_to_mont(job.shift.v, job.shift.v, f, 4);
    f_to_mont(job.inv_n.v, job.inv_n.v, f, 4);
    job.h = h;
    job.shift_at = malloc(n * sizeof(fr_t));
    job.tw = malloc((n / 2 + 1) * sizeof(fr_t)); /* tw[n/2] = w^(n/2) = -1 */
    int lanes = job.tw != NULL ? coset_lanes_alloc(&job, t) : 0;
    for (int v = 0; v < 3; v++) job.out[v] = job.lanes[0] != NULL ? NULL : malloc(n * sizeof(fr_t));
    int status = -1;
    const int vectors = job.lanes[0] != NULL || (job.out[0] && job.out[1] && job.out[2]);
    if (job.shift_at && job.tw && lanes == 0 && vectors) {
        const fr_t zero = {{0, 0, 0, 0}};
        fr_t one;
        memcpy(one.v, f->one, 32);
        f_sub(job.tw[n / 2].v, zero.v, one.v, f, 4);
        /* Threads first, held at the gate: the barrier's count is the largest power of two of those that
         * started (this one included), so a thread the system refuses leaves none waiting for it. */
        pthread_t ids[MAX_THREADS];
        pthread_mutex_init(&job.gate, NULL);
        pthread_cond_init(&job.opened, NULL);
        int started = 0;
        for (; started < t - 1; started++)
            if (pthread_create(&ids[started], NULL, coset_thread, &job) != 0) break;
        int run = 1;
        while (2 * run <= started + 1) run *= 2;
        job.threads = run;
        pthread_barrier_init(&job.barrier, NULL, (unsigned)run);
        pthread_mutex_lock(&job.gate);
        job.open = 1;
        pthread_cond_broadcast(&job.opened);
        pthread_mutex_unlock(&job.gate);
        coset_worker(&job);
        for (int i = 0; i < started; i++) pthread_join(ids[i], NULL);
        pthread_barrier_destroy(&job.barrier);
        pthread_cond_destroy(&job.opened);
        pthread_mutex_destroy(&job.gate);
        status = 0;
    }
    free(job.shift_at);
    free(job.tw);
    for (int v = 0; v < 3; v++) {
        free(job.out[v]);
        free(job.lanes[v]);
    }
    return status;
}

#endif
