/* prooflane.groth16._curvemath: the Python binding of the C core (core.h), the only file that includes
 * Python.h. It parses and checks the arguments, releases the GIL while the core computes, and returns
 * bytes.
 *
 * - msm(curve, group, rows, scalars, threads, window=0): a multi-scalar multiplication over rows of affine
 *   points in Montgomery form, exactly as a .zkey section stores them (no conversion, no copy: the rows
 *   may be a memory-mapped file), with 32-byte little-endian scalars.
 * - msm(..., window, stride): the same over fixed-base tables (fixed_table's), each of `stride` windows.
 * - msm(..., window, 0, endo=1): the same over rows of the subgroup of order r (a checked key's), each
 *   scalar split by the endomorphism (glv.h). Off the subgroup it computes another sum: never for rows
 *   that have not been checked (the subgroup checks themselves use the plain MSM).
 * - fixed_table(curve, group, rows, shift, tables, threads): the rows times 2^(shift·t) for t < tables.
 * - first_off_curve(curve, group, rows): the first row not on the curve, or -1.
 * - first_outside_subgroup(curve, group, rows, threads): BLS12-381's rows (already on the curve) by the
 *   endomorphism tests of subgroup.h: the first outside the subgroup of order r, or -1.
 * - coset_h(curve, a, b, c, n, roots, threads): a·b - c on the odd coset w_2n·<w_n>.
 * - synthesize(curve, matrix, rows, wires, values, witness, n_rows): A·w, B·w and their product.
 * - from_montgomery(curve, values, times): scalar-field values times R^-times.
 * - capabilities(): the CPU's capabilities (cpu.h) by name, detected, built and used; use_capabilities(names)
 *   sets those used (masked by what the CPU has and the build compiled: the caller applies
 *   PROOFLANE_NO_IFMA, the core reads no environment).
 * - kernels(): the kernel set (cpu.h's KERNELS), each with its twin and whether it runs now;
 *   switch_kernel(name, on) switches one (the pair tests).
 * - asm: 1 when the assembly is compiled in (0 in a PROOFLANE_NO_ASM build, and off x86-64).
 *
 * Curves: 0 = BN254 (alt_bn128), 1 = BLS12-381; groups 1 (over Fq) and 2 (over Fq2 = Fq[u]/(u^2 + 1)).
 * Buffers are any C-contiguous bytes-like objects, at any address: the core copies values in and out, it
 * never casts a buffer to a typed pointer. Thread counts are any int, clamped to [1, MAX_THREADS] (64).
 * Results: plain (not Montgomery) little-endian bytes. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core.h"

_Static_assert(sizeof(Py_ssize_t) == sizeof(size_t), "buffer lengths fit size_t");

/* An int converter for PyArg_ParseTuple's "O&": any Python int (or __index__), clamped to [1, MAX_THREADS],
 * so that no thread count reaching the core can overflow a product of it. */
static int threads_arg(PyObject *obj, void *out) {
    PyObject *index = PyNumber_Index(obj);
    if (index == NULL) return 0;
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (value == -1 && PyErr_Occurred()) return 0;
    if (overflow) value = overflow > 0 ? MAX_THREADS : 1;
    *(int *)out = threads_clamp(value);
    return 1;
}

static int check_curve(int curve) {
    if (curve != 0 && curve != 1) {
        PyErr_Format(PyExc_ValueError, "no such curve: %d", curve);
        return -1;
    }
    return 0;
}

static int check_group(int curve, int group) {
    if (!group_exists(curve, group)) {
        PyErr_Format(PyExc_ValueError, "no such curve and group: %d, %d", curve, group);
        return -1;
    }
    return 0;
}

