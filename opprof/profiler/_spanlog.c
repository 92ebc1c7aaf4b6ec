/* opprof.profiler._spanlog: the recorder's hot path, in C.
 *
 * Why C: a plain op's span recorded by the Python recorder cost ~1.1 µs (a thread-local lookup, a
 * tuple of 11 fields the garbage collector tracks, attribute reads, a frame); a span in plain
 * Python is ~0.13 µs at best. Here the engine's two hooks for an op (``on_push`` on the pusher,
 * ``run`` around the op on the thread that runs it) are C functions that read the op's slots at
 * their offsets, read CLOCK_MONOTONIC (what ``time.perf_counter_ns`` reads on Linux: the recording
 * mixes both clocks), and append one fixed-size record of int64s to a per-thread log found through
 * a C thread-local. Names, invocations and sites become small integer codes (one dict lookup each,
 * fewer for runs of one invocation), vars their ids. Nothing per record is a Python object, so
 * nothing is left for the garbage collector.
 *
 * A thread keeps four logs (``Log``), one per shape of build.py's ThreadRecords: plain ops, sub-ops
 * (pushed inside a custom op's Python), a custom op's own records (its engine op, its Dummy_Wait,
 * its Python: ``on_python``) and the engine edges of the ops that are not plain. A log's schema
 * names its fields, so the Python recorder appends the same records in their tuple form, and
 * indexing a log gives them back as tuples (the live view reads tails that way): this module is a
 * fast lane beside the Python recorder, not a second one (tests/profiler/test_compiled_recorder.py
 * holds them equal). An op of any other info goes to the Python recorder's ``run``, unchanged. The
 * build after stop() reads each log as columns (``Log.columns`` writes them into the build's int64
 * array), so no record becomes a Python object there either: a trivial custom op's
 * family of five spans built in 7 µs where its tuples took 15 (2,000 calls, 2026-12-04).
 *
 * ``on_push`` notes every op's push in the Python recorder's shape (inside a custom op's Python
 * with its invocation and the user's line, found in C as (code, offset): see ../_frames.h).
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
#include "../_int64.h"     /* opprof_as_i64(): an int64 from a Python int, without the byte-array path */
#include "_spares.h"       /* freed log chunks kept for the next recording */
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
/* The four logs a thread's records hold, in Log's schema letters (see below); build.py names them
 * too, and the recorder uses this module only where both agree. A plain op (its span and edges); a
 * sub-op (t0, t1, name, seq, its push's note); a custom op's own op or Python (kind, t0, t1,
 * invocation, seq or CPU ns); a non-plain op's edges (seq, push, pusher, ready, by, by_var, reads,
 * writes, site). */
/* The hooks' contract with opprof/profiler/recorder.py (its SPANLOG_API): raised on both sides with
 * every change of Hot's arguments or a hook's, so that a module left from an older install is not used. */
#define SPANLOG_API 8
#define PLAIN_SCHEMA "iiniiiiiivv"
#define SUB_SCHEMA "iiniN"
#define FAM_SCHEMA "iiioi"
#define DEPS_SCHEMA "iiiiiivvs"
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
    int64_t x = opprof_as_i64(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred()) *err = 1;
    return x;
}

static slot_t S_PROF, S_INFO, S_NAME, S_SEQ, S_READY, S_BY, S_BY_VAR, S_READS, S_WRITES, S_IS_ASYNC, S_VAR_ID, S_INDEX, S_PLAIN,
    S_SUB, S_FAM, S_DEPS, S_CINV, S_CPART;
/* opprof.engine.state's CustomOpInfo and CustomPart.INVOCATION; build's START, DUMMY, PYTHON kinds. */
static PyTypeObject *custom_info_type;
static PyObject *part_invocation;
static int64_t KIND_START, KIND_DUMMY, KIND_PYTHON;
static PyObject *str_invocation, *str_id;

/* ------------------------------------------------------------------ tables (three a recorder) */
/* What a record holds that is not a number, as a small code: names (str -> code, by value), objects
 * (an Invocation: by identity) and sites (a push's ``(code, offset)`` or ``(file, line)``: by the
 * identity of its first item and the value of its second, as a new pair is made at every push). Each
 * table keeps what it coded alive, so an identity stays unique while the recorder lives. */
typedef struct {
    PyObject *index; /* key -> int code */
    PyObject *list;  /* code -> the value */
} table_t;

static int table_init(table_t *t) {
    t->index = PyDict_New();
    t->list = PyList_New(0);
    return t->index == NULL || t->list == NULL ? -1 : 0;
}

static void table_free(table_t *t) {
    Py_CLEAR(t->index);
    Py_CLEAR(t->list);
}

/* The code of ``key`` (stolen), adding ``value`` as a new one; -1 with an exception set. */
static int64_t table_code(table_t *t, PyObject *key, PyObject *value) {
    if (key == NULL) return -1;
    PyObject *c = PyDict_GetItemWithError(t->index, key);
    if (c != NULL) {
        Py_DECREF(key);
        return opprof_as_i64(c);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return -1;
    }
    Py_ssize_t code = PyList_GET_SIZE(t->list);
    PyObject *pc = PyLong_FromSsize_t(code);
    int bad = pc == NULL || PyDict_SetItem(t->index, key, pc) < 0 || PyList_Append(t->list, value) < 0;
    Py_XDECREF(pc);
    Py_DECREF(key);
    return bad ? -1 : (int64_t)code;
}

static int64_t name_code(table_t *t, PyObject *name) {
    PyObject *c = PyDict_GetItemWithError(t->index, name); /* the common case: no key made */
    if (c != NULL) return opprof_as_i64(c);
    if (PyErr_Occurred()) return -1;
    return table_code(t, Py_NewRef(name), name);
}

/* An object's code by identity; -1 for None. */
static int64_t object_code(table_t *t, PyObject *obj) {
    return obj == Py_None ? -1 : table_code(t, PyLong_FromVoidPtr(obj), obj);
}

/* A site's code: a pair by (identity of its first item, its second), anything else by identity; -1 for None. */
static int64_t site_code(table_t *t, PyObject *site) {
    if (site == Py_None) return -1;
    if (PyTuple_CheckExact(site) && PyTuple_GET_SIZE(site) == 2) {
        PyObject *first = PyLong_FromVoidPtr(PyTuple_GET_ITEM(site, 0));
        PyObject *key = first == NULL ? NULL : PyTuple_Pack(2, first, PyTuple_GET_ITEM(site, 1));
        Py_XDECREF(first);
        return table_code(t, key, site);
    }
    return table_code(t, PyLong_FromVoidPtr(site), site);
}

/* A code back to its value (a new reference); None for -1. */
static PyObject *table_value(table_t *t, int64_t code) {
    if (code < 0) return Py_NewRef(Py_None);
    PyObject *v = PyList_GetItem(t->list, (Py_ssize_t)code);
    Py_XINCREF(v);
    return v;
}

