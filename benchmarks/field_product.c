/* The BN254 base-field product two ways, by throughput (independent products in flight): the C core's
 * 4-limb Montgomery product (mulx/adcx/adox, R = 2^256), and an 8-lane Montgomery product in radix 2^52
 * with AVX-512 IFMA (vpmadd52luq/vpmadd52huq, R = 2^260, five limbs a lane), lazily reduced (outputs below
 * 2q) and fully reduced (below q). The core's BN254 G1 batches (csrc/ifma.h) use the fully reduced one.
 * Every lane of the IFMA product is first checked against the core's product on random inputs.
 *
 * Built and run by bench_field_product.py: cc -O3 -I<csrc> field_product.c. Prints one line of JSON. The
 * IFMA code is compiled for its functions alone (a target attribute) and runs only where the CPU has
 * AVX-512 IFMA; elsewhere (or with a compiler other than GCC or Clang on x86-64) the core's product alone
 * is measured. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static u64 rng_state = 0x9e3779b97f4a7c15ULL;
static u64 next_random(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* a random element below q */
static void random_below_q(u64 *a) {
    do {
        for (int j = 0; j < 4; j++) a[j] = next_random();
        a[3] &= 0x3fffffffffffffffULL;
    } while (!f_below(a, &BN_Q, 4));
}

#define CHAINS 8
#define ROUNDS 2000000L

static double mulx_ns(void) {
    fqbn_t x[CHAINS], b;
    random_below_q(b.v);
    for (int c = 0; c < CHAINS; c++) random_below_q(x[c].v);
    double t0 = now();
    for (long n = 0; n < ROUNDS; n++)
        for (int c = 0; c < CHAINS; c++) fqbn_mul(&x[c], &x[c], &b);
    double t1 = now();
    u64 sink = 0;
    for (int c = 0; c < CHAINS; c++) sink ^= x[c].v[0];
    if (sink == 42) printf("#");
    return (t1 - t0) * 1e9 / ((double)ROUNDS * CHAINS);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_IFMA_CODE 1
#include <immintrin.h>
#define IFMA __attribute__((target("avx512f,avx512ifma")))

#define M52 0xfffffffffffffULL
typedef struct {
    __m512i l[5]; /* limb i of 8 elements */
} v5;

static __m512i P52[5], PINV52, MASK52;

static void to52(u64 *out, const u64 *a) {
    memset(out, 0, 5 * sizeof(u64));
    for (int bit = 0; bit < 256; bit++)
        if ((a[bit / 64] >> (bit % 64)) & 1) out[bit / 52] |= (u64)1 << (bit % 52);
}

static void from52(u64 *out, const u64 *a) {
    memset(out, 0, 4 * sizeof(u64));
    for (int bit = 0; bit < 260; bit++)
        if ((a[bit / 52] >> (bit % 52)) & 1) {
            if (bit >= 256) abort(); /* outputs are below 2q < 2^255 */
            out[bit / 64] |= (u64)1 << (bit % 64);
        }
}

/* r = a·b·2^-260 mod q, below 2q for inputs below 2q; `full` subtracts q once more where it can (below q). */
static inline IFMA __attribute__((always_inline)) void vmul(v5 *r, const v5 *a, const v5 *b, int full) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i t[11];
    for (int i = 0; i < 11; i++) t[i] = zero;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++) {
            t[i + j] = _mm512_madd52lo_epu64(t[i + j], a->l[i], b->l[j]);
            t[i + j + 1] = _mm512_madd52hi_epu64(t[i + j + 1], a->l[i], b->l[j]);
        }
    for (int i = 0; i < 5; i++) {
        __m512i m = _mm512_madd52lo_epu64(zero, t[i], PINV52);
        for (int j = 0; j < 5; j++) {
            t[i + j] = _mm512_madd52lo_epu64(t[i + j], m, P52[j]);
            t[i + j + 1] = _mm512_madd52hi_epu64(t[i + j + 1], m, P52[j]);
        }
        t[i + 1] = _mm512_add_epi64(t[i + 1], _mm512_srli_epi64(t[i], 52));
    }
    __m512i carry = zero;
    for (int i = 5; i < 10; i++) {
        __m512i v = _mm512_add_epi64(t[i], carry);
        r->l[i - 5] = _mm512_and_si512(v, MASK52);
        carry = _mm512_srli_epi64(v, 52);
    }
    if (full) { /* r - q, kept where it does not borrow */
        __m512i d[5], borrow = zero;
        for (int i = 0; i < 5; i++) {
            __m512i v = _mm512_sub_epi64(_mm512_sub_epi64(r->l[i], P52[i]), borrow);
            borrow = _mm512_srli_epi64(v, 63);
            d[i] = _mm512_and_si512(v, MASK52);
        }
        __mmask8 keep = _mm512_cmpeq_epi64_mask(borrow, zero);
        for (int i = 0; i < 5; i++) r->l[i] = _mm512_mask_mov_epi64(r->l[i], keep, d[i]);
    }
}

