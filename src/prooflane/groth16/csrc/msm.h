/* Multi-scalar multiplication by Pippenger's buckets with signed digits, over rows of affine points in
 * Montgomery form exactly as a .zkey section stores them. A template, like curve.h, included after it with
 * the same G, E and GB (groups.h); the part that does not depend on the group is compiled once. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "glv.h"
#include "limbs.h"
#include "threads.h"

#ifndef PROOFLANE_MSM_COMMON
#define PROOFLANE_MSM_COMMON

#define DIGIT_LIMBS 5 /* a scalar below 2^256 plus the signed-digit offset fits 5 limbs */
#define SPLIT_LIMBS 3 /* a half of a GLV split (below 2^128, glv.h) plus the offset fits 3 */

/* The offset sum over windows i of 2^(c-1)·2^(c·i): with it added, window i's c bits minus 2^(c-1) are the
 * signed digits d_i in [-2^(c-1), 2^(c-1)) of the scalar, sum d_i·2^(c·i). */
static void digit_offset(u64 *offset, int c, int windows) {
    memset(offset, 0, DIGIT_LIMBS * sizeof(u64));
    for (int i = 0; i < windows; i++) {
        int bit = c * i + c - 1;
        offset[bit / 64] |= (u64)1 << (bit % 64);
    }
}

static void add_offset(u64 *d, const u64 *offset, int limbs) {
    u64 carry = 0;
    for (int j = 0; j < limbs; j++) {
        u128 s = (u128)d[j] + offset[j] + carry;
        d[j] = (u64)s;
        carry = (u64)(s >> 64);
    }
}

static inline int64_t window_digit(const u64 *d, int w, int c, int limbs) {
    const int bit = w * c, limb = bit / 64, shift = bit % 64;
    u64 v = d[limb] >> shift;
    if (shift + c > 64 && limb + 1 < limbs) v |= d[limb + 1] << (64 - shift);
    return (int64_t)(v & (((u64)1 << c) - 1)) - ((int64_t)1 << (c - 1));
}

/* The bit length of the widest of `count` scalars (the limbs - 1 low limbs of each `limbs`). */
static int max_bits(const u64 *digits, size_t count, int limbs) {
    u64 any[4] = {0, 0, 0, 0};
    for (size_t k = 0; k < count; k++)
        for (int j = 0; j < limbs - 1; j++) any[j] |= digits[(size_t)limbs * k + j];
    for (int j = limbs - 2; j >= 0; j--)
        if (any[j]) return 64 * j + 64 - __builtin_clzll(any[j]);
    return 0;
}

/* Whether a unit of `terms` terms over 2^(c-1) buckets adds them in batches (curve.h): enough buckets that
 * a batch rarely meets one twice, enough terms a bucket to pay for reducing them. */
static int batched_buckets(size_t terms, int c) {
    const size_t nb = (size_t)1 << (c - 1);
    return nb >= 1024 && terms >= 4 * nb;
}

/* Work units a window: the terms cut into chunks until every thread has two units (or a chunk would fall
 * below 256 terms). */
static int window_chunks(int windows, int threads, size_t terms) {
    int chunks = 1;
    while (windows * chunks < 2 * threads && (size_t)chunks * 256 < terms) chunks *= 2;
    return chunks;
}

/* The window width that minimises filled·a·terms + windows·k·2^c, in batched additions, where `windows` is
 * the scalars' signed windows and `filled` those that hold digits (a scalar of b bits has b + 1 bits of
 * signed digits; the last window can be empty, as with 12-bit scalars in 13-bit windows): a term costs one
 * (a = 1) in affine buckets, a mixed addition (a = 1.8) in Jacobian ones; per bucket the reduction costs
 * k·2 of them (measured at 2^16 terms, G1: c = 12 0.38-0.44 s, 11 0.49 s, 13 0.41-0.44 s; at 41,000 terms,
 * c = 10 with Jacobian buckets 0.18 s, 11 and 12 batched 0.13 s). Whether a window's buckets are affine is
 * decided per work unit (window_chunks), as msm_worker does. Capped so that a thread's buckets stay small. */
