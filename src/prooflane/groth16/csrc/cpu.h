/* The CPU's capabilities and the kernels that use them, in one place (as supranational/blst's src/cpuid.c
 * and gnark-crypto's utils/cpu keep them): the capability word is read from the CPU alone (cpuid and
 * xgetbv on x86-64), never from the environment; each fast kernel is declared in KERNELS beside its scalar
 * twin, the code it replaces where the capability is missing or not used; and kernels_live says which run.
 *
 *   cpu_detected   what this CPU has (cpu_init, once)
 *   cpu_used       what the kernels may use: cpu_use(want) masks `want` by cpu_detected and by what this
 *                  build compiled (CPU_BUILT); all of it until the caller says otherwise (the binding's
 *                  caller clears CPU_IFMA under PROOFLANE_NO_IFMA: the core reads no environment)
 *   kernels_live   bit k: KERNELS[k] runs, its capability used and the kernel not switched off
 *                  (kernel_switch: the pair tests compare each kernel with its twin)
 *
 * The words change between calls (at import, in tests). A call running on another thread meanwhile may see
 * either value at each check, and takes either route: a kernel computes exactly what its twin computes. */
#ifndef PROOFLANE_CPU_H
#define PROOFLANE_CPU_H

/* Capabilities: bits of the word. */
#define CPU_MULX 0x1u /* BMI2 and ADX: mulx, adcx, adox */
#define CPU_IFMA 0x2u /* AVX-512F and AVX-512 IFMA, their register state saved by the OS */
#define CPU_CAPABILITY_COUNT 2

/* Their names, as the binding says them. */
static const struct {
    unsigned bit;
    const char *name;
} CPU_CAPABILITIES[CPU_CAPABILITY_COUNT] = {{.bit = CPU_MULX, .name = "mulx"},
                                            {.bit = CPU_IFMA, .name = "avx512-ifma"}};

/* What this build can use: the assembly (mont_x86.h, ifma.h's target functions) is compiled in on x86-64
 * with a GNU compiler unless PROOFLANE_NO_ASM is defined, which forces the portable C everywhere. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(PROOFLANE_NO_ASM)
#define CPU_BUILT (CPU_MULX | CPU_IFMA)
#else
#define CPU_BUILT 0u
#endif

/* The kernel set: every fast kernel, the capability it needs, its scalar twin, what it serves and on which
 * curves (bit 0: BN254, bit 1: BLS12-381). tests/groth16/test_kernels.py runs every pair on every curve and
 * group it serves, and tests/c/test_core.c every pair the build and CPU have. */
enum { KERNEL_MULX, KERNEL_IFMA_BATCHES, KERNEL_IFMA_SUMS, KERNEL_IFMA_NTT, KERNEL_IFMA_SUBGROUP, KERNEL_COUNT };

typedef struct {
    const char *name;   /* as the binding and the tests name it */
    unsigned needs;     /* capability bits */
    const char *twin;   /* the scalar code that runs without it */
    const char *serves; /* "products" (every operation), "msm", "ntt" or "subgroup" */
    unsigned curves;    /* bit 0: BN254, bit 1: BLS12-381 */
} kernel_t;

static const kernel_t KERNELS[KERNEL_COUNT] = {
    [KERNEL_MULX] = {.name = "mulx-products",
                     .needs = CPU_MULX,
                     .twin = "portable-products",
                     .serves = "products",
                     .curves = 3},
    [KERNEL_IFMA_BATCHES] =
        {.name = "ifma-batches", .needs = CPU_IFMA, .twin = "4-limb-batches", .serves = "msm", .curves = 1},
    [KERNEL_IFMA_SUMS] =
        {.name = "ifma-bucket-sums", .needs = CPU_IFMA, .twin = "4-limb-bucket-sums", .serves = "msm", .curves = 1},
    [KERNEL_IFMA_NTT] = {.name = "ifma-ntt", .needs = CPU_IFMA, .twin = "4-limb-ntt", .serves = "ntt", .curves = 3},
    [KERNEL_IFMA_SUBGROUP] = {.name = "ifma-subgroup",
                              .needs = CPU_IFMA,
                              .twin = "one-point-subgroup",
                              .serves = "subgroup",
                              .curves = 2},
};

static unsigned cpu_detected = 0, cpu_used = 0, kernels_off = 0, kernels_live = 0;

/* Whether kernel k runs now (read at each use: a plain load). */
static inline int kernel_runs(int k) { return (int)(kernels_live >> k) & 1; }

static void kernels_update(void) {
    unsigned live = 0;
    for (int k = 0; k < KERNEL_COUNT; k++)
        if ((KERNELS[k].needs & ~cpu_used) == 0 && !((kernels_off >> k) & 1)) live |= 1u << k;
    kernels_live = live;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>

/* cpuid leaf 7 (EBX: BMI2 bit 8, AVX512F bit 16, ADX bit 19, AVX512IFMA bit 21) and, for the AVX-512
 * registers, the OS's consent: leaf 1's OSXSAVE (ECX bit 27), then XCR0 by xgetbv with the SSE, AVX,
 * opmask, ZMM_Hi256 and Hi16_ZMM states (bits 1, 2, 5, 6, 7: 0xe6) all saved on a context switch. */
static unsigned cpu_detect(void) {
    unsigned a, b, c, d, caps = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    const unsigned leaf7 = b;
    if (((leaf7 >> 8) & 1) && ((leaf7 >> 19) & 1)) caps |= CPU_MULX;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return caps;
    unsigned xcr0, high;
    __asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(high) : "c"(0));
    (void)high;
    if ((xcr0 & 0xe6) == 0xe6 && ((leaf7 >> 16) & 1) && ((leaf7 >> 21) & 1)) caps |= CPU_IFMA;
    return caps;
}
#else
/* Elsewhere (aarch64 among them) no kernel here needs more than the base instruction set (aarch64's
 * 64 x 64 -> 128-bit product, umulh, is base): the word is 0. A kernel that needs, say, SVE reads
 * getauxval(AT_HWCAP) here. */
static unsigned cpu_detect(void) { return 0; }
#endif

/* The capabilities the kernels may use: `want` masked by what the CPU has and the build compiled. Returns
 * those now used. */
static unsigned cpu_use(unsigned want) {
    cpu_used = want & cpu_detected & CPU_BUILT;
    kernels_update();
    return cpu_used;
}

/* Kernel k on (where its capability is used) or off (its twin runs): the pair tests. Returns whether it
 * runs now. */
static int kernel_switch(int k, int on) {
    kernels_off = on ? kernels_off & ~(1u << k) : kernels_off | 1u << k;
    kernels_update();
    return kernel_runs(k);
}

/* Once, before anything else: every capability of the CPU used, every kernel on. */
static void cpu_init(void) {
    cpu_detected = cpu_detect();
    kernels_off = 0;
    cpu_use(cpu_detected);
}

#endif
