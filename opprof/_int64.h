/* A Python int read as an int64 in opprof's compiled recorders, on their hot paths.
 *
 * Why not PyLong_AsLongLong: on CPython 3.11 it reads any int of two or more 30-bit digits (every
 * value from 2^30 up: each timestamp in ns, a var id or op seq past a billion) through
 * _PyLong_AsByteArray, a byte-at-a-time loop. On a threaded loop of 10x10 ``a = a + 1`` profiled,
 * that was 541 of the 2,840 instructions an op the recorder added on the engine's workers
 * (callgrind, 2026-12-05): the push's timestamp and the op's ready time, read back each op.
 * PyLong_AsLong folds the digits in a register, and a C long is 64 bits wherever these are built
 * (LP64 Linux); elsewhere the long long call stays. Same values, same errors (-1 with an
 * exception set: OverflowError past int64, TypeError for a non-int). */
#ifndef OPPROF_INT64_H
#define OPPROF_INT64_H

#include <Python.h>
#if PY_VERSION_HEX >= 0x030B0000
#include <cpython/longintrepr.h> /* PyLongObject's digits */
#else
#include <longintrepr.h>
#endif
#include <limits.h>
#include <stdint.h>

/* An exact int of at most two digits (|v| < 2^60 with 30-bit digits: every timestamp in ns, seq and
 * id) read off its digits, inline: PyLong_AsLong is a call that loops over the digits, and the
 * recorders read several ints an op (a threaded trivial custom-op call's recording: 1,800 of the
 * 22,900 instructions it added, callgrind, 2026-12-06). The layout is each version's own (built
 * per version): the signed digit count in ob_size up to 3.11, the count and sign in lv_tag from
 * 3.12. Anything else (more digits, a subclass such as bool, not an int) takes the call. */
static inline int opprof_small_int(PyObject *v, int64_t *out) {
    if (!PyLong_CheckExact(v)) return 0;
#if PY_VERSION_HEX >= 0x030C0000
    uintptr_t tag = ((PyLongObject *)v)->long_value.lv_tag;
    const digit *d = ((PyLongObject *)v)->long_value.ob_digit;
    uintptr_t n = tag >> _PyLong_NON_SIZE_BITS;
    int negative = (tag & _PyLong_SIGN_MASK) == 2; /* 0: positive, 1: zero, 2: negative */
#else
    Py_ssize_t size = Py_SIZE(v);
    const digit *d = ((PyLongObject *)v)->ob_digit;
    size_t n = (size_t)(size < 0 ? -size : size);
    int negative = size < 0;
#endif
    if (n > 2) return 0;
    int64_t x = n == 0 ? 0 : n == 1 ? (int64_t)d[0] : (int64_t)d[0] | ((int64_t)d[1] << PyLong_SHIFT);
    *out = negative ? -x : x;
    return 1;
}

static inline int64_t opprof_as_i64(PyObject *v) {
    int64_t x;
    if (opprof_small_int(v, &x)) return x;
#if LONG_MAX == INT64_MAX
    return (int64_t)PyLong_AsLong(v);
#else
    return (int64_t)PyLong_AsLongLong(v);
#endif
}

#endif
