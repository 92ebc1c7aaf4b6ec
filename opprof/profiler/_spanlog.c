/* opprof.profiler._spanlog: the recorder's hot path, in C.
 *
 * Why C: a plain op's span recorded by the Python recorder cost ~1.1 µs (a thread-local lookup, a
 * tuple of 11 fields the garbage collector tracks, attribute reads, a frame); a span in plain
 * Python is ~0.13 µs at best. Here the engine's two hooks for a plain op (``on_push`` on the pusher,
 * ``run`` around the op on the thread that runs it) are C functions that read the op's slots at
 * their offsets, read CLOCK_MONOTONIC (what ``time.perf_counter_ns`` reads on Linux: the recording
 * mixes both clocks), and append one fixed-size record of int64s to a per-thread log found through
 * a C thread-local. Names become small integer codes (one dict lookup of an interned str), the vars
 * their ids. Nothing per span is a Python object, so nothing is left for the garbage collector.
 *
 * ``on_push`` notes every op's push in the Python recorder's shape (inside a custom op's Python
 * with its invocation and the user's line, found in C as (code, offset): see ../_frames.h). At ``run``, a
 * sub-op (pushed inside a custom op's Python) and a custom op's own two ops are kept as the same
 * tuples the Python recorder appends, in the same lists (``sub``, ``fam``, ``deps``), as is a
 * custom op's Python (``on_python``) and a sub-op the naive engine pushes and runs at once; an op
 * of any other info goes to the Python recorder's ``run``, unchanged: this module is a fast lane
 * beside it, not a second recorder (tests/profiler/test_compiled_recorder.py holds them equal). The build after stop() reads each log as columns
 * (``PlainLog.columns``: the records' bytes, for ``numpy.frombuffer``), so no record becomes a
 * Python object there either.
 *
 * A log is chunked (CHUNK records a chunk, never moved): a live view may read a thread's log while
 * that thread appends (both with the GIL held; nothing here releases it).
 */
#define PY_SSIZE_T_CLEAN
#ifndef Py_BUILD_CORE_MODULE
#define Py_BUILD_CORE_MODULE /* ../_frames.h reads the interpreter's frame list from the internal headers */
#endif
#include <Python.h>

#include "../_frames.h"    /* opprof_user_frame(): the user's line that pushed a sub-op */
#include "../_monotonic.h" /* monotonic_ns(): the clock perf_counter_ns reads */
#include <structmember.h>

#if defined(Py_GIL_DISABLED)
#error "opprof.profiler._spanlog relies on the GIL to serialise its logs"
#endif

#include <stdint.h>
#include <time.h>

/* An Invocation a record refers to, out of the garbage collector's sight too: a frozen dataclass of
 * a str, an int and a bool, in no cycle, and one a custom-op call that the profile keeps until it
 * stops (their growth, not the records', set off a full collection every ~2,000 calls: 24 ms each). */
static inline void untrack_invocation(PyObject *inv) {
    if (inv != Py_None && PyObject_IS_GC(inv)) PyObject_GC_UnTrack(inv);
}

/* One plain op, in the order of opprof/profiler/build.py's T0 ... WRITES (NAME as a code into the
 * recorder's names; READS/WRITES a var id (ids start at 1), or -(k+1) for the log's k-th extra, a
 * tuple of ids, for an op with none or several vars). */
typedef struct {
    int64_t t0, t1, name, seq, push, pusher, ready, by, by_var, reads, writes;
} plain_t;
#define FIELDS 11
#define CHUNK 4096

/* ------------------------------------------------------------------ slots read at their offsets */
/* A __slots__ attribute of a known class read without the attribute machinery (~15 ns a read
 * saved); any other type goes through getattr. */
typedef struct {
    PyTypeObject *type;
    Py_ssize_t offset;
    PyObject *name;
} slot_t;

static int slot_init(slot_t *s, PyObject *type, const char *name) {
    s->type = (PyTypeObject *)type;
    s->offset = -1;
    s->name = PyUnicode_InternFromString(name);
    if (s->name == NULL) return -1;
    PyObject *d = PyObject_GetAttr(type, s->name);
    if (d == NULL) return -1;
    if (Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX) s->offset = m->offset;
    }
    Py_DECREF(d);
    return 0;
}

/* A new reference, or NULL with an exception set. */
static inline PyObject *slot_get(slot_t *s, PyObject *obj) {
    if (s->offset >= 0 && Py_TYPE(obj) == s->type) {
        PyObject *v = *(PyObject **)((char *)obj + s->offset);
        if (v != NULL) {
            Py_INCREF(v);
            return v;
        }
    }
    return PyObject_GetAttr(obj, s->name);
}

static int slot_set(slot_t *s, PyObject *obj, PyObject *value) {
    if (s->offset >= 0 && Py_TYPE(obj) == s->type) {
        PyObject **at = (PyObject **)((char *)obj + s->offset);
        PyObject *old = *at;
        Py_INCREF(value);
        *at = value;
        Py_XDECREF(old);
        return 0;
    }
    return PyObject_SetAttr(obj, s->name, value);
}

static int64_t slot_int(slot_t *s, PyObject *obj, int *err) {
    PyObject *v = slot_get(s, obj);
    if (v == NULL) {
        *err = 1;
        return 0;
    }
    int64_t x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred()) *err = 1;
    return x;
}

static slot_t S_PROF, S_INFO, S_NAME, S_SEQ, S_READY, S_BY, S_BY_VAR, S_READS, S_WRITES, S_IS_ASYNC, S_VAR_ID, S_INDEX, S_PLAIN,
    S_SUB, S_FAM, S_DEPS, S_CINV, S_CPART;
/* opprof.engine.state's CustomOpInfo and CustomPart.INVOCATION; build's START, DUMMY, PYTHON kinds. */
static PyTypeObject *custom_info_type;
static PyObject *part_invocation, *kind_start, *kind_dummy, *kind_python;
static PyObject *str_invocation;

