/* The eight-lane test of subgroup.h, a template over BLS12-381's two groups (G and E of groups.h, and
 * IFMA_K: the Fq elements of a coordinate, 1 or 2), in ifma.h's v416 arithmetic (8 limbs of 52 bits,
 * R' = 2^416):
 *
 *   GF(lanes_mul_is)(p, t, n, k, limbs, &unsure): the lanes where [k]p = t, for eight affine points p (on the
 *   curve, not infinity) and eight affine targets t, k of `limbs` 64-bit limbs above 1.
 *
 * Lane by lane the same chain: [k]p by doubling (a = 0) and mixed additions from the top bit, then the
 * comparison on the Jacobian coordinates (X = tx·Z², Y = ty·Z³, Z ≠ 0). A lane whose chain meets a case the
 * formulas do not cover (the accumulator at infinity, or equal to ±p in an addition: never so for a point
 * of the subgroup of order r, whose multiples [j]p for 1 < j < r are neither, and k < r) is left out of
 * the result and set in *unsure, for the one-point test. Lanes past n repeat the first point. */
#if IFMA_K == 1
#define VE v416
#define VF(name) v416_##name
#elif IFMA_K == 2
#define VE v416x2
#define VF(name) v416x2_##name
#else
#error "IFMA_K: the Fq elements of a coordinate, 1 or 2"
#endif
#define EF(name) CAT(CAT(E, _), name)
#define GF(name) CAT(CAT(G, _), name)

static IFMA_TARGET __mmask8 GF(lanes_mul_is)(const GF(aff) *const *p, const GF(aff) *t, int n, const u64 *k,
                                             int limbs, __mmask8 *unsure) {
    const EF(t) *px[IFMA_LANES], *py[IFMA_LANES], *tx[IFMA_LANES], *ty[IFMA_LANES];
    for (int lane = 0; lane < IFMA_LANES; lane++) {
        const int at = lane < n ? lane : 0;
        px[lane] = &p[at]->x;
        py[lane] = &p[at]->y;
        tx[lane] = &t[at].x;
        ty[lane] = &t[at].y;
    }
    const VE x = VF(stage)(px, n), y = VF(stage)(py, n), zero = VF(zero)();
    const v416 q = v416_set1(&IFMA381_Q);
    const __m512i qinv = _mm512_set1_epi64((long long)IFMA381_QINV);
    VE X = x, Y = y, Z = VF(one)();
    __mmask8 odd = 0;
    int top = 64 * limbs - 1;
    while (!((k[top / 64] >> (top % 64)) & 1)) top--;
    for (int bit = top - 1; bit >= 0; bit--) {
        /* doubling: A = X², B = Y², C = B², D = 2((X + B)² - A - C), E = 3A, X' = E² - 2D,
         * Y' = E(D - X') - 8C, Z' = 2YZ */
        const VE A = VF(sqr)(X, &q, qinv), B = VF(sqr)(Y, &q, qinv), C = VF(sqr)(B, &q, qinv);
        VE D = VF(sub)(VF(sub)(VF(sqr)(VF(add)(X, B, &q), &q, qinv), A, &q), C, &q);
        D = VF(add)(D, D, &q);
        const VE E3 = VF(add)(VF(add)(A, A, &q), A, &q);
        const VE X2 = VF(sub)(VF(sub)(VF(sqr)(E3, &q, qinv), D, &q), D, &q);
        const VE C2 = VF(add)(C, C, &q), C4 = VF(add)(C2, C2, &q), C8 = VF(add)(C4, C4, &q);
        Z = VF(mul)(VF(add)(Y, Y, &q), Z, &q, qinv);
        Y = VF(sub)(VF(mul)(E3, VF(sub)(D, X2, &q), &q, qinv), C8, &q);
        X = X2;
        if (!((k[bit / 64] >> (bit % 64)) & 1)) continue;
        /* mixed addition of (x, y): U = x·Z², S = y·Z³, H = U - X, r = 2(S - Y), I = 4H², J = H·I,
         * V = X·I, X' = r² - J - 2V, Y' = r(V - X') - 2Y·J, Z' = (Z + H)² - Z² - H² */
        const VE ZZ = VF(sqr)(Z, &q, qinv);
        const VE U = VF(mul)(x, ZZ, &q, qinv), S = VF(mul)(y, VF(mul)(Z, ZZ, &q, qinv), &q, qinv);
        const VE H = VF(sub)(U, X, &q), HH = VF(sqr)(H, &q, qinv);
        odd |= VF(eq)(H, zero) | VF(eq)(Z, zero);
        const VE HH2 = VF(add)(HH, HH, &q), I = VF(add)(HH2, HH2, &q), J = VF(mul)(H, I, &q, qinv);
        const VE SY = VF(sub)(S, Y, &q), r = VF(add)(SY, SY, &q), V = VF(mul)(X, I, &q, qinv);
        const VE X3 = VF(sub)(VF(sub)(VF(sub)(VF(sqr)(r, &q, qinv), J, &q), V, &q), V, &q);
        const VE YJ = VF(mul)(Y, J, &q, qinv);
        Y = VF(sub)(VF(sub)(VF(mul)(r, VF(sub)(V, X3, &q), &q, qinv), YJ, &q), YJ, &q);
        Z = VF(sub)(VF(sub)(VF(sqr)(VF(add)(Z, H, &q), &q, qinv), ZZ, &q), HH, &q);
        X = X3;
    }
    const VE ZZ = VF(sqr)(Z, &q, qinv);
    const __mmask8 on_x = VF(eq)(X, VF(mul)(VF(stage)(tx, n), ZZ, &q, qinv));
    const __mmask8 on_y = VF(eq)(Y, VF(mul)(VF(stage)(ty, n), VF(mul)(Z, ZZ, &q, qinv), &q, qinv));
    const __mmask8 lanes = n >= IFMA_LANES ? 0xff : (__mmask8)((1u << n) - 1);
    odd |= VF(eq)(Z, zero);
    *unsure = odd & lanes;
    return on_x & on_y & (__mmask8)~odd & lanes;
}

#undef VE
#undef VF
#undef EF
#undef GF
#undef IFMA_K
