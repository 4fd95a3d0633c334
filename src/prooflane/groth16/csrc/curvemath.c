/* prooflane.groth16._curvemath: the prover's arithmetic over a key's own bytes, on every core.
 *
 * - msm(curve, group, rows, scalars, threads): a multi-scalar multiplication over rows of affine points in
 *   Montgomery form, exactly as a .zkey section stores them (no conversion, no copy: the rows may be a
 *   memory-mapped file), with 32-byte little-endian scalars; Pippenger's buckets with signed digits, the
 *   windows (and, for few windows, chunks of the terms) shared among threads.
 * - first_off_curve(curve, group, rows): the first row not on the curve, or -1.
 * - coset_h(curve, a, b, c, n, roots, threads): a·b - c on the odd coset w_2n·<w_n>, from the values of
 *   a, b, c on <w_n> (an inverse NTT, the coset shift and an NTT per vector, radix 2, threads per stage).
 *
 * Curves: 0 = BN254 (alt_bn128), 1 = BLS12-381; groups 1 (over Fq) and 2 (over Fq2 = Fq[u]/(u^2 + 1)).
 * Every function releases the GIL while it computes. Results: plain (not Montgomery) little-endian bytes. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdlib.h>

#include "field.h"
#include "inverse.h"

/* -- the fields ---------------------------------------------------------------------------------------- */

static const field_t BN_Q = {4,
                             {0x3c208c16d87cfd47ULL, 0x97816a916871ca8dULL, 0xb85045b68181585dULL,
                              0x30644e72e131a029ULL},
                             {0xf32cfc5b538afa89ULL, 0xb5e71911d44501fbULL, 0x47ab1eff0a417ff6ULL,
                              0x06d89f71cab8351fULL},
                             {0xd35d438dc58f0d9dULL, 0x0a78eb28f5c70b3dULL, 0x666ea36f7879462cULL,
                              0x0e0a77c19a07df2fULL},
                             0x87d20782e4866389ULL};
static const field_t BN_R = {4,
                             {0x43e1f593f0000001ULL, 0x2833e84879b97091ULL, 0xb85045b68181585dULL,
                              0x30644e72e131a029ULL},
                             {0x1bb8e645ae216da7ULL, 0x53fe3ab1e35c59e3ULL, 0x8c49833d53bb8085ULL,
                              0x0216d0b17f4e44a5ULL},
                             {0xac96341c4ffffffbULL, 0x36fc76959f60cd29ULL, 0x666ea36f7879462eULL,
                              0x0e0a77c19a07df2fULL},
                             0xc2e1f593efffffffULL};
static const field_t BLS_Q = {6,
                              {0xb9feffffffffaaabULL, 0x1eabfffeb153ffffULL, 0x6730d2a0f6b0f624ULL,
                               0x64774b84f38512bfULL, 0x4b1ba7b6434bacd7ULL, 0x1a0111ea397fe69aULL},
                              {0xf4df1f341c341746ULL, 0x0a76e6a609d104f1ULL, 0x8de5476c4c95b6d5ULL,
                               0x67eb88a9939d83c0ULL, 0x9a793e85b519952dULL, 0x11988fe592cae3aaULL},
                              {0x760900000002fffdULL, 0xebf4000bc40c0002ULL, 0x5f48985753c758baULL,
                               0x77ce585370525745ULL, 0x5c071a97a256ec6dULL, 0x15f65ec3fa80e493ULL},
                              0x89f3fffcfffcfffdULL};
static const field_t BLS_R = {4,
                              {0xffffffff00000001ULL, 0x53bda402fffe5bfeULL, 0x3339d80809a1d805ULL,
                               0x73eda753299d7d48ULL},
                              {0xc999e990f3f29c6dULL, 0x2b6cedcb87925c23ULL, 0x05d314967254398fULL,
                               0x0748d9d99f59ff11ULL},
                              {0x00000001fffffffeULL, 0x5884b7fa00034802ULL, 0x998c4fefecbc4ff5ULL,
                               0x1824b159acc5056fULL},
                              0xfffffffeffffffffULL};