static PyObject *py_msm(PyObject *Py_UNUSED(self), PyObject *args) {
    int curve, group, threads, window = 0, stride = 0, endo = 0;
    Py_buffer rows, scalars;
    if (!PyArg_ParseTuple(args, "iiy*y*O&|iip", &curve, &group, &rows, &scalars, threads_arg, &threads, &window,
                          &stride, &endo))
        return NULL;
    PyObject *result = NULL;
    if (check_group(curve, group) < 0) goto done;
    if (endo && stride != 0) {
        PyErr_SetString(PyExc_ValueError, "the endomorphism split is for rows, not for tables");
        goto done;
    }
    const size_t width = ROW_BYTES(curve, group), have = (size_t)rows.len, given = (size_t)scalars.len;
    const size_t count = given / FR_BYTES;
    if (have % width || given % FR_BYTES || (stride == 0 && have / width != count) ||
        (stride != 0 && (count == 0 || (have / width) % count))) {
        PyErr_Format(PyExc_ValueError, "%zd bytes of rows (%zu a row) against %zd bytes of scalars (32 each)",
                     rows.len, width, scalars.len);
        goto done;
    }
    if (count >= ((size_t)1 << 32)) {
        PyErr_SetString(PyExc_ValueError, "more than 2^32 terms");
        goto done;
    }
    const size_t tables = stride == 0 ? 1 : have / width / count;
    if (stride != 0 && (window < 2 || window > 16 || stride < 1 || stride > 256 || tables > 256)) {
        PyErr_Format(PyExc_ValueError,
                     "tables need a window of 2..16 bits and 1..256 windows a table, "
                     "at most 256 tables (window %d, stride %d, %zu tables)",
                     window, stride, tables);
        goto done;
    }
    unsigned char out[MAX_ROW_BYTES];
    int status;
    Py_BEGIN_ALLOW_THREADS;
    status =
        groups_msm(curve, group, rows.buf, scalars.buf, count, threads, window, (int)tables, stride, endo, out);
    Py_END_ALLOW_THREADS;
    if (status == -2)
        PyErr_Format(PyExc_ValueError, "a scalar has more than the tables' %zu windows of %d bits",
                     tables * (size_t)stride, window);
    else if (status < 0)
        PyErr_NoMemory();
    else
        result = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)width);
done:
    PyBuffer_Release(&rows);
    PyBuffer_Release(&scalars);
    return result;
}

static PyObject *py_fixed_table(PyObject *Py_UNUSED(self), PyObject *args) {
    int curve, group, shift, tables, threads;
    Py_buffer rows;
    if (!PyArg_ParseTuple(args, "iiy*iiO&", &curve, &group, &rows, &shift, &tables, threads_arg, &threads))
        return NULL;
    PyObject *result = NULL;
    if (check_group(curve, group) < 0) goto done;
    const size_t width = ROW_BYTES(curve, group), count = (size_t)rows.len / width;
    if ((size_t)rows.len % width) {
        PyErr_Format(PyExc_ValueError, "%zd bytes are not rows of %zu", rows.len, width);
        goto done;
    }
    if (shift < 1 || shift > 4096 || tables < 1 || tables > 256) {
        PyErr_Format(PyExc_ValueError, "shift %d and tables %d: 1..4096 and 1..256", shift, tables);
        goto done;
    }
    if (count > (size_t)PY_SSIZE_T_MAX / width / (size_t)tables) {
        PyErr_SetString(PyExc_OverflowError, "the table would not fit in memory");
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * width * (size_t)tables));
    if (result == NULL) goto done;
    int status;
    unsigned char *table = (unsigned char *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS;
    status = count ? groups_fixed_table(curve, group, table, rows.buf, count, shift, tables, threads) : 0;
    Py_END_ALLOW_THREADS;
    if (status < 0) {
        Py_CLEAR(result);
        PyErr_NoMemory();
    }
done:
    PyBuffer_Release(&rows);
    return result;
}

static PyObject *py_first_off_curve(PyObject *Py_UNUSED(self), PyObject *args) {
    int curve, group;
    Py_buffer rows;
    if (!PyArg_ParseTuple(args, "iiy*", &curve, &group, &rows)) return NULL;
    PyObject *result = NULL;
    if (check_group(curve, group) < 0) goto done;
    const size_t width = ROW_BYTES(curve, group);
    if ((size_t)rows.len % width) {
        PyErr_Format(PyExc_ValueError, "%zd bytes are not rows of %zu", rows.len, width);
        goto done;
    }
    int64_t found;
    Py_BEGIN_ALLOW_THREADS;
    found = groups_first_off_curve(curve, group, rows.buf, (size_t)rows.len / width);
    Py_END_ALLOW_THREADS;
    result = PyLong_FromLongLong(found);
done:
    PyBuffer_Release(&rows);
    return result;
}