/* ------------------------------------------------------------------ Note: a push's note */
/* What on_push keeps on the op (``Opr.prof``) from its push to its run, in build's NOTE_* order: when
 * it was pushed, the pusher's records (their index), the invocation whose Python pushed it (or None)
 * and, for a sub-op, the user's line that did ((code, offset), or None). It was a tuple of four and
 * an int for the time: ~500 instructions an op to make and free (PyTuple_Pack, PyLong_FromLongLong
 * and their deallocs: callgrind, threaded 10x10 loop, 2026-12-06); here the numbers stay numbers.
 * Read as a sequence it is that tuple, which the Python recorder's general path unpacks. Out of the
 * garbage collector's sight: numbers, an Invocation (untracked), a site pair, in no cycle. */
typedef struct {
    PyObject_HEAD
    int64_t ts;
    int64_t pusher;
    PyObject *inv;
    PyObject *site;
} Note;
static PyTypeObject NoteType;

/* A new note; ``site`` is stolen. */
static PyObject *note_new(int64_t ts, int64_t pusher, PyObject *inv, PyObject *site) {
    Note *n = PyObject_New(Note, &NoteType);
    if (n == NULL) {
        Py_DECREF(site);
        return NULL;
    }
    n->ts = ts, n->pusher = pusher;
    n->inv = Py_NewRef(inv);
    n->site = site;
    return (PyObject *)n;
}

static void note_dealloc(Note *n) {
    Py_XDECREF(n->inv);
    Py_XDECREF(n->site);
    PyObject_Free(n);
}

static Py_ssize_t note_length(PyObject *Py_UNUSED(n)) { return 4; }

static PyObject *note_item(Note *n, Py_ssize_t i) {
    switch (i) {
    case 0: return PyLong_FromLongLong(n->ts);
    case 1: return PyLong_FromLongLong(n->pusher);
    case 2: return Py_NewRef(n->inv);
    case 3: return Py_NewRef(n->site);
    default: PyErr_SetString(PyExc_IndexError, "a push's note has four fields (ts, records, invocation, site)"); return NULL;
    }
}

static PyObject *note_repr(Note *n) {
    return PyUnicode_FromFormat("Note(ts=%lld, records=%lld, invocation=%R, site=%R)", (long long)n->ts, (long long)n->pusher,
                                n->inv, n->site);
}

static PySequenceMethods note_as_sequence = {.sq_length = note_length, .sq_item = (ssizeargfunc)note_item};

static PyTypeObject NoteType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "opprof.profiler._spanlog.Note",
    .tp_doc = "A push's note (ts, records, invocation, site), as the compiled on_push keeps it on the op.",
    .tp_basicsize = sizeof(Note),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)note_dealloc,
    .tp_repr = (reprfunc)note_repr,
    .tp_as_sequence = &note_as_sequence,
};

/* A note's fields, from a Note or (the Python recorder's) tuple of four; ``inv`` and ``site``
 * borrowed. 0, or -1 with an exception set. */
static int note_fields(PyObject *note, int64_t *ts, int64_t *pusher, PyObject **inv, PyObject **site) {
    if (Py_IS_TYPE(note, &NoteType)) {
        Note *n = (Note *)note;
        *ts = n->ts, *pusher = n->pusher, *inv = n->inv, *site = n->site;
        return 0;
    }
    if (!PyTuple_Check(note) || PyTuple_GET_SIZE(note) != 4) {
        PyErr_SetString(PyExc_TypeError, "a push's note is (ts, records, invocation, site)");
        return -1;
    }
    int err = 0;
    *ts = opprof_as_i64(PyTuple_GET_ITEM(note, 0));
    if (*ts == -1 && PyErr_Occurred()) err = 1;
    *pusher = err ? 0 : opprof_as_i64(PyTuple_GET_ITEM(note, 1));
    if (*pusher == -1 && PyErr_Occurred()) err = 1;
    *inv = PyTuple_GET_ITEM(note, 2), *site = PyTuple_GET_ITEM(note, 3);
    return err ? -1 : 0;
}

static inline int is_note(PyObject *note) {
    return Py_IS_TYPE(note, &NoteType) || (PyTuple_CheckExact(note) && PyTuple_GET_SIZE(note) == 4);
}

/* A note's invocation (borrowed), from either form (see is_note). */
static inline PyObject *note_inv(PyObject *note) {
    return Py_IS_TYPE(note, &NoteType) ? ((Note *)note)->inv : PyTuple_GET_ITEM(note, 2);
}

#define SITE_CACHE_BITS 3
#define SITE_CACHE (1 << SITE_CACHE_BITS) /* entries of Hot.site_cache */
typedef struct Hot Hot;
static PyTypeObject HotType;

struct Hot {
    PyObject_HEAD
    int recording;
    int full;
    long long count;      /* records attempted (the recorder's cap counts them) */
    long long max_events; /* the cap */
    unsigned long long generation;
    table_t names, objects, sites;
    /* The sites last coded, by (code, offset): a loop pushes from a handful of lines, and a hit
     * hands out the site pair made before and its code, with no pair made, hashed and compared
     * (~500 instructions a sub-op's push: its pair, the key pair of site_code, a tuple-keyed dict
     * lookup). Each entry holds its pair (the sites table does too). */
    struct site_entry {
        PyObject *code; /* borrowed: the pair holds it */
        int offset;
        PyObject *pair; /* (code, offset) */
        int64_t coded;
    } site_cache[SITE_CACHE];
    PyObject *register_cb;  /* () -> this thread's ThreadRecords (made on first record) */
    PyObject *slow_run; /* the Python recorder's run, for every op that is not plain */
    opprof_user_code user;  /* whose code is not the user's (the not_user prefixes) */
    PyObject *thread_state; /* opprof.engine.state.thread_state */
    PyObject *internal;     /* opprof.engine.INTERNAL */
    PyObject *numpy_peaks;  /* the recorder's dict: inv.id -> (t0 of its Python, NumPy peak bytes) */
    /* What makes a Hot the engine's observer itself (the recorder's hot_path): the recorder, which
     * the rare hooks go to; the clock and NumPy-memory meter the custom-op machinery asks for. */
    PyObject *reports_to, *clock, *numpy_memory;
};

/* ------------------------------------------------------------------ Log: one thread's records of one shape */
/* A log's schema names its tuple form's fields, one letter each: 'i' an int, 'n' a name (str), 'v' an
 * op's vars (one id, or a tuple of ids), 'o' an object or None, 's' a site or None, 'N' a push's note
 * ``(ts, records, invocation, site)``; each is one int64 slot in a record, a note four. build.py
 * names the schemas (and their slots) once; the hooks below write the four it names. */
#define MAX_FIELDS 16

/* A growable array of int64s (a log's extras: flat, so the build reads them as arrays too). */
typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} vec_t;

