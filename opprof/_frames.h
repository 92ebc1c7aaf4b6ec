/* The user's line, found in C: the innermost frame of the calling thread whose code is not under a
 * list of path prefixes (opprof's own machinery, and what a front end added: see
 * opprof/profiler/sites.py's NOT_USER), as its code object and instruction offset. Shared by
 * opprof/profiler/_memlog.c (where a kept array was made) and opprof/profiler/_spanlog.c (the
 * line that pushed a sub-op inside a custom op's Python).
 *
 * Why C: from Python the walk is sys._getframe and f_back, which make a frame object per step
 * (0.3-1 µs a walk); here it reads the interpreter's own frame list, which makes none: 20-40 ns
 * for the usual 3-5 frames. The line is not computed here (PyCode_Addr2Line scans the code's line
 * table): the caller keeps (code, offset) and resolves it when the trace is built.
 *
 * The frame list is internal and differs per version (the extensions are built per version):
 *   3.10        PyThreadState.frame -> PyFrameObject (f_back, f_code, f_lasti in code units)
 *   3.11, 3.12  PyThreadState.cframe->current_frame -> _PyInterpreterFrame (previous, f_code)
 *   3.13        PyThreadState.current_frame -> _PyInterpreterFrame (previous, f_executable)
 * The including file defines Py_BUILD_CORE_MODULE before Python.h, then includes this. */
#ifndef OPPROF_FRAMES_H
#define OPPROF_FRAMES_H

#include <Python.h>
#include <string.h>
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h" /* _PyInterpreterFrame */
#else
#include <frameobject.h> /* PyFrameObject's fields (public in 3.10) */
#endif

/* Filenames whose "is this the user's code?" is remembered (a walk meets a handful: the engine's,
 * the NDArray module's, the user's cell or script); one past these is checked each time. */
#define OPPROF_FILE_CACHE 64
/* Frames walked towards the user's line, at most (the usual paths take 2-5). */
#define OPPROF_MAX_WALK 24

typedef struct {
    PyObject *not_user; /* a tuple of str path prefixes, or NULL: every file is the user's */
    struct {
        PyObject *file; /* strong: a code object's co_filename */
        int own;        /* 1: under a not_user prefix */
    } files[OPPROF_FILE_CACHE];
    int nfiles;
} opprof_user_code;

/* Forget the remembered files and the prefixes (on a new set of prefixes, or at the end). */
static inline void opprof_user_code_clear(opprof_user_code *u) {
    for (int i = 0; i < u->nfiles; i++) Py_CLEAR(u->files[i].file);
    u->nfiles = 0;
    Py_CLEAR(u->not_user);
}

/* Take ``not_user`` (a tuple of str, or None for no prefix); 0, or -1 with TypeError set. */
static inline int opprof_user_code_set(opprof_user_code *u, PyObject *not_user) {
    if (not_user != NULL && not_user != Py_None) {
        if (!PyTuple_Check(not_user)) {
            PyErr_SetString(PyExc_TypeError, "not_user: a tuple of str path prefixes");
            return -1;
        }
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(not_user); k++)
            if (!PyUnicode_Check(PyTuple_GET_ITEM(not_user, k))) {
                PyErr_SetString(PyExc_TypeError, "not_user: a tuple of str path prefixes");
                return -1;
            }
    }
    opprof_user_code_clear(u);
    if (not_user != NULL && not_user != Py_None) u->not_user = Py_NewRef(not_user);
    return 0;
}

/* Whether ``file`` (a co_filename) is under one of the prefixes: 1 yes, 0 no. Remembered per
 * filename object (a module's code objects share theirs). Runs no Python code. */
static inline int opprof_is_not_user(opprof_user_code *u, PyObject *file) {
    for (int i = 0; i < u->nfiles; i++)
        if (u->files[i].file == file) return u->files[i].own;
    int own = 0;
    Py_ssize_t n;
    const char *path = PyUnicode_Check(file) ? PyUnicode_AsUTF8AndSize(file, &n) : NULL;
    if (path == NULL) {
        PyErr_Clear();
        own = 1; /* not a path: not a line a user could read */
    } else if (u->not_user != NULL) {
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(u->not_user) && !own; k++) {
            Py_ssize_t m;
            const char *prefix = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(u->not_user, k), &m);
            if (prefix == NULL) {
                PyErr_Clear();
                continue;
            }
            own = m <= n && memcmp(path, prefix, (size_t)m) == 0;
        }
    }
    if (u->nfiles < OPPROF_FILE_CACHE) {
        u->files[u->nfiles].file = Py_NewRef(file);
        u->files[u->nfiles++].own = own;
    }
    return own;
}

/* The innermost frame of this thread (it holds the GIL) whose code is the user's: its code
 * (borrowed) and, in ``*offset``, the byte offset of its current instruction (for
 * PyCode_Addr2Line); NULL where none is within OPPROF_MAX_WALK frames. */
static inline PyObject *opprof_user_frame(opprof_user_code *u, int *offset) {
    PyThreadState *ts = PyThreadState_Get();
#if PY_VERSION_HEX >= 0x030D0000
    _PyInterpreterFrame *f = ts->current_frame;
#elif PY_VERSION_HEX >= 0x030B0000
    _PyInterpreterFrame *f = ts->cframe->current_frame;
#else
    PyFrameObject *f = ts->frame;
#endif
    for (int depth = 0; f != NULL && depth < OPPROF_MAX_WALK; depth++) {
#if PY_VERSION_HEX >= 0x030B0000
#if PY_VERSION_HEX >= 0x030C0000
        if (f->owner == FRAME_OWNED_BY_CSTACK) { /* the interpreter's entry shim: no user code */
            f = f->previous;
            continue;
        }
#endif
#if PY_VERSION_HEX >= 0x030D0000
        if (!PyCode_Check(f->f_executable)) {
            f = f->previous;
            continue;
        }
#endif
        if (_PyFrame_IsIncomplete(f)) {
            f = f->previous;
            continue;
        }
#if PY_VERSION_HEX >= 0x030D0000
        PyCodeObject *code = _PyFrame_GetCode(f);
#else
        PyCodeObject *code = f->f_code;
#endif
        if (!opprof_is_not_user(u, code->co_filename)) {
            *offset = _PyInterpreterFrame_LASTI(f) * (int)sizeof(_Py_CODEUNIT);
            return (PyObject *)code;
        }
        f = f->previous;
#else
        PyCodeObject *code = f->f_code;
        if (!opprof_is_not_user(u, code->co_filename)) {
            *offset = f->f_lasti * (int)sizeof(_Py_CODEUNIT);
            return (PyObject *)code;
        }
        f = f->f_back;
#endif
    }
    return NULL;
}

#endif
