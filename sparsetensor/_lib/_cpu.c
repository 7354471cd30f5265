/* What the CPU supports, for the choice of the kernels' instruction-set level
 * (sparsetensor/_lib/__init__.py). Built without -march flags, so that it runs on every
 * CPU of its architecture: a CPU below the baseline gets an ImportError, not SIGILL.
 *
 *   x86_64_levels() -> tuple of the x86-64 psABI levels (2, 3, 4) the CPU and OS support
 *   features() -> dict of the features the levels are made of (empty off x86-64)
 *
 * __builtin_cpu_supports reads CPUID and, for AVX and AVX-512, whether the OS saves the
 * vector registers (XGETBV). GCC >= 12 knows the levels by name; elsewhere a level is
 * its SIMD features (every CPU with them has the level's scalar extras too).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define ST_X86 1
#define ST_HAS(name) (__builtin_cpu_supports(name) != 0)
#if defined(__clang__) || __GNUC__ < 12
#define ST_V2 (ST_HAS("sse3") && ST_HAS("ssse3") && ST_HAS("sse4.1") && ST_HAS("sse4.2") && ST_HAS("popcnt"))
#define ST_V3 (ST_V2 && ST_HAS("avx") && ST_HAS("avx2") && ST_HAS("fma") && ST_HAS("bmi") && ST_HAS("bmi2"))
#define ST_V4 (ST_V3 && ST_HAS("avx512f") && ST_HAS("avx512bw") && ST_HAS("avx512cd") && \
               ST_HAS("avx512dq") && ST_HAS("avx512vl"))
#else
#define ST_V2 ST_HAS("x86-64-v2")
#define ST_V3 ST_HAS("x86-64-v3")
#define ST_V4 ST_HAS("x86-64-v4")
#endif
#endif

static PyObject *x86_64_levels(PyObject *self, PyObject *unused) {
#ifdef ST_X86
    __builtin_cpu_init();
    int v2 = ST_V2, v3 = v2 && ST_V3, v4 = v3 && ST_V4;
    if (v4) return Py_BuildValue("(iii)", 2, 3, 4);
    if (v3) return Py_BuildValue("(ii)", 2, 3);
    if (v2) return Py_BuildValue("(i)", 2);
#endif
    return PyTuple_New(0);
}

static int add_feature(PyObject *d, const char *name, int value) {
    return PyDict_SetItemString(d, name, value ? Py_True : Py_False);
}

#define ST_FEATURE(name) if (add_feature(d, name, ST_HAS(name)) < 0) goto fail;

static PyObject *features(PyObject *self, PyObject *unused) {
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
#ifdef ST_X86
    __builtin_cpu_init();
    ST_FEATURE("sse4.2") ST_FEATURE("popcnt") ST_FEATURE("avx") ST_FEATURE("avx2")
    ST_FEATURE("fma") ST_FEATURE("bmi2") ST_FEATURE("avx512f") ST_FEATURE("avx512bw")
    ST_FEATURE("avx512cd") ST_FEATURE("avx512dq") ST_FEATURE("avx512vl")
#endif
    return d;
#ifdef ST_X86
fail:
    Py_DECREF(d);
    return NULL;
#endif
}

static PyMethodDef methods[] = {
    {"x86_64_levels", x86_64_levels, METH_NOARGS, "The x86-64 levels (2, 3, 4) this CPU supports."},
    {"features", features, METH_NOARGS, "The CPU features the x86-64 levels are made of."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cpu", NULL, 0, methods};

PyMODINIT_FUNC PyInit__cpu(void) { return PyModule_Create(&module); }