static int vec_push(vec_t *x, int64_t value) {
    if (x->n == x->cap) {
        Py_ssize_t cap = x->cap ? x->cap * 2 : 64;
        int64_t *grown = PyMem_Realloc(x->v, (size_t)cap * sizeof(int64_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        x->v = grown, x->cap = cap;
    }
    x->v[x->n++] = value;
    return 0;
}

static PyObject *vec_bytes(vec_t *x) { return PyBytes_FromStringAndSize((const char *)x->v, x->n * (Py_ssize_t)sizeof(int64_t)); }

typedef struct {
    PyObject_HEAD
    int64_t **chunks;
    Py_ssize_t nchunks, cap;
    Py_ssize_t len;
    Py_ssize_t width;               /* int64 slots a record */
    char schema[MAX_FIELDS + 1];    /* its tuple form's fields */
    Hot *owner;                     /* whose tables code its names, objects and sites */
    vec_t xids, xstart;             /* extras: the var ids of ops with none or several, one run each (flat), and where each starts */
} Log;

static PyTypeObject LogType;

/* Chunks of a released log kept for the next recording's logs (../_spares.h), up to 4 MB. A chunk of
 * plain records is 4096 x 88 bytes (360 KB): malloc maps it fresh, and each of its 88 pages costs
 * its first write a page fault: 440 faults, ~0.8 ms a 20,000-op profile, 0.6 % of its run, every
 * time (free unmaps it again). Touched only with the GIL held, as every Log is. */
OPPROF_SPARES(chunk_spares, 64, (size_t)4 << 20);

static int64_t *chunk_take(size_t bytes) {
    int64_t *chunk = opprof_spares_take(&chunk_spares, bytes);
    return chunk != NULL ? chunk : PyMem_Malloc(bytes);
}

static void chunk_give(int64_t *chunk, size_t bytes) {
    if (!opprof_spares_give(&chunk_spares, chunk, bytes)) PyMem_Free(chunk);
}

static inline size_t chunk_bytes(Log *log) { return (size_t)(CHUNK * log->width) * sizeof(int64_t); }

static int64_t *log_next(Log *log) {
    Py_ssize_t c = log->len / CHUNK;
    if (c >= log->nchunks) {
        if (log->nchunks == log->cap) {
            Py_ssize_t cap = log->cap ? log->cap * 2 : 16;
            int64_t **grown = PyMem_Realloc(log->chunks, (size_t)cap * sizeof(int64_t *));
            if (grown == NULL) {
                PyErr_NoMemory();
                return NULL;
            }
            log->chunks = grown;
            log->cap = cap;
        }
        int64_t *chunk = chunk_take(chunk_bytes(log));
        if (chunk == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        log->chunks[log->nchunks++] = chunk;
    }
    return log->chunks[c] + (log->len % CHUNK) * log->width;
}

static inline int64_t *log_at(Log *log, Py_ssize_t i) { return log->chunks[i / CHUNK] + (i % CHUNK) * log->width; }

/* Append one record (``log->width`` slots at ``r``); 0, or -1 with an exception set. */
static int log_put(Log *log, const int64_t *r) {
    int64_t *at = log_next(log);
    if (at == NULL) return -1;
    memcpy(at, r, (size_t)log->width * sizeof(int64_t));
    log->len++; /* last: a live reader (with the GIL) never sees a record half written */
    return 0;
}

/* A new extra of ``n`` var ids, each read from ``vars[i]`` (an engine Var when ``of_vars``, else an
 * int): its code, -(k + 1) for the log's k-th; 0 with *err set on an error (the ids read so far are
 * dropped). */
static int64_t new_extra(Log *log, PyObject *vars, int of_vars, int *err) {
    Py_ssize_t n = PyTuple_GET_SIZE(vars), at = log->xids.n;
    for (Py_ssize_t i = 0; i < n && !*err; i++) {
        PyObject *v = PyTuple_GET_ITEM(vars, i);
        int64_t id = of_vars ? slot_int(&S_VAR_ID, v, err) : opprof_as_i64(v);
        if (!of_vars && id == -1 && PyErr_Occurred()) *err = 1;
        if (!*err && vec_push(&log->xids, id) < 0) *err = 1;
    }
    if (!*err && vec_push(&log->xstart, at) < 0) *err = 1;
    if (*err) {
        log->xids.n = at;
        return 0;
    }
    return -(int64_t)log->xstart.n;
}

/* A var tuple as a record's field: the id of its one var, else a code into the log's extras. */
static int64_t vars_field(Log *log, PyObject *vars, int *err) {
    if (!PyTuple_Check(vars)) {
        PyErr_SetString(PyExc_TypeError, "an op's vars must be a tuple");
        *err = 1;
        return 0;
    }
    if (PyTuple_GET_SIZE(vars) == 1) return slot_int(&S_VAR_ID, PyTuple_GET_ITEM(vars, 0), err);
    return new_extra(log, vars, 1, err);
}

/* A vars field given by Python code (an int, or a tuple of var ids). */
static int64_t given_vars(Log *log, PyObject *v, int *err) {
    if (PyLong_Check(v)) {
        int64_t x = opprof_as_i64(v);
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
    return new_extra(log, v, 0, err);
}

static PyObject *field_vars(Log *log, int64_t x) {
    if (x > 0) return PyLong_FromLongLong(x);
    Py_ssize_t k = (Py_ssize_t)(-1 - x);
    Py_ssize_t lo = (Py_ssize_t)log->xstart.v[k], hi = k + 1 < log->xstart.n ? (Py_ssize_t)log->xstart.v[k + 1] : log->xids.n;
    PyObject *t = PyTuple_New(hi - lo);
    for (Py_ssize_t i = lo; t != NULL && i < hi; i++) {
        PyObject *id = PyLong_FromLongLong(log->xids.v[i]);
        if (id == NULL) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, i - lo, id);
    }
    return t;
}

static inline int64_t given_int(PyObject *v, int *err) {
    int64_t x = opprof_as_i64(v);
    if (x == -1 && PyErr_Occurred()) *err = 1;
    return x;
}

/* One field given by Python code, written at ``f`` (a note's four slots); the slots it took. */
static int given_field(Log *log, char kind, PyObject *v, int64_t *f, int *err) {
    Hot *h = log->owner;
    switch (kind) {
    case 'n':
        if (!PyUnicode_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "an op's name is a str");
            *err = 1;
            return 1;
        }
        f[0] = name_code(&h->names, v);
        *err = f[0] < 0;
        return 1;
    case 'v':
        f[0] = given_vars(log, v, err);
        return 1;
    case 'o':
        f[0] = object_code(&h->objects, v);
        *err = f[0] == -1 && PyErr_Occurred();
        return 1;
    case 's':
        f[0] = site_code(&h->sites, v);
        *err = f[0] == -1 && PyErr_Occurred();
        return 1;
    case 'N': {
        PyObject *inv, *site;
        if (note_fields(v, &f[0], &f[1], &inv, &site) < 0) {
            *err = 1;
            return 4;
        }
        f[2] = object_code(&h->objects, inv), *err = f[2] == -1 && PyErr_Occurred();
        if (!*err) f[3] = site_code(&h->sites, site), *err = f[3] == -1 && PyErr_Occurred();
        return 4;
    }
    default:
        f[0] = given_int(v, err);
        return 1;
    }
}

/* One field of a record's tuple form, from the slots at ``f``; the slots it took (*out NULL: error). */
static int tuple_field(Log *log, char kind, int64_t *f, PyObject **out) {
    Hot *h = log->owner;
    switch (kind) {
    case 'n':
        *out = table_value(&h->names, f[0]);
        return 1;
    case 'v':
        *out = field_vars(log, f[0]);
        return 1;
    case 'o':
        *out = table_value(&h->objects, f[0]);
        return 1;
    case 's':
        *out = table_value(&h->sites, f[0]);
        return 1;
    case 'N': {
        PyObject *ts = PyLong_FromLongLong(f[0]), *records = PyLong_FromLongLong(f[1]);
        PyObject *inv = table_value(&h->objects, f[2]), *site = table_value(&h->sites, f[3]);
        *out = ts && records && inv && site ? PyTuple_Pack(4, ts, records, inv, site) : NULL;
        Py_XDECREF(ts), Py_XDECREF(records), Py_XDECREF(inv), Py_XDECREF(site);
        return 4;
    }
    default:
        *out = PyLong_FromLongLong(f[0]);
        return 1;
    }
}

static PyObject *record_tuple(Log *log, int64_t *f) {
    Py_ssize_t n = (Py_ssize_t)strlen(log->schema);
    PyObject *t = PyTuple_New(n);
    if (t == NULL) return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *v;
        f += tuple_field(log, log->schema[k], f, &v);
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, k, v);
    }
    return t;
}

