#ifndef PROOFLANE_MONT4_X86_H
#define PROOFLANE_MONT4_X86_H
/* 4-limb Montgomery multiplication with mulx/adcx/adox (BMI2 + ADX): CIOS with the reduction of each row
 * interleaved, two carry chains per row. Needs p < 2^255 (every prime here), so that a row's sum fits five
 * words and each row's state four; r may alias a or b. */
#define MONT_ROW(I, T0, T1, T2, T3, T4)                                                                  \
    "xorl %%eax, %%eax\n\t"                                                                              \
    "movq " #I "*8(%[b]), %%rdx\n\t"                                                                     \
    "mulxq 0(%[a]), %%rbx, %%rcx\n\t"                                                                    \
    "adcxq %%rbx, " T0 "\n\t"                                                                            \
    "adoxq %%rcx, " T1 "\n\t"                                                                            \
    "mulxq 8(%[a]), %%rbx, %%rcx\n\t"                                                                    \
    "adcxq %%rbx, " T1 "\n\t"                                                                            \
    "adoxq %%rcx, " T2 "\n\t"                                                                            \
    "mulxq 16(%[a]), %%rbx, %%rcx\n\t"                                                                   \
    "adcxq %%rbx, " T2 "\n\t"                                                                            \
    "adoxq %%rcx, " T3 "\n\t"                                                                            \
    "mulxq 24(%[a]), %%rbx, %%rcx\n\t"                                                                   \
    "adcxq %%rbx, " T3 "\n\t"                                                                            \
    "adoxq %%rcx, " T4 "\n\t"                                                                            \
    "adcxq %%rax, " T4 "\n\t"                                                                            \
    "movq " T0 ", %%rdx\n\t"                                                                             \
    "imulq %[inv], %%rdx\n\t"                                                                            \
    "xorl %%eax, %%eax\n\t"                                                                              \
    "mulxq 0(%[p]), %%rbx, %%rcx\n\t"                                                                    \
    "adcxq %%rbx, " T0 "\n\t"                                                                            \
    "adoxq %%rcx, " T1 "\n\t"                                                                            \
    "mulxq 8(%[p]), %%rbx, %%rcx\n\t"                                                                    \
    "adcxq %%rbx, " T1 "\n\t"                                                                            \
    "adoxq %%rcx, " T2 "\n\t"                                                                            \
    "mulxq 16(%[p]), %%rbx, %%rcx\n\t"                                                                   \
    "adcxq %%rbx, " T2 "\n\t"                                                                            \
    "adoxq %%rcx, " T3 "\n\t"                                                                            \
    "mulxq 24(%[p]), %%rbx, %%rcx\n\t"                                                                   \
    "adcxq %%rbx, " T3 "\n\t"                                                                            \
    "adoxq %%rcx, " T4 "\n\t"                                                                            \
    "adcxq %%rax, " T4 "\n\t"

static inline __attribute__((always_inline)) void mont_mul4_adx(uint64_t *r, const uint64_t *a,
                                                                const uint64_t *b, const uint64_t *p,
                                                                uint64_t inv) {
    __asm__ volatile(
        "xorl %%r8d, %%r8d\n\t"
        "xorl %%r9d, %%r9d\n\t"
        "xorl %%r10d, %%r10d\n\t"
        "xorl %%r11d, %%r11d\n\t"
        "xorl %%r12d, %%r12d\n\t"
        MONT_ROW(0, "%%r8", "%%r9", "%%r10", "%%r11", "%%r12")
        MONT_ROW(1, "%%r9", "%%r10", "%%r11", "%%r12", "%%r8")
        MONT_ROW(2, "%%r10", "%%r11", "%%r12", "%%r8", "%%r9")
        MONT_ROW(3, "%%r11", "%%r12", "%%r8", "%%r9", "%%r10")
        /* (r12, r8, r9, r10) < 2p: subtract p unless that borrows */
        "movq %%r12, %%rax\n\t"
        "subq 0(%[p]), %%rax\n\t"
        "movq %%r8, %%rbx\n\t"
        "sbbq 8(%[p]), %%rbx\n\t"
        "movq %%r9, %%rcx\n\t"
        "sbbq 16(%[p]), %%rcx\n\t"
        "movq %%r10, %%rdx\n\t"
        "sbbq 24(%[p]), %%rdx\n\t"
        "cmovcq %%r12, %%rax\n\t"
        "cmovcq %%r8, %%rbx\n\t"
        "cmovcq %%r9, %%rcx\n\t"
        "cmovcq %%r10, %%rdx\n\t"
        "movq %%rax, 0(%[r])\n\t"
        "movq %%rbx, 8(%[r])\n\t"
        "movq %%rcx, 16(%[r])\n\t"
        "movq %%rdx, 24(%[r])\n\t"
        :
        : [r] "r"(r), [a] "r"(a), [b] "r"(b), [p] "r"(p), [inv] "m"(inv)
        : "rax", "rbx", "rcx", "rdx", "r8", "r9", "r10", "r11", "r12", "cc", "memory");
}