/* A base field's element type and the operations curve.h uses. */
#define DEFINE_FP(P, F, N)                                                                             \
    typedef struct {                                                                                   \
        u64 v[N];                                                                                      \
    } P##_t;                                                                                           \
    static inline void P##_add(P##_t *r, const P##_t *a, const P##_t *b) { f_add(r->v, a->v, b->v, &F, N); } \
    static inline void P##_sub(P##_t *r, const P##_t *a, const P##_t *b) { f_sub(r->v, a->v, b->v, &F, N); } \
    static inline void P##_mul(P##_t *r, const P##_t *a, const P##_t *b) { f_mul(r->v, a->v, b->v, &F, N); } \
    static inline void P##_sqr(P##_t *r, const P##_t *a) { f_mul(r->v, a->v, a->v, &F, N); }          \
    static inline void P##_neg(P##_t *r, const P##_t *a) { f_neg(r->v, a->v, &F, N); }                \
    static inline int P##_is_zero(const P##_t *a) { return limbs_is_zero(a->v, N); }                  \
    static inline int P##_eq(const P##_t *a, const P##_t *b) { return limbs_eq(a->v, b->v, N); }        \
    static inline int P##_below(const P##_t *a) { return f_below(a->v, &F, N); }                       \
    static inline const P##_t *P##_one(void) { return (const P##_t *)F.one; }                        \
    static void P##_inv(P##_t *r, const P##_t *a) { f_inv(r->v, a->v, &F, N); }                        \
    static inline void P##_from_mont(P##_t *r, const P##_t *a) { f_from_mont(r->v, a->v, &F, N); }    \
    static inline void P##_to_mont(P##_t *r, const P##_t *a) { f_to_mont(r->v, a->v, &F, N); }

/* Fq2 = Fq[u] / (u^2 + 1) over a base field P (both curves' twists use it). */
#define DEFINE_FP2(P2, P)                                                                              \
    typedef struct {                                                                                   \
        P##_t c0, c1;                                                                                  \
    } P2##_t;                                                                                          \
    static P2##_t P2##_ONE;                                                                            \
    static inline void P2##_add(P2##_t *r, const P2##_t *a, const P2##_t *b) {                         \
        P##_add(&r->c0, &a->c0, &b->c0);                                                               \
        P##_add(&r->c1, &a->c1, &b->c1);                                                               \
    }                                                                                                  \
    static inline void P2##_sub(P2##_t *r, const P2##_t *a, const P2##_t *b) {                         \
        P##_sub(&r->c0, &a->c0, &b->c0);                                                               \
        P##_sub(&r->c1, &a->c1, &b->c1);                                                               \
    }                                                                                                  \
    static inline void P2##_mul(P2##_t *r, const P2##_t *a, const P2##_t *b) {                         \
        P##_t t0, t1, sa, sb;                                                                          \
        P##_mul(&t0, &a->c0, &b->c0);                                                                  \
        P##_mul(&t1, &a->c1, &b->c1);                                                                  \
        P##_add(&sa, &a->c0, &a->c1);                                                                  \
        P##_add(&sb, &b->c0, &b->c1);                                                                  \
        P##_mul(&sa, &sa, &sb);                                                                        \
        P##_sub(&r->c0, &t0, &t1);                                                                     \
        P##_sub(&sa, &sa, &t0);                                                                        \
        P##_sub(&r->c1, &sa, &t1);                                                                     \
    }                                                                                                  \
    static inline void P2##_sqr(P2##_t *r, const P2##_t *a) {                                          \
        P##_t s, d, m;                                                                                 \
        P##_add(&s, &a->c0, &a->c1);                                                                   \
        P##_sub(&d, &a->c0, &a->c1);                                                                   \
        P##_mul(&m, &a->c0, &a->c1);                                                                   \
        P##_mul(&r->c0, &s, &d);                                                                       \
        P##_add(&r->c1, &m, &m);                                                                       \
    }                                                                                                  \
    static inline void P2##_neg(P2##_t *r, const P2##_t *a) {                                          \
        P##_neg(&r->c0, &a->c0);                                                                       \
        P##_neg(&r->c1, &a->c1);                                                                       \
    }                                                                                                  \
    static inline int P2##_is_zero(const P2##_t *a) { return P##_is_zero(&a->c0) && P##_is_zero(&a->c1); } \
    static inline int P2##_eq(const P2##_t *a, const P2##_t *b) {                                       \
        return P##_eq(&a->c0, &b->c0) && P##_eq(&a->c1, &b->c1);                                       \
    }                                                                                                  \
    static inline int P2##_below(const P2##_t *a) { return P##_below(&a->c0) && P##_below(&a->c1); }    \
    static inline const P2##_t *P2##_one(void) { return &P2##_ONE; }                                   \
    static void P2##_inv(P2##_t *r, const P2##_t *a) {                                                  \
        P##_t n0, n1;                                                                                  \
        P##_mul(&n0, &a->c0, &a->c0);                                                                  \
        P##_mul(&n1, &a->c1, &a->c1);                                                                  \
        P##_add(&n0, &n0, &n1);                                                                        \
        P##_inv(&n0, &n0);                                                                             \
        P##_mul(&r->c0, &a->c0, &n0);                                                                  \
        P##_mul(&n1, &a->c1, &n0);                                                                     \
        P##_neg(&r->c1, &n1);                                                                          \
    }                                                                                                  \
    static inline void P2##_from_mont(P2##_t *r, const P2##_t *a) {                                     \
        P##_from_mont(&r->c0, &a->c0);                                                                 \
        P##_from_mont(&r->c1, &a->c1);                                                                 \
    }

