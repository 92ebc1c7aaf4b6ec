/* opprof.profiler._memlog: memory recording's hot path, in C (opprof/profiler/memory.py is its Python face).
 *
 * Why C: the pure-Python path (MemoryRecording._made and _freed) costs 1.0-1.4 µs per NDArray made
 * and freed (a loop of 20,000 ``x = x + 1`` on 4x4 arrays, naive engine; 1.8-3 µs on the threaded
 * one), +15-39 % on that loop profiled (ops of 6-9 µs), where the goal is ~5 %: a bound method
 * call per array, ``next()`` on a counter, four slot stores on the weak reference, a dict store and
 * pop keyed by an int made for it, a tuple of four ints per event that the garbage collector tracks
 * (a list of 40,000 of them for full collections to scan), and a Python frame for the free
 * callback. This module does the same in 0.19-0.34 µs on that loop (0.23 µs with the hook called
 * directly, where NumPy's own ``empty(16)`` is 0.1 µs; the two clock reads, vDSO clock_gettime,
 * are ~8 % of that loop's samples under perf).
 *
 * Here ``Log.made`` is the NDArray hook itself (opprof.nd.ndarray's ``_on_array`` is the bound C method);
 * the weak reference on the storage is a ``weakref.ref`` subclass (``Storage``) whose struct carries
 * the storage number, the var id and the bytes, and whose callback is one module-level C function.
 * A record is four int64s in a growable C array; ``Log.records()`` hands them over as bytes for
 * ``numpy.frombuffer``, so no event is ever a Python object.
 *
 * Which storages are alive: each Storage is linked into its Log's doubly linked list (the list owns
 * the reference that keeps it alive, as the Python path's ``_live`` dict does), and unlinked by its
 * free. "Already seen" (``detach()`` shares storage) is answered by walking the array's own weak
 * reference list (usually empty or one entry) for a Storage of this Log: no dict, no int key.
 *
 * Re-entrancy: making the weak reference allocates a GC object, so a collection can run inside
 * ``made`` and free other storages, whose callbacks append to the same buffer. ``made`` therefore
 * does every call that can reach Python first, and only then reserves, links and writes its record,
 * with nothing in between that can run Python code (so neither a callback on this thread nor one on
 * another, which needs the GIL, can move the buffer under it). All of this relies on the GIL.
 */
#define PY_SSIZE_T_CLEAN
#ifndef Py_BUILD_CORE_MODULE
#define Py_BUILD_CORE_MODULE /* ../_frames.h reads the interpreter's frame list from the internal headers */
#endif
#include <Python.h>

#include "../_frames.h"    /* opprof_user_frame(): the user's line that made an array */
#include "_npmem_hooks.h"  /* what _npmem.c's handlers tell: their frees and moves */
#include "_ptrtable.h"     /* the watch table's hash, probe and deletion (shared with _npmem.c) */
#include "../_monotonic.h" /* monotonic_ns(): the clock perf_counter_ns reads */
#include "../_int64.h"     /* opprof_as_i64(): an int64 from a Python int, without the byte-array path */
#include <structmember.h>

#if defined(Py_GIL_DISABLED)
#error "opprof.profiler._memlog relies on the GIL to serialise its log"
#endif

#include <pthread.h>
#include <stdint.h>
#if PY_VERSION_HEX < 0x030C0000
#include "internal/pycore_pystate.h" /* _PyThreadState_GET(): the GIL holder's state, one load */
#endif

/* One event, as opprof/profiler/memory.py reads it (RECORD_SIZE bytes, native byte order): the
 * Python path's (ns, storage number, var id, +bytes / -bytes) tuple. */
typedef struct {
    int64_t ts, number, var, nbytes;
} event_t;

/* The first buffer holds 4,096 events (128 KiB); it doubles from there (amortised, a realloc per
 * doubling: ~20 for a million events). */
#define FIRST_CAP 4096

typedef struct Log Log;

/* A weak reference to one storage (a weakref.ref subclass), with what its free needs to say. */
typedef struct Storage {
    PyWeakReference ref;
    struct Storage *prev, *next; /* the owner's list of live storages */
    Log *owner;                  /* borrowed: a Log lets go of all its Storages before it goes; NULL once released */
    int64_t number, var, nbytes;
    PyObject *code; /* strong: the code of the user's line that made the array (opprof_user_frame); NULL none */
    int lasti;      /* the byte offset of that line's instruction in ``code`` */
} Storage;