static int window_bits(size_t count, int bits, int threads) {
    int best = 2;
    double best_cost = 0;
    for (int c = 2; c <= 16; c++) {
        const int windows = (bits + 2 + c - 1) / c, filled = (bits + 1 + c - 1) / c;
        const int batched = batched_buckets(count / (size_t)window_chunks(windows, threads, count), c);
        const double a = batched ? 1.0 : 1.8, k = batched ? 3.0 : 2.5;
        const double cost = (double)filled * a * (double)count + (double)windows * k * (double)((size_t)1 << c);
        if (c == 2 || cost < best_cost) {
            best = c;
            best_cost = cost;
        }
    }
    return best;
}

/* A group whose batches and bucket sums have no faster route than msm.h's own (see GF(fast_batch) and
 * GF(fast_sums)). */
#define NO_FAST_BATCH(G)                                                                                           \
    static int G##_fast_batch(G##_batcher *s) {                                                                    \
        (void)s;                                                                                                   \
        return 0;                                                                                                  \
    }                                                                                                              \
    static int G##_fast_sums(const G##_batcher *s, size_t nb, G##_jac *sum) {                                      \
        (void)s, (void)nb, (void)sum;                                                                              \
        return 0;                                                                                                  \
    }

#endif /* PROOFLANE_MSM_COMMON */

#define EF(name) CAT(CAT(E, _), name)
#define GF(name) CAT(CAT(G, _), name)

typedef struct {
    const unsigned char *bases; /* rows of affine points: `tables` tables of `rows` rows (fixed_table) */
    const u64 *digits;          /* per kept term: its scalar plus the signed-digit offset, `limbs` limbs */
    const uint32_t *index;      /* per kept term: its row */
    const uint8_t *kinds;       /* NULL, or per kept term of a GLV split: bit 0 negate its point, bit 1 map
                                   it by the endomorphism (GF(endo)) */
    const EF(t) *endo_x;        /* with kinds: per row, the x of its point mapped by GF(endo) (which
                                   changes x alone), computed once rather than in every window */
    int limbs;                  /* DIGIT_LIMBS, or SPLIT_LIMBS for the halves of a split */
    size_t count, rows;         /* kept terms; rows a table */
    int c;                      /* window bits */
    int windows;                /* the scalars' windows: window t·stride + w is window w of table t */
    int tables, stride;
    int chunks;                 /* work units: stride x chunks of the terms */
    int next;                   /* the next unit to take (atomic) */
    GF(jac) *sums;              /* per unit: its window's weighted bucket sum over its chunk */
    int failed;
} GF(msm_job);

/* The terms of one unit, in order: for each of its kept terms and each table, the digit of window
 * t·stride + w and the table's point (mapped by the endomorphism for the second half of a split, negated
 * for a negative digit or half). */
static inline int64_t GF(term)(const GF(msm_job) *job, size_t k, int w, int t, GF(aff) *p) {
    int64_t d = window_digit(job->digits + (size_t)job->limbs * k, t * job->stride + w, job->c, job->limbs);
    if (d == 0) return 0;
    memcpy(p, job->bases + ((size_t)job->index[k] * job->tables + t) * sizeof *p, sizeof *p);
    int negate = d < 0;
    if (job->kinds != NULL) {
        const uint8_t kind = job->kinds[k];
        if (kind & 2) p->x = job->endo_x[job->index[k]];
        negate ^= kind & 1;
    }
    if (negate) EF(neg)(&p->y, &p->y);
    return d < 0 ? -d : d;
}