/* r = a + b mod p (a, b < p < 2^255: the sum does not carry out of four words). */
static inline __attribute__((always_inline)) void mod_add4_asm(uint64_t *r, const uint64_t *a, const uint64_t *b,
                                                               const uint64_t *p) {
    __asm__ volatile(
        "movq 0(%[a]), %%r8\n\t"
        "addq 0(%[b]), %%r8\n\t"
        "movq 8(%[a]), %%r9\n\t"
        "adcq 8(%[b]), %%r9\n\t"
        "movq 16(%[a]), %%r10\n\t"
        "adcq 16(%[b]), %%r10\n\t"
        "movq 24(%[a]), %%r11\n\t"
        "adcq 24(%[b]), %%r11\n\t"
        "movq %%r8, %%rax\n\t"
        "subq 0(%[p]), %%rax\n\t"
        "movq %%r9, %%rcx\n\t"
        "sbbq 8(%[p]), %%rcx\n\t"
        "movq %%r10, %%rdx\n\t"
        "sbbq 16(%[p]), %%rdx\n\t"
        "movq %%r11, %%rsi\n\t"
        "sbbq 24(%[p]), %%rsi\n\t"
        "cmovcq %%r8, %%rax\n\t"
        "cmovcq %%r9, %%rcx\n\t"
        "cmovcq %%r10, %%rdx\n\t"
        "cmovcq %%r11, %%rsi\n\t"
        "movq %%rax, 0(%[r])\n\t"
        "movq %%rcx, 8(%[r])\n\t"
        "movq %%rdx, 16(%[r])\n\t"
        "movq %%rsi, 24(%[r])\n\t"
        :
        : [r] "r"(r), [a] "r"(a), [b] "r"(b), [p] "r"(p)
        : "rax", "rcx", "rdx", "rsi", "r8", "r9", "r10", "r11", "cc", "memory");
}

/* r = a - b mod p (a, b < p): p added back under a mask when the difference borrows. */
static inline __attribute__((always_inline)) void mod_sub4_asm(uint64_t *r, const uint64_t *a, const uint64_t *b,
                                                               const uint64_t *p) {
    __asm__ volatile(
        "movq 0(%[a]), %%r8\n\t"
        "subq 0(%[b]), %%r8\n\t"
        "movq 8(%[a]), %%r9\n\t"
        "sbbq 8(%[b]), %%r9\n\t"
        "movq 16(%[a]), %%r10\n\t"
        "sbbq 16(%[b]), %%r10\n\t"
        "movq 24(%[a]), %%r11\n\t"
        "sbbq 24(%[b]), %%r11\n\t"
        "sbbq %%rsi, %%rsi\n\t"
        "movq 0(%[p]), %%rax\n\t"
        "andq %%rsi, %%rax\n\t"
        "movq 8(%[p]), %%rcx\n\t"
        "andq %%rsi, %%rcx\n\t"
        "movq 16(%[p]), %%rdx\n\t"
        "andq %%rsi, %%rdx\n\t"
        "andq 24(%[p]), %%rsi\n\t"
        "addq %%rax, %%r8\n\t"
        "adcq %%rcx, %%r9\n\t"
        "adcq %%rdx, %%r10\n\t"
        "adcq %%rsi, %%r11\n\t"
        "movq %%r8, 0(%[r])\n\t"
        "movq %%r9, 8(%[r])\n\t"
        "movq %%r10, 16(%[r])\n\t"
        "movq %%r11, 24(%[r])\n\t"
        :
        : [r] "r"(r), [a] "r"(a), [b] "r"(b), [p] "r"(p)
        : "rax", "rcx", "rdx", "rsi", "r8", "r9", "r10", "r11", "cc", "memory");
}

#endif
