/* The quotient's values on the coset: h = a·b - c on the odd coset w_2n·<w_n>, from the values of a, b
 * and c on <w_n> (an inverse NTT, the coset shift and an NTT per vector, radix 2, threads per stage), with
 * snarkjs' roots. Values cross as 32-byte little-endian rows at any address (copied, never cast). */
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
    const unsigned char *in[3];   /* a, b, c: m canonical 32-byte values each */
    fr_t *scratch, *out[3], *tw;  /* tw: w^k for k < n/2 */
    fr_t w, shift_scaled, shift;  /* w_n; n^-1 (the inverse transform's factor); w_2n */
    unsigned char *h;             /* the result, n canonical 32-byte values */
    pthread_barrier_t barrier;
    int next_thread;
    pthread_mutex_t gate; /* the started threads wait here until `threads` is known */
    pthread_cond_t opened;
    int open;
} coset_job;

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

/* A forward NTT of x (bit-reversed order in, natural order out) by thread t of T: the stages within a
 * thread's block alone, then the wider stages split by butterflies with a barrier after each. */
static void ntt_stages(coset_job *job, fr_t *x, int t) {
    const field_t *f = job->f;
    const size_t n = job->n, T = (size_t)job->threads, block = n / T, base = (size_t)t * block;
    for (size_t len = 2; len <= block; len <<= 1) {
        const size_t half = len / 2, step = n / len;
        for (size_t s = base; s < base + block; s += len)
            for (size_t j = 0; j < half; j++) {
                fr_t u = x[s + j], v;
                fr_mul(&v, &x[s + j + half], &job->tw[j * step], f);
                f_add(x[s + j].v, u.v, v.v, f, 4);
                f_sub(x[s + j + half].v, u.v, v.v, f, 4);
            }
    }
    pthread_barrier_wait(&job->barrier);
    for (size_t len = 2 * block; len <= n; len <<= 1) {
        const size_t half = len / 2, step = n / len, per = n / 2 / T;
        for (size_t b = (size_t)t * per; b < (size_t)(t + 1) * per; b++) {
            const size_t s = (b / half) * len, j = b % half;
            fr_t u = x[s + j], v;
            fr_mul(&v, &x[s + j + half], &job->tw[j * step], f);
            f_add(x[s + j].v, u.v, v.v, f, 4);
            f_sub(x[s + j + half].v, u.v, v.v, f, 4);
        }
        pthread_barrier_wait(&job->barrier);
    }
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
    for (int v = 0; v < 3; v++) {
        /* values on <w_n>, bit-reversed, in Montgomery form */
        for (size_t i = lo; i < hi; i++) {
            fr_t x = {{0, 0, 0, 0}};
            if (i < job->m) {
                x = fr_load(job->in[v] + FR_BYTES * i);
                f_to_mont(x.v, x.v, f, 4);
            }
            job->scratch[bit_reverse((uint32_t)i, job->log_n)] = x;
        }
        pthread_barrier_wait(&job->barrier);
        ntt_stages(job, job->scratch, t); /* NTT(values): n·coefficient[-k mod n] at k */
        /* coefficient j times n^-1·w_2n^j, bit-reversed for the next NTT */
        fr_t scale;
        u64 e[4] = {lo, 0, 0, 0};
        f_pow(scale.v, job->shift.v, e, f, 4);
        fr_mul(&scale, &scale, &job->shift_scaled, f);
        for (size_t j = lo; j < hi; j++) {
            fr_t x;
            fr_mul(&x, &job->scratch[(n - j) % n], &scale, f);
            job->out[v][bit_reverse((uint32_t)j, job->log_n)] = x;
            fr_mul(&scale, &scale, &job->shift, f);
        }
        pthread_barrier_wait(&job->barrier);
        ntt_stages(job, job->out[v], t); /* values on the coset */
    }
    for (size_t i = lo; i < hi; i++) {
        fr_t x;
        fr_mul(&x, &job->out[0][i], &job->out[1][i], f);
        f_sub(x.v, x.v, job->out[2][i].v, f, 4);
        f_from_mont(x.v, x.v, f, 4);
        fr_store(job->h + FR_BYTES * i, &x);
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
    job.shift_scaled = fr_load(roots + 2 * FR_BYTES);
    f_to_mont(job.w.v, job.w.v, f, 4);
    f_to_mont(job.shift.v, job.shift.v, f, 4);
    f_to_mont(job.shift_scaled.v, job.shift_scaled.v, f, 4);
    job.h = h;
    job.scratch = malloc(n * sizeof(fr_t));
    job.tw = malloc((n / 2 + 1) * sizeof(fr_t));
    for (int v = 0; v < 3; v++) job.out[v] = malloc(n * sizeof(fr_t));
    int status = -1;
    if (job.scratch && job.tw && job.out[0] && job.out[1] && job.out[2]) {
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
    free(job.scratch);
    free(job.tw);
    for (int v = 0; v < 3; v++) free(job.out[v]);
    return status;
}

#endif