struct Log {
    PyObject_HEAD
    event_t *events;
    Py_ssize_t len, cap;
    int64_t numbers;  /* the next storage number */
    Storage *live;    /* the head of the live list (each holds one reference, the list's) */
    Py_ssize_t nlive;
    int on;
    PyTypeObject *var_type;    /* opprof.engine.Var, whose ``id`` slot is read at its offset */
    Py_ssize_t var_id_offset; /* -1: read ``id`` through getattr */
    opprof_user_code user; /* whose code is not the user's (start(not_user)) */
    struct watch *watched;  /* storages watched through the NumPy handler's free (see "watched storages") */
    size_t wcap, wused;
};

static PyTypeObject StorageType, LogType;
static PyObject *str_base, *str_nbytes, *str_id, *str_itemsize;

/* ------------------------------------------------------------------ reading a NumPy array
 * An array's base and bytes are read off its struct where ``bind_numpy`` checked that layout:
 * ``getattr(data, "base")`` and ``getattr(data, "nbytes")`` cost ~55 ns an array together (about
 * a fifth of recording one). The fields are the leading ones of NumPy's PyArrayObject_fields
 * (numpy/_core/include/numpy/ndarraytypes.h), the same since NumPy 1.7 and in 2.x; the item size
 * lives in the dtype, whose layout NumPy 2 changed, so it is asked of the dtype once per dtype
 * object and remembered. Anything else (a subclass, a layout the check refused) goes through
 * getattr. */
typedef struct {
    PyObject_HEAD char *data;
    int nd;
    Py_ssize_t *dimensions;
    Py_ssize_t *strides;
    PyObject *base;
    PyObject *descr;
    int flags;
    PyObject *weakreflist;
    void *_buffer_info;   /* NumPy >= 1.20 */
    PyObject *mem_handler; /* NumPy >= 1.22: the capsule of the handler that allocated the data */
} array_head_t;

static PyTypeObject *ndarray_type = NULL; /* numpy.ndarray, once bind_numpy checked the layout */
#define DTYPE_CACHE 32
static struct {
    PyObject *descr; /* strong */
    int64_t itemsize;
} dtypes[DTYPE_CACHE];
static int ndtypes = 0;

/* The item size of ``descr``; -1 with an exception set. */
static int64_t itemsize_of(PyObject *descr) {
    for (int i = 0; i < ndtypes; i++)
        if (dtypes[i].descr == descr) return dtypes[i].itemsize;
    PyObject *v = PyObject_GetAttr(descr, str_itemsize);
    if (v == NULL) return -1;
    int64_t size = opprof_as_i64(v);
    Py_DECREF(v);
    if (size == -1 && PyErr_Occurred()) return -1;
    if (ndtypes < DTYPE_CACHE) {
        dtypes[ndtypes].descr = Py_NewRef(descr);
        dtypes[ndtypes++].itemsize = size;
    }
    return size;
}

/* The storage's base (borrowed, NULL: it owns its data; 0) and bytes, read off the struct where the
 * layout was checked, else by getattr (then base is Py_None or another object); -1 with an exception set. */
static int array_facts(PyObject *data, PyObject **base, int64_t *nbytes) {
    if (ndarray_type != NULL && Py_IS_TYPE(data, ndarray_type)) {
        array_head_t *a = (array_head_t *)data;
        *base = a->base;
        if (*base != NULL) return 0;
        int64_t size = itemsize_of(a->descr);
        if (size < 0) return -1;
        for (int k = 0; k < a->nd; k++) size *= (int64_t)a->dimensions[k];
        *nbytes = size;
        return 0;
    }
    PyObject *b = PyObject_GetAttr(data, str_base);
    if (b == NULL) return -1;
    Py_DECREF(b); /* only compared with None */
    *base = b == Py_None ? NULL : b;
    if (*base != NULL) return 0;
    PyObject *n = PyObject_GetAttr(data, str_nbytes);
    if (n == NULL) return -1;
    *nbytes = opprof_as_i64(n);
    Py_DECREF(n);
    return *nbytes == -1 && PyErr_Occurred() ? -1 : 0;
}

/* ------------------------------------------------------------------ watched storages
 * Where opprof.profiler._npmem's data-memory handler allocated an array's data (the recording
 * thread has it installed while recording, a custom op's Python while it runs), its free is seen
 * by that handler: the storage is kept in a pointer table here, and the handler's free hook records
 * the free, without a weak reference (~0.18 µs of the ~0.21 µs an array cost with one). Any other
 * array keeps the weak reference. One Log watches at a time (the ``watcher``); the hooks run under
 * the GIL (NumPy frees an array's data in its dealloc), and are ignored without it. */