static Log *log_make(Hot *owner, const char *schema) {
    Py_ssize_t n = (Py_ssize_t)strlen(schema), width = 0;
    if (n == 0 || n > MAX_FIELDS || strspn(schema, "invosN") != (size_t)n) {
        PyErr_Format(PyExc_ValueError, "a log's schema is 1 to %d of the letters i n v o s N, got '%s'", MAX_FIELDS, schema);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < n; k++) width += schema[k] == 'N' ? 4 : 1;
    Log *log = (Log *)LogType.tp_alloc(&LogType, 0);
    if (log == NULL) return NULL;
    memcpy(log->schema, schema, (size_t)n + 1);
    log->width = width;
    log->owner = (Hot *)Py_NewRef(owner);
    return log;
}

static PyObject *log_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *owner;
    const char *schema;
    if (!PyArg_ParseTuple(args, "O!s:Log", &HotType, &owner, &schema)) return NULL;
    return (PyObject *)log_make((Hot *)owner, schema);
}

/* A Log holds its Hot, which holds the recorder's bound methods, and the recorder holds its logs:
 * a cycle. The collector must see the Log's edge to free it: an untracked Log kept every stopped
 * recorder alive with all its records (1 MB a 20,000-op profile, found by a block of compare runs
 * whose memory grew by 21 MB a block). The Hot's tp_clear breaks the cycle. */
static int log_traverse(Log *log, visitproc visit, void *arg) {
    Py_VISIT(log->owner);
    return 0;
}

/* Give back every record's memory (its chunks to the cache for the next recording): the log is empty after. */
static void log_empty(Log *log) {
    for (Py_ssize_t i = 0; i < log->nchunks; i++) chunk_give(log->chunks[i], chunk_bytes(log));
    PyMem_Free(log->chunks);
    PyMem_Free(log->xids.v);
    PyMem_Free(log->xstart.v);
    log->chunks = NULL, log->nchunks = log->cap = log->len = 0;
    log->xids = (vec_t){NULL, 0, 0}, log->xstart = (vec_t){NULL, 0, 0};
}

static void log_dealloc(Log *log) {
    PyObject_GC_UnTrack(log);
    log_empty(log);
    Py_XDECREF(log->owner);
    Py_TYPE(log)->tp_free((PyObject *)log);
}

static Py_ssize_t log_length(Log *log) { return log->len; }

static PyObject *log_append(Log *log, PyObject *rec) {
    Py_ssize_t n = (Py_ssize_t)strlen(log->schema);
    if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) != n) {
        PyErr_Format(PyExc_TypeError, "a record of this log is a tuple of %zd fields", n);
        return NULL;
    }
    int64_t r[4 * MAX_FIELDS];
    int64_t *f = r;
    int err = 0;
    for (Py_ssize_t k = 0; k < n && !err; k++) f += given_field(log, log->schema[k], PyTuple_GET_ITEM(rec, k), f, &err);
    if (err || log_put(log, r) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *log_extend(Log *log, PyObject *records) {
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

static PyObject *log_item(Log *log, Py_ssize_t i) {
    if (i < 0 || i >= log->len) {
        PyErr_SetString(PyExc_IndexError, "Log index out of range");
        return NULL;
    }
    return record_tuple(log, log_at(log, i));
}

static PyObject *log_subscript(Log *log, PyObject *key) {
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) return NULL;
        return log_item(log, i < 0 ? i + log->len : i);
    }
    if (!PySlice_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "Log indices are ints or slices");
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

/* The records, field by field, into columns at..at+len of ``out``: a writable C-contiguous int64
 * buffer of width rows (the build's array of every log's records). One pass over the records, where
 * their bytes copied out and then transposed by NumPy took two (20,000 plain ops: 0.45 ms of a
 * 4.3 ms build, 2026-12-05). 0, or -1 with an exception set. */
static int log_fill(Log *log, PyObject *out, PyObject *at_obj) {
    Py_ssize_t at = PyLong_AsSsize_t(at_obj);
    if (at == -1 && PyErr_Occurred()) return -1;
    Py_buffer view;
    if (PyObject_GetBuffer(out, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = view.format == NULL ? "B" : view.format;
    if (*f == '<' || *f == '=' || *f == '@') f++;
    int ok = view.ndim == 2 && view.itemsize == (Py_ssize_t)sizeof(int64_t) && (strcmp(f, "l") == 0 || strcmp(f, "q") == 0) &&
             view.shape[0] == log->width && at >= 0 && at <= view.shape[1] - log->len;
    if (!ok) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError,
                     "columns(out, at): out must be a writable C-contiguous int64 array of %zd rows with room for %zd "
                     "records from column %zd",
                     log->width, log->len, at);
        return -1;
    }
    int64_t *base = (int64_t *)view.buf;
    Py_ssize_t n = view.shape[1], w = log->width;
    for (Py_ssize_t i = 0; i < log->len; i++) {
        const int64_t *r = log_at(log, i);
        for (Py_ssize_t j = 0; j < w; j++) base[j * n + at + i] = r[j];
    }
    PyBuffer_Release(&view);
    return 0;
}

static PyObject *log_columns(Log *log, PyObject *const *args, Py_ssize_t nargs) {
    /* The records into columns at.. of ``out`` (log_fill), then the names, objects and sites by code
     * (the recorder's, shared by its logs: copies as they are now), and this log's extras as the
     * bytes of their var ids (flat) and of where each extra starts among them. */
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "columns(out, at)");
        return NULL;
    }
    if (log_fill(log, args[0], args[1]) < 0) return NULL;
    Hot *h = log->owner;
    return Py_BuildValue("(NNNNN)", PyList_GetSlice(h->names.list, 0, PY_SSIZE_T_MAX),
                         PyList_GetSlice(h->objects.list, 0, PY_SSIZE_T_MAX), PyList_GetSlice(h->sites.list, 0, PY_SSIZE_T_MAX),
                         vec_bytes(&log->xids), vec_bytes(&log->xstart));
}