/* Buckets as Jacobian points, one mixed addition per term: for units with few buckets or few terms. */
static void GF(unit_jacobian)(const GF(msm_job) *job, GF(jac) *buckets, size_t nb, int w, size_t lo, size_t hi,
                              GF(jac) *sum) {
    for (size_t b = 0; b < nb; b++) GF(set_inf)(&buckets[b]);
    for (size_t k = lo; k < hi; k++)
        for (int t = 0; t < job->tables && t * job->stride + w < job->windows; t++) {
            GF(aff) p;
            int64_t d = GF(term)(job, k, w, t, &p);
            if (d) GF(add_aff)(&buckets[d - 1], &buckets[d - 1], &p);
        }
    GF(jac) running, total;
    GF(set_inf)(&running);
    GF(set_inf)(&total);
    for (size_t b = nb; b-- > 0;) {
        GF(add)(&running, &running, &buckets[b]);
        GF(add)(&total, &total, &running);
    }
    *sum = total;
}

/* Buckets as affine points, added to in batches that share one inversion (Montgomery's trick): about six
 * multiplications a term where a mixed addition takes eleven. A batch never holds one bucket twice: a term
 * whose bucket is already in the batch goes to that bucket's Jacobian overflow by a mixed addition (so
 * that terms crowding into few buckets, as 0/1 witness values do, cost no more than the Jacobian path). */
#define BATCH 256 /* the batches' inversion is about 300 multiplications: 1.2 a term */
#define PENDING (BATCH / 2) /* fewer than a batch: replayed into an empty batch, they never fill it */

typedef struct {
    GF(aff) *buckets;
    GF(jac) *overflow;   /* per bucket: terms that met it already in the batch */
    uint8_t *full;       /* per bucket: its affine point is set */
    uint32_t *stamp;     /* per bucket: the batch it is in */
    uint32_t batch;      /* this batch's stamp */
    int size;            /* terms in the batch */
    uint32_t bucket[BATCH];
    GF(aff) p[BATCH];
    EF(t) before[BATCH], den[BATCH]; /* per term: product of the earlier denominators; its denominator */
    void *scratch;                   /* GF(fast_batch)'s memory, or NULL */
    int pending;                     /* terms whose bucket was in the batch already: for the next one */
    uint32_t pending_bucket[PENDING];
    GF(aff) pending_p[PENDING];
} GF(batcher);

/* The batch by a faster route where the group has one (ifma.h: BN254 G1 and G2 with AVX-512 IFMA): 1 when
 * done, 0 to leave it to run_batch. Defined after this template's instantiation (groups.h). */
static int GF(fast_batch)(GF(batcher) *s);

/* unit_batched's weighted bucket sum by a faster route where the group has one (ifma.h, as fast_batch): 1
 * when *sum is set, 0 to leave it to unit_batched's own loop. */
static int GF(fast_sums)(const GF(batcher) *s, size_t nb, GF(jac) *sum);

static void GF(schedule)(GF(batcher) *s, uint32_t bucket, const GF(aff) *p);

/* The terms set aside while the batch ran, into the next one (which they cannot fill). */
static void GF(replay)(GF(batcher) *s) {
    const int n = s->pending;
    uint32_t bucket[PENDING];
    GF(aff) p[PENDING];
    memcpy(bucket, s->pending_bucket, (size_t)n * sizeof *bucket);
    memcpy(p, s->pending_p, (size_t)n * sizeof *p);
    s->pending = 0;
    for (int j = 0; j < n; j++) GF(schedule)(s, bucket[j], &p[j]);
}

static void GF(run_batch)(GF(batcher) *s) {
    if (s->size == 0) return;
    if (GF(fast_batch)(s)) {
        s->size = 0;
        s->batch++;
        GF(replay)(s);
        return;
    }
    EF(t) acc = *EF(one)(), inv, lambda, t;
    for (int j = 0; j < s->size; j++) {
        EF(sub)(&s->den[j], &s->p[j].x, &s->buckets[s->bucket[j]].x);
        s->before[j] = acc;
        EF(mul)(&acc, &acc, &s->den[j]);
    }
    EF(inv)(&inv, &acc);
    for (int j = s->size - 1; j >= 0; j--) {
        GF(aff) *b = &s->buckets[s->bucket[j]];
        const GF(aff) *p = &s->p[j];
        EF(mul)(&t, &inv, &s->before[j]); /* 1 / den[j] */
        EF(mul)(&inv, &inv, &s->den[j]);
        EF(sub)(&lambda, &p->y, &b->y);
        EF(mul)(&lambda, &lambda, &t);
        EF(t) x3, y3;
        EF(sqr)(&x3, &lambda);
        EF(sub)(&x3, &x3, &b->x);
        EF(sub)(&x3, &x3, &p->x);
        EF(sub)(&y3, &b->x, &x3);
        EF(mul)(&y3, &y3, &lambda);
        EF(sub)(&y3, &y3, &b->y);
        b->x = x3;
        b->y = y3;
    }
    s->size = 0;
    s->batch++;
    GF(replay)(s);
}

