/* prooflane's C core, all of it and free of Python: the four groups' group law and MSM (groups.h), the
 * quotient's NTT (ntt.h), synthesis (synthesis.h) and scalars out of Montgomery form (fr.h). module.c,
 * the binding, includes this header (one translation unit: a unity build). core_init() must run once
 * before anything else. Results are plain (not Montgomery) little-endian bytes.
 *
 *   cpu.h        the CPU's capabilities, read in one place; the kernel set (each fast kernel beside its twin)
 *                and which kernels run
 *   limbs.h      limb types and comparisons
 *   field.h      Montgomery arithmetic over a field_t (portable C; mont_x86.h's assembly on x86-64 unless
 *                PROOFLANE_NO_ASM is defined)
 *   inverse.h    inversion by safegcd divsteps
 *   towers.h     both curves' fields: constants, Fq and Fq2 element types, each curve's b
 *   curve.h      the group law (a template over a coordinate field)
 *   glv.h        the GLV split of a scalar by the curves' endomorphism
 *   ifma.h       BN254 G1's batched affine additions eight at a time with AVX-512 IFMA
 *   msm.h        Pippenger with signed digits (a template, after curve.h)
 *   threads.h    the thread cap and the worker pool of one call
 *   groups.h     the four groups instantiated; MSM and on-curve check by curve and group
 *   subgroup.h   BLS12-381's subgroup tests by endomorphism, point by point
 *   fr.h, ntt.h, synthesis.h   the scalar field, the coset NTT, synthesis
 *   ifma_ntt.h   the coset NTT's arithmetic eight values at a time with AVX-512 IFMA */
#ifndef PROOFLANE_CORE_H
#define PROOFLANE_CORE_H

#include "groups.h"
#include "subgroup.h"
#include "ntt.h"
#include "ifma_ntt.h"
#include "synthesis.h"

/* 1 when the assembly is compiled in (and used: its sums and differences run on every x86-64 CPU). */
#define CORE_ASM HAVE_MONT_ASM

static void core_init(void) {
    cpu_init();
    towers_init();
    ifma_init();
}

#endif