static PyObject *log_copy(Log *log, PyObject *Py_UNUSED(ignored)) {
    Log *c = log_make(log->owner, log->schema);
    if (c == NULL) return NULL;
    for (Py_ssize_t i = 0; i < log->len; i++)
        if (log_put(c, log_at(log, i)) < 0) goto fail;
    for (Py_ssize_t i = 0; i < log->xids.n; i++)
        if (vec_push(&c->xids, log->xids.v[i]) < 0) goto fail;
    for (Py_ssize_t i = 0; i < log->xstart.n; i++)
        if (vec_push(&c->xstart, log->xstart.v[i]) < 0) goto fail;
    return (PyObject *)c;
fail:
    Py_DECREF(c);
    return NULL;
}

static PyObject *log_schema(Log *log, void *Py_UNUSED(closure)) { return PyUnicode_FromString(log->schema); }

static PyObject *log_width(Log *log, void *Py_UNUSED(closure)) { return PyLong_FromSsize_t(log->width); }

static PyObject *log_release(Log *log, PyObject *Py_UNUSED(ignored)) {
    log_empty(log);
    Py_RETURN_NONE;
}

static PyGetSetDef log_getset[] = {
    {"schema", (getter)log_schema, NULL, "its tuple form's fields, a letter each (see _spanlog.c)", NULL},
    {"width", (getter)log_width, NULL, "int64 slots a record", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef log_methods[] = {
    {"append", (PyCFunction)log_append, METH_O, "Append one record given in its tuple form (the Python paths)."},
    {"extend", (PyCFunction)log_extend, METH_O, "Append each record of an iterable, as list.extend does."},
    {"columns", (PyCFunction)(void (*)(void))log_columns, METH_FASTCALL,
     "columns(out, at): write the records into columns at.. of ``out``; (names, objects, sites by code, bytes of the "
     "extras' var ids, bytes of where each extra starts among them)."},
    {"copy", (PyCFunction)log_copy, METH_NOARGS, "The log as it is now (a live build reads a copy)."},
    {"release", (PyCFunction)log_release, METH_NOARGS,
     "Empty the log, its memory kept for the next recording's logs (once its trace is built: the "
     "recorder's cycle frees the log itself only at a later collection)."},
    {NULL, NULL, 0, NULL},
};

/* sq_item makes a log iterable as a list of tuples is (tests and tools read records one by one). */
static PySequenceMethods log_as_sequence = {.sq_length = (lenfunc)log_length, .sq_item = (ssizeargfunc)log_item};
static PyMappingMethods log_as_mapping = {.mp_length = (lenfunc)log_length, .mp_subscript = (binaryfunc)log_subscript};

static PyTypeObject LogType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "opprof.profiler._spanlog.Log",
    .tp_doc = "One thread's records of one shape, fixed-size, in chunks (a list of tuples on the pure path).",
    .tp_basicsize = sizeof(Log),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = log_new,
    .tp_dealloc = (destructor)log_dealloc,
    .tp_traverse = (traverseproc)log_traverse,
    .tp_free = PyObject_GC_Del,
    .tp_methods = log_methods,
    .tp_getset = log_getset,
    .tp_as_sequence = &log_as_sequence,
    .tp_as_mapping = &log_as_mapping,
};

/* ------------------------------------------------------------------ Hot: one recorder's fast lane */
static unsigned long long generations = 0;

/* This thread's records for the recorder `generation` (borrowed: the recorder keeps them). */
static _Thread_local struct {
    unsigned long long generation;
    PyObject *records;            /* its ThreadRecords */
    Log *plain, *sub, *fam, *deps; /* its logs (see build.ThreadRecords) */
    PyObject *index;              /* its ThreadRecords.index: what a push's note names the pusher by */
    int64_t index_value;          /* the same, as a number */
    PyObject *state;              /* this thread's dict of opprof.engine.state.thread_state (a threading.local) */
    PyObject *last_inv;           /* the invocation last coded on this thread, and its code: a custom op's */
    int64_t last_inv_code;        /* records come in runs of the same one (a dict lookup saved each) */
    PyObject *last_name;          /* the op name last coded on this thread (a reference), and its code */
    int64_t last_name_code;
} tls;

/* The log in ``rec``'s slot ``s`` if it has the schema the hooks write; borrowed (rec keeps it); NULL with an exception set. */
static Log *records_log(PyObject *rec, slot_t *s, const char *schema) {
    PyObject *log = slot_get(s, rec);
    if (log == NULL) return NULL;
    Py_DECREF(log);
    if (!Py_IS_TYPE(log, &LogType) || strcmp(((Log *)log)->schema, schema) != 0) {
        PyErr_Format(PyExc_TypeError, "the thread's records hold no Log of schema %s in %U", schema, s->name);
        return NULL;
    }
    return (Log *)log;
}

static PyObject *this_threads_records(Hot *self) {
    if (tls.generation == self->generation) return tls.records;
    PyObject *rec = PyObject_CallNoArgs(self->register_cb);
    if (rec == NULL) return NULL;
    Py_DECREF(rec); /* borrowed from here on: the recorder's list of records keeps it alive, as long as it */
    Log *plain = records_log(rec, &S_PLAIN, PLAIN_SCHEMA), *sub = plain ? records_log(rec, &S_SUB, SUB_SCHEMA) : NULL;
    Log *fam = sub ? records_log(rec, &S_FAM, FAM_SCHEMA) : NULL, *deps = fam ? records_log(rec, &S_DEPS, DEPS_SCHEMA) : NULL;
    if (deps == NULL) return NULL;
    if (plain->owner != self || sub->owner != self || fam->owner != self || deps->owner != self) {
        PyErr_SetString(PyExc_ValueError, "the thread's logs belong to another recorder");
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
    int err = 0;
    tls.index_value = given_int(index, &err);
    if (err) return NULL;
    tls.index = index;
    tls.generation = self->generation;
    tls.records = rec;
    tls.plain = plain, tls.sub = sub, tls.fam = fam, tls.deps = deps;
    tls.last_inv = NULL;
    Py_CLEAR(tls.last_name); /* its code was the last recorder's */
    return tls.records;
}

/* An invocation's code in the recorder's objects (call after this_threads_records); -1 for None,
 * or -1 with an exception set. */
static int64_t inv_code(Hot *self, PyObject *inv) {
    if (inv == tls.last_inv) return tls.last_inv_code;
    int64_t code = object_code(&self->objects, inv);
    if (code >= 0) tls.last_inv = inv, tls.last_inv_code = code; /* the table keeps it alive: its address stays its own */
    return code;
}

/* The invocation whose Python this thread runs (thread_state.invocation), borrowed; Py_None outside
 * one (the class's default: the thread never set it). Call after this_threads_records. */
static PyObject *current_invocation(void) {
    PyObject *inv = PyDict_GetItemWithError(tls.state, str_invocation);
    if (inv != NULL) return inv;
    return PyErr_Occurred() ? NULL : Py_None;
}

static PyObject *hot_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"max_events", "register", "run", "not_user", "thread_state", "internal", "numpy_peaks", NULL};
    long long max_events;
    PyObject *reg, *run, *not_user, *ts, *internal, *peaks = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "LOOOOO|O!:Hot", kwlist, &max_events, &reg, &run, &not_user, &ts, &internal,
                                     &PyDict_Type, &peaks))
        return NULL;
    Hot *self = (Hot *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    if (opprof_user_code_set(&self->user, not_user) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    if (table_init(&self->names) < 0 || table_init(&self->objects) < 0 || table_init(&self->sites) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->recording = 1;
    self->max_events = max_events;
    self->generation = ++generations;
    Py_INCREF(reg), Py_INCREF(run), Py_INCREF(ts);
    Py_INCREF(internal);
    self->register_cb = reg;
    self->slow_run = run;
    self->thread_state = ts;
    self->internal = internal;
    self->numpy_peaks = Py_XNewRef(peaks);
    return (PyObject *)self;
}

static int hot_traverse(Hot *self, visitproc visit, void *arg) {
    Py_VISIT(self->register_cb);
    Py_VISIT(self->slow_run);
    Py_VISIT(self->user.not_user);
    Py_VISIT(self->reports_to);
    Py_VISIT(self->clock);
    Py_VISIT(self->numpy_memory);
    for (int i = 0; i < SITE_CACHE; i++) Py_VISIT(self->site_cache[i].pair);
    return 0;
}

static int hot_clear(Hot *self) {
    Py_CLEAR(self->register_cb);
    Py_CLEAR(self->slow_run);
    Py_CLEAR(self->reports_to);
    Py_CLEAR(self->clock);
    Py_CLEAR(self->numpy_memory);
    for (int i = 0; i < SITE_CACHE; i++) Py_CLEAR(self->site_cache[i].pair);
    opprof_user_code_clear(&self->user);
    return 0;
}

static void hot_dealloc(Hot *self) {
    PyObject_GC_UnTrack(self);
    hot_clear(self);
    table_free(&self->names);
    table_free(&self->objects);
    table_free(&self->sites);
    Py_XDECREF(self->thread_state);
    Py_XDECREF(self->internal);
    Py_XDECREF(self->numpy_peaks);
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

/* Fibonacci hashing of (code, offset): a loop's lines are a few code units apart in one code object,
 * and the low bits of either alone put two such pushes in one slot. */
static inline struct site_entry *site_slot(Hot *self, PyObject *code, int offset) {
    uint64_t h = ((uint64_t)(uintptr_t)code ^ ((uint64_t)(uint32_t)offset << 32)) * 0x9E3779B97F4A7C15ULL;
    return &self->site_cache[h >> (64 - SITE_CACHE_BITS)];
}

/* Whether ``e`` holds the site (code, offset). */
static inline int site_hit(const struct site_entry *e, PyObject *code, int offset) {
    return e->pair != NULL && e->code == code && e->offset == offset;
}

/* site_code for the hooks: a pair met before (its first item and offset) from the cache. */
static int64_t hot_site_code(Hot *self, PyObject *site) {
    int64_t off;
    if (!PyTuple_CheckExact(site) || PyTuple_GET_SIZE(site) != 2 || !opprof_small_int(PyTuple_GET_ITEM(site, 1), &off) ||
        off < INT_MIN || off > INT_MAX)
        return site_code(&self->sites, site);
    PyObject *first = PyTuple_GET_ITEM(site, 0);
    struct site_entry *e = site_slot(self, first, (int)off);
    if (site_hit(e, first, (int)off)) return e->coded;
    int64_t coded = site_code(&self->sites, site);
    if (coded >= 0) {
        Py_XSETREF(e->pair, Py_NewRef(site));
        e->code = first, e->offset = (int)off, e->coded = coded;
    }
    return coded;
}

/* The user's line that pushed (the innermost frame outside the not_user prefixes) as a
 * ``(code, offset)`` pair, which the build turns into ``(file, line)`` (opprof.profiler.sites.resolve):
 * the cache's pair where that site was met before, else a new one; None where no frame is the
 * user's; NULL with an exception set. */
static PyObject *user_site(Hot *self) {
    int offset = 0;
    PyObject *code = opprof_user_frame(&self->user, &offset);
    if (code == NULL) return Py_NewRef(Py_None);
    struct site_entry *e = site_slot(self, code, offset);
    if (site_hit(e, code, offset)) return Py_NewRef(e->pair);
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
    PyObject *note = note_new(ts, tls.index_value, inv, site);
    if (note == NULL) return NULL;
    int bad = slot_set(&S_PROF, opr, note);
    Py_DECREF(note);
    if (bad) return NULL;
    Py_RETURN_NONE;
}

/* An op's engine edges from the op and its push's note, at ``d`` in build's DEP_* order (DEPS_SCHEMA),
 * its vars coded into ``log``'s extras; 0, or -1 with an exception set. */
static int op_edges(Hot *self, Log *log, int64_t *d, PyObject *opr, PyObject *note) {
    int err = 0;
    PyObject *inv, *site;
    if (note_fields(note, &d[1], &d[2], &inv, &site) < 0) return -1;
    d[0] = slot_int(&S_SEQ, opr, &err);
    if (!err) d[3] = slot_int(&S_READY, opr, &err);
    if (!err) d[4] = slot_int(&S_BY, opr, &err);
    if (!err) d[5] = slot_int(&S_BY_VAR, opr, &err);
    if (err) return -1;
    PyObject *reads = slot_get(&S_READS, opr);
    if (reads == NULL) return -1;
    d[6] = vars_field(log, reads, &err);
    Py_DECREF(reads);
    if (err) return -1;
    PyObject *writes = slot_get(&S_WRITES, opr);
    if (writes == NULL) return -1;
    d[7] = vars_field(log, writes, &err);
    Py_DECREF(writes);
    if (err) return -1;
    d[8] = hot_site_code(self, site);
    return d[8] == -1 && PyErr_Occurred() ? -1 : 0;
}

/* A name's code, through a one-entry cache per thread (call after this_threads_records, which empties
 * it for a new recorder): a loop's ops come in runs of one name, and the names table's dict lookup
 * was 231 of the ~1,600 instructions an op the recorder's hooks ran on a threaded 10x10 ``a = a + 1``
 * loop (callgrind, 2026-12-05). The cache holds a reference, so no other string takes its address. */
static int64_t thread_name_code(Hot *self, PyObject *name) {
    if (name == tls.last_name) return tls.last_name_code;
    int64_t code = name_code(&self->names, name);
    if (code >= 0) {
        Py_XSETREF(tls.last_name, Py_NewRef(name));
        tls.last_name_code = code;
    }
    return code;
}

/* An op's name as a code; -1 with an exception set. */
static int64_t op_name(Hot *self, PyObject *opr) {
    PyObject *name = slot_get(&S_NAME, opr);
    if (name == NULL) return -1;
    int64_t code = PyUnicode_Check(name) ? thread_name_code(self, name) : -1;
    Py_DECREF(name);
    if (code < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "an op's name is a str");
    return code;
}

/* Keep a plain op's span [t0, t1] on this thread's log (PLAIN_SCHEMA: its span and its edges in one
 * record); 0, or -1 with an exception set. */
static int keep(Hot *self, PyObject *opr, PyObject *note, int64_t t0, int64_t t1) {
    if (!admit(self)) return 0;
    if (this_threads_records(self) == NULL) return -1;
    int64_t d[9];
    plain_t r = {.t0 = t0, .t1 = t1};
    r.name = op_name(self, opr);
    if (r.name < 0 || op_edges(self, tls.plain, d, opr, note) < 0) return -1;
    r.seq = d[0], r.push = d[1], r.pusher = d[2], r.ready = d[3], r.by = d[4], r.by_var = d[5];
    r.reads = d[6], r.writes = d[7]; /* a plain op has no site */
    return log_put(tls.plain, &r.t0);
}

/* Keep an op that is not plain, as the Python recorder's _record does: a sub-op (info None, pushed
 * inside a custom op's Python) in ``sub`` (SUB_SCHEMA: t0, t1, name, seq and its push's note), a
 * custom op's own op in ``fam`` (FAM_SCHEMA: START or DUMMY, t0, t1, invocation, seq); its edges
 * in ``deps``. */
static int keep_other(Hot *self, PyObject *opr, PyObject *note, PyObject *info, int64_t t0, int64_t t1) {
    if (!admit(self)) return 0;
    if (this_threads_records(self) == NULL) return -1;
    int64_t d[9];
    if (op_edges(self, tls.deps, d, opr, note) < 0) return -1;
    if (info == Py_None) {
        int64_t inv = inv_code(self, note_inv(note));
        if (inv == -1 && PyErr_Occurred()) return -1;
        int64_t r[8] = {t0, t1, op_name(self, opr), d[0], d[1], d[2], inv, d[8]};
        if (r[2] < 0 || log_put(tls.sub, r) < 0) return -1;
    } else {
        PyObject *obj = slot_get(&S_CINV, info), *part = slot_get(&S_CPART, info);
        if (obj != NULL) untrack_invocation(obj);
        int64_t inv = obj == NULL ? -1 : inv_code(self, obj); /* the table keeps it */
        int bad = obj == NULL || part == NULL || (inv == -1 && PyErr_Occurred());
        int64_t r[5] = {part == part_invocation ? KIND_START : KIND_DUMMY, t0, t1, inv, d[0]};
        Py_XDECREF(obj), Py_XDECREF(part);
        if (bad || log_put(tls.fam, r) < 0) return -1;
    }
    return log_put(tls.deps, d);
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
    if (!is_note(note)) return PyObject_Vectorcall(self->slow_run, args, (size_t)nargs, NULL);
    if (info == Py_None) /* a plain op, or a sub-op (pushed inside a custom op's Python) */
        return timed(self, opr, note, note_inv(note) == Py_None ? NULL : Py_None, fn, args + 2, nargs - 2);
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
    if (!PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "an op's name is a str");
        return -1;
    }
    untrack_invocation(inv);
    int err = 0;
    int64_t seq = given_int(args[1], &err);
    int64_t name = err ? -1 : thread_name_code(self, args[0]);
    int64_t invc = name < 0 ? -1 : inv_code(self, inv);
    int64_t sitec = invc < 0 ? -1 : hot_site_code(self, site);
    if (name < 0 || invc < 0 || (sitec == -1 && PyErr_Occurred())) return -1;
    int64_t reads = vars_field(tls.deps, args[2], &err);
    int64_t writes = err ? 0 : vars_field(tls.deps, args[3], &err);
    if (err) return -1;
    int64_t r[8] = {t0, t1, name, seq, t0, tls.index_value, invc, sitec};
    int64_t d[9] = {seq, t0, tls.index_value, 0, 0, 0, reads, writes, sitec};
    return log_put(tls.sub, r) < 0 || log_put(tls.deps, d) < 0 ? -1 : 0;
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

/* on_python(inv, t0, t1, cpu_ns=-1, numpy_peak=-1): a custom op's Python ran; kept as (PYTHON, t0,
 * t1, inv, cpu) in ``fam``, and a NumPy peak (>= 0: memory is recorded) as (t0, peak) in the
 * recorder's numpy_peaks under inv.id, as Recorder.note_numpy_peak does: in the same call, as this
 * runs on the custom-op thread while the worker its sub-ops wait for may want the GIL. It takes no
 * slot under the cap (its family's Dummy_Wait, recorded after it, may still fit), but once the cap
 * is reached the family is incomplete anyway. */
static PyObject *hot_on_python(Hot *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 3 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError, "on_python(inv, t0, t1, cpu_ns=-1, numpy_peak=-1)");
        return NULL;
    }
    if (!self->recording || self->full) Py_RETURN_NONE;
    if (this_threads_records(self) == NULL) return NULL;
    untrack_invocation(args[0]);
    int err = 0;
    int64_t inv = inv_code(self, args[0]);
    if (inv == -1 && PyErr_Occurred()) return NULL;
    int64_t r[5] = {KIND_PYTHON, given_int(args[1], &err), 0, inv, -1};
    if (!err) r[2] = given_int(args[2], &err);
    if (!err && nargs >= 4) r[4] = given_int(args[3], &err);
    int64_t peak = !err && nargs == 5 ? given_int(args[4], &err) : -1;
    if (err || log_put(tls.fam, r) < 0) return NULL;
    if (peak >= 0 && self->numpy_peaks != NULL) {
        PyObject *id = PyObject_GetAttr(args[0], str_id);
        PyObject *kept = id == NULL ? NULL : PyTuple_Pack(2, args[1], args[4]);
        int bad = kept == NULL || PyDict_SetItem(self->numpy_peaks, id, kept) < 0;
        Py_XDECREF(id), Py_XDECREF(kept);
        if (bad) return NULL;
    }
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
    Log *log = tls.plain;
    int err = 0;
    plain_t r = {.t0 = t0, .t1 = t1, .push = t0, .pusher = tls.index_value, .ready = 0, .by = 0, .by_var = 0};
    {
        r.name = thread_name_code(self, args[0]);
        err = r.name < 0;
    }
    if (!err) {
        r.seq = opprof_as_i64(args[1]);
        err = r.seq == -1 && PyErr_Occurred();
    }
    if (!err) r.reads = vars_field(log, args[2], &err);
    if (!err) r.writes = vars_field(log, args[3], &err);
    return err ? -1 : log_put(log, &r.t0);
}

/* run_pushed(name, seq, reads, writes, fn, *args): the naive engine's plain op pushed and run at once. */
static PyObject *hot_run_pushed(Hot *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 5) {
        PyErr_SetString(PyExc_TypeError, "run_pushed(name, seq, reads, writes, fn, *args)");
        return NULL;
    }
    if (!self->recording) { /* paused: the op runs, as bare as without a profile (nothing to note) */
        PyObject *res = PyObject_Vectorcall(args[4], args + 5, (size_t)(nargs - 5), NULL);
        if (res == NULL) return NULL;
        Py_DECREF(res);
        Py_RETURN_NONE;
    }
    if (this_threads_records(self) == NULL) return NULL;
    PyObject *inv = current_invocation();
    if (inv == NULL) return NULL;
    if (inv != Py_None) return run_pushed_inside(self, inv, args, nargs);
    call_t c = timed_call(args[4], args + 5, nargs - 5);
    return finished(&c, keep_pushed(self, args, c.t0, c.t1));
}