/* bucket += p: set where the bucket is empty, into the batch, else set aside for the next batch where the
 * bucket is in this one (a Jacobian addition costs about twice a batched one), else into its overflow. */
static void GF(schedule)(GF(batcher) *s, uint32_t bucket, const GF(aff) *p) {
    if (!s->full[bucket]) {
        s->buckets[bucket] = *p;
        s->full[bucket] = 1;
        return;
    }
    const GF(aff) *b = &s->buckets[bucket];
    if (s->stamp[bucket] == s->batch && s->pending < PENDING) {
        s->pending_bucket[s->pending] = bucket;
        s->pending_p[s->pending++] = *p;
        return;
    }
    if (s->stamp[bucket] == s->batch || EF(eq)(&b->x, &p->x)) {
        /* in the batch already, or p = ±bucket (a doubling or a cancellation): no inversion here */
        GF(add_aff)(&s->overflow[bucket], &s->overflow[bucket], p);
        return;
    }
    s->stamp[bucket] = s->batch;
    s->bucket[s->size] = bucket;
    s->p[s->size] = *p;
    if (++s->size == BATCH) GF(run_batch)(s);
}

static void GF(unit_batched)(const GF(msm_job) *job, GF(batcher) *s, size_t nb, int w, size_t lo, size_t hi,
                             GF(jac) *sum) {
    memset(s->full, 0, nb);
    for (size_t b = 0; b < nb; b++) GF(set_inf)(&s->overflow[b]);
    for (size_t k = lo; k < hi; k++)
        for (int t = 0; t < job->tables && t * job->stride + w < job->windows; t++) {
            GF(aff) p;
            int64_t d = GF(term)(job, k, w, t, &p);
            if (d) GF(schedule)(s, (uint32_t)(d - 1), &p);
        }
    while (s->size > 0) GF(run_batch)(s); /* and what it replays */
    if (GF(fast_sums)(s, nb, sum)) return;
    GF(jac) running, total;
    GF(set_inf)(&running);
    GF(set_inf)(&total);
    for (size_t b = nb; b-- > 0;) {
        if (s->full[b]) GF(add_aff)(&s->overflow[b], &s->overflow[b], &s->buckets[b]);
        GF(add)(&running, &running, &s->overflow[b]);
        GF(add)(&total, &total, &running);
    }
    *sum = total;
}

static void *GF(msm_worker)(void *arg) {
    GF(msm_job) *job = arg;
    const size_t nb = (size_t)1 << (job->c - 1);
    const int batched = batched_buckets(job->count / job->chunks * (size_t)job->tables, job->c);
    GF(jac) *jacobian = NULL;
    GF(batcher) *s = NULL;
    if (batched) {
        s = calloc(1, sizeof *s);
        if (s != NULL) {
            s->buckets = malloc(nb * sizeof *s->buckets);
            s->overflow = malloc(nb * sizeof *s->overflow);
            s->full = malloc(nb);
            s->stamp = calloc(nb, sizeof *s->stamp);
            s->batch = 1;
        }
    } else {
        jacobian = malloc(nb * sizeof *jacobian);
    }
    if (batched ? (s == NULL || !s->buckets || !s->overflow || !s->full || !s->stamp) : jacobian == NULL) {
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
    } else {
        const int units = job->stride * job->chunks;
        for (;;) {
            int unit = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);
            if (unit >= units) break;
            const int w = unit / job->chunks, chunk = unit % job->chunks;
            const size_t lo = job->count * chunk / job->chunks, hi = job->count * (chunk + 1) / job->chunks;
            if (batched)
                GF(unit_batched)(job, s, nb, w, lo, hi, &job->sums[unit]);
            else
                GF(unit_jacobian)(job, jacobian, nb, w, lo, hi, &job->sums[unit]);
        }
    }
    if (s != NULL) {
        free(s->scratch);
        free(s->buckets);
        free(s->overflow);
        free(s->full);
        free(s->stamp);
        free(s);
    }
    free(jacobian);
    return NULL;
}

