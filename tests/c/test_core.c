/* The C core's own tests, free of Python (docs/groth16.md, "The C extension": the lanes): every entry point
 * of core.h against known answers from the Python reference (tests/c/vectors.py writes them), under every
 * kernel set this CPU and build allow: all of cpu.h's kernels that run, each of them switched off alone
 * (its twin then runs) and none. So each fast kernel is tested against its twin and both against the
 * reference, on every curve and group. A kernel whose capability is missing is named and skipped, and
 * fails the run where PROOFLANE_EXPECT_IFMA=1 asks for the IFMA kernels. Built natively and, in `make
 * test`, for aarch64, run there under qemu-user.
 *
 *     test_core VECTORS        exit 0 when every check passed; the last line "test_core: N passed, N failed" */
#include <stdio.h>
#include <stdlib.h>

#include "core.h"

enum { MSM = 1, NTT, SYNTH, FROM_MONT, OFF_CURVE, SUBGROUP };
#define MAX_BLOBS 8

typedef struct {
    const unsigned char *data;
    size_t len;
} blob_t;

typedef struct {
    uint32_t kind, curve, group, param[4], spare, count;
    blob_t blob[MAX_BLOBS];
} record_t;

static int passed = 0, failed = 0;

static const char *KINDS[] = {
    "", "msm", "ntt", "synthesis", "from_montgomery", "first_off_curve", "first_outside_subgroup"};

/* One comparison: counted, and a failure named by its record, its call and the kernels that ran. */
static void check(int ok, size_t index, const record_t *r, const char *call) {
    if (ok) {
        passed++;
        return;
    }
    failed++;
    fprintf(stderr, "FAILED record %zu (%s, curve %u, group %u, %s) with kernels", index, KINDS[r->kind], r->curve,
            r->group, call);
    for (int k = 0; k < KERNEL_COUNT; k++)
        if (kernel_runs(k)) fprintf(stderr, " %s", KERNELS[k].name);
    fprintf(stderr, "\n");
}