static npmem_hooks_t *npmem = NULL; /* bound by bind_npmem */
static Log *watcher = NULL;         /* borrowed: the Log whose start() took the hooks, until its stop() */

struct watch {
    uintptr_t key; /* the data pointer; 0: empty */
    int64_t number, var, nbytes;
    PyObject *code; /* strong: where the user's code made it (opprof_user_frame), or NULL */
    int lasti;
};

/* The entry of ``key``, or NULL. */
static struct watch *watch_find(Log *log, uintptr_t key) {
    if (log->wused == 0) return NULL;
    struct watch *e = &log->watched[opprof_ptr_probe(log->watched, sizeof(struct watch), log->wcap - 1, key)];
    return e->key != 0 ? e : NULL;
}

/* Room for one more entry (the table kept at most 3/4 full); -1 with MemoryError set. */
static int watch_reserve(Log *log) {
    if ((log->wused + 1) * 4 <= log->wcap * 3) return 0;
    /* From 64 entries (3 KB): a loop that frees each array soon after making it keeps a handful
     * alive, and their slots, spread over the table by the hash, then stay in the L1 cache. */
    size_t cap = log->wcap ? log->wcap * 2 : 64;
    struct watch *t = PyMem_Calloc(cap, sizeof(struct watch));
    if (t == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t k = 0; k < log->wcap; k++) {
        uintptr_t key = log->watched[k].key;
        if (key != 0) t[opprof_ptr_probe(t, sizeof(struct watch), cap - 1, key)] = log->watched[k];
    }
    PyMem_Free(log->watched);
    log->watched = t;
    log->wcap = cap;
    return 0;
}

/* Put an entry (room reserved); its key is not in the table. */
static void watch_put(Log *log, struct watch w) {
    log->watched[opprof_ptr_probe(log->watched, sizeof(struct watch), log->wcap - 1, w.key)] = w;
    log->wused++;
}

/* Take the entry at ``e`` out. */
static struct watch watch_take(Log *log, struct watch *e) {
    struct watch out = *e;
    opprof_ptr_delete(log->watched, sizeof(struct watch), log->wcap - 1, (size_t)(e - log->watched));
    log->wused--;
    return out;
}

/* Forget every watched storage (they stay alive: an allocation without a free). */
static void watch_clear(Log *log) {
    for (size_t k = 0; k < log->wcap; k++)
        if (log->watched[k].key != 0) Py_CLEAR(log->watched[k].code);
    PyMem_Free(log->watched);
    log->watched = NULL;
    log->wcap = log->wused = 0;
}

static void write_event(Log *log, int64_t number, int64_t var, int64_t nbytes);
static int reserve(Log *log);
static void unwatch(Log *log);

/* Whether the calling thread holds the GIL. The free and move hooks ask on every block the handler
 * frees (NumPy may free without it); PyGILState_Check answers through the thread-specific-storage
 * key (pthread_getspecific and two calls: ~150 of the ~1,100 instructions memory recording added to
 * an op of the naive engine's 10x10 ``a = a + 1`` loop, callgrind, 2026-12-06). The interpreter's
 * own record of who holds it is one load: from 3.12 the calling thread's attached state (a thread
 * local, NULL from the moment it lets the GIL go); before, the holder's state (a global, NULL while
 * no thread holds it), whose thread id is then compared with the caller's. That read of another
 * thread's state can only meet one its thread is deleting while the caller is without the GIL, and
 * is never then the caller's id. */
static inline int holds_gil(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return PyThreadState_GetUnchecked() != NULL;
#elif PY_VERSION_HEX >= 0x030C0000
    return _PyThreadState_UncheckedGet() != NULL;
#else
    PyThreadState *ts = _PyThreadState_GET();
    return ts != NULL && ts->thread_id == (unsigned long)pthread_self();
#endif
}

/* The handler freed ``ptr``: the free of a watched storage. */
static void watched_free(void *ptr) {
    Log *log = watcher;
    if (log == NULL || !log->on || !holds_gil()) return;
    struct watch *e = watch_find(log, (uintptr_t)ptr);
    if (e == NULL) return;
    struct watch w = watch_take(log, e);
    Py_CLEAR(w.code); /* a code object: its dealloc runs no Python code */
    if (reserve(log) == 0)
        write_event(log, w.number, w.var, -w.nbytes);
    else
        PyErr_Clear(); /* out of memory in a free: the event is lost, the free goes on */
}

