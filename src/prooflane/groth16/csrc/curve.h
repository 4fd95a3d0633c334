/* One group of points on y^2 = x^3 + b (a = 0), instantiated per curve and group by curvemath.c:
 *
 *   #define G g1bn      prefix of this group's names
 *   #define E fqbn      prefix of the coordinate field's names (E_t, E_add, E_mul, ...)
 *   #define GB g1bn_b   b in Montgomery form, an E_t
 *   #include "curve.h"
 *
 * Points are affine (x, y) as a .zkey row stores them (Montgomery form; all zero: the point at infinity)
 * or Jacobian (X, Y, Z) with x = X/Z^2, y = Y/Z^3 (Z = 0: the point at infinity). The formulas are the
 * Explicit-Formulas Database's dbl-2009-l, madd-2007-bl and add-2007-bl for a = 0, with the equal-point
 * and opposite-point cases handled, so that they are the group law on every point of the curve. */

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define EF(name) CAT(CAT(E, _), name)
#define GF(name) CAT(CAT(G, _), name)

typedef struct {
    EF(t) x, y;
} GF(aff);

typedef struct {
    EF(t) x, y, z;
} GF(jac);

static inline void GF(set_inf)(GF(jac) *p) { memset(p, 0, sizeof *p); }

static inline int GF(is_inf)(const GF(jac) *p) { return EF(is_zero)(&p->z); }

static inline int GF(aff_is_inf)(const GF(aff) *p) { return EF(is_zero)(&p->x) && EF(is_zero)(&p->y); }

static void GF(dbl)(GF(jac) *r, const GF(jac) *p) {
    if (GF(is_inf)(p)) {
        *r = *p;
        return;
    }
    EF(t) a, b, c, d, e, f, t, x3, y3, z3;
    EF(sqr)(&a, &p->x);
    EF(sqr)(&b, &p->y);
    EF(sqr)(&c, &b);
    EF(add)(&t, &p->x, &b);
    EF(sqr)(&t, &t);
    EF(sub)(&t, &t, &a);
    EF(sub)(&t, &t, &c);
    EF(add)(&d, &t, &t);
    EF(add)(&e, &a, &a);
    EF(add)(&e, &e, &a);
    EF(sqr)(&f, &e);
    EF(mul)(&z3, &p->y, &p->z);
    EF(add)(&z3, &z3, &z3);
    EF(sub)(&x3, &f, &d);
    EF(sub)(&x3, &x3, &d);
    EF(sub)(&y3, &d, &x3);
    EF(mul)(&y3, &e, &y3);
    EF(add)(&c, &c, &c);
    EF(add)(&c, &c, &c);
    EF(add)(&c, &c, &c);
    EF(sub)(&y3, &y3, &c);
    r->x = x3;
    r->y = y3;
    r->z = z3;
}

/* The end of both additions: x3 = rr^2 - j - 2v, y3 = rr·(v - x3) - 2·s·j. */
static inline void GF(add_tail)(EF(t) *x3, EF(t) *y3, const EF(t) *rr, const EF(t) *j, const EF(t) *v,
                                const EF(t) *s) {
    EF(t) t;
    EF(sqr)(x3, rr);
    EF(sub)(x3, x3, j);
    EF(sub)(x3, x3, v);
    EF(sub)(x3, x3, v);
    EF(sub)(&t, v, x3);
    EF(mul)(y3, rr, &t);
    EF(mul)(&t, s, j);
    EF(add)(&t, &t, &t);
    EF(sub)(y3, y3, &t);
}

/* p + q where q has p's x: 2p when their y agree too (rr = 0), else the point at infinity. */
static void GF(same_x)(GF(jac) *r, const GF(jac) *p, const EF(t) *rr) {
    if (EF(is_zero)(rr))
        GF(dbl)(r, p);
    else
        GF(set_inf)(r);
}

/* r = p + q with q affine and not at infinity; r may alias p. */
static void GF(add_aff)(GF(jac) *r, const GF(jac) *p, const GF(aff) *q) {
    if (GF(is_inf)(p)) {
        r->x = q->x;
        r->y = q->y;
        r->z = *EF(one)();
        return;
    }
    EF(t) z1z1, u2, s2, h, hh, i, j, rr, v, x3, y3, z3;
    EF(sqr)(&z1z1, &p->z);
    EF(mul)(&u2, &q->x, &z1z1);
    EF(mul)(&s2, &q->y, &p->z);
    EF(mul)(&s2, &s2, &z1z1);
    EF(sub)(&h, &u2, &p->x);
    EF(sub)(&rr, &s2, &p->y);
    if (EF(is_zero)(&h)) { /* equal x: p = q (double) or p = -q (infinity) */
        GF(same_x)(r, p, &rr);
        return;
    }
    EF(add)(&rr, &rr, &rr);
    EF(sqr)(&hh, &h);
    EF(add)(&i, &hh, &hh);
    EF(add)(&i, &i, &i);
    EF(mul)(&j, &h, &i);
    EF(mul)(&v, &p->x, &i);
    GF(add_tail)(&x3, &y3, &rr, &j, &v, &p->y);
    EF(add)(&z3, &p->z, &h);
    EF(sqr)(&z3, &z3);
    EF(sub)(&z3, &z3, &z1z1);
    EF(sub)(&z3, &z3, &hh);
    r->x = x3;
    r->y = y3;
    r->z = z3;
}