static uint32_t u32_at(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static int64_t i64_of(const blob_t *b) {
    int64_t v = 0;
    if (b->len == 8) memcpy(&v, b->data, 8);
    return v;
}

/* The records of the file read whole into `data`; returns their number, or -1 for a malformed file. */
static long read_records(const unsigned char *data, size_t len, record_t **out) {
    if (len < 8 || memcmp(data, "PLVEC1\0\0", 8) != 0) return -1;
    size_t at = 8, count = 0, room = 64;
    record_t *records = malloc(room * sizeof *records);
    while (records != NULL && at < len) {
        if (len - at < 36) break;
        record_t r;
        memset(&r, 0, sizeof r);
        uint32_t *fields[9] = {&r.kind,     &r.curve,    &r.group, &r.param[0], &r.param[1],
                               &r.param[2], &r.param[3], &r.spare, &r.count};
        for (int i = 0; i < 9; i++) *fields[i] = u32_at(data + at + 4 * (size_t)i);
        at += 36;
        if (r.count > MAX_BLOBS || r.kind < MSM || r.kind > SUBGROUP) break;
        uint32_t i = 0;
        for (; i < r.count && len - at >= 8; i++) {
            uint64_t n;
            memcpy(&n, data + at, 8);
            at += 8;
            if (n > len - at) break;
            r.blob[i] = (blob_t){.data = data + at, .len = (size_t)n};
            at += (size_t)n;
        }
        if (i < r.count) break;
        if (count == room) {
            record_t *more = realloc(records, 2 * room * sizeof *records);
            if (more == NULL) break;
            records = more;
            room *= 2;
        }
        records[count++] = r;
    }
    if (records == NULL || at != len) {
        free(records);
        return -1;
    }
    *out = records;
    return (long)count;
}

static void run_msm(size_t index, const record_t *r) {
    const blob_t *rows = &r->blob[0], *scalars = &r->blob[1], *want = &r->blob[2], *calls = &r->blob[3];
    const int curve = (int)r->curve, group = (int)r->group, stride = (int)r->param[0];
    const size_t count = scalars->len / FR_BYTES, width = ROW_BYTES(curve, group);
    for (size_t c = 0; c + 12 <= calls->len; c += 12) {
        const int window = (int)u32_at(calls->data + c), threads = (int)u32_at(calls->data + c + 4);
        const int endo = (int)u32_at(calls->data + c + 8);
        unsigned char out[MAX_ROW_BYTES], *table = NULL;
        const unsigned char *bases = rows->data;
        int tables = 1;
        if (stride > 0) { /* tables for scalars of up to 256 bits: 258 bits of signed windows */
            tables = ((258 + window - 1) / window + stride - 1) / stride;
            table = malloc(count * width * (size_t)tables);
            if (table == NULL ||
                groups_fixed_table(curve, group, table, rows->data, count, window * stride, tables, threads) != 0) {
                check(0, index, r, "fixed_table");
                free(table);
                continue;
            }
            bases = table;
        }
        const int status =
            groups_msm(curve, group, bases, scalars->data, count, threads, window, tables, stride, endo, out);
        char call[96];
        snprintf(call, sizeof call, "window %d, threads %d, endo %d, stride %d", window, threads, endo, stride);
        check(status == 0 && want->len == width && memcmp(out, want->data, width) == 0, index, r, call);
        free(table);
    }
}

static void run_ntt(size_t index, const record_t *r) {
    const size_t n = r->param[0], m = r->blob[0].len / FR_BYTES;
    const unsigned char *in[3] = {r->blob[0].data, r->blob[1].data, r->blob[2].data};
    unsigned char *h = malloc(n * FR_BYTES);
    for (int threads = 1; h != NULL && threads <= 4; threads *= 2) {
        const int status = ntt_coset_h(scalar_field((int)r->curve), in, m, n, r->blob[3].data, threads, h);
        char call[48];
        snprintf(call, sizeof call, "n %zu, threads %d", n, threads);
        check(status == 0 && r->blob[4].len == n * FR_BYTES && memcmp(h, r->blob[4].data, n * FR_BYTES) == 0, index,
              r, call);
    }
    if (h == NULL) check(0, index, r, "memory");
    free(h);
}

static void run_synthesis(size_t index, const record_t *r) {
    const field_t *f = scalar_field((int)r->curve);
    const size_t n_rows = r->param[0], n_wires = r->blob[4].len / FR_BYTES;
    const synth_terms t = {r->blob[0].data, r->blob[1].data, r->blob[2].data, r->blob[3].data, r->blob[0].len / 4};
    unsigned char *out = malloc(3 * FR_BYTES * n_rows);
    const int ok = out != NULL && synth_first_bad_witness(f, r->blob[4].data, n_wires) < 0 &&
                   synth_first_bad_term(&t, (int64_t)n_rows, (int64_t)n_wires) < 0 &&
                   synth_rows(f, &t, r->blob[4].data, n_rows, out) == 0;
    check(ok && r->blob[5].len == 3 * FR_BYTES * n_rows && memcmp(out, r->blob[5].data, r->blob[5].len) == 0, index,
          r, "A·w, B·w, A·w∘B·w");
    free(out);
}

static void run_from_montgomery(size_t index, const record_t *r) {
    const size_t len = r->blob[0].len;
    unsigned char *out = malloc(len ? len : 1);
    if (out != NULL)
        fr_from_montgomery(scalar_field((int)r->curve), r->blob[0].data, out, len / FR_BYTES, (int)r->param[0]);
    check(out != NULL && r->blob[1].len == len && memcmp(out, r->blob[1].data, len) == 0, index, r, "times");
    free(out);
}

static void run_off_curve(size_t index, const record_t *r) {
    const size_t width = ROW_BYTES((int)r->curve, (int)r->group);
    const int64_t found =
        groups_first_off_curve((int)r->curve, (int)r->group, r->blob[0].data, r->blob[0].len / width);
    check(found == i64_of(&r->blob[1]), index, r, "rows");
}

static void run_subgroup(size_t index, const record_t *r) {
    const size_t width = ROW_BYTES((int)r->curve, (int)r->group);
    for (int threads = 1; threads <= 2; threads++) {
        const int64_t found =
            bls_first_outside_subgroup((int)r->group, r->blob[0].data, r->blob[0].len / width, threads);
        check(r->curve == 1 && found == i64_of(&r->blob[1]), index, r, threads == 1 ? "1 thread" : "2 threads");
    }
}

static void run(size_t index, const record_t *r) {
    static const uint32_t blobs[] = {0, 4, 5, 6, 2, 2, 2};
    if (r->count != blobs[r->kind]) {
        check(0, index, r, "its blobs");
        return;
    }
    switch (r->kind) {
    case MSM: run_msm(index, r); break;
    case NTT: run_ntt(index, r); break;
    case SYNTH: run_synthesis(index, r); break;
    case FROM_MONT: run_from_montgomery(index, r); break;
    case OFF_CURVE: run_off_curve(index, r); break;
    default: run_subgroup(index, r); break;
    }
}

/* Whether kernel k serves a record of `kind` (the products serve every one). */
static int serves(int k, uint32_t kind) {
    const char *s = KERNELS[k].serves;
    return strcmp(s, "products") == 0 || (strcmp(s, "msm") == 0 && kind == MSM) ||
           (strcmp(s, "ntt") == 0 && kind == NTT) || (strcmp(s, "subgroup") == 0 && kind == SUBGROUP);
}

/* The record under every kernel set: all that run, each one of those that serve it off alone, none. */
static void run_every_pair(size_t index, const record_t *r, unsigned available) {
    run(index, r);
    for (int k = 0; k < KERNEL_COUNT; k++) {
        if (!((available >> k) & 1) || !serves(k, r->kind)) continue;
        kernel_switch(k, 0);
        run(index, r);
        kernel_switch(k, 1);
    }
    if (available) {
        for (int k = 0; k < KERNEL_COUNT; k++) kernel_switch(k, 0);
        run(index, r);
        for (int k = 0; k < KERNEL_COUNT; k++) kernel_switch(k, 1);
    }
}

/* The bounds ifma.h's and ifma_ntt.h's lanes rely on, against each modulus they take (5 limbs of 52 bits,
 * R = 2^256: BN254's q and both r; 8 limbs, R = 2^416: BLS12-381's q). A product of operands below 2p
 * (an unreduced sum: Fq2's Karatsuba) ends below 2p, so one subtraction reduces it, where 4p < R; a
 * product of operands below p (the NTT's: every value reduced) where p < R (so p fits the limbs). */
static int bit_length(const u64 *a, int n) {
    for (int i = n - 1; i >= 0; i--)
        if (a[i]) return 64 * i + 64 - __builtin_clzll(a[i]);
    return 0;
}

static void check_lane_bounds(void) {
    const struct {
        const char *name;
        const field_t *p;
        int rbits, sums; /* R = 2^rbits; sums: unreduced sums feed its products */
    } lanes[] = {{"BN254 q (batches, bucket sums)", &BN_Q, 256, 1},
                 {"BN254 r (NTT)", &BN_R, 256, 0},
                 {"BLS12-381 r (NTT)", &BLS_R, 256, 0},
                 {"BLS12-381 q (subgroup tests)", &BLS_Q, 416, 1}};
    for (size_t i = 0; i < sizeof lanes / sizeof lanes[0]; i++) {
        const int bits = bit_length(lanes[i].p->p, lanes[i].p->n);
        const int ok = bits + (lanes[i].sums ? 2 : 0) <= lanes[i].rbits;
        if (!ok) fprintf(stderr, "FAILED the lanes' bound for %s (%d bits)\n", lanes[i].name, bits);
        passed += ok;
        failed += !ok;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_core VECTORS (tests/c/vectors.py writes them)\n");
        return 2;
    }
    FILE *file = fopen(argv[1], "rb");
    if (file == NULL) {
        perror(argv[1]);
        return 2;
    }
    fseek(file, 0, SEEK_END);
    const long size = ftell(file);
    fseek(file, 0, SEEK_SET);
    unsigned char *data = size > 0 ? malloc((size_t)size) : NULL;
    const int read = data != NULL && fread(data, 1, (size_t)size, file) == (size_t)size;
    fclose(file);
    record_t *records = NULL;
    const long count = read ? read_records(data, (size_t)size, &records) : -1;
    if (count < 0) {
        fprintf(stderr, "%s: not a file of vectors (tests/c/vectors.py)\n", argv[1]);
        return 2;
    }
    core_init();
    const char *expect = getenv("PROOFLANE_EXPECT_IFMA"); /* the test's, never the core's */
    const int expect_ifma = expect != NULL && expect[0] != '\0' && strcmp(expect, "0") != 0;
    unsigned available = 0;
    for (int k = 0; k < KERNEL_COUNT; k++) {
        if (kernel_runs(k)) {
            available |= 1u << k;
            printf("kernel %s: against its twin %s\n", KERNELS[k].name, KERNELS[k].twin);
            continue;
        }
        const char *why = KERNELS[k].needs & ~CPU_BUILT ? "this build has no assembly" : "this CPU lacks it";
        const char *needs = "?";
        for (int i = 0; i < CPU_CAPABILITY_COUNT; i++)
            if (KERNELS[k].needs & CPU_CAPABILITIES[i].bit) needs = CPU_CAPABILITIES[i].name;
        printf("SKIPPED kernel %s: needs %s (%s); its twin %s runs\n", KERNELS[k].name, needs, why,
               KERNELS[k].twin);
        if (expect_ifma && KERNELS[k].needs & CPU_IFMA) {
            fprintf(stderr, "FAILED PROOFLANE_EXPECT_IFMA is set, but kernel %s does not run\n", KERNELS[k].name);
            failed++;
        }
    }
    check_lane_bounds();
    for (long i = 0; i < count; i++) run_every_pair((size_t)i, &records[i], available);
    printf("test_core: %d passed, %d failed\n", passed, failed);
    free(records);
    free(data);
    return failed ? 1 : 0;
}