DEFINE_FP(fqbn, BN_Q, 4)
DEFINE_FP2(fq2bn, fqbn)
DEFINE_FP(fqbls, BLS_Q, 6)
DEFINE_FP2(fq2bls, fqbls)

/* b of each curve and twist, in Montgomery form (set at import from the plain values). */
static fqbn_t g1bn_b;
static fq2bn_t g2bn_b;
static fqbls_t g1bls_b;
static fq2bls_t g2bls_b;

/* -- what every MSM shares: signed digits, the window, threads ----------------------------------------- */

#define MAX_THREADS 64 /* threads of one call, the caller's included: more are asked for, these run */
#define DIGIT_LIMBS 5 /* a scalar below 2^256 plus the signed-digit offset fits 5 limbs */

/* The offset sum over windows i of 2^(c-1)·2^(c·i): with it added, window i's c bits minus 2^(c-1) are the
 * signed digits d_i in [-2^(c-1), 2^(c-1)) of the scalar, sum d_i·2^(c·i). */
static void digit_offset(u64 *offset, int c, int windows) {
    memset(offset, 0, DIGIT_LIMBS * sizeof(u64));
    for (int i = 0; i < windows; i++) {
        int bit = c * i + c - 1;
        offset[bit / 64] |= (u64)1 << (bit % 64);
    }
}

static void add_offset(u64 *d, const u64 *offset) {
    u64 carry = 0;
    for (int j = 0; j < DIGIT_LIMBS; j++) {
        u128 s = (u128)d[j] + offset[j] + carry;
        d[j] = (u64)s;
        carry = (u64)(s >> 64);
    }
}

static inline int64_t window_digit(const u64 *d, int w, int c) {
    const int bit = w * c, limb = bit / 64, shift = bit % 64;
    u64 v = d[limb] >> shift;
    if (shift + c > 64 && limb + 1 < DIGIT_LIMBS) v |= d[limb + 1] << (64 - shift);
    return (int64_t)(v & (((u64)1 << c) - 1)) - ((int64_t)1 << (c - 1));
}

/* The bit length of the widest of `count` scalars (4 low limbs of each DIGIT_LIMBS). */
static int max_bits(const u64 *digits, size_t count) {
    u64 any[4] = {0, 0, 0, 0};
    for (size_t k = 0; k < count; k++)
        for (int j = 0; j < 4; j++) any[j] |= digits[DIGIT_LIMBS * k + j];
    for (int j = 3; j >= 0; j--)
        if (any[j]) return 64 * j + 64 - __builtin_clzll(any[j]);
    return 0;
}

/* Whether a unit of `terms` terms over 2^(c-1) buckets adds them in batches (curve.h): enough buckets that
 * a batch rarely meets one twice, enough terms a bucket to pay for reducing them. */
static int batched_buckets(size_t terms, int c) {
    const size_t nb = (size_t)1 << (c - 1);
    return nb >= 1024 && terms >= 4 * nb;
}

/* The window width that minimises windows·(a·terms + k·2^c), in batched additions: a term costs one
 * (a = 1) in affine buckets, a mixed addition (a = 1.8) in Jacobian ones; per bucket the reduction costs
 * k·2 of them (measured at 2^16 terms, G1: c = 12 0.38-0.44 s, 11 0.49 s, 13 0.41-0.44 s; at 41,000 terms,
 * c = 10 with Jacobian buckets 0.18 s, 11 and 12 batched 0.13 s). Capped so that a thread's buckets stay
 * small. */