/* r = p + q; r may alias p or q. */
static void GF(add)(GF(jac) *r, const GF(jac) *p, const GF(jac) *q) {
    if (GF(is_inf)(p)) {
        *r = *q;
        return;
    }
    if (GF(is_inf)(q)) {
        *r = *p;
        return;
    }
    EF(t) z1z1, z2z2, u1, u2, s1, s2, h, i, j, rr, v, x3, y3, z3;
    EF(sqr)(&z1z1, &p->z);
    EF(sqr)(&z2z2, &q->z);
    EF(mul)(&u1, &p->x, &z2z2);
    EF(mul)(&u2, &q->x, &z1z1);
    EF(mul)(&s1, &p->y, &q->z);
    EF(mul)(&s1, &s1, &z2z2);
    EF(mul)(&s2, &q->y, &p->z);
    EF(mul)(&s2, &s2, &z1z1);
    EF(sub)(&h, &u2, &u1);
    EF(sub)(&rr, &s2, &s1);
    if (EF(is_zero)(&h)) { /* equal x: p = q (double) or p = -q (infinity) */
        GF(same_x)(r, p, &rr);
        return;
    }
    EF(add)(&i, &h, &h);
    EF(sqr)(&i, &i);
    EF(mul)(&j, &h, &i);
    EF(add)(&rr, &rr, &rr);
    EF(mul)(&v, &u1, &i);
    GF(add_tail)(&x3, &y3, &rr, &j, &v, &s1);
    EF(add)(&z3, &p->z, &q->z);
    EF(sqr)(&z3, &z3);
    EF(sub)(&z3, &z3, &z1z1);
    EF(sub)(&z3, &z3, &z2z2);
    EF(mul)(&z3, &z3, &h);
    r->x = x3;
    r->y = y3;
    r->z = z3;
}

/* Plain (not Montgomery) affine coordinates of p; zeros for the point at infinity. */
static void GF(to_plain)(GF(aff) *out, const GF(jac) *p) {
    if (GF(is_inf)(p)) {
        memset(out, 0, sizeof *out);
        return;
    }
    EF(t) zi, zi2, x, y;
    EF(inv)(&zi, &p->z);
    EF(sqr)(&zi2, &zi);
    EF(mul)(&x, &p->x, &zi2);
    EF(mul)(&zi2, &zi2, &zi);
    EF(mul)(&y, &p->y, &zi2);
    EF(from_mont)(&out->x, &x);
    EF(from_mont)(&out->y, &y);
}

/* Whether an affine row (Montgomery form, not all zero) has canonical coordinates and lies on the curve. */
static int GF(on_curve)(const GF(aff) *p) {
    if (!EF(below)(&p->x) || !EF(below)(&p->y)) return 0;
    EF(t) lhs, rhs;
    EF(sqr)(&lhs, &p->y);
    EF(sqr)(&rhs, &p->x);
    EF(mul)(&rhs, &rhs, &p->x);
    EF(add)(&rhs, &rhs, &GB);
    return EF(eq)(&lhs, &rhs);
}

/* Index of the first row off the curve (rows all zero, the point at infinity, are skipped), or -1. */
static Py_ssize_t GF(first_off_curve)(const unsigned char *rows, Py_ssize_t count) {
    for (Py_ssize_t k = 0; k < count; k++) {
        GF(aff) p;
        memcpy(&p, rows + (size_t)k * sizeof p, sizeof p);
        if (!GF(aff_is_inf)(&p) && !GF(on_curve)(&p)) return k;
    }
    return -1;
}

/* -- multi-scalar multiplication (Pippenger, signed digits) ------------------------------------------- */

typedef struct {
    const unsigned char *bases; /* rows of affine points */
    const u64 *digits;          /* per kept term: its scalar plus the signed-digit offset, DIGIT_LIMBS limbs */
    const uint32_t *index;      /* per kept term: its row */
    size_t count;               /* kept terms */
    int c;                      /* window bits */
    int windows, chunks;        /* work units: windows x chunks of the terms */
    int next;                   /* the next unit to take (atomic) */
    GF(jac) *sums;              /* per unit: its window's weighted bucket sum over its chunk */
    int failed;
} GF(msm_job);