static PyObject *py_first_outside_subgroup(PyObject *Py_UNUSED(self), PyObject *args) {
    int curve, group, threads;
    Py_buffer rows;
    if (!PyArg_ParseTuple(args, "iiy*O&", &curve, &group, &rows, threads_arg, &threads)) return NULL;
    PyObject *result = NULL;
    if (check_group(curve, group) < 0) goto done;
    if (curve != 1) {
        PyErr_SetString(PyExc_ValueError, "the endomorphism subgroup test is BLS12-381's (curve 1)");
        goto done;
    }
    const size_t width = ROW_BYTES(curve, group);
    if ((size_t)rows.len % width) {
        PyErr_Format(PyExc_ValueError, "%zd bytes are not rows of %zu", rows.len, width);
        goto done;
    }
    int64_t found;
    Py_BEGIN_ALLOW_THREADS;
    found = bls_first_outside_subgroup(group, rows.buf, (size_t)rows.len / width, threads);
    Py_END_ALLOW_THREADS;
    result = PyLong_FromLongLong(found);
done:
    PyBuffer_Release(&rows);
    return result;
}

static PyObject *py_coset_h(PyObject *Py_UNUSED(self), PyObject *args) {
    int curve, threads;
    Py_ssize_t n;
    Py_buffer bufs[3], roots;
    if (!PyArg_ParseTuple(args, "iy*y*y*ny*O&", &curve, &bufs[0], &bufs[1], &bufs[2], &n, &roots, threads_arg,
                          &threads))
        return NULL;
    PyObject *result = NULL;
    if (check_curve(curve) < 0) goto done;
    if (n < 1 || (n & (n - 1)) || n > ((Py_ssize_t)1 << NTT_MAX_LOG)) {
        PyErr_Format(PyExc_ValueError, "the domain %zd is not a power of two up to 2^30", n);
        goto done;
    }
    if (bufs[0].len % FR_BYTES || bufs[0].len != bufs[1].len || bufs[0].len != bufs[2].len ||
        bufs[0].len / FR_BYTES > n) {
        PyErr_SetString(PyExc_ValueError, "a, b and c must hold as many 32-byte values, at most the domain");
        goto done;
    }
    if (roots.len != 3 * FR_BYTES) {
        PyErr_SetString(PyExc_ValueError, "roots: w_n, w_2n and 1/n, 32 bytes each");
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, n * FR_BYTES);
    if (result == NULL) goto done;
    const unsigned char *in[3] = {bufs[0].buf, bufs[1].buf, bufs[2].buf};
    unsigned char *h = (unsigned char *)PyBytes_AS_STRING(result);
    int status;
    Py_BEGIN_ALLOW_THREADS;
    status = ntt_coset_h(scalar_field(curve), in, (size_t)bufs[0].len / FR_BYTES, (size_t)n, roots.buf, threads, h);
    Py_END_ALLOW_THREADS;
    if (status < 0) {
        Py_CLEAR(result);
        PyErr_NoMemory();
    }
done:
    for (int v = 0; v < 3; v++) PyBuffer_Release(&bufs[v]);
    PyBuffer_Release(&roots);
    return result;
}

/* a = A·w, b = B·w, c = a∘b over the key's rows, from its (matrix, row, wire, value) terms (values plain). */
static PyObject *py_synthesize(PyObject *Py_UNUSED(self), PyObject *args) {
    int curve;
    Py_ssize_t n_rows;
    Py_buffer matrix, rows, wires, values, witness;
    if (!PyArg_ParseTuple(args, "iy*y*y*y*y*n", &curve, &matrix, &rows, &wires, &values, &witness, &n_rows))
        return NULL;
    PyObject *result = NULL;
    if (check_curve(curve) < 0) goto done;
    const size_t terms = (size_t)matrix.len / 4;
    if (matrix.len % 4 || rows.len % 8 || (size_t)rows.len / 8 != terms || wires.len % 8 ||
        (size_t)wires.len / 8 != terms || values.len % FR_BYTES || (size_t)values.len / FR_BYTES != terms ||
        witness.len % FR_BYTES) {
        PyErr_SetString(PyExc_ValueError, "matrix (u32), rows, wires (i64) and values (32 bytes) must be as many");
        goto done;
    }
    if (n_rows < 0 || n_rows > SYNTH_MAX_ROWS) {
        PyErr_Format(PyExc_ValueError, "n_rows %zd is not in 0..2^30", n_rows);
        goto done;
    }
    const field_t *f = scalar_field(curve);
    const size_t n_wires = (size_t)witness.len / FR_BYTES;
    const synth_terms t = {matrix.buf, rows.buf, wires.buf, values.buf, terms};
    int64_t bad;
    Py_BEGIN_ALLOW_THREADS;
    bad = synth_first_bad_witness(f, witness.buf, n_wires);
    Py_END_ALLOW_THREADS;
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "witness value %lld is not below the field", (long long)bad);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS;
    bad = synth_first_bad_term(&t, (int64_t)n_rows, (int64_t)n_wires);
    Py_END_ALLOW_THREADS;
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "term %lld: matrix %u, row %lld, wire %lld out of range", (long long)bad,
                     (unsigned)synth_matrix(&t, (size_t)bad), (long long)synth_row(&t, (size_t)bad),
                     (long long)synth_wire(&t, (size_t)bad));
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, 3 * FR_BYTES * n_rows);
    if (result == NULL) goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    int status;
    Py_BEGIN_ALLOW_THREADS;
    status = synth_rows(f, &t, witness.buf, (size_t)n_rows, out);
    Py_END_ALLOW_THREADS;
    if (status < 0) {
        Py_CLEAR(result);
        PyErr_NoMemory();
    }