/* ------------------------------------------------------------------ the names (one table a recorder) */
typedef struct {
    PyObject *index; /* str -> int code */
    PyObject *list;  /* code -> str */
} names_t;

static int64_t name_code(names_t *n, PyObject *name) {
    PyObject *c = PyDict_GetItemWithError(n->index, name);
    if (c != NULL) return PyLong_AsLongLong(c);
    if (PyErr_Occurred()) return -1;
    Py_ssize_t code = PyList_GET_SIZE(n->list);
    PyObject *pc = PyLong_FromSsize_t(code);
    if (pc == NULL) return -1;
    int bad = PyDict_SetItem(n->index, name, pc) < 0 || PyList_Append(n->list, name) < 0;
    Py_DECREF(pc);
    return bad ? -1 : (int64_t)code;
}

/* ------------------------------------------------------------------ PlainLog: one thread's plain ops */
typedef struct {
    PyObject_HEAD
    plain_t **chunks;
    Py_ssize_t nchunks, cap;
    Py_ssize_t len;
    PyObject *names;  /* the recorder's Names (a list of the strings, shared) */
    names_t *table;   /* the recorder's table (owned by the Hot; names keeps its list alive) */
    PyObject *owner;  /* the Hot whose table this is */
    PyObject *extras; /* list: var-id tuples of ops with none or several vars */
} PlainLog;

static PyTypeObject PlainLogType;

static plain_t *log_next(PlainLog *log) {
    Py_ssize_t c = log->len / CHUNK;
    if (c >= log->nchunks) {
        if (log->nchunks == log->cap) {
            Py_ssize_t cap = log->cap ? log->cap * 2 : 16;
            plain_t **grown = PyMem_Realloc(log->chunks, (size_t)cap * sizeof(plain_t *));
            if (grown == NULL) {
                PyErr_NoMemory();
                return NULL;
            }
            log->chunks = grown;
            log->cap = cap;
        }
        plain_t *chunk = PyMem_Malloc(CHUNK * sizeof(plain_t));
        if (chunk == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        log->chunks[log->nchunks++] = chunk;
    }
    return &log->chunks[c][log->len % CHUNK];
}

static inline plain_t *log_at(PlainLog *log, Py_ssize_t i) { return &log->chunks[i / CHUNK][i % CHUNK]; }

/* A var tuple as a record's field: the id of its one var, else a code into the log's extras. */
static int64_t vars_field(PlainLog *log, PyObject *vars, int *err) {
    if (!PyTuple_Check(vars)) {
        PyErr_SetString(PyExc_TypeError, "an op's vars must be a tuple");
        *err = 1;
        return 0;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(vars);
    if (n == 1) return slot_int(&S_VAR_ID, PyTuple_GET_ITEM(vars, 0), err);
    PyObject *ids = PyTuple_New(n);
    if (ids == NULL) {
        *err = 1;
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *id = slot_get(&S_VAR_ID, PyTuple_GET_ITEM(vars, i));
        if (id == NULL) {
            Py_DECREF(ids);
            *err = 1;
            return 0;
        }
        PyTuple_SET_ITEM(ids, i, id);
    }
    Py_ssize_t k = PyList_GET_SIZE(log->extras);
    int bad = PyList_Append(log->extras, ids) < 0;
    Py_DECREF(ids);
    if (bad) {
        *err = 1;
        return 0;
    }
    return -1 - (int64_t)k;
}

/* A field given by Python code (an int, or a tuple of var ids). */
static int64_t given_vars(PlainLog *log, PyObject *v, int *err) {
    if (PyLong_Check(v)) {
        int64_t x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred()) *err = 1;
        if (x < 1 && !*err) {
            PyErr_SetString(PyExc_ValueError, "var ids start at 1");
            *err = 1;
        }
        return x;
    }
    if (!PyTuple_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "reads/writes must be a var id or a tuple of ids");
        *err = 1;
        return 0;
    }
    Py_ssize_t k = PyList_GET_SIZE(log->extras);
    if (PyList_Append(log->extras, v) < 0) {
        *err = 1;
        return 0;
    }
    return -1 - (int64_t)k;
}

static PyObject *field_vars(PlainLog *log, int64_t x) {
    if (x > 0) return PyLong_FromLongLong(x);
    PyObject *t = PyList_GetItem(log->extras, (Py_ssize_t)(-1 - x));
    Py_XINCREF(t);
    return t;
}

static PyObject *record_tuple(PlainLog *log, plain_t *r) {
    PyObject *t = PyTuple_New(FIELDS);
    if (t == NULL) return NULL;
    int64_t *f = &r->t0;
    for (int k = 0; k < FIELDS; k++) {
        PyObject *v;
        if (k == 2) {
            v = PyList_GetItem(log->table->list, (Py_ssize_t)f[k]);
            Py_XINCREF(v);
        } else if (k == 9 || k == 10) {
            v = field_vars(log, f[k]);
        } else {
            v = PyLong_FromLongLong(f[k]);
        }
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, k, v);
    }
    return t;
}

typedef struct Hot Hot;
static PyTypeObject HotType;

struct Hot {
    PyObject_HEAD
    int recording;
    int full;
    long long count;      /* records attempted (the recorder's cap counts them) */
    long long max_events; /* the cap */
    unsigned long long generation;
    names_t table;
    PyObject *register_cb;  /* () -> this thread's ThreadRecords (made on first record) */
    PyObject *slow_run; /* the Python recorder's run, for every op that is not plain */
    PyObject *slow_run_pushed;
    opprof_user_code user;  /* whose code is not the user's (the not_user prefixes) */
    PyObject *thread_state; /* opprof.engine.state.thread_state */
    PyObject *internal;     /* opprof.engine.INTERNAL */
};