/* The terms of one unit, in order: its window's digit and its point (negated for a negative digit). */
static inline int64_t GF(term)(const GF(msm_job) *job, size_t k, int w, GF(aff) *p) {
    int64_t d = window_digit(job->digits + DIGIT_LIMBS * k, w, job->c);
    if (d == 0) return 0;
    memcpy(p, job->bases + (size_t)job->index[k] * sizeof *p, sizeof *p);
    if (d < 0) {
        EF(neg)(&p->y, &p->y);
        d = -d;
    }
    return d;
}

/* Buckets as Jacobian points, one mixed addition per term: for units with few buckets or few terms. */
static void GF(unit_jacobian)(const GF(msm_job) *job, GF(jac) *buckets, size_t nb, int w, size_t lo, size_t hi,
                              GF(jac) *sum) {
    for (size_t b = 0; b < nb; b++) GF(set_inf)(&buckets[b]);
    for (size_t k = lo; k < hi; k++) {
        GF(aff) p;
        int64_t d = GF(term)(job, k, w, &p);
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
} GF(batcher);

static void GF(run_batch)(GF(batcher) *s) {
    if (s->size == 0) return;
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
}

/* bucket += p: set where the bucket is empty, into the batch, or into its overflow. */
static void GF(schedule)(GF(batcher) *s, uint32_t bucket, const GF(aff) *p) {
    if (!s->full[bucket]) {
        s->buckets[bucket] = *p;
        s->full[bucket] = 1;
        return;
    }
    const GF(aff) *b = &s->buckets[bucket];
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
    for (size_t k = lo; k < hi; k++) {
        GF(aff) p;
        int64_t d = GF(term)(job, k, w, &p);
        if (d) GF(schedule)(s, (uint32_t)(d - 1), &p);
    }
    GF(run_batch)(s);
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
    const int batched = batched_buckets(job->count / job->chunks, job->c);
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
        const int units = job->windows * job->chunks;
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
        free(s->buckets);
        free(s->overflow);
        free(s->full);
        free(s->stamp);
        free(s);
    }
    free(jacobian);
    return NULL;
}

/* out = sum of scalars[k]·rows[k] over count terms; scalars are 4-limb little-endian integers (any value
 * below 2^256). Returns 0, or -1 when memory ran out. Runs on up to `threads` threads; `window` in 2..16
 * fixes the window width (tests reach both bucket strategies with it), else it is chosen. */
static int GF(msm)(GF(jac) *out, const unsigned char *rows, const unsigned char *scalars, size_t count,
                   int threads, int window) {
    GF(set_inf)(out);
    u64 *digits = malloc((count ? count : 1) * DIGIT_LIMBS * sizeof(u64));
    uint32_t *index = malloc((count ? count : 1) * sizeof(uint32_t));
    if (digits == NULL || index == NULL) {
        free(digits);
        free(index);
        return -1;
    }
    size_t kept = 0;
    for (size_t k = 0; k < count; k++) {
        u64 s[4];
        memcpy(s, scalars + 32 * k, 32);
        if (limbs_is_zero(s, 4)) continue;
        GF(aff) p;
        memcpy(&p, rows + k * sizeof p, sizeof p);
        if (GF(aff_is_inf)(&p)) continue;
        memcpy(digits + DIGIT_LIMBS * kept, s, 32);
        digits[DIGIT_LIMBS * kept + 4] = 0;
        index[kept++] = (uint32_t)k;
    }
    if (kept == 0) {
        free(digits);
        free(index);
        return 0;
    }
    const int bits = max_bits(digits, kept);
    const int c = window >= 2 && window <= 16 ? window : window_bits(kept, bits);
    const int windows = (bits + 2 + c - 1) / c;
    u64 offset[DIGIT_LIMBS];
    digit_offset(offset, c, windows);
    for (size_t k = 0; k < kept; k++) add_offset(digits + DIGIT_LIMBS * k, offset);
    int chunks = 1;
    while (windows * chunks < 2 * threads && (size_t)chunks * 256 < kept) chunks *= 2;
    GF(msm_job) job = {rows, digits, index, kept, c, windows, chunks, 0, NULL, 0};
    job.sums = malloc((size_t)windows * chunks * sizeof *job.sums);
    int status = job.sums == NULL ? -1 : run_threads(GF(msm_worker), &job, threads, windows * chunks);
    if (status == 0 && job.failed) status = -1;
    if (status == 0) {
        for (int w = windows - 1; w >= 0; w--) {
            for (int i = 0; i < c; i++) GF(dbl)(out, out);
            for (int ch = 0; ch < chunks; ch++) GF(add)(out, out, &job.sums[w * chunks + ch]);
        }
    }
    free(job.sums);
    free(digits);
    free(index);
    return status;
}

#undef EF
#undef GF