/* The handler moved ``old`` to ``new_ptr`` (a realloc): the storage goes on at its new place. */
static void watched_move(void *old, void *new_ptr) {
    Log *log = watcher;
    if (log == NULL || old == new_ptr || !holds_gil()) return;
    struct watch *e = watch_find(log, (uintptr_t)old);
    if (e == NULL) return;
    struct watch w = watch_take(log, e);
    w.key = (uintptr_t)new_ptr;
    watch_put(log, w); /* one out, one in: the room is there */
}

/* Whether ``data`` (an ndarray read off its struct) owns memory the handler allocated: watched. */
static inline int watchable(Log *log, PyObject *data) {
    if (watcher != log || npmem == NULL || ndarray_type == NULL || !Py_IS_TYPE(data, ndarray_type)) return 0;
    PyObject *h = ((array_head_t *)data)->mem_handler;
    return (h == *npmem->watch_capsule || h == *npmem->capsule) && ((array_head_t *)data)->data != NULL;
}

/* bind_npmem(hooks) -> None: take opprof.profiler._npmem's hooks (its ``_hooks`` capsule). */
static PyObject *memlog_bind_npmem(PyObject *module, PyObject *capsule) {
    if (capsule == Py_None) { /* unbind: weak references for every array */
        if (watcher != NULL) {
            PyErr_SetString(PyExc_RuntimeError, "bind_npmem(None) while a Log is recording");
            return NULL;
        }
        npmem = NULL;
        Py_RETURN_NONE;
    }
    npmem_hooks_t *h = PyCapsule_GetPointer(capsule, NPMEM_HOOKS_CAPSULE);
    if (h == NULL) return NULL;
    if (h->version != NPMEM_HOOKS_VERSION) {
        PyErr_Format(PyExc_RuntimeError, "opprof.profiler._npmem's hooks are of version %d, not %d", h->version,
                     NPMEM_HOOKS_VERSION);
        return NULL;
    }
    npmem = h;
    Py_RETURN_NONE;
}

/* handler_of(array) -> the capsule of the handler that allocated its data (None where unknown). */
static PyObject *memlog_handler_of(PyObject *module, PyObject *data) {
    if (ndarray_type == NULL || !Py_IS_TYPE(data, ndarray_type)) Py_RETURN_NONE;
    PyObject *h = ((array_head_t *)data)->mem_handler;
    return Py_NewRef(h != NULL ? h : Py_None);
}

/* bind_numpy(ndarray, samples): read arrays of type ``ndarray`` off their struct from now on, if
 * every one of ``samples`` (arrays of several shapes and dtypes, views among them) reads there as
 * getattr says; returns whether it does. */
static PyObject *memlog_bind_numpy(PyObject *module, PyObject *args) {
    PyObject *type, *samples;
    if (!PyArg_ParseTuple(args, "O!O!:bind_numpy", &PyType_Type, &type, &PyList_Type, &samples)) return NULL;
    PyTypeObject *was = ndarray_type;
    ndarray_type = (PyTypeObject *)type;
    int ok = 1;
    for (Py_ssize_t i = 0; ok && i < PyList_GET_SIZE(samples); i++) {
        PyObject *x = PyList_GET_ITEM(samples, i);
        PyObject *fast_base = NULL, *slow_base = NULL;
        int64_t fast = -1, slow = -1;
        if (!Py_IS_TYPE(x, ndarray_type)) continue;
        if (array_facts(x, &fast_base, &fast) < 0) return NULL;
        PyTypeObject *keep = ndarray_type;
        ndarray_type = NULL; /* the getattr path */
        int bad = array_facts(x, &slow_base, &slow) < 0;
        ndarray_type = keep;
        if (bad) return NULL;
        ok = fast_base == slow_base && (fast_base != NULL || fast == slow);
    }
    if (!ok) ndarray_type = was;
    return PyBool_FromLong(ok);
}
/* The weak references' callback (``_freed``): one function for all, so a Storage refers to
 * nothing but its storage (weakly) and to this; it finds its Log through ``owner``. */
static PyObject *freed_callback;

/* ------------------------------------------------------------------ the event buffer */

/* The events buffer of a released log, kept for the next recording's log (the largest, up to
 * SPARE_MAX bytes): a fresh buffer costs each 4 KB page's first write a page fault (~1.8 us here),
 * ~300 of them a 20,000-op recording (20,000 NDArrays made and freed, 32 bytes an event), where the
 * recording itself costs ~0.2 us an array. Touched with the GIL held only. */
