#ifndef PROOFLANE_MONT_X86_H
#define PROOFLANE_MONT_X86_H

#include <stdint.h>

/* The assembly is laid out by hand, one instruction a line: not clang-format's. */
/* clang-format off */

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

/* The same for 6 limbs (p < 2^383: BLS12-381's base field), in seven words T0..T6 rotating through
 * r8..r14; rbx:rcx take each product, flags are cleared by a xor of rbx. a and b are read before r is written
 * (r may alias them); the result is stored, p subtracted in the registers, and the difference stored over it
 * unless it borrowed. r comes in memory and takes a's register once the rows are done: ten registers are
 * clobbered, and a build that keeps the frame pointer (the sanitiser lane's -fno-omit-frame-pointer) has
 * only three left for the pointers. */
#define MONT_ROW6(I, T0, T1, T2, T3, T4, T5, T6)                                                          \
    "xorl %%ebx, %%ebx\n\t"                                                                              \
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
    "mulxq 32(%[a]), %%rbx, %%rcx\n\t"                                                                   \
    "adcxq %%rbx, " T4 "\n\t"                                                                            \
    "adoxq %%rcx, " T5 "\n\t"                                                                            \
    "mulxq 40(%[a]), %%rbx, %%rcx\n\t"                                                                   \
    "adcxq %%rbx, " T5 "\n\t"                                                                            \
    "adoxq %%rcx, " T6 "\n\t"                                                                            \
    "adcq $0, " T6 "\n\t"                                                                                \
    "movq " T0 ", %%rdx\n\t"                                                                             \
    "imulq %[inv], %%rdx\n\t"                                                                            \
    "xorl %%ebx, %%ebx\n\t"                                                                              \
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
    "mulxq 32(%[p]), %%rbx, %%rcx\n\t"                                                                   \
    "adcxq %%rbx, " T4 "\n\t"                                                                            \
    "adoxq %%rcx, " T5 "\n\t"                                                                            \
    "mulxq 40(%[p]), %%rbx, %%rcx\n\t"                                                                   \
    "adcxq %%rbx, " T5 "\n\t"                                                                            \
    "adoxq %%rcx, " T6 "\n\t"                                                                            \
    "adcq $0, " T6 "\n\t"

#define KEEP_UNLESS_BORROW_AT(OFF, REG, BASE)                                                            \
    "movq " OFF "(" BASE "), %%rbx\n\t"                                                                  \
    "cmovncq " REG ", %%rbx\n\t"                                                                         \
    "movq %%rbx, " OFF "(" BASE ")\n\t"
#define KEEP_UNLESS_BORROW(OFF, REG) KEEP_UNLESS_BORROW_AT(OFF, REG, "%[r]")