/* The GLV split of every term, on every thread: term k's halves take slots 2k and 2k + 1 (no compaction, so
 * that chunks of terms are independent); a half that is zero, or whose point is at infinity, keeps zero
 * digits and is skipped by every window (GF(term)). */
#define SPLIT_CHUNK 4096

typedef struct {
    const glv_t *glv;
    const unsigned char *rows, *scalars;
    size_t count, next; /* next: the first term of the next chunk to take (atomic) */
    u64 *digits;
    uint32_t *index;
    uint8_t *kinds;
    EF(t) *endo_x; /* per term kept: GF(endo)'s x of its point */
} GF(split_job);

static void *GF(split_worker)(void *arg) {
    GF(split_job) *job = arg;
    for (;;) {
        const size_t lo = __atomic_fetch_add(&job->next, SPLIT_CHUNK, __ATOMIC_RELAXED);
        if (lo >= job->count) break;
        const size_t hi = job->count - lo < SPLIT_CHUNK ? job->count : lo + SPLIT_CHUNK;
        for (size_t k = lo; k < hi; k++) {
            u64 s[4], half[2][4];
            GF(aff) p;
            memcpy(s, job->scalars + 32 * k, 32);
            memcpy(&p, job->rows + k * sizeof p, sizeof p);
            int signs = 0;
            if (limbs_is_zero(s, 4) || GF(aff_is_inf)(&p)) {
                memset(half, 0, sizeof half);
            } else {
                signs = glv_split(job->glv, s, half[0], half[1]);
                GF(endo)(&p);
                job->endo_x[k] = p.x;
            }
            for (int h = 0; h < 2; h++) {
                u64 *d = job->digits + SPLIT_LIMBS * (2 * k + h);
                memcpy(d, half[h], (SPLIT_LIMBS - 1) * sizeof(u64));
                d[SPLIT_LIMBS - 1] = 0;
                job->kinds[2 * k + h] = (uint8_t)(((signs >> h) & 1) | (h << 1));
                job->index[2 * k + h] = (uint32_t)k;
            }
        }
    }
    return NULL;
}

/* out = sum of scalars[k]·P_k over count terms, the P_k in `tables` tables of count rows each (one: the
 * rows themselves; more: fixed_table's, with window width `window` and `stride` windows a table).
 * Scalars are 4-limb little-endian integers (any value below 2^256); rows and scalars may lie at any
 * address (they are copied, never cast), count < 2^32. Runs on up to `threads` threads (clamped to
 * [1, MAX_THREADS]); `window` in 2..16 fixes the window width (tests reach both bucket strategies with
 * it), else it is chosen; with tables, the scalars must have at most tables·stride windows. With `glv`
 * (rows only, no tables) each scalar is split by glv.h into two halves of 128 bits over P_k and GF(endo)
 * of it, unless every scalar is below 2^128 already: only for points of the subgroup of order r, where
 * the endomorphism is λ. Returns 0, -1 when
 * memory ran out, -2 when a scalar is too wide for the tables. */