static PyObject *log_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *owner;
    if (!PyArg_ParseTuple(args, "O!:PlainLog", &HotType, &owner)) return NULL;
    PlainLog *log = (PlainLog *)type->tp_alloc(type, 0);
    if (log == NULL) return NULL;
    log->extras = PyList_New(0);
    if (log->extras == NULL) {
        Py_DECREF(log);
        return NULL;
    }
    Py_INCREF(owner);
    log->owner = owner;
    log->table = &((Hot *)owner)->table;
    return (PyObject *)log;
}

static void log_dealloc(PlainLog *log) {
    for (Py_ssize_t i = 0; i < log->nchunks; i++) PyMem_Free(log->chunks[i]);
    PyMem_Free(log->chunks);
    Py_XDECREF(log->extras);
    Py_XDECREF(log->owner);
    Py_TYPE(log)->tp_free((PyObject *)log);
}

static Py_ssize_t log_length(PlainLog *log) { return log->len; }

static PyObject *log_append(PlainLog *log, PyObject *rec) {
    if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) != FIELDS) {
        PyErr_Format(PyExc_TypeError, "a plain op's record is a tuple of %d fields", FIELDS);
        return NULL;
    }
    plain_t r;
    int64_t *f = &r.t0;
    int err = 0;
    for (int k = 0; k < FIELDS && !err; k++) {
        PyObject *v = PyTuple_GET_ITEM(rec, k);
        if (k == 2) {
            if (!PyUnicode_Check(v)) {
                PyErr_SetString(PyExc_TypeError, "an op's name is a str");
                return NULL;
            }
            f[k] = name_code(log->table, v);
            err = f[k] < 0;
        } else if (k == 9 || k == 10) {
            f[k] = given_vars(log, v, &err);
        } else {
            f[k] = PyLong_AsLongLong(v);
            err = f[k] == -1 && PyErr_Occurred();
        }
    }
    if (err) return NULL;
    plain_t *at = log_next(log);
    if (at == NULL) return NULL;
    *at = r;
    log->len++;
    Py_RETURN_NONE;
}

static PyObject *log_extend(PlainLog *log, PyObject *records) {
    PyObject *it = PyObject_GetIter(records);
    if (it == NULL) return NULL;
    PyObject *rec;
    while ((rec = PyIter_Next(it)) != NULL) {
        PyObject *ok = log_append(log, rec);
        Py_DECREF(rec);
        if (ok == NULL) {
            Py_DECREF(it);
            return NULL;
        }
        Py_DECREF(ok);
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyObject *log_item(PlainLog *log, Py_ssize_t i) {
    if (i < 0 || i >= log->len) {
        PyErr_SetString(PyExc_IndexError, "PlainLog index out of range");
        return NULL;
    }
    return record_tuple(log, log_at(log, i));
}

static PyObject *log_subscript(PlainLog *log, PyObject *key) {
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) return NULL;
        return log_item(log, i < 0 ? i + log->len : i);
    }
    if (!PySlice_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "PlainLog indices are ints or slices");
        return NULL;
    }
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(key, &start, &stop, &step) < 0) return NULL;
    Py_ssize_t n = PySlice_AdjustIndices(log->len, &start, &stop, step);
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t j = 0, i = start; j < n; j++, i += step) {
        PyObject *t = record_tuple(log, log_at(log, i));
        if (t == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, j, t);
    }
    return out;
}

static PyObject *log_columns(PlainLog *log, PyObject *Py_UNUSED(ignored)) {
    /* The records' bytes (FIELDS int64s each), the names (code -> str; shared, may grow), extras. */
    PyObject *b = PyBytes_FromStringAndSize(NULL, log->len * (Py_ssize_t)sizeof(plain_t));
    if (b == NULL) return NULL;
    char *dst = PyBytes_AS_STRING(b);
    for (Py_ssize_t c = 0, left = log->len; left > 0; c++) {
        Py_ssize_t k = left < CHUNK ? left : CHUNK;
        memcpy(dst, log->chunks[c], (size_t)k * sizeof(plain_t));
        dst += k * sizeof(plain_t);
        left -= k;
    }
    PyObject *names = PyList_GetSlice(log->table->list, 0, PY_SSIZE_T_MAX);
    PyObject *extras = PyList_GetSlice(log->extras, 0, PY_SSIZE_T_MAX);
    if (names == NULL || extras == NULL) {
        Py_DECREF(b);
        Py_XDECREF(names);
        Py_XDECREF(extras);
        return NULL;
    }
    return Py_BuildValue("(NNN)", b, names, extras);
}

static PyObject *log_copy(PlainLog *log, PyObject *Py_UNUSED(ignored)) {
    PyObject *args = Py_BuildValue("(O)", log->owner);
    if (args == NULL) return NULL;
    PlainLog *c = (PlainLog *)log_new(&PlainLogType, args, NULL);
    Py_DECREF(args);
    if (c == NULL) return NULL;
    for (Py_ssize_t i = 0; i < log->len; i++) {
        plain_t *at = log_next(c);
        if (at == NULL) {
            Py_DECREF(c);
            return NULL;
        }
        *at = *log_at(log, i);
        c->len++;
    }
    Py_SETREF(c->extras, PyList_GetSlice(log->extras, 0, PY_SSIZE_T_MAX));
    if (c->extras == NULL) {
        Py_DECREF(c);
        return NULL;
    }
    return (PyObject *)c;
}

static PyMethodDef log_methods[] = {
    {"append", (PyCFunction)log_append, METH_O, "Append one record given as build's 11-field tuple (the Python paths)."},
    {"extend", (PyCFunction)log_extend, METH_O, "Append each record of an iterable, as list.extend does."},
    {"columns", (PyCFunction)log_columns, METH_NOARGS,
     "(bytes of the records as int64s, names by code, extras): the build reads them with numpy.frombuffer."},
    {"copy", (PyCFunction)log_copy, METH_NOARGS, "The log as it is now (a live build reads a copy)."},
    {NULL, NULL, 0, NULL},
};