done:
    PyBuffer_Release(&matrix);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&wires);
    PyBuffer_Release(&values);
    PyBuffer_Release(&witness);
    return result;
}

/* Scalar-field values out of Montgomery form `times` times: x·R^-times mod r for any 32-byte x (a .zkey
 * stores its coefficients as c·R^2). */
static PyObject *py_from_montgomery(PyObject *Py_UNUSED(self), PyObject *args) {
    int curve, times;
    Py_buffer values;
    if (!PyArg_ParseTuple(args, "iy*i", &curve, &values, &times)) return NULL;
    PyObject *result = NULL;
    if ((curve != 0 && curve != 1) || values.len % FR_BYTES || times < 0 || times > 4) {
        PyErr_SetString(PyExc_ValueError, "from_montgomery(curve 0 or 1, 32-byte values, times 0..4)");
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, values.len);
    if (result == NULL) goto done;
    const unsigned char *in = values.buf;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS;
    fr_from_montgomery(scalar_field(curve), in, out, (size_t)values.len / FR_BYTES, times);
    Py_END_ALLOW_THREADS;
done:
    PyBuffer_Release(&values);
    return result;
}

/* A tuple of the names of the capabilities in `word`. */
static PyObject *capability_names(unsigned word) {
    PyObject *names = PyList_New(0);
    for (int i = 0; names != NULL && i < CPU_CAPABILITY_COUNT; i++) {
        if (!(word & CPU_CAPABILITIES[i].bit)) continue;
        PyObject *name = PyUnicode_FromString(CPU_CAPABILITIES[i].name);
        if (name == NULL || PyList_Append(names, name) < 0) Py_CLEAR(names);
        Py_XDECREF(name);
    }
    PyObject *tuple = names == NULL ? NULL : PyList_AsTuple(names);
    Py_XDECREF(names);
    return tuple;
}

static PyObject *py_capabilities(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(args)) {
    PyObject *detected = capability_names(cpu_detected), *built = capability_names(CPU_BUILT);
    PyObject *used = capability_names(cpu_used), *result = NULL;
    if (detected != NULL && built != NULL && used != NULL)
        result = Py_BuildValue("{sOsOsO}", "detected", detected, "built", built, "used", used);
    Py_XDECREF(detected);
    Py_XDECREF(built);
    Py_XDECREF(used);
    return result;
}

/* use_capabilities(names): the word of the named capabilities (each one of CPU_CAPABILITIES), to cpu_use. */
static PyObject *py_use_capabilities(PyObject *Py_UNUSED(self), PyObject *arg) {
    PyObject *items = PySequence_Fast(arg, "use_capabilities takes a sequence of capability names");
    if (items == NULL) return NULL;
    unsigned want = 0;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(items); k++) {
        const char *name = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(items, k));
        int i = 0;
        while (name != NULL && i < CPU_CAPABILITY_COUNT && strcmp(name, CPU_CAPABILITIES[i].name) != 0) i++;
        if (name == NULL || i == CPU_CAPABILITY_COUNT) {
            if (name != NULL) PyErr_Format(PyExc_ValueError, "no such capability: %s", name);
            Py_DECREF(items);
            return NULL;
        }
        want |= CPU_CAPABILITIES[i].bit;
    }
    Py_DECREF(items);
    return capability_names(cpu_use(want));
}