/* The recorder's count as an iterator: next(hot) takes a slot, as next(itertools.count()) does. */
static PyObject *hot_iter(PyObject *self) {
    Py_INCREF(self);
    return self;
}

static PyObject *hot_next(Hot *self) { return PyLong_FromLongLong(self->count++); }

/* The engine's ready hook (see EngineObserver.on_ready): each op of the list ``args[0]`` became ready
 * now, when the op ``args[1]`` (its seq) completed. One clock read for them all and two slot writes
 * an op: 60 ns a call here, against 124 ns for the same lines as a Python method (a million calls
 * of one op each, 2026-12-05); it runs at nearly every completion of a chain of small ops. */
static PyObject *hot_on_ready(Hot *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0]) || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "on_ready(ready: list of Opr, by: int)");
        return NULL;
    }
    PyObject *ready = args[0], *by = args[1];
    PyObject *now = PyLong_FromLongLong(monotonic_ns());
    if (now == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ready); i++) {
        PyObject *opr = PyList_GET_ITEM(ready, i);
        if (slot_set(&S_READY, opr, now) < 0 || slot_set(&S_BY, opr, by) < 0) {
            Py_DECREF(now);
            return NULL;
        }
    }
    Py_DECREF(now);
    Py_RETURN_NONE;
}