/* sq_item makes a log iterable as a list of tuples is (tests and tools read records one by one). */
static PySequenceMethods log_as_sequence = {.sq_length = (lenfunc)log_length, .sq_item = (ssizeargfunc)log_item};
static PyMappingMethods log_as_mapping = {.mp_length = (lenfunc)log_length, .mp_subscript = (binaryfunc)log_subscript};

static PyTypeObject PlainLogType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "opprof.profiler._spanlog.PlainLog",
    .tp_doc = "One thread's plain-op records, fixed-size, in chunks (a list of tuples on the pure path).",
    .tp_basicsize = sizeof(PlainLog),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = log_new,
    .tp_dealloc = (destructor)log_dealloc,
    .tp_methods = log_methods,
    .tp_as_sequence = &log_as_sequence,
    .tp_as_mapping = &log_as_mapping,
};

/* ------------------------------------------------------------------ Hot: one recorder's fast lane */
static unsigned long long generations = 0;

/* This thread's records for the recorder `generation` (borrowed: the recorder keeps them). */
static _Thread_local struct {
    unsigned long long generation;
    PyObject *records; /* its ThreadRecords */
    PlainLog *plain;
    PyObject *sub, *fam, *deps; /* its lists (see build.ThreadRecords) */
    PyObject *index;            /* its ThreadRecords.index: what a push's note names the pusher by */
    PyObject *state;            /* this thread's dict of opprof.engine.state.thread_state (a threading.local) */
} tls;

static PyObject *this_threads_records(Hot *self) {
    if (tls.generation == self->generation) return tls.records;
    PyObject *rec = PyObject_CallNoArgs(self->register_cb);
    if (rec == NULL) return NULL;
    PyObject *plain = slot_get(&S_PLAIN, rec);
    if (plain == NULL || !Py_IS_TYPE(plain, &PlainLogType)) {
        if (plain != NULL) PyErr_SetString(PyExc_TypeError, "the thread's records hold no PlainLog");
        Py_XDECREF(plain);
        Py_DECREF(rec);
        return NULL;
    }
    PyObject *sub = slot_get(&S_SUB, rec), *fam = slot_get(&S_FAM, rec), *deps = slot_get(&S_DEPS, rec);
    int bad = sub == NULL || fam == NULL || deps == NULL || !PyList_CheckExact(sub) || !PyList_CheckExact(fam) ||
              !PyList_CheckExact(deps);
    /* Borrowed from here on: the recorder's list of records keeps them alive, as long as it. */
    Py_XDECREF(sub), Py_XDECREF(fam), Py_XDECREF(deps), Py_DECREF(plain), Py_DECREF(rec);
    if (bad) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "the thread's records hold no sub, fam and deps lists");
        return NULL;
    }
    /* The thread's own dict of the engine's threading.local: stable for the thread's life (the
     * local lives as long as the process), so reading the invocation is one dict lookup. */
    PyObject *state = PyObject_GetAttrString(self->thread_state, "__dict__");
    if (state == NULL || !PyDict_Check(state)) {
        if (state != NULL) PyErr_SetString(PyExc_TypeError, "the engine's thread state has no dict");
        Py_XDECREF(state);
        return NULL;
    }
    Py_DECREF(state);
    tls.state = state;
    PyObject *index = slot_get(&S_INDEX, rec);
    if (index == NULL) return NULL;
    Py_DECREF(index); /* the records keep it */
    tls.index = index;
    tls.generation = self->generation;
    tls.records = rec;
    tls.plain = (PlainLog *)plain;
    tls.sub = sub, tls.fam = fam, tls.deps = deps;
    return tls.records;
}

/* The invocation whose Python this thread runs (thread_state.invocation), borrowed; Py_None outside
 * one (the class's default: the thread never set it). Call after this_threads_records. */
static PyObject *current_invocation(void) {
    PyObject *inv = PyDict_GetItemWithError(tls.state, str_invocation);
    if (inv != NULL) return inv;
    return PyErr_Occurred() ? NULL : Py_None;
}