static PyObject *py_kernels(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(args)) {
    PyObject *result = PyTuple_New(KERNEL_COUNT);
    for (int k = 0; result != NULL && k < KERNEL_COUNT; k++) {
        const kernel_t *kernel = &KERNELS[k];
        PyObject *needs = capability_names(kernel->needs);
        PyObject *curves = PyList_New(0);
        for (long curve = 0; curves != NULL && curve < 2; curve++) { /* ids: 0 BN254, 1 BLS12-381 */
            if (!((kernel->curves >> curve) & 1)) continue;
            PyObject *id = PyLong_FromLong(curve);
            if (id == NULL || PyList_Append(curves, id) < 0) Py_CLEAR(curves);
            Py_XDECREF(id);
        }
        PyObject *item = needs == NULL || curves == NULL
                             ? NULL
                             : Py_BuildValue("{sssOsssssOsO}", "name", kernel->name, "needs", needs, "twin",
                                             kernel->twin, "serves", kernel->serves, "curves", curves, "runs",
                                             kernel_runs(k) ? Py_True : Py_False);
        Py_XDECREF(needs);
        Py_XDECREF(curves);
        if (item == NULL)
            Py_CLEAR(result);
        else
            PyTuple_SET_ITEM(result, k, item);
    }
    return result;
}

static PyObject *py_switch_kernel(PyObject *Py_UNUSED(self), PyObject *args) {
    const char *name;
    int on;
    if (!PyArg_ParseTuple(args, "sp", &name, &on)) return NULL;
    for (int k = 0; k < KERNEL_COUNT; k++)
        if (strcmp(name, KERNELS[k].name) == 0) return PyBool_FromLong(kernel_switch(k, on));
    PyErr_Format(PyExc_ValueError, "no such kernel: %s", name);
    return NULL;
}

static PyMethodDef methods[] = {
    {"capabilities", py_capabilities, METH_NOARGS,
     "capabilities() -> dict: the CPU's capabilities by name: 'detected' (read from the CPU), 'built' (this build "
     "has kernels for them) and 'used' (the kernels may use them now)"},
    {"use_capabilities", py_use_capabilities, METH_O,
     "use_capabilities(names) -> tuple: let the kernels use these capabilities (those the CPU has and the build "
     "compiled); the capabilities now used"},
    {"kernels", py_kernels, METH_NOARGS,
     "kernels() -> tuple of dicts: the kernel set, each fast kernel with the capabilities it needs ('needs'), its "
     "scalar twin, what it serves, its curves (0, 1) and whether it runs now ('runs')"},
    {"switch_kernel", py_switch_kernel, METH_VARARGS,
     "switch_kernel(name, on) -> bool: a kernel on (where its capabilities are used) or off (its twin runs); "
     "whether it runs now"},
    {"from_montgomery", py_from_montgomery, METH_VARARGS,
     "from_montgomery(curve, values, times) -> bytes: scalar-field values times R^-times"},
    {"synthesize", py_synthesize, METH_VARARGS,
     "synthesize(curve, matrix, rows, wires, values, witness, n_rows) -> bytes: A·w, B·w and their product"},
    {"msm", py_msm, METH_VARARGS,
     "msm(curve, group, rows, scalars, threads, window=0, stride=0, endo=False) -> bytes: sum of "
     "scalars[k]·rows[k], plain affine coordinates (window: the window width, 2..16; 0 chooses; stride: rows "
     "are fixed_table's tables of `stride` windows each; endo: the rows lie in the subgroup of order r, split "
     "each scalar by the endomorphism)"},
    {"fixed_table", py_fixed_table, METH_VARARGS,
     "fixed_table(curve, group, rows, shift, tables, threads) -> bytes: tables of the rows times 2^(shift·t), "
     "t < tables, in the rows' form"},
    {"first_off_curve", py_first_off_curve, METH_VARARGS,
     "first_off_curve(curve, group, rows) -> int: the first row not on the curve, or -1"},
    {"first_outside_subgroup", py_first_outside_subgroup, METH_VARARGS,
     "first_outside_subgroup(curve, group, rows, threads) -> int: BLS12-381 only (curve 1): the first row (on "
     "the curve) outside the subgroup of order r, by the endomorphism tests, or -1"},
    {"coset_h", py_coset_h, METH_VARARGS,
     "coset_h(curve, a, b, c, n, roots, threads) -> bytes: a·b - c on the odd coset"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_curvemath", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__curvemath(void) {
    const uint16_t probe = 1;
    if (*(const unsigned char *)&probe != 1) {
        PyErr_SetString(PyExc_ImportError, "the native prover needs a little-endian machine");
        return NULL;
    }
    core_init();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "asm", CORE_ASM) < 0 ||
        PyModule_AddIntConstant(m, "max_threads", MAX_THREADS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