static int window_bits(size_t count, int bits) {
    int best = 2;
    double best_cost = 0;
    for (int c = 2; c <= 16; c++) {
        int windows = (bits + 2 + c - 1) / c;
        int batched = batched_buckets(count, c);
        double a = batched ? 1.0 : 1.8, k = batched ? 3.0 : 2.5;
        double cost = (double)windows * (a * (double)count + k * (double)((size_t)1 << c));
        if (c == 2 || cost < best_cost) {
            best = c;
            best_cost = cost;
        }
    }
    return best;
}

/* Run worker(job) on min(threads, units) threads, this one included; the workers share the units. */
static int run_threads(void *(*worker)(void *), void *job, int threads, int units) {
    int extra = (threads < units ? threads : units) - 1;
    pthread_t ids[MAX_THREADS];
    if (extra > MAX_THREADS - 1) extra = MAX_THREADS - 1;
    int started = 0;
    for (; started < extra; started++)
        if (pthread_create(&ids[started], NULL, worker, job) != 0) break; /* the others take its share */
    worker(job);
    for (int i = 0; i < started; i++) pthread_join(ids[i], NULL);
    return 0;
}

#define G g1bn
#define E fqbn
#define GB g1bn_b
#include "curve.h"
#undef G
#undef E
#undef GB

#define G g2bn
#define E fq2bn
#define GB g2bn_b
#include "curve.h"
#undef G
#undef E
#undef GB

#define G g1bls
#define E fqbls
#define GB g1bls_b
#include "curve.h"
#undef G
#undef E
#undef GB

#define G g2bls
#define E fq2bls
#define GB g2bls_b
#include "curve.h"
#undef G
#undef E
#undef GB

/* -- the NTT and the quotient's values on the coset ---------------------------------------------------- */

typedef struct {
    u64 v[4];
} fr_t;

INLINE void fr_mul(fr_t *r, const fr_t *a, const fr_t *b, const field_t *f) { f_mul(r->v, a->v, b->v, f, 4); }

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
                memcpy(x.v, job->in[v] + 32 * i, 32);
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
        memcpy(job->h + 32 * i, x.v, 32);
    }
    return NULL;
}

/* -- the module's functions ---------------------------------------------------------------------------- */

static int check_curve(int curve, int group) {
    if ((curve != 0 && curve != 1) || (group != 1 && group != 2)) {
        PyErr_Format(PyExc_ValueError, "no such curve and group: %d, %d", curve, group);
        return -1;
    }
    return 0;
}

static size_t row_bytes(int curve, int group) { return (size_t)(curve == 0 ? 32 : 48) * 2 * group; }

static PyObject *py_msm(PyObject *self, PyObject *args) {
    int curve, group, threads, window = 0;
    Py_buffer rows, scalars;
    if (!PyArg_ParseTuple(args, "iiy*y*i|i", &curve, &group, &rows, &scalars, &threads, &window)) return NULL;
    PyObject *result = NULL;
    const size_t width = row_bytes(curve, group);
    if (check_curve(curve, group) < 0) goto done;
    if (rows.len % width || scalars.len % 32 || (size_t)rows.len / width != (size_t)scalars.len / 32) {
        PyErr_Format(PyExc_ValueError, "%zd bytes of rows (%zu a row) against %zd bytes of scalars (32 each)",
                     rows.len, width, scalars.len);
        goto done;
    }
    const size_t count = (size_t)scalars.len / 32;
    if (count >= ((size_t)1 << 32)) {
        PyErr_SetString(PyExc_ValueError, "more than 2^32 terms");
        goto done;
    }
    if (threads < 1) threads = 1;
    u64 out[4 * 6];
    int status = 0;
    Py_BEGIN_ALLOW_THREADS;
    if (curve == 0 && group == 1) {
        g1bn_jac s;
        status = g1bn_msm(&s, rows.buf, scalars.buf, count, threads, window);
        g1bn_to_plain((g1bn_aff *)out, &s);
    } else if (curve == 0) {
        g2bn_jac s;
        status = g2bn_msm(&s, rows.buf, scalars.buf, count, threads, window);
        g2bn_to_plain((g2bn_aff *)out, &s);
    } else if (group == 1) {
        g1bls_jac s;
        status = g1bls_msm(&s, rows.buf, scalars.buf, count, threads, window);
        g1bls_to_plain((g1bls_aff *)out, &s);
    } else {
        g2bls_jac s;
        status = g2bls_msm(&s, rows.buf, scalars.buf, count, threads, window);
        g2bls_to_plain((g2bls_aff *)out, &s);
    }
    Py_END_ALLOW_THREADS;
    if (status < 0)
        PyErr_NoMemory();
    else
        result = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)width);