static PyObject *hot_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"max_events", "register", "run", "run_pushed", "not_user", "thread_state", "internal", NULL};
    long long max_events;
    PyObject *reg, *run, *run_pushed, *not_user, *ts, *internal;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "LOOOOOO:Hot", kwlist, &max_events, &reg, &run, &run_pushed, &not_user,
                                     &ts, &internal))
        return NULL;
    Hot *self = (Hot *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    if (opprof_user_code_set(&self->user, not_user) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->table.index = PyDict_New();
    self->table.list = PyList_New(0);
    if (self->table.index == NULL || self->table.list == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->recording = 1;
    self->max_events = max_events;
    self->generation = ++generations;
    Py_INCREF(reg), Py_INCREF(run), Py_INCREF(run_pushed), Py_INCREF(ts);
    Py_INCREF(internal);
    self->register_cb = reg;
    self->slow_run = run;
    self->slow_run_pushed = run_pushed;
    self->thread_state = ts;
    self->internal = internal;
    return (PyObject *)self;
}

static int hot_traverse(Hot *self, visitproc visit, void *arg) {
    Py_VISIT(self->register_cb);
    Py_VISIT(self->slow_run);
    Py_VISIT(self->slow_run_pushed);
    Py_VISIT(self->user.not_user);
    return 0;
}

static int hot_clear(Hot *self) {
    Py_CLEAR(self->register_cb);
    Py_CLEAR(self->slow_run);
    Py_CLEAR(self->slow_run_pushed);
    opprof_user_code_clear(&self->user);
    return 0;
}

static void hot_dealloc(Hot *self) {
    PyObject_GC_UnTrack(self);
    hot_clear(self);
    Py_XDECREF(self->table.index);
    Py_XDECREF(self->table.list);
    Py_XDECREF(self->thread_state);
    Py_XDECREF(self->internal);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Whether a record may be kept: recording, and under the cap (an attempt past it marks the
 * recording full, as the Python recorder's next(self._count) does). */
static inline int admit(Hot *self) {
    if (!self->recording) return 0;
    if (self->count++ < self->max_events) return 1;
    self->full = 1;
    return 0;
}

/* The user's line that pushed (the innermost frame outside the not_user prefixes) as a new
 * ``(code, offset)`` pair, which the build turns into ``(file, line)`` (opprof.profiler.sites.resolve);
 * None where no frame is the user's; NULL with an exception set. */
static PyObject *user_site(Hot *self) {
    int offset = 0;
    PyObject *code = opprof_user_frame(&self->user, &offset);
    if (code == NULL) return Py_NewRef(Py_None);
    PyObject *off = PyLong_FromLong(offset);
    if (off == NULL) return NULL;
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(off);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, Py_NewRef(code));
    PyTuple_SET_ITEM(pair, 1, off);
    return pair;
}

/* on_push(opr): note when and by whom an op was pushed, opr.prof = (ts, records, invocation, site)
 * in build's NOTE_* order: inside a custom op's Python, its invocation and (for a sub-op) the
 * user's line that pushed it, as (code, offset) (user_site); (ts, records, None, None) elsewhere. */
static PyObject *hot_on_push(Hot *self, PyObject *opr) {
    if (!self->recording) Py_RETURN_NONE;
    PyObject *info = slot_get(&S_INFO, opr);
    if (info == NULL) return NULL;
    Py_DECREF(info); /* compared by identity only */
    if (info == self->internal) Py_RETURN_NONE;
    PyObject *rec = this_threads_records(self);
    if (rec == NULL) return NULL;
    PyObject *inv = current_invocation(); /* the thread's state keeps it while its Python runs */
    if (inv == NULL) return NULL;
    untrack_invocation(inv);
    int64_t ts = monotonic_ns();
    PyObject *site = inv != Py_None && info == Py_None ? user_site(self) : Py_NewRef(Py_None);
    if (site == NULL) return NULL;
    PyObject *t = PyLong_FromLongLong(ts);
    if (t == NULL) {
        Py_DECREF(site);
        return NULL;
    }
    PyObject *note = PyTuple_Pack(4, t, tls.index, inv, site);
    Py_DECREF(t);
    Py_DECREF(site);
    if (note == NULL) return NULL;
    PyObject_GC_UnTrack(note); /* numbers, an Invocation, a site: in no cycle (see append_new) */
    int bad = slot_set(&S_PROF, opr, note);
    Py_DECREF(note);
    if (bad) return NULL;
    Py_RETURN_NONE;
}

/* Fill a plain op's record from the op and its push's note; 0, or -1 with an exception set. */
static int fill(Hot *self, PlainLog *log, plain_t *r, PyObject *opr, PyObject *note) {
    int err = 0;
    PyObject *name = slot_get(&S_NAME, opr);
    if (name == NULL) return -1;
    r->name = PyUnicode_Check(name) ? name_code(&self->table, name) : -1;
    Py_DECREF(name);
    if (r->name < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "an op's name is a str");
        return -1;
    }
    r->seq = slot_int(&S_SEQ, opr, &err);
    r->push = PyLong_AsLongLong(PyTuple_GET_ITEM(note, 0));
    if (r->push == -1 && PyErr_Occurred()) return -1;
    r->pusher = PyLong_AsLongLong(PyTuple_GET_ITEM(note, 1));
    if (r->pusher == -1 && PyErr_Occurred()) return -1;
    r->ready = slot_int(&S_READY, opr, &err);
    r->by = slot_int(&S_BY, opr, &err);
    r->by_var = slot_int(&S_BY_VAR, opr, &err);
    if (err) return -1;
    PyObject *reads = slot_get(&S_READS, opr);
    if (reads == NULL) return -1;
    r->reads = vars_field(log, reads, &err);
    Py_DECREF(reads);
    if (err) return -1;
    PyObject *writes = slot_get(&S_WRITES, opr);
    if (writes == NULL) return -1;
    r->writes = vars_field(log, writes, &err);
    Py_DECREF(writes);
    return err ? -1 : 0;
}

/* Keep a plain op's span [t0, t1] on this thread's log; 0, or -1 with an exception set. */
static int keep(Hot *self, PyObject *opr, PyObject *note, int64_t t0, int64_t t1) {
    if (!admit(self)) return 0;
    if (this_threads_records(self) == NULL) return -1;
    PlainLog *log = tls.plain;
    plain_t r;
    r.t0 = t0;
    r.t1 = t1;
    if (fill(self, log, &r, opr, note) < 0) return -1;
    plain_t *at = log_next(log);
    if (at == NULL) return -1;
    *at = r;
    log->len++;
    return 0;
}

/* A var tuple as a deps field, as the Python recorder keeps it: the one var's id, else a tuple of ids. */
static PyObject *vars_value(PyObject *vars) {
    if (!PyTuple_Check(vars)) {
        PyErr_SetString(PyExc_TypeError, "an op's vars must be a tuple");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(vars);
    if (n == 1) return slot_get(&S_VAR_ID, PyTuple_GET_ITEM(vars, 0));
    PyObject *ids = PyTuple_New(n);
    if (ids == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *id = slot_get(&S_VAR_ID, PyTuple_GET_ITEM(vars, i));
        if (id == NULL) {
            Py_DECREF(ids);
            return NULL;
        }
        PyTuple_SET_ITEM(ids, i, id);
    }
    return ids;
}

/* Append a new record (stolen) to one of the thread's lists, out of the garbage collector's sight:
 * a record holds numbers, strings, an Invocation (which holds only those) and a push's note (the
 * same), so it is in no reference cycle, and a profile's thousands of records would otherwise be
 * traversed by every full collection they make more frequent (a trivial custom op's call, naive
 * engine: 94 us profiled, 78 with the collector off, 58 unprofiled). */
static int append_new(PyObject *list, PyObject *item) {
    if (item == NULL) return -1;
    PyObject_GC_UnTrack(item);
    int bad = PyList_Append(list, item);
    Py_DECREF(item);
    return bad;
}

/* Keep an op that is not plain, as the Python recorder's _record does: a sub-op (info None, pushed
 * inside a custom op's Python) as (t0, t1, name, seq, note) in ``sub``, a custom op's own op as
 * (START or DUMMY, t0, t1, invocation, seq) in ``fam``; its edges in ``deps``. */
static int keep_other(Hot *self, PyObject *opr, PyObject *note, PyObject *info, int64_t t0, int64_t t1) {
    if (!admit(self)) return 0;
    if (this_threads_records(self) == NULL) return -1;
    PyObject *seq = slot_get(&S_SEQ, opr);
    if (seq == NULL) return -1;
    PyObject *a = PyLong_FromLongLong(t0), *b = PyLong_FromLongLong(t1);
    int bad = a == NULL || b == NULL;
    if (!bad && info == Py_None) {
        PyObject *name = slot_get(&S_NAME, opr);
        bad = name == NULL || append_new(tls.sub, PyTuple_Pack(5, a, b, name, seq, note)) < 0;
        Py_XDECREF(name);
    } else if (!bad) {
        PyObject *inv = slot_get(&S_CINV, info), *part = slot_get(&S_CPART, info);
        PyObject *kind = part == part_invocation ? kind_start : kind_dummy;
        if (inv != NULL) untrack_invocation(inv);
        bad = inv == NULL || part == NULL || append_new(tls.fam, PyTuple_Pack(5, kind, a, b, inv, seq)) < 0;
        Py_XDECREF(inv), Py_XDECREF(part);
    }
    Py_XDECREF(a), Py_XDECREF(b);
    if (!bad) {
        PyObject *pusher = PyTuple_GET_ITEM(note, 1);
        Py_INCREF(pusher);
        PyObject *ready = slot_get(&S_READY, opr), *by = slot_get(&S_BY, opr), *by_var = slot_get(&S_BY_VAR, opr);
        PyObject *r = slot_get(&S_READS, opr), *w = slot_get(&S_WRITES, opr);
        PyObject *reads = r ? vars_value(r) : NULL, *writes = w ? vars_value(w) : NULL;
        bad = pusher == NULL || ready == NULL || by == NULL || by_var == NULL || reads == NULL || writes == NULL ||
              append_new(tls.deps, PyTuple_Pack(9, seq, PyTuple_GET_ITEM(note, 0), pusher, ready, by, by_var, reads, writes,
                                                PyTuple_GET_ITEM(note, 3))) < 0;
        Py_XDECREF(pusher), Py_XDECREF(ready), Py_XDECREF(by), Py_XDECREF(by_var);
        Py_XDECREF(r), Py_XDECREF(w), Py_XDECREF(reads), Py_XDECREF(writes);
    }
    Py_DECREF(seq);
    return bad ? -1 : 0;
}

/* One call of an op's function, timed: its result (NULL: it raised, its error fetched here so that
 * keeping the span runs with no exception set) and the clock before and after it. */
typedef struct {
    PyObject *res, *type, *value, *tb;
    int64_t t0, t1;
} call_t;

static call_t timed_call(PyObject *fn, PyObject *const *args, Py_ssize_t n) {
    call_t c = {NULL, NULL, NULL, NULL, monotonic_ns(), 0};
    c.res = PyObject_Vectorcall(fn, args, (size_t)n, NULL);
    c.t1 = monotonic_ns();
    if (c.res == NULL) PyErr_Fetch(&c.type, &c.value, &c.tb);
    return c;
}

/* What a hook returns once it has tried to keep the call's span (``kept``: 0, or -1 with an
 * exception set): None; the function's own error, which a failure to keep the span must not
 * replace; or the keeping's error. */
static PyObject *finished(call_t *c, int kept) {
    if (c->res == NULL) {
        if (kept < 0) PyErr_Clear();
        PyErr_Restore(c->type, c->value, c->tb);
        return NULL;
    }
    Py_DECREF(c->res);
    if (kept < 0) return NULL;
    Py_RETURN_NONE;
}

/* Call fn(*args) between two clock reads and keep the span, also when fn raised: a plain op's
 * (``info`` NULL) or another's (:func:`keep_other`). */
static PyObject *timed(Hot *self, PyObject *opr, PyObject *note, PyObject *info, PyObject *fn, PyObject *const *args,
                       Py_ssize_t n) {
    Py_INCREF(note); /* held across fn, which may drop the op's */
    call_t c = timed_call(fn, args, n);
    int kept = info == NULL ? keep(self, opr, note, c.t0, c.t1) : keep_other(self, opr, note, info, c.t0, c.t1);
    Py_DECREF(note);
    return finished(&c, kept);
}

/* run(opr, fn, *args): time fn(*args) and keep a plain op's span; anything else is the Python
 * recorder's (it keeps its own note of what was pushed inside a custom op). */
static PyObject *hot_run(Hot *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2) {
        PyErr_SetString(PyExc_TypeError, "run(opr, fn, *args)");
        return NULL;
    }
    PyObject *opr = args[0], *fn = args[1];
    PyObject *note = slot_get(&S_PROF, opr);
    if (note == NULL) return NULL;
    Py_DECREF(note); /* the op keeps it */
    if (note == Py_None) {  /* pushed before recording started, or internal */
        PyObject *res = PyObject_Vectorcall(fn, args + 2, (size_t)(nargs - 2), NULL);
        if (res == NULL) return NULL;
        Py_DECREF(res);
        Py_RETURN_NONE;
    }
    PyObject *info = slot_get(&S_INFO, opr);
    if (info == NULL) return NULL;
    Py_DECREF(info);
    if (!PyTuple_CheckExact(note) || PyTuple_GET_SIZE(note) != 4)
        return PyObject_Vectorcall(self->slow_run, args, (size_t)nargs, NULL);
    if (info == Py_None) /* a plain op, or a sub-op (pushed inside a custom op's Python) */
        return timed(self, opr, note, PyTuple_GET_ITEM(note, 2) == Py_None ? NULL : Py_None, fn, args + 2, nargs - 2);
    if (Py_TYPE(info) != custom_info_type) return PyObject_Vectorcall(self->slow_run, args, (size_t)nargs, NULL);
    PyObject *part = slot_get(&S_CPART, info);
    if (part == NULL) return NULL;
    Py_DECREF(part);
    PyObject *is_async = slot_get(&S_IS_ASYNC, opr);
    if (is_async == NULL) return NULL;
    Py_DECREF(is_async);
    if (part == part_invocation && is_async == Py_True) {
        /* A custom op's own engine op: recorded before it runs. It only hands its Python to the
         * custom-op pool, and the whole invocation can finish on other threads (the profile's stop,
         * too) before this thread would get back here. Its start is what the parent uses. */
        int64_t t = monotonic_ns();
        if (keep_other(self, opr, note, info, t, t) < 0) return NULL;
        PyObject *res = PyObject_Vectorcall(fn, args + 2, (size_t)(nargs - 2), NULL);
        if (res == NULL) return NULL;
        Py_DECREF(res);
        Py_RETURN_NONE;
    }
    return timed(self, opr, note, info, fn, args + 2, nargs - 2);
}

/* A sub-op pushed and run at once inside a custom op's Python (the naive engine): kept as the Python
 * recorder keeps one (a sub record with its push's note, and its edges), without an Opr. Its push
 * and its start are one instant; the user's line that pushed is found by user_site. */
static int keep_pushed_sub(Hot *self, PyObject *inv, PyObject *site, PyObject *const *args, int64_t t0, int64_t t1) {
    if (!admit(self)) return 0;
    PyObject *a = PyLong_FromLongLong(t0), *b = PyLong_FromLongLong(t1);
    PyObject *note = a ? PyTuple_Pack(4, a, tls.index, inv, site) : NULL;
    if (note != NULL) PyObject_GC_UnTrack(note); /* in no cycle (see append_new) */
    untrack_invocation(inv);
    PyObject *pusher = slot_get(&S_INDEX, tls.records);
    PyObject *reads = vars_value(args[2]), *writes = vars_value(args[3]);
    PyObject *zero = PyLong_FromLong(0);
    int bad = b == NULL || note == NULL || pusher == NULL || reads == NULL || writes == NULL || zero == NULL ||
              append_new(tls.sub, PyTuple_Pack(5, a, b, args[0], args[1], note)) < 0 ||
              append_new(tls.deps, PyTuple_Pack(9, args[1], a, pusher, zero, zero, zero, reads, writes, site)) < 0;
    Py_XDECREF(a), Py_XDECREF(b), Py_XDECREF(note), Py_XDECREF(pusher);
    Py_XDECREF(reads), Py_XDECREF(writes), Py_XDECREF(zero);
    return bad ? -1 : 0;
}

static PyObject *run_pushed_inside(Hot *self, PyObject *inv, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *rec = this_threads_records(self);
    if (rec == NULL) return NULL;
    PyObject *site = user_site(self);
    if (site == NULL) return NULL;
    call_t c = timed_call(args[4], args + 5, nargs - 5);
    int kept = keep_pushed_sub(self, inv, site, args, c.t0, c.t1);
    Py_DECREF(site);
    return finished(&c, kept);
}

/* on_python(inv, t0, t1, cpu_ns=-1): a custom op's Python ran; kept as (PYTHON, t0, t1, inv, cpu)
 * in ``fam``. It takes no slot under the cap (its family's Dummy_Wait, recorded after it, may still
 * fit), but once the cap is reached the family is incomplete anyway. */
static PyObject *hot_on_python(Hot *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 3 || nargs > 4) {
        PyErr_SetString(PyExc_TypeError, "on_python(inv, t0, t1, cpu_ns=-1)");
        return NULL;
    }
    if (!self->recording || self->full) Py_RETURN_NONE;
    if (this_threads_records(self) == NULL) return NULL;
    untrack_invocation(args[0]);
    PyObject *cpu = nargs == 4 ? (Py_INCREF(args[3]), args[3]) : PyLong_FromLong(-1);
    if (cpu == NULL) return NULL;
    int bad = append_new(tls.fam, PyTuple_Pack(5, kind_python, args[1], args[2], args[0], cpu)) < 0;
    Py_DECREF(cpu);
    if (bad) return NULL;
    Py_RETURN_NONE;
}

/* Keep the naive engine's plain op pushed and run at once, [t0, t1] (its push is t0); 0, or -1 with
 * an exception set. */
static int keep_pushed(Hot *self, PyObject *const *args, int64_t t0, int64_t t1) {
    if (!admit(self)) return 0;
    PyObject *rec = this_threads_records(self);
    if (rec == NULL) return -1;
    if (!PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "an op's name is a str");
        return -1;
    }
    PlainLog *log = tls.plain;
    int err = 0;
    plain_t r = {.t0 = t0, .t1 = t1, .push = t0, .ready = 0, .by = 0, .by_var = 0};
    r.pusher = slot_int(&S_INDEX, rec, &err);
    if (!err) {
        r.name = name_code(&self->table, args[0]);
        err = r.name < 0;
    }
    if (!err) {
        r.seq = PyLong_AsLongLong(args[1]);
        err = r.seq == -1 && PyErr_Occurred();
    }
    if (!err) r.reads = vars_field(log, args[2], &err);
    if (!err) r.writes = vars_field(log, args[3], &err);
    plain_t *at = err ? NULL : log_next(log);
    if (at == NULL) return -1;
    *at = r;
    log->len++;
    return 0;
}