#define SPARE_MAX ((size_t)8 << 20)
static event_t *spare_events = NULL;
static Py_ssize_t spare_cap = 0;

static void events_give(event_t *events, Py_ssize_t cap) {
    if (events == NULL) return;
    if ((size_t)cap * sizeof(event_t) <= SPARE_MAX && cap > spare_cap) {
        PyMem_Free(spare_events);
        spare_events = events, spare_cap = cap;
    } else {
        PyMem_Free(events);
    }
}

/* Room for one more event; -1 with MemoryError set. Calls no Python code. */
static int reserve(Log *log) {
    if (log->len < log->cap) return 0;
    if (log->cap == 0 && spare_events != NULL) {
        log->events = spare_events, log->cap = spare_cap;
        spare_events = NULL, spare_cap = 0;
        return 0;
    }
    Py_ssize_t cap = log->cap ? log->cap * 2 : FIRST_CAP;
    if ((size_t)cap > PY_SSIZE_T_MAX / sizeof(event_t)) {
        PyErr_NoMemory();
        return -1;
    }
    event_t *grown = PyMem_Realloc(log->events, (size_t)cap * sizeof(event_t));
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    log->events = grown;
    log->cap = cap;
    return 0;
}

/* Stamps and writes an event into the room reserve() made: call nothing in between. */
static inline void write_event(Log *log, int64_t number, int64_t var, int64_t nbytes) {
    event_t *e = &log->events[log->len++];
    e->ts = monotonic_ns();
    e->number = number;
    e->var = var;
    e->nbytes = nbytes;
}

/* ------------------------------------------------------------------ the live list */

static inline void link_storage(Log *log, Storage *s) {
    s->owner = log;
    s->prev = NULL;
    s->next = log->live;
    if (log->live != NULL) log->live->prev = s;
    log->live = s;
    log->nlive++;
}

static inline void unlink_storage(Log *log, Storage *s) {
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        log->live = s->next;
    if (s->next != NULL) s->next->prev = s->prev;
    s->prev = s->next = NULL;
    s->owner = NULL;
    log->nlive--;
}

/* Lets go of every live Storage, their callbacks cleared first: none fires after this, even for a
 * Storage someone else still holds (weakref.getweakrefs), and nothing is recorded for them. */
static void release_all(Log *log) {
    while (log->live != NULL) {
        Storage *s = log->live;
        unlink_storage(log, s);
        Py_CLEAR(s->ref.wr_callback);
        Py_CLEAR(s->code);
        Py_DECREF(s); /* the list's reference: the weak reference dies, and leaves the array's list */
    }
}

/* Whether this Log already has a Storage on ``data``: its weak reference list holds one. Reads the
 * list where CPython keeps it (the type's tp_weaklistoffset; negative for a managed one in 3.12+, on
 * the pre-header). An array is on a handful of weak references at most, usually none. */
static inline int seen(Log *log, PyObject *data) {
    Py_ssize_t offset = Py_TYPE(data)->tp_weaklistoffset;
    if (offset == 0) return 0; /* no weak references: making one raises, as on the Python path */
    PyWeakReference *w = *(PyWeakReference **)((char *)data + offset);
    for (; w != NULL; w = w->wr_next)
        if (Py_IS_TYPE(w, &StorageType) && ((Storage *)w)->owner == log) return 1;
    return 0;
}

/* ------------------------------------------------------------------ Storage */

/* The weak references' callback: the storage died. Records its free if a Log still has it. */
static PyObject *storage_freed(PyObject *module, PyObject *ref) {
    if (!Py_IS_TYPE(ref, &StorageType)) Py_RETURN_NONE;
    Storage *s = (Storage *)ref;
    Log *log = s->owner;
    if (log == NULL) Py_RETURN_NONE;
    unlink_storage(log, s);
    Py_CLEAR(s->code); /* a code object: its dealloc runs no Python code */
    int ok = reserve(log) == 0;
    if (ok) write_event(log, s->number, s->var, -s->nbytes);
    /* The list's reference; the last one on CPython <= 3.12 (it calls a lone weak reference's callback
     * with a borrowed reference, and touches it no more once the call returns), as when the Python
     * path's ``_live.pop`` drops its own inside ``_freed``. */
    Py_DECREF(s);
    if (!ok) return NULL; /* reported as unraisable, as a failed list.append in _freed would be */
    Py_RETURN_NONE;
}