done:
    PyBuffer_Release(&rows);
    PyBuffer_Release(&scalars);
    return result;
}

static PyObject *py_first_off_curve(PyObject *self, PyObject *args) {
    int curve, group;
    Py_buffer rows;
    if (!PyArg_ParseTuple(args, "iiy*", &curve, &group, &rows)) return NULL;
    PyObject *result = NULL;
    const size_t width = row_bytes(curve, group);
    if (check_curve(curve, group) < 0) goto done;
    if (rows.len % width) {
        PyErr_Format(PyExc_ValueError, "%zd bytes are not rows of %zu", rows.len, width);
        goto done;
    }
    const Py_ssize_t count = rows.len / (Py_ssize_t)width;
    Py_ssize_t found;
    Py_BEGIN_ALLOW_THREADS;
    if (curve == 0)
        found = group == 1 ? g1bn_first_off_curve(rows.buf, count) : g2bn_first_off_curve(rows.buf, count);
    else
        found = group == 1 ? g1bls_first_off_curve(rows.buf, count) : g2bls_first_off_curve(rows.buf, count);
    Py_END_ALLOW_THREADS;
    result = PyLong_FromSsize_t(found);
done:
    PyBuffer_Release(&rows);
    return result;
}

/* A started thread: waits at the gate until the caller has fixed the number of threads, then works. */
static void *coset_thread(void *arg) {
    coset_job *job = arg;
    pthread_mutex_lock(&job->gate);
    while (!job->open) pthread_cond_wait(&job->opened, &job->gate);
    pthread_mutex_unlock(&job->gate);
    return coset_worker(job);
}