/* run_pushed(name, seq, reads, writes, fn, *args): the naive engine's plain op pushed and run at once. */
static PyObject *hot_run_pushed(Hot *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 5) {
        PyErr_SetString(PyExc_TypeError, "run_pushed(name, seq, reads, writes, fn, *args)");
        return NULL;
    }
    if (!self->recording) goto slow;
    if (this_threads_records(self) == NULL) return NULL;
    PyObject *inv = current_invocation();
    if (inv == NULL) return NULL;
    if (inv != Py_None) return run_pushed_inside(self, inv, args, nargs);
    call_t c = timed_call(args[4], args + 5, nargs - 5);
    return finished(&c, keep_pushed(self, args, c.t0, c.t1));
slow:
    return PyObject_Vectorcall(self->slow_run_pushed, args, (size_t)nargs, NULL);
}

/* The recorder's count as an iterator: next(hot) takes a slot, as next(itertools.count()) does. */
static PyObject *hot_iter(PyObject *self) {
    Py_INCREF(self);
    return self;
}

static PyObject *hot_next(Hot *self) { return PyLong_FromLongLong(self->count++); }

static PyMethodDef hot_methods[] = {
    {"on_push", (PyCFunction)hot_on_push, METH_O, "The engine's push hook (see Recorder.on_push)."},
    {"run", (PyCFunction)(void (*)(void))hot_run, METH_FASTCALL, "The engine's run hook (see Recorder.run)."},
    {"run_pushed", (PyCFunction)(void (*)(void))hot_run_pushed, METH_FASTCALL, "The naive engine's push-and-run hook."},
    {"on_python", (PyCFunction)(void (*)(void))hot_on_python, METH_FASTCALL, "A custom op's Python ran (see Recorder.on_python)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef hot_members[] = {
    {"recording", T_INT, offsetof(Hot, recording), 0, "0 while paused"},
    {"full", T_INT, offsetof(Hot, full), 0, "1 once a record was dropped at the cap"},
    {"count", T_LONGLONG, offsetof(Hot, count), 0, "records attempted so far"},
    {"max_events", T_LONGLONG, offsetof(Hot, max_events), READONLY, "the cap"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject HotType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "opprof.profiler._spanlog.Hot",
    .tp_doc = "One recorder's fast lane for plain ops (see the module docstring).",
    .tp_basicsize = sizeof(Hot),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = hot_new,
    .tp_dealloc = (destructor)hot_dealloc,
    .tp_traverse = (traverseproc)hot_traverse,
    .tp_clear = (inquiry)hot_clear,
    .tp_methods = hot_methods,
    .tp_members = hot_members,
    .tp_iter = hot_iter,
    .tp_iternext = (iternextfunc)hot_next,
};

/* ------------------------------------------------------------------ the module */
static PyObject *mod_bind(PyObject *m, PyObject *args) {
    /* bind(Opr, Var, ThreadRecords, CustomOpInfo, CustomPart.INVOCATION, (START, DUMMY, PYTHON)):
     * learn the slots' offsets (the classes live in Python) and what a family's records hold. */
    PyObject *opr, *var, *records, *info, *part, *start, *dummy, *python;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O(OOO):bind", &PyType_Type, &opr, &PyType_Type, &var, &PyType_Type, &records,
                          &PyType_Type, &info, &part, &start, &dummy, &python))
        return NULL;
    if (slot_init(&S_PROF, opr, "prof") || slot_init(&S_INFO, opr, "info") || slot_init(&S_NAME, opr, "name") ||
        slot_init(&S_SEQ, opr, "seq") || slot_init(&S_READY, opr, "ready_ns") || slot_init(&S_BY, opr, "by") ||
        slot_init(&S_BY_VAR, opr, "by_var") || slot_init(&S_READS, opr, "reads") || slot_init(&S_WRITES, opr, "writes") ||
        slot_init(&S_IS_ASYNC, opr, "is_async") || slot_init(&S_VAR_ID, var, "id") || slot_init(&S_INDEX, records, "index") ||
        slot_init(&S_PLAIN, records, "plain") || slot_init(&S_SUB, records, "sub") || slot_init(&S_FAM, records, "fam") ||
        slot_init(&S_DEPS, records, "deps") || slot_init(&S_CINV, info, "invocation") || slot_init(&S_CPART, info, "part"))
        return NULL;
    /* Kept for the process's life: their offsets and identities are. */
    Py_INCREF(opr), Py_INCREF(var), Py_INCREF(records), Py_INCREF(info);
    Py_INCREF(part), Py_INCREF(start), Py_INCREF(dummy), Py_INCREF(python);
    custom_info_type = (PyTypeObject *)info;
    part_invocation = part, kind_start = start, kind_dummy = dummy, kind_python = python;
    Py_RETURN_NONE;
}

static PyMethodDef mod_methods[] = {
    {"bind", mod_bind, METH_VARARGS,
     "bind(Opr, Var, ThreadRecords, CustomOpInfo, CustomPart.INVOCATION, (START, DUMMY, PYTHON)): the classes and kinds it reads."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "opprof.profiler._spanlog", "The recorder's hot path for plain ops (see _spanlog.c).", -1,
    mod_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__spanlog(void) {
    str_invocation = PyUnicode_InternFromString("invocation");
    if (str_invocation == NULL) return NULL;
    if (PyType_Ready(&PlainLogType) < 0 || PyType_Ready(&HotType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (m == NULL) return NULL;
    Py_INCREF(&PlainLogType);
    Py_INCREF(&HotType);
    if (PyModule_AddObject(m, "PlainLog", (PyObject *)&PlainLogType) < 0 ||
        PyModule_AddObject(m, "Hot", (PyObject *)&HotType) < 0 ||
        PyModule_AddIntConstant(m, "RECORD_SIZE", (long)sizeof(plain_t)) < 0 ||
        PyModule_AddIntConstant(m, "FIELDS", FIELDS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