static PyMemberDef storage_members[] = {
    {"number", T_LONGLONG, offsetof(Storage, number), READONLY, "The storage's number in its Log."},
    {"var", T_LONGLONG, offsetof(Storage, var), READONLY, "The var id of the array that allocated it."},
    {"nbytes", T_LONGLONG, offsetof(Storage, nbytes), READONLY, "Its bytes."},
    {NULL},
};

static PyTypeObject StorageType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "opprof.profiler._memlog.Storage",
    .tp_doc = "A weak reference to an array's storage that remembers what its free needs to say (made by Log.made only).",
    .tp_basicsize = sizeof(Storage),
    /* Py_TPFLAGS_HAVE_GC, the dealloc (which takes it off its object's list) and the traversal are
     * weakref.ref's, inherited: the Log unlinks a Storage before it lets go of it. */
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .tp_members = storage_members,
    /* .tp_base = &_PyWeakref_RefType, set at import (an address from another shared object) */
};

/* ------------------------------------------------------------------ Log */

static PyObject *log_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"var_type", NULL};
    PyObject *var_type = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:Log", names, &var_type)) return NULL;
    if (var_type != Py_None && !PyType_Check(var_type)) {
        PyErr_SetString(PyExc_TypeError, "Log(var_type): a class or None");
        return NULL;
    }
    Log *log = (Log *)type->tp_alloc(type, 0);
    if (log == NULL) return NULL;
    log->var_id_offset = -1;
    if (var_type != Py_None) {
        /* ``id`` as a __slots__ member read at its offset (as _spanlog.c reads Var.id: ~15 ns a
         * read saved over getattr); any other class goes through getattr. */
        PyObject *d = PyObject_GetAttr(var_type, str_id);
        if (d == NULL) {
            Py_DECREF(log);
            return NULL;
        }
        if (Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
            if (m->type == T_OBJECT_EX) log->var_id_offset = m->offset;
        }
        Py_DECREF(d);
        Py_INCREF(var_type);
        log->var_type = (PyTypeObject *)var_type;
    }
    return (PyObject *)log;
}

static void log_dealloc(Log *log) {
    unwatch(log);
    release_all(log);
    watch_clear(log);
    opprof_user_code_clear(&log->user);
    events_give(log->events, log->cap);
    Py_XDECREF(log->var_type);
    Py_TYPE(log)->tp_free((PyObject *)log);
}

static Py_ssize_t log_length(Log *log) { return log->len; }

/* var.id; -1 with an exception set on failure (a var id is never negative). */
static inline int64_t var_id(Log *log, PyObject *var) {
    PyObject *v = NULL;
    if (log->var_id_offset >= 0 && Py_TYPE(var) == log->var_type) v = *(PyObject **)((char *)var + log->var_id_offset);
    if (v != NULL) return opprof_as_i64(v);
    v = PyObject_GetAttr(var, str_id);
    if (v == NULL) return -1;
    int64_t id = opprof_as_i64(v);
    Py_DECREF(v);
    return id;
}