static int GF(msm_tables)(GF(jac) *out, const unsigned char *rows, const unsigned char *scalars, size_t count,
                          int threads, int window, int tables, int stride, const glv_t *glv) {
    GF(set_inf)(out);
    threads = threads_clamp(threads);
    int split = glv != NULL && tables <= 1;
    if (split) { /* scalars below 2^128 (a circuit's bits, short values) have nothing to split */
        u64 high = 0;
        for (size_t k = 0; k < count && !high; k++) {
            u64 top[2];
            memcpy(top, scalars + 32 * k + 16, 16);
            high = top[0] | top[1];
        }
        split = high != 0;
    }
    const int limbs = split ? SPLIT_LIMBS : DIGIT_LIMBS;
    const size_t room = (count ? count : 1) * (split ? 2 : 1);
    GF(msm_job) job = {.sums = NULL}; /* set once the window is known; its sums freed on the way out */
    u64 *digits = malloc(room * limbs * sizeof(u64));
    uint32_t *index = malloc(room * sizeof(uint32_t));
    uint8_t *kinds = split ? malloc(room) : NULL;
    EF(t) *endo_x = split ? malloc((count ? count : 1) * sizeof *endo_x) : NULL;
    int status = -1; /* until the sum is made: memory ran out */
    if (digits == NULL || index == NULL || (split && (kinds == NULL || endo_x == NULL))) goto done;
    size_t kept = 0;
    if (split) {
        GF(split_job) sj = {.glv = glv,
                            .rows = rows,
                            .scalars = scalars,
                            .count = count,
                            .next = 0,
                            .digits = digits,
                            .index = index,
                            .kinds = kinds,
                            .endo_x = endo_x};
        const size_t units = (count + SPLIT_CHUNK - 1) / SPLIT_CHUNK;
        if (units > 0) run_threads(GF(split_worker), &sj, threads, units > MAX_THREADS ? MAX_THREADS : (int)units);
        kept = 2 * count;
    } else {
        for (size_t k = 0; k < count; k++) {
            u64 s[4];
            memcpy(s, scalars + 32 * k, 32);
            if (limbs_is_zero(s, 4)) continue;
            GF(aff) p;
            memcpy(&p, rows + k * (size_t)(tables > 1 ? tables : 1) * sizeof p, sizeof p);
            if (GF(aff_is_inf)(&p)) continue;
            memcpy(digits + DIGIT_LIMBS * kept, s, 32);
            digits[DIGIT_LIMBS * kept + 4] = 0;
            index[kept++] = (uint32_t)k;
        }
    }
    const int bits = kept == 0 ? 0 : max_bits(digits, kept, limbs);
    status = 0;
    if (bits == 0) goto done; /* no term, or every one zero: the sum is infinity */
    const int c = window >= 2 && window <= 16 ? window : window_bits(kept, bits, threads);
    const int windows = (bits + 2 + c - 1) / c;
    if (tables > 1 && windows > tables * stride) {
        status = -2;
        goto done;
    }
    if (tables <= 1) {
        tables = 1;
        stride = windows;
    }
    u64 offset[DIGIT_LIMBS];
    digit_offset(offset, c, windows);
    for (size_t k = 0; k < kept; k++) add_offset(digits + (size_t)limbs * k, offset, limbs);
    const int chunks = window_chunks(stride, threads, kept);
    job = (GF(msm_job)){.bases = rows,
                        .digits = digits,
                        .index = index,
                        .kinds = kinds,
                        .endo_x = endo_x,
                        .limbs = limbs,
                        .count = kept,
                        .rows = count,
                        .c = c,
                        .windows = windows,
                        .tables = tables,
                        .stride = stride,
                        .chunks = chunks,
                        .next = 0,
                        .sums = NULL,
                        .failed = 0};
    job.sums = malloc((size_t)stride * chunks * sizeof *job.sums);
    if (job.sums != NULL) run_threads(GF(msm_worker), &job, threads, stride * chunks);
    if (job.sums == NULL || job.failed) {
        status = -1;
        goto done;
    }
    for (int w = stride - 1; w >= 0; w--) {
        for (int i = 0; i < c; i++) GF(dbl)(out, out);
        for (int ch = 0; ch < chunks; ch++) GF(add)(out, out, &job.sums[w * chunks + ch]);
    }
done: /* the one way out: everything this call allocated */
    free(job.sums);
    free(digits);
    free(index);
    free(kinds);
    free(endo_x);
    return status;
}