static IFMA void ifma_init(void) {
    u64 q52[5];
    to52(q52, BN_Q.p);
    u64 inv = 1;
    for (int i = 0; i < 6; i++) inv *= 2 - q52[0] * inv; /* q^-1 mod 2^64 by Newton */
    for (int i = 0; i < 5; i++) P52[i] = _mm512_set1_epi64((long long)q52[i]);
    PINV52 = _mm512_set1_epi64((long long)((0 - inv) & M52));
    MASK52 = _mm512_set1_epi64((long long)M52);
}

static IFMA void load_lane(v5 *v, int lane, const u64 *a52) {
    for (int i = 0; i < 5; i++) {
        u64 all[8];
        _mm512_storeu_si512(all, v->l[i]);
        all[lane] = a52[i];
        v->l[i] = _mm512_loadu_si512(all);
    }
}

static IFMA void store_lane(u64 *a52, const v5 *v, int lane) {
    for (int i = 0; i < 5; i++) {
        u64 all[8];
        _mm512_storeu_si512(all, v->l[i]);
        a52[i] = all[lane];
    }
}

/* Each lane's a·b (radix 2^52, R = 2^260) times 16 equals the core's a·b (R = 2^256), on random inputs. */
static IFMA int ifma_checks(int rounds) {
    for (int round = 0; round < rounds; round++) {
        v5 a, b, r;
        u64 as[8][4], bs[8][4];
        for (int lane = 0; lane < 8; lane++) {
            u64 a52[5], b52[5];
            random_below_q(as[lane]);
            random_below_q(bs[lane]);
            to52(a52, as[lane]);
            to52(b52, bs[lane]);
            load_lane(&a, lane, a52);
            load_lane(&b, lane, b52);
        }
        vmul(&r, &a, &b, 1);
        for (int lane = 0; lane < 8; lane++) {
            u64 r52[5], got[4], want[4], sixteen[4] = {16, 0, 0, 0}, t[4];
            store_lane(r52, &r, lane);
            from52(got, r52);
            if (!f_below(got, &BN_Q, 4)) return 0;
            fqbn_mul((fqbn_t *)want, (const fqbn_t *)as[lane], (const fqbn_t *)bs[lane]);
            /* got·16 = got·(16·R)·R^-1: the core's product by 16 in Montgomery form */
            f_mul(t, sixteen, BN_Q.r2, &BN_Q, 4);
            f_mul(got, got, t, &BN_Q, 4);
            if (memcmp(got, want, sizeof want)) return 0;
        }
    }
    return 1;
}

static IFMA double ifma_ns(int full) {
    v5 x[CHAINS], b;
    for (int i = 0; i < 5; i++) b.l[i] = _mm512_set1_epi64((long long)(next_random() & M52 & 0xffffffffffULL));
    for (int c = 0; c < CHAINS; c++) x[c] = b;
    double t0 = now();
    for (long n = 0; n < ROUNDS; n++)
        for (int c = 0; c < CHAINS; c++) vmul(&x[c], &x[c], &b, full);
    double t1 = now();
    u64 sink[8];
    _mm512_storeu_si512(sink, x[0].l[0]);
    if (sink[0] == 42) printf("#");
    return (t1 - t0) * 1e9 / ((double)ROUNDS * CHAINS * 8);
}
#endif

int main(void) {
    core_init();
    printf("{\"mulx\": %d, \"core_product_ns\": %.3f", core_mulx(), mulx_ns());
#ifdef HAVE_IFMA_CODE
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512ifma")) {
        ifma_init();
        int ok = ifma_checks(2000);
        printf(", \"ifma\": true, \"ifma_equal_to_core\": %s, \"ifma_lazy_ns\": %.3f, \"ifma_full_ns\": %.3f",
               ok ? "true" : "false", ifma_ns(0), ifma_ns(1));
    } else {
        printf(", \"ifma\": false");
    }
#else
    printf(", \"ifma\": false");
#endif
    printf("}\n");
    return 0;
}