/* made(data, var): the NDArray hook (see MemoryRecording._made, whose rules these are). */
static PyObject *log_made(Log *log, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "made() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *data = args[0], *var = args[1];
    if (!log->on) Py_RETURN_NONE;
    PyObject *base = NULL;
    int64_t nbytes = 0;
    if (array_facts(data, &base, &nbytes) < 0) return NULL;
    if (base != NULL) Py_RETURN_NONE; /* a view: another array's storage */
    if (nbytes == 0) Py_RETURN_NONE;
    if (watchable(log, data)) {
        uintptr_t key = (uintptr_t)((array_head_t *)data)->data;
        /* The var's id first (off its slot's fast path, an attribute: Python code, which may free
         * watched storages and move the table's entries), then the room, then one probe: the slot
         * that holds the storage already (detach(), an alias: nothing to record) or takes it. */
        int64_t id = var_id(log, var);
        if (id == -1 && PyErr_Occurred()) return NULL;
        if (watch_reserve(log) < 0 || reserve(log) < 0) return NULL;
        struct watch *slot = &log->watched[opprof_ptr_probe(log->watched, sizeof(struct watch), log->wcap - 1, key)];
        if (slot->key == key) Py_RETURN_NONE;
        *slot = (struct watch){key, log->numbers++, id, nbytes, NULL, 0};
        slot->code = opprof_user_frame(&log->user, &slot->lasti);
        Py_XINCREF(slot->code);
        log->wused++;
        write_event(log, slot->number, id, nbytes);
        Py_RETURN_NONE;
    }
    if (seen(log, data)) Py_RETURN_NONE; /* the same storage again (detach(), an alias) */
    int64_t id = var_id(log, var);
    if (id == -1 && PyErr_Occurred()) return NULL;
    /* weakref.ref's own __new__ (an argument tuple from the freelist), not a call of the type:
     * type_call would run weakref's __init__ too, which parses the arguments a second time. Building
     * the reference by hand (skipping the tuple and the parsing) would save some 30-40 ns more, but
     * would copy CPython's private list insertion and its static vectorcall: not worth the risk. */
    PyObject *targs = PyTuple_Pack(2, data, freed_callback);
    if (targs == NULL) return NULL;
    Storage *s = (Storage *)_PyWeakref_RefType.tp_new(&StorageType, targs, NULL);
    Py_DECREF(targs);
    if (s == NULL) return NULL;
    /* From here on nothing runs Python code; above, a collection may have run (the allocation):
     * frees recorded, even a stop(). */
    if (!log->on || reserve(log) < 0) {
        Py_CLEAR(s->ref.wr_callback);
        Py_DECREF(s);
        return log->on ? NULL : Py_NewRef(Py_None);
    }
    /* Out of the collector's sight: it refers to nothing strongly but the callback, and a profile
     * keeps thousands alive that each collection would otherwise traverse. */
    PyObject_GC_UnTrack(s);
    s->number = log->numbers++;
    s->var = id;
    s->nbytes = nbytes;
    s->code = opprof_user_frame(&log->user, &s->lasti);
    Py_XINCREF(s->code);
    link_storage(log, s); /* the new reference is the list's */
    write_event(log, s->number, id, nbytes);
    Py_RETURN_NONE;
}

static PyObject *log_start(Log *log, PyObject *args) {
    PyObject *not_user = NULL;
    if (!PyArg_ParseTuple(args, "|O:start", &not_user)) return NULL;
    if (opprof_user_code_set(&log->user, not_user) < 0) return NULL;
    log->on = 1;
    if (npmem != NULL && watcher == NULL) { /* frees through the NumPy handler come here */
        watcher = log;
        *npmem->free_hook = watched_free;
        *npmem->move_hook = watched_move;
    }
    Py_RETURN_NONE;
}

static void unwatch(Log *log) {
    if (watcher != log) return;
    watcher = NULL;
    if (npmem != NULL) {
        *npmem->free_hook = NULL;
        *npmem->move_hook = NULL;
    }
}

static PyObject *log_stop(Log *log, PyObject *unused) {
    log->on = 0;
    unwatch(log);
    release_all(log);
    watch_clear(log);
    opprof_user_code_clear(&log->user);
    Py_RETURN_NONE;
}

/* alive_sites(): [(storage number, file, line)] of the storages still alive that have a user's line.
 * The sites are copied out first: building the rows allocates, and a collection then may free a
 * storage (its callback or the handler's free hook changes the lists being read). */
static PyObject *log_alive_sites(Log *log, PyObject *unused) {
    Py_ssize_t n = log->nlive + (Py_ssize_t)log->wused, k = 0;
    struct watch *got = PyMem_Calloc((size_t)n + 1, sizeof(struct watch));
    if (got == NULL) return PyErr_NoMemory();
    for (Storage *s = log->live; s != NULL && k < n; s = s->next)
        if (s->code != NULL) got[k++] = (struct watch){1, s->number, 0, 0, Py_NewRef(s->code), s->lasti};
    for (size_t j = 0; j < log->wcap && k < n; j++)
        if (log->watched[j].key != 0 && log->watched[j].code != NULL) {
            got[k] = log->watched[j];
            Py_INCREF(got[k++].code);
        }
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; i < k && out != NULL; i++) {
        PyCodeObject *code = (PyCodeObject *)got[i].code;
        PyObject *row = Py_BuildValue("(LOi)", (long long)got[i].number, code->co_filename, PyCode_Addr2Line(code, got[i].lasti));
        if (row == NULL || PyList_Append(out, row) < 0) Py_CLEAR(out);
        Py_XDECREF(row);
    }
    for (Py_ssize_t i = 0; i < k; i++) Py_DECREF(got[i].code);
    PyMem_Free(got);
    return out;
}

static PyObject *log_records(Log *log, PyObject *unused) {
    return PyBytes_FromStringAndSize((const char *)log->events, log->len * (Py_ssize_t)sizeof(event_t));
}