static inline __attribute__((always_inline)) void mont_mul6_adx(uint64_t *r, const uint64_t *a,
                                                                const uint64_t *b, const uint64_t *p,
                                                                uint64_t inv) {
    const uint64_t *base = a; /* a, then r */
    __asm__ volatile(
        "xorl %%r8d, %%r8d\n\t"
        "xorl %%r9d, %%r9d\n\t"
        "xorl %%r10d, %%r10d\n\t"
        "xorl %%r11d, %%r11d\n\t"
        "xorl %%r12d, %%r12d\n\t"
        "xorl %%r13d, %%r13d\n\t"
        "xorl %%r14d, %%r14d\n\t"
        MONT_ROW6(0, "%%r8", "%%r9", "%%r10", "%%r11", "%%r12", "%%r13", "%%r14")
        MONT_ROW6(1, "%%r9", "%%r10", "%%r11", "%%r12", "%%r13", "%%r14", "%%r8")
        MONT_ROW6(2, "%%r10", "%%r11", "%%r12", "%%r13", "%%r14", "%%r8", "%%r9")
        MONT_ROW6(3, "%%r11", "%%r12", "%%r13", "%%r14", "%%r8", "%%r9", "%%r10")
        MONT_ROW6(4, "%%r12", "%%r13", "%%r14", "%%r8", "%%r9", "%%r10", "%%r11")
        MONT_ROW6(5, "%%r13", "%%r14", "%%r8", "%%r9", "%%r10", "%%r11", "%%r12")
        /* (r14, r8, r9, r10, r11, r12) < 2p */
        "movq %[r], %[a]\n\t"
        "movq %%r14, 0(%[a])\n\t"
        "movq %%r8, 8(%[a])\n\t"
        "movq %%r9, 16(%[a])\n\t"
        "movq %%r10, 24(%[a])\n\t"
        "movq %%r11, 32(%[a])\n\t"
        "movq %%r12, 40(%[a])\n\t"
        "subq 0(%[p]), %%r14\n\t"
        "sbbq 8(%[p]), %%r8\n\t"
        "sbbq 16(%[p]), %%r9\n\t"
        "sbbq 24(%[p]), %%r10\n\t"
        "sbbq 32(%[p]), %%r11\n\t"
        "sbbq 40(%[p]), %%r12\n\t"
        KEEP_UNLESS_BORROW_AT("0", "%%r14", "%[a]")
        KEEP_UNLESS_BORROW_AT("8", "%%r8", "%[a]")
        KEEP_UNLESS_BORROW_AT("16", "%%r9", "%[a]")
        KEEP_UNLESS_BORROW_AT("24", "%%r10", "%[a]")
        KEEP_UNLESS_BORROW_AT("32", "%%r11", "%[a]")
        KEEP_UNLESS_BORROW_AT("40", "%%r12", "%[a]")
        : [a] "+r"(base)
        : [r] "m"(r), [b] "r"(b), [p] "r"(p), [inv] "m"(inv)
        : "rbx", "rcx", "rdx", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "cc", "memory");
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

/* r = a + b mod p over 6 limbs (a, b < p < 2^383: no carry out of six words): the sum is stored, p
 * subtracted in the registers, and the difference stored over the sum unless it borrowed. */
static inline __attribute__((always_inline)) void mod_add6_asm(uint64_t *r, const uint64_t *a, const uint64_t *b,
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
        "movq 32(%[a]), %%r12\n\t"
        "adcq 32(%[b]), %%r12\n\t"
        "movq 40(%[a]), %%r13\n\t"
        "adcq 40(%[b]), %%r13\n\t"
        "movq %%r8, 0(%[r])\n\t"
        "movq %%r9, 8(%[r])\n\t"
        "movq %%r10, 16(%[r])\n\t"
        "movq %%r11, 24(%[r])\n\t"
        "movq %%r12, 32(%[r])\n\t"
        "movq %%r13, 40(%[r])\n\t"
        "subq 0(%[p]), %%r8\n\t"
        "sbbq 8(%[p]), %%r9\n\t"
        "sbbq 16(%[p]), %%r10\n\t"
        "sbbq 24(%[p]), %%r11\n\t"
        "sbbq 32(%[p]), %%r12\n\t"
        "sbbq 40(%[p]), %%r13\n\t"
        KEEP_UNLESS_BORROW("0", "%%r8")
        KEEP_UNLESS_BORROW("8", "%%r9")
        KEEP_UNLESS_BORROW("16", "%%r10")
        KEEP_UNLESS_BORROW("24", "%%r11")
        KEEP_UNLESS_BORROW("32", "%%r12")
        KEEP_UNLESS_BORROW("40", "%%r13")
        :
        : [r] "r"(r), [a] "r"(a), [b] "r"(b), [p] "r"(p)
        : "rbx", "r8", "r9", "r10", "r11", "r12", "r13", "cc", "memory");
}

/* r = a - b mod p over 6 limbs (a, b < p): p is added back where the difference borrowed, each limb of p
 * picked by a cmov on the zero flag of the borrow mask (set once by a test, which also clears the carry;
 * adcx leaves the zero flag alone). */
#define ADD_P_IF_BORROWED(OFF, REG)                                                                      \
    "movl $0, %%ebx\n\t"                                                                                 \
    "cmovnzq " OFF "(%[p]), %%rbx\n\t"                                                                   \
    "adcxq %%rbx, " REG "\n\t"

static inline __attribute__((always_inline)) void mod_sub6_asm(uint64_t *r, const uint64_t *a, const uint64_t *b,
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
        "movq 32(%[a]), %%r12\n\t"
        "sbbq 32(%[b]), %%r12\n\t"
        "movq 40(%[a]), %%r13\n\t"
        "sbbq 40(%[b]), %%r13\n\t"
        "sbbq %%rbx, %%rbx\n\t"
        "testq %%rbx, %%rbx\n\t"
        ADD_P_IF_BORROWED("0", "%%r8")
        ADD_P_IF_BORROWED("8", "%%r9")
        ADD_P_IF_BORROWED("16", "%%r10")
        ADD_P_IF_BORROWED("24", "%%r11")
        ADD_P_IF_BORROWED("32", "%%r12")
        ADD_P_IF_BORROWED("40", "%%r13")
        "movq %%r8, 0(%[r])\n\t"
        "movq %%r9, 8(%[r])\n\t"
        "movq %%r10, 16(%[r])\n\t"
        "movq %%r11, 24(%[r])\n\t"
        "movq %%r12, 32(%[r])\n\t"
        "movq %%r13, 40(%[r])\n\t"
        :
        : [r] "r"(r), [a] "r"(a), [b] "r"(b), [p] "r"(p)
        : "rbx", "r8", "r9", "r10", "r11", "r12", "r13", "cc", "memory");
}

/* clang-format on */

#endif