static PyObject *py_coset_h(PyObject *self, PyObject *args) {
    int curve, threads;
    Py_ssize_t n;
    Py_buffer bufs[3], roots;
    if (!PyArg_ParseTuple(args, "iy*y*y*ny*i", &curve, &bufs[0], &bufs[1], &bufs[2], &n, &roots, &threads))
        return NULL;
    PyObject *result = NULL;
    coset_job job;
    memset(&job, 0, sizeof job);
    if (curve != 0 && curve != 1) {
        PyErr_Format(PyExc_ValueError, "no such curve: %d", curve);
        goto done;
    }
    if (n < 1 || (n & (n - 1)) || n > ((Py_ssize_t)1 << 30)) {
        PyErr_Format(PyExc_ValueError, "the domain %zd is not a power of two up to 2^30", n);
        goto done;
    }
    if (bufs[0].len % 32 || bufs[0].len != bufs[1].len || bufs[0].len != bufs[2].len || bufs[0].len / 32 > n) {
        PyErr_SetString(PyExc_ValueError, "a, b and c must hold as many 32-byte values, at most the domain");
        goto done;
    }
    if (roots.len != 96) {
        PyErr_SetString(PyExc_ValueError, "roots: w_n, w_2n and 1/n, 32 bytes each");
        goto done;
    }
    job.f = curve == 0 ? &BN_R : &BLS_R;
    job.n = (size_t)n;
    job.m = (size_t)bufs[0].len / 32;
    job.log_n = __builtin_ctzll((unsigned long long)n);
    int t = 1;
    while (2 * t <= threads && 2 * t <= MAX_THREADS && (size_t)(4 * t) <= job.n)
        t *= 2; /* a power of two, each block >= 2: the threads wanted (job.threads: those that run) */
    for (int v = 0; v < 3; v++) job.in[v] = bufs[v].buf;
    memcpy(job.w.v, (const unsigned char *)roots.buf, 32);
    memcpy(job.shift.v, (const unsigned char *)roots.buf + 32, 32);
    memcpy(job.shift_scaled.v, (const unsigned char *)roots.buf + 64, 32);
    f_to_mont(job.w.v, job.w.v, job.f, 4);
    f_to_mont(job.shift.v, job.shift.v, job.f, 4);
    f_to_mont(job.shift_scaled.v, job.shift_scaled.v, job.f, 4);
    result = PyBytes_FromStringAndSize(NULL, n * 32);
    if (result == NULL) goto done;
    job.h = (unsigned char *)PyBytes_AS_STRING(result);
    job.scratch = malloc(job.n * sizeof(fr_t));
    job.tw = malloc((job.n / 2 + 1) * sizeof(fr_t));
    for (int v = 0; v < 3; v++) job.out[v] = malloc(job.n * sizeof(fr_t));
    if (!job.scratch || !job.tw || !job.out[0] || !job.out[1] || !job.out[2]) {
        Py_CLEAR(result);
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS;
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
    Py_END_ALLOW_THREADS;
done:
    free(job.scratch);
    free(job.tw);
    for (int v = 0; v < 3; v++) free(job.out[v]);
    for (int v = 0; v < 3; v++) PyBuffer_Release(&bufs[v]);
    PyBuffer_Release(&roots);
    return result;
}

/* a = A·w, b = B·w, c = a∘b over the key's rows, from its (matrix, row, wire, value) terms (values plain). */
static PyObject *py_synthesize(PyObject *self, PyObject *args) {
    int curve;
    Py_ssize_t n_rows;
    Py_buffer matrix, rows, wires, values, witness;
    if (!PyArg_ParseTuple(args, "iy*y*y*y*y*n", &curve, &matrix, &rows, &wires, &values, &witness, &n_rows))
        return NULL;
    PyObject *result = NULL;
    fr_t *acc = NULL;
    const Py_ssize_t terms = matrix.len / 4, n_wires = witness.len / 32;
    if (curve != 0 && curve != 1) {
        PyErr_Format(PyExc_ValueError, "no such curve: %d", curve);
        goto done;
    }
    if (matrix.len % 4 || rows.len != 8 * terms || wires.len != 8 * terms || values.len != 32 * terms ||
        witness.len % 32 || n_rows < 0) {
        PyErr_SetString(PyExc_ValueError, "matrix (u32), rows, wires (i64) and values (32 bytes) must be as many");
        goto done;
    }
    const field_t *f = curve == 0 ? &BN_R : &BLS_R;
    const uint32_t *mat = matrix.buf;
    const int64_t *row = rows.buf, *wire = wires.buf;
    const fr_t *val = values.buf, *w = witness.buf;
    for (Py_ssize_t i = 0; i < n_wires; i++)
        if (!f_below(w[i].v, f, 4)) {
            PyErr_Format(PyExc_ValueError, "witness value %zd is not below the field", i);
            goto done;
        }
    for (Py_ssize_t k = 0; k < terms; k++)
        if (mat[k] > 1 || row[k] < 0 || row[k] >= n_rows || wire[k] < 0 || wire[k] >= n_wires) {
            PyErr_Format(PyExc_ValueError, "term %zd: matrix %u, row %lld, wire %lld out of range", k, mat[k],
                         (long long)row[k], (long long)wire[k]);
            goto done;
        }
    acc = calloc(2 * (size_t)n_rows + 1, sizeof(fr_t));
    result = PyBytes_FromStringAndSize(NULL, 3 * 32 * n_rows);
    if (acc == NULL || result == NULL) {
        Py_CLEAR(result);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t k = 0; k < terms; k++) {
        fr_t v, t; /* to Montgomery form, then one Montgomery product with w: the plain product */
        f_to_mont(v.v, val[k].v, f, 4);
        fr_mul(&t, &v, &w[wire[k]], f);
        fr_t *slot = &acc[mat[k] * (size_t)n_rows + (size_t)row[k]];
        f_add(slot->v, slot->v, t.v, f, 4);
    }
    for (Py_ssize_t i = 0; i < n_rows; i++) {
        fr_t am, c;
        f_to_mont(am.v, acc[i].v, f, 4);
        fr_mul(&c, &am, &acc[n_rows + i], f);
        memcpy(out + 32 * i, acc[i].v, 32);
        memcpy(out + 32 * (n_rows + i), acc[n_rows + i].v, 32);
        memcpy(out + 32 * (2 * n_rows + i), c.v, 32);
    }
    Py_END_ALLOW_THREADS;
done:
    free(acc);
    PyBuffer_Release(&matrix);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&wires);
    PyBuffer_Release(&values);
    PyBuffer_Release(&witness);
    return result;
}