/* Fixed-base tables: row t·count + k of `table` is [2^(shift·t)]rows[k] for t < tables, in the rows' own
 * form (Montgomery affine, zeros for infinity), so that an MSM over the same bases with window c and
 * shift = c·stride sums every window of a table in one pass of buckets (msm_tables). Each chunk of rows
 * doubles its points `shift` times in Jacobian form from the table before and returns them to affine with
 * one inversion (Montgomery's trick). Returns 0, or -1 when memory ran out. */
#define TABLE_CHUNK 256

typedef struct {
    unsigned char *table;
    size_t count, next; /* next: the first row of the next chunk to take (atomic) */
    int shift, tables, failed;
} GF(table_job);

static void *GF(table_worker)(void *arg) {
    GF(table_job) *job = arg;
    GF(jac) *jac = malloc(TABLE_CHUNK * sizeof *jac);
    EF(t) *before = malloc(TABLE_CHUNK * sizeof *before);
    if (jac == NULL || before == NULL) {
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
        free(jac);
        free(before);
        return NULL;
    }
    const size_t width = sizeof(GF(aff));
    for (;;) {
        size_t lo = __atomic_fetch_add(&job->next, TABLE_CHUNK, __ATOMIC_RELAXED);
        if (lo >= job->count) break;
        size_t n = job->count - lo < TABLE_CHUNK ? job->count - lo : TABLE_CHUNK;
        for (int t = 1; t < job->tables; t++) {
            const unsigned char *src = job->table + (lo * job->tables + t - 1) * width;
            unsigned char *dst = job->table + (lo * job->tables + t) * width;
            const size_t step = job->tables * width;
            EF(t) acc = *EF(one)();
            for (size_t j = 0; j < n; j++) {
                GF(aff) p;
                memcpy(&p, src + j * step, width);
                if (GF(aff_is_inf)(&p)) {
                    GF(set_inf)(&jac[j]);
                    continue;
                }
                jac[j].x = p.x;
                jac[j].y = p.y;
                jac[j].z = *EF(one)();
                for (int i = 0; i < job->shift; i++) GF(dbl)(&jac[j], &jac[j]);
                before[j] = acc;
                EF(mul)(&acc, &acc, &jac[j].z);
            }
            EF(t) inv;
            EF(inv)(&inv, &acc);
            for (size_t j = n; j-- > 0;) {
                GF(aff) q;
                if (GF(is_inf)(&jac[j])) {
                    memset(&q, 0, sizeof q);
                } else {
                    EF(t) zi, zi2;
                    EF(mul)(&zi, &inv, &before[j]); /* 1 / z_j */
                    EF(mul)(&inv, &inv, &jac[j].z);
                    EF(sqr)(&zi2, &zi);
                    EF(mul)(&q.x, &jac[j].x, &zi2);
                    EF(mul)(&zi2, &zi2, &zi);
                    EF(mul)(&q.y, &jac[j].y, &zi2);
                }
                memcpy(dst + j * step, &q, width);
            }
        }
    }
    free(jac);
    free(before);
    return NULL;
}

static int GF(fixed_table)(unsigned char *table, const unsigned char *rows, size_t count, int shift, int tables,
                           int threads) {
    for (size_t k = 0; k < count; k++)
        memcpy(table + k * (size_t)tables * sizeof(GF(aff)), rows + k * sizeof(GF(aff)), sizeof(GF(aff)));
    GF(table_job) job = {.table = table, .count = count, .next = 0, .shift = shift, .tables = tables, .failed = 0};
    const size_t chunks = (count + TABLE_CHUNK - 1) / TABLE_CHUNK;
    run_threads(GF(table_worker), &job, threads_clamp(threads), chunks > 1 << 30 ? 1 << 30 : (int)chunks);
    return job.failed ? -1 : 0;
}

#undef EF
#undef GF
