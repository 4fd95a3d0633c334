/* The group law of one group of points on y^2 = x^3 + b (a = 0), a template instantiated per curve and
 * group by groups.h:
 *
 *   #define G g1bn      prefix of this group's names
 *   #define E fqbn      prefix of the coordinate field's names (towers.h: E_t, E_add, E_mul, ...)
 *   #define GB g1bn_b   b in Montgomery form, an E_t
 *   #include "curve.h"
 *
 * It needs only the coordinate field's operations (E_add, E_sub, E_mul, E_sqr, E_neg, E_is_zero, E_eq,
 * E_below, E_one, E_inv, E_from_mont) and <string.h>, and leaves G, E and GB defined (msm.h, included after
 * it, uses them too).
 * Points are affine (x, y) as a .zkey row stores them (Montgomery form; all zero: the point at infinity)
 * or Jacobian (X, Y, Z) with x = X/Z^2, y = Y/Z^3 (Z = 0: the point at infinity). The formulas are the
 * Explicit-Formulas Database's dbl-2009-l, madd-2007-bl and add-2007-bl for a = 0, with the equal-point
 * and opposite-point cases handled, so that they are the group law on every point of the curve. */

#include <stdint.h>
#include <string.h>

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

/* Index of the first of count rows off the curve (rows all zero, the point at infinity, are skipped), or
 * -1. The rows may lie at any address. */
static int64_t GF(first_off_curve)(const unsigned char *rows, size_t count) {
    for (size_t k = 0; k < count; k++) {
        GF(aff) p;
        memcpy(&p, rows + (size_t)k * sizeof p, sizeof p);
        if (!GF(aff_is_inf)(&p) && !GF(on_curve)(&p)) return (int64_t)k;
    }
    return -1;
}

#undef EF
#undef GF