/* Scalar-field values out of Montgomery form `times` times: x·R^-times mod r for any 32-byte x (a .zkey
 * stores its coefficients as c·R^2). */
static PyObject *py_from_montgomery(PyObject *self, PyObject *args) {
    int curve, times;
    Py_buffer values;
    if (!PyArg_ParseTuple(args, "iy*i", &curve, &values, &times)) return NULL;
    PyObject *result = NULL;
    if ((curve != 0 && curve != 1) || values.len % 32 || times < 0 || times > 4) {
        PyErr_SetString(PyExc_ValueError, "from_montgomery(curve 0 or 1, 32-byte values, times 0..4)");
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, values.len);
    if (result == NULL) goto done;
    const field_t *f = curve == 0 ? &BN_R : &BLS_R;
    const unsigned char *in = values.buf;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    const Py_ssize_t count = values.len / 32;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t k = 0; k < count; k++) {
        u64 x[4];
        memcpy(x, in + 32 * k, 32);
        for (int i = 0; i < times; i++) f_from_mont(x, x, f, 4);
        memcpy(out + 32 * k, x, 32);
    }
    Py_END_ALLOW_THREADS;
done:
    PyBuffer_Release(&values);
    return result;
}

static PyMethodDef methods[] = {
    {"from_montgomery", py_from_montgomery, METH_VARARGS,
     "from_montgomery(curve, values, times) -> bytes: scalar-field values times R^-times"},
    {"synthesize", py_synthesize, METH_VARARGS,
     "synthesize(curve, matrix, rows, wires, values, witness, n_rows) -> bytes: A·w, B·w and their product"},
    {"msm", py_msm, METH_VARARGS,
     "msm(curve, group, rows, scalars, threads, window=0) -> bytes: sum of scalars[k]·rows[k], plain affine "
     "coordinates (window: the window width, 2..16; 0 chooses)"},
    {"first_off_curve", py_first_off_curve, METH_VARARGS,
     "first_off_curve(curve, group, rows) -> int: the first row not on the curve, or -1"},
    {"coset_h", py_coset_h, METH_VARARGS,
     "coset_h(curve, a, b, c, n, roots, threads) -> bytes: a·b - c on the odd coset"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_curvemath", NULL, -1, methods, NULL, NULL, NULL, NULL};

static void plain_to_mont(u64 *r, u64 value, const field_t *f) {
    u64 x[MAXN] = {value};
    f_mul(r, x, f->r2, f, f->n);
}

PyMODINIT_FUNC PyInit__curvemath(void) {
    const uint16_t probe = 1;
    if (*(const unsigned char *)&probe != 1) {
        PyErr_SetString(PyExc_ImportError, "the native prover needs a little-endian machine");
        return NULL;
    }
    /* BN254's twist: b' = 3 / (9 + u), plain limbs */
    static const u64 bn_b2[2][4] = {
        {0x3267e6dc24a138e5ULL, 0xb5b4c5e559dbefa3ULL, 0x81be18991be06ac3ULL, 0x2b149d40ceb8aaaeULL},
        {0xe4a2bd0685c315d2ULL, 0xa74fa084e52d1852ULL, 0xcd2cafadeed8fdf4ULL, 0x009713b03af0fed4ULL},
    };
#if HAVE_MONT_ASM
    __builtin_cpu_init();
    have_adx = __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("adx");
#endif
    plain_to_mont(g1bn_b.v, 3, &BN_Q);
    f_to_mont(g2bn_b.c0.v, bn_b2[0], &BN_Q, 4);
    f_to_mont(g2bn_b.c1.v, bn_b2[1], &BN_Q, 4);
    plain_to_mont(g1bls_b.v, 4, &BLS_Q);
    plain_to_mont(g2bls_b.c0.v, 4, &BLS_Q);
    plain_to_mont(g2bls_b.c1.v, 4, &BLS_Q);
    memcpy(fq2bn_ONE.c0.v, BN_Q.one, 32);
    memcpy(fq2bls_ONE.c0.v, BLS_Q.one, 48);
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "mulx", have_adx) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