/* The hooks an engine calls rarely (a wait, a held-back push, a failed custom op, an engine switch):
 * handed to the recorder's own methods of the same name. */
static PyObject *forward(Hot *self, const char *name, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (self->reports_to == NULL) {
        PyErr_Format(PyExc_RuntimeError, "%s: this Hot reports to no recorder", name);
        return NULL;
    }
    PyObject *fn = PyObject_GetAttrString(self->reports_to, name);
    if (fn == NULL) return NULL;
    PyObject *res = PyObject_Vectorcall(fn, args, nargsf, kwnames);
    Py_DECREF(fn);
    return res;
}
#define FORWARD(hook)                                                                                        \
    static PyObject *hot_##hook(Hot *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) { \
        return forward(self, #hook, args, nargsf, kwnames);                                                  \
    }
FORWARD(on_wait)
FORWARD(on_held_back)
FORWARD(on_error)
FORWARD(follow)
#undef FORWARD

static PyMethodDef hot_methods[] = {
    {"on_push", (PyCFunction)hot_on_push, METH_O, "The engine's push hook (see Recorder.on_push)."},
    {"run", (PyCFunction)(void (*)(void))hot_run, METH_FASTCALL, "The engine's run hook (see Recorder.run)."},
    {"run_pushed", (PyCFunction)(void (*)(void))hot_run_pushed, METH_FASTCALL, "The naive engine's push-and-run hook."},
    {"on_python", (PyCFunction)(void (*)(void))hot_on_python, METH_FASTCALL, "A custom op's Python ran (see Recorder.on_python)."},
    {"on_ready", (PyCFunction)(void (*)(void))hot_on_ready, METH_FASTCALL, "Ops made ready by a completion (see EngineObserver.on_ready)."},
    {"on_wait", (PyCFunction)(void (*)(void))hot_on_wait, METH_FASTCALL | METH_KEYWORDS, "The recorder's on_wait."},
    {"on_held_back", (PyCFunction)(void (*)(void))hot_on_held_back, METH_FASTCALL | METH_KEYWORDS, "The recorder's on_held_back."},
    {"on_error", (PyCFunction)(void (*)(void))hot_on_error, METH_FASTCALL | METH_KEYWORDS, "The recorder's on_error."},
    {"follow", (PyCFunction)(void (*)(void))hot_follow, METH_FASTCALL | METH_KEYWORDS, "The recorder's follow."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef hot_members[] = {
    {"recording", T_INT, offsetof(Hot, recording), 0, "0 while paused"},
    {"full", T_INT, offsetof(Hot, full), 0, "1 once a record was dropped at the cap"},
    {"count", T_LONGLONG, offsetof(Hot, count), 0, "records attempted so far"},
    {"max_events", T_LONGLONG, offsetof(Hot, max_events), READONLY, "the cap"},
    {"reports_to", T_OBJECT, offsetof(Hot, reports_to), 0, "the recorder this stands for on the engine's hot path"},
    {"clock", T_OBJECT, offsetof(Hot, clock), 0, "the recorder's clock (time.perf_counter_ns)"},
    {"numpy_memory", T_OBJECT, offsetof(Hot, numpy_memory), 0, "the recorder's NumPy-memory meter, or None"},
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
    part_invocation = part;
    int err = 0;
    KIND_START = given_int(start, &err);
    if (!err) KIND_DUMMY = given_int(dummy, &err);
    if (!err) KIND_PYTHON = given_int(python, &err);
    if (err) return NULL;
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
    str_id = PyUnicode_InternFromString("id");
    if (str_invocation == NULL || str_id == NULL) return NULL;
    if (PyType_Ready(&LogType) < 0 || PyType_Ready(&HotType) < 0 || PyType_Ready(&NoteType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (m == NULL) return NULL;
    Py_INCREF(&LogType);
    Py_INCREF(&HotType);
    Py_INCREF(&NoteType);
    if (PyModule_AddObject(m, "Log", (PyObject *)&LogType) < 0 ||
        PyModule_AddObject(m, "Hot", (PyObject *)&HotType) < 0 ||
        PyModule_AddObject(m, "Note", (PyObject *)&NoteType) < 0 ||
        PyModule_AddIntConstant(m, "RECORD_SIZE", (long)sizeof(plain_t)) < 0 ||
        PyModule_AddIntConstant(m, "FIELDS", FIELDS) < 0 || PyModule_AddIntConstant(m, "API", SPANLOG_API) < 0 || PyModule_AddStringConstant(m, "PLAIN_SCHEMA", PLAIN_SCHEMA) < 0 ||
        PyModule_AddStringConstant(m, "SUB_SCHEMA", SUB_SCHEMA) < 0 || PyModule_AddStringConstant(m, "FAM_SCHEMA", FAM_SCHEMA) < 0 ||
        PyModule_AddStringConstant(m, "DEPS_SCHEMA", DEPS_SCHEMA) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