static PyObject *log_release(Log *log, PyObject *unused) {
    if (log->on) {
        PyErr_SetString(PyExc_RuntimeError, "a memory log is released once stopped");
        return NULL;
    }
    events_give(log->events, log->cap);
    log->events = NULL, log->len = log->cap = 0;
    Py_RETURN_NONE;
}

static PyMethodDef log_methods[] = {
    {"made", (PyCFunction)(void (*)(void))log_made, METH_FASTCALL,
     "made(data, var): an NDArray was made on storage ``data`` (a NumPy array) for ``var``: record an allocation "
     "if the storage is its own, new and not empty."},
    {"start", (PyCFunction)log_start, METH_VARARGS,
     "start(not_user=()): record from now on; each allocation remembers the innermost line outside code under "
     "the ``not_user`` path prefixes (the user's), for alive_sites()."},
    {"alive_sites", (PyCFunction)log_alive_sites, METH_NOARGS,
     "alive_sites() -> [(storage number, file, line)]: where each storage still alive was made, where known."},
    {"stop", (PyCFunction)log_stop, METH_NOARGS,
     "Record no more, and let go of every live storage's weak reference (no callback after this)."},
    {"records", (PyCFunction)log_records, METH_NOARGS,
     "The events so far as bytes: RECORD_SIZE each, int64 (ns, storage number, var id, +bytes / -bytes)."},
    {"release", (PyCFunction)log_release, METH_NOARGS,
     "Drop the events (once stopped and read), their buffer kept for the next recording's log."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef log_members[] = {
    {"on", T_INT, offsetof(Log, on), READONLY, "1 while recording."},
    {"live", T_PYSSIZET, offsetof(Log, nlive), READONLY, "How many storages it holds a weak reference to."},
    {"watched", T_PYSSIZET, offsetof(Log, wused), READONLY, "How many storages it watches through the NumPy handler."},
    {NULL},
};

static PySequenceMethods log_as_sequence = {.sq_length = (lenfunc)log_length};

static PyTypeObject LogType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "opprof.profiler._memlog.Log",
    .tp_doc = "Log(var_type=None): one memory recording's allocations and frees, fixed-size records (see _memlog.c).",
    .tp_basicsize = sizeof(Log),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = log_new,
    .tp_dealloc = (destructor)log_dealloc,
    .tp_methods = log_methods,
    .tp_members = log_members,
    .tp_as_sequence = &log_as_sequence,
};

/* ------------------------------------------------------------------ module */

static PyMethodDef freed_def = {"_freed", storage_freed, METH_O, "A Storage's callback: its storage was freed."};

static PyMethodDef module_methods[] = {
    {"bind_npmem", memlog_bind_npmem, METH_O,
     "bind_npmem(hooks): see frees of storage opprof.profiler._npmem's handler allocated through its hooks "
     "(None: no more)."},
    {"handler_of", memlog_handler_of, METH_O,
     "handler_of(array): the capsule of the data-memory handler that allocated its data (None: unknown)."},
    {"bind_numpy", memlog_bind_numpy, METH_VARARGS,
     "bind_numpy(ndarray, samples) -> bool: read arrays of that type off NumPy's struct from now on, if every "
     "sample reads there as getattr says (else keep getattr)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "opprof.profiler._memlog", "Memory recording's hot path (see _memlog.c).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__memlog(void) {
    str_base = PyUnicode_InternFromString("base");
    str_nbytes = PyUnicode_InternFromString("nbytes");
    str_id = PyUnicode_InternFromString("id");
    str_itemsize = PyUnicode_InternFromString("itemsize");
    if (str_base == NULL || str_nbytes == NULL || str_id == NULL || str_itemsize == NULL) return NULL;
    StorageType.tp_base = &_PyWeakref_RefType;
    if (PyType_Ready(&StorageType) < 0 || PyType_Ready(&LogType) < 0) return NULL;
    freed_callback = PyCFunction_New(&freed_def, NULL);
    if (freed_callback == NULL) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (m == NULL) return NULL;
    Py_INCREF(&LogType);
    Py_INCREF(&StorageType);
    if (PyModule_AddObject(m, "Log", (PyObject *)&LogType) < 0 ||
        PyModule_AddObject(m, "Storage", (PyObject *)&StorageType) < 0 ||
        PyModule_AddIntConstant(m, "RECORD_SIZE", (long)sizeof(event_t)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
