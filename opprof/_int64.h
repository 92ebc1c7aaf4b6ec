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
#include <limits.h>
#include <stdint.h>

static inline int64_t opprof_as_i64(PyObject *v) {
#if LONG_MAX == INT64_MAX
    return (int64_t)PyLong_AsLong(v);
#else
    return (int64_t)PyLong_AsLongLong(v);
#endif
}

#endif
