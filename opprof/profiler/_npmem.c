/* opprof.profiler._npmem: the NumPy data a custom op's Python allocates itself (opprof/profiler/npmem.py is
 * its Python face).
 *
 * opprof's memory recording sees NDArray storage only; the NumPy temporaries inside a custom op's
 * Python (``y = np.tanh(x) * 2``) never become NDArrays. NumPy >= 1.22 lets an extension install the
 * allocator of array data (NEP 49, "data memory handler"): a PyCapsule named "mem_handler" wrapping a
 * PyDataMem_Handler, held in a context variable, so installing one affects the calling thread's
 * context only. ``enter()`` installs this module's handler in the calling thread right before the
 * custom op's Python and ``leave()`` puts the previous one back right after; the handler forwards every
 * call to NumPy's default handler (captured by ``bind``) and counts bytes per thread.
 *
 * Counting (per thread, ``cur`` and ``peak``): malloc and calloc add their size; free subtracts the
 * size NumPy passes it (an array's allocated bytes). realloc is not told the old size, so each thread
 * keeps a small open-addressing table (pointer -> size) of the blocks it allocated while measuring:
 * a realloc of one of those counts (new - old) exactly, and moves the entry; a realloc of any other
 * block (made before ``enter`` or on another thread, or once the table is 3/4 full) counts +new
 * (an upper bound: a moving realloc briefly holds both blocks). NumPy reallocs array data rarely
 * (``ndarray.resize``, ``fromiter``/``fromfile`` growing their result). The table is emptied when the
 * outermost ``leave`` returns. A block made here and freed on another thread (an array that escaped)
 * lowers that thread's ``cur``: harmless, every measurement is a difference on one thread.
 *
 * A second handler, the watching one (watch_enter/watch_leave), forwards without counting; both call
 * the free and move hooks opprof/profiler/_memlog.c sets (the ``_hooks`` capsule), so a memory
 * recording sees the frees of storage they allocated without a weak reference per array.
 *
 * A third, the recycling one (recycle_enter/recycle_leave), serves the trace build: it keeps the
 * large blocks freed through it for the next ones of their size class (see its section below).
 *
 * No NumPy headers at build time: the two structs below are copied from NumPy's
 * numpy/_core/include/numpy/ndarraytypes.h (NumPy 2.4; the same in 1.22+'s numpy/core/include), and
 * the C-API table indices from numpy/_core/include/numpy/__multiarray_api.h: PyDataMem_SetHandler is
 * PyArray_API[304], PyDataMem_GetHandler [305], PyArray_GetNDArrayCFeatureVersion [211]
 * (NPY_1_22_API_VERSION is 0x0000000f, numpyconfig.h). The table comes at run time from the
 * ``_ARRAY_API`` capsule the Python face passes to ``bind``.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "_npmem_hooks.h" /* what _memlog.c takes from the ``_hooks`` capsule */
#include "_ptrtable.h"    /* the size table's hash, probe and deletion (shared with _memlog.c) */
#include "_spares.h"      /* the recycling handler's kept blocks (shared with _spanlog.c) */

/* From numpy/_core/include/numpy/ndarraytypes.h ("Memory handler structure for array data"). */
typedef struct {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr, size_t size);
} PyDataMemAllocator;

typedef struct {
    char name[127]; /* multiple of 64 to keep the struct aligned */
    uint8_t version; /* currently 1 */
    PyDataMemAllocator allocator;
} PyDataMem_Handler;

#define API_SET_HANDLER 304
#define API_GET_HANDLER 305
#define API_FEATURE_VERSION 211
#define NPY_1_22_API_VERSION 0x0000000f
#define HANDLER_NAME "opprof_npmem"
#define MEM_HANDLER "mem_handler"

static PyObject *(*set_handler)(PyObject *) = NULL;
static PyObject *(*get_handler)(void) = NULL;
static PyObject *base_capsule = NULL; /* the default handler's capsule (a reference kept for good) */
static PyDataMemAllocator base;       /* its allocator, which ours forwards to */
static PyObject *our_capsule = NULL;

/* Told of every block our handlers free or move (opprof/profiler/_memlog.c watches NDArray storage
 * this way, where the storage was allocated through one of them: no weak reference per array).
 * Set and read under the GIL; NumPy frees an array's data in its dealloc, with the GIL held. */
static npmem_free_hook_t free_hook = NULL;
static npmem_move_hook_t move_hook = NULL;
/* The watching handler's capsule: the same hooks, without the counting (see watch_enter). */
static PyObject *watch_capsule = NULL;
static npmem_hooks_t hooks = {NPMEM_HOOKS_VERSION, &free_hook, &move_hook, &our_capsule, &watch_capsule};

/* Per thread: bytes allocated minus freed through our handler, and the most of it since enter. */
static __thread int64_t cur, peak;
static __thread int depth; /* enter()s not yet left on this thread */
/* What each enter() not yet left keeps for its leave(), innermost last: the handler it replaced (a
 * strong reference; NULL where leave() restores nothing), ``cur`` then and the outer peak. enter()
 * returns depth (a small int: no allocation) and leave() takes it back. A tuple (handler, cur, peak)
 * was the token until 2026-12-06: building and parsing it was ~1,100 instructions of the ~6,500 that
 * memory recording adds to a trivial custom op on the naive engine (callgrind), and each tuple a
 * GC-tracked allocation. An enter() past MAX_FRAMES measures nothing (its token None). */
#define MAX_FRAMES 32
typedef struct {
    PyObject *old;
    int64_t cur0, saved;
} frame_t;
static __thread frame_t frames[MAX_FRAMES];
/* The handler a sticky enter() replaced on this thread (a strong reference), which unstick() puts back. */
static __thread PyObject *kept_prev = NULL;

/* The per-thread size table (_ptrtable.h: linear probing, deletion by backward shift). */
#define SLOTS 1024
#define MAX_USED (SLOTS * 3 / 4)
typedef struct {
    uintptr_t key; /* 0: empty */
    int64_t size;
} slot_t;
static __thread slot_t table[SLOTS];
static __thread int used;
/* The blocks put since the outermost enter, so that its leave empties the table by popping them:
 * clearing all of it (16 KB) at a leave where a block escaped (a trivial custom op's output, on the
 * naive engine) made enter + leave around one escaping 10x10 array cost 0.76 us over the array
 * alone, popping 0.59 us (200,000 calls each, 2026-12-04). Past LOGGED puts the leave clears the
 * whole table instead. */
#define LOGGED 32
static __thread uintptr_t logged[LOGGED];
static __thread int n_logged;

static void table_put(void *ptr, int64_t size) {
    if (used >= MAX_USED) return;
    size_t i = opprof_ptr_probe(table, sizeof(slot_t), SLOTS - 1, (uintptr_t)ptr);
    if (table[i].key == 0) used++;
    table[i].key = (uintptr_t)ptr;
    table[i].size = size;
    if (n_logged < LOGGED) logged[n_logged] = (uintptr_t)ptr;
    n_logged++;
}

/* Remove ptr; its size, or -1 where it is not in the table. */
static int64_t table_pop(void *ptr) {
    if (used == 0) return -1;
    size_t i = opprof_ptr_probe(table, sizeof(slot_t), SLOTS - 1, (uintptr_t)ptr);
    if (table[i].key == 0) return -1;
    int64_t size = table[i].size;
    opprof_ptr_delete(table, sizeof(slot_t), SLOTS - 1, i);
    used--;
    return size;
}

static inline void add(int64_t n) {
    cur += n;
    if (cur > peak) peak = cur;
}

static void *np_malloc(void *ctx, size_t size) {
    (void)ctx;
    void *p = base.malloc(base.ctx, size);
    if (p != NULL) {
        add((int64_t)size);
        if (depth > 0) table_put(p, (int64_t)size);
    }
    return p;
}

static void *np_calloc(void *ctx, size_t nelem, size_t elsize) {
    (void)ctx;
    void *p = base.calloc(base.ctx, nelem, elsize);
    if (p != NULL) {
        int64_t size = (int64_t)(nelem * elsize); /* the base calloc succeeded: no overflow */
        add(size);
        if (depth > 0) table_put(p, size);
    }
    return p;
}

static void *np_realloc(void *ctx, void *ptr, size_t new_size) {
    (void)ctx;
    void *p = base.realloc(base.ctx, ptr, new_size);
    if (p == NULL) return NULL; /* the old block is untouched */
    if (ptr != NULL && move_hook != NULL) move_hook(ptr, p);
    int64_t old = ptr != NULL ? table_pop(ptr) : 0;
    add((int64_t)new_size - (old > 0 ? old : 0));
    if (depth > 0) table_put(p, (int64_t)new_size);
    return p;
}

static void np_free(void *ctx, void *ptr, size_t size) {
    (void)ctx;
    if (ptr != NULL) {
        table_pop(ptr);
        cur -= (int64_t)size;
        if (free_hook != NULL) free_hook(ptr);
    }
    base.free(base.ctx, ptr, size);
}

static PyDataMem_Handler our_handler = {
    HANDLER_NAME, 1, {NULL, np_malloc, np_calloc, np_realloc, np_free}};

/* The watching handler: NumPy's default, and the free and move hooks (no counting, no table: the
 * recording thread of a memory recording has it, ~20 ns an array less than the counting one). */
static void *w_malloc(void *ctx, size_t size) {
    (void)ctx;
    return base.malloc(base.ctx, size);
}

static void *w_calloc(void *ctx, size_t nelem, size_t elsize) {
    (void)ctx;
    return base.calloc(base.ctx, nelem, elsize);
}

static void *w_realloc(void *ctx, void *ptr, size_t new_size) {
    (void)ctx;
    void *p = base.realloc(base.ctx, ptr, new_size);
    if (p != NULL && ptr != NULL && move_hook != NULL) move_hook(ptr, p);
    return p;
}

static void w_free(void *ctx, void *ptr, size_t size) {
    (void)ctx;
    if (ptr != NULL && free_hook != NULL) free_hook(ptr);
    base.free(base.ctx, ptr, size);
}

#define WATCH_NAME "opprof_npmem_watch"
static PyDataMem_Handler watch_handler = {WATCH_NAME, 1, {NULL, w_malloc, w_calloc, w_realloc, w_free}};

/* bind(api_capsule): take NumPy's C-API table, check it has the handler API, capture the current
 * (default) handler. Raises RuntimeError saying why where anything is off. */
static PyObject *npmem_bind(PyObject *module, PyObject *capsule) {
    (void)module;
    if (set_handler != NULL) Py_RETURN_NONE;
    if (!PyCapsule_CheckExact(capsule)) {
        PyErr_SetString(PyExc_RuntimeError, "NumPy's _ARRAY_API is not a capsule");
        return NULL;
    }
    void **api = (void **)PyCapsule_GetPointer(capsule, PyCapsule_GetName(capsule));
    if (api == NULL) return NULL;
    unsigned int (*feature_version)(void) = (unsigned int (*)(void))api[API_FEATURE_VERSION];
    unsigned int fv = feature_version();
    if (fv < NPY_1_22_API_VERSION) {
        PyErr_Format(PyExc_RuntimeError, "NumPy's C API is of feature version 0x%x: the data memory handler needs NumPy >= 1.22 (0x%x)",
                     fv, NPY_1_22_API_VERSION);
        return NULL;
    }
    PyObject *(*set)(PyObject *) = (PyObject * (*)(PyObject *)) api[API_SET_HANDLER];
    PyObject *(*get)(void) = (PyObject * (*)(void)) api[API_GET_HANDLER];
    PyObject *current = get();
    if (current == NULL) return NULL;
    if (!PyCapsule_IsValid(current, MEM_HANDLER)) {
        Py_DECREF(current);
        PyErr_SetString(PyExc_RuntimeError, "NumPy's current data memory handler is not a \"mem_handler\" capsule");
        return NULL;
    }
    PyDataMem_Handler *h = (PyDataMem_Handler *)PyCapsule_GetPointer(current, MEM_HANDLER);
    if (h == NULL) {
        Py_DECREF(current);
        return NULL;
    }
    if (h->version != 1) {
        PyErr_Format(PyExc_RuntimeError, "NumPy's data memory handler is of version %d: this module knows version 1",
                     (int)h->version);
        Py_DECREF(current);
        return NULL;
    }
    if (strncmp(h->name, "default_allocator", sizeof h->name) != 0) {
        PyErr_Format(PyExc_RuntimeError, "the current NumPy data memory handler is %.127s, not NumPy's default_allocator", h->name);
        Py_DECREF(current);
        return NULL;
    }
    base = h->allocator;
    base_capsule = current; /* kept: arrays made through ours free through the base */
    set_handler = set;
    get_handler = get;
    Py_RETURN_NONE;
}

/* Install ``capsule`` in this thread's context where the handler in use is one of ``mine`` (NumPy's
 * default, or one of ours); the handler it replaced (a new reference), or Py_None (a new reference)
 * where another one is in use and was left be; NULL with an exception set. */
static PyObject *install(PyObject *capsule, PyObject *const *mine, int n) {
    if (set_handler == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "opprof.profiler._npmem is not bound (bind() first)");
        return NULL;
    }
    PyObject *old = set_handler(capsule);
    if (old == NULL) return NULL;
    for (int i = 0; i < n; i++)
        if (old == mine[i]) return old;
    PyObject *back = set_handler(old); /* someone else's handler: leave it be */
    Py_XDECREF(back);
    Py_DECREF(old);
    if (back == NULL) return NULL;
    Py_RETURN_NONE;
}

/* ``capsule`` installed where NumPy's default handler is in use (see install). */
static PyObject *install_over_default(PyObject *capsule) {
    PyObject *const mine[] = {base_capsule};
    return install(capsule, mine, 1);
}

/* enter(sticky=False) -> token: install our handler in this thread's context (where NumPy's default
 * handler is in use, or ours already: a nested call, or the watching one: a recording thread) and
 * start a peak; None (nothing measured) where another handler is in use, or past MAX_FRAMES nested.
 *
 * Sticky: the handler stays installed after leave(), and an enter() that finds it installed sets
 * nothing. Setting a handler is a context-variable set (a new context each time) and leave() another:
 * around a trivial custom op's Python on the naive engine the two cost ~1 us of its ~37 us (memory
 * recording on over off 1.06x, 1.03x sticky; 15 interleaved rounds, 2026-12-04). A caller asks for it
 * on a thread of its own (a custom-op pool thread), and calls unstick() there once the recording is
 * over (before that thread's next custom op) to put back what it replaced; a handler replacing the
 * watching one is always sticky, as the recording that installed the watching one puts back what
 * was there before it when it stops (watch_leave). The token is this enter's depth (see frames). */
static PyObject *npmem_enter(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "enter(sticky=False) takes at most one argument");
        return NULL;
    }
    int sticky = nargs == 1 ? PyObject_IsTrue(args[0]) : 0;
    if (sticky < 0) return NULL;
    if (set_handler == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "opprof.profiler._npmem is not bound (bind() first)");
        return NULL;
    }
    if (depth >= MAX_FRAMES) Py_RETURN_NONE; /* nested too deep: this one measures nothing */
    PyObject *current = get_handler();
    if (current == NULL) return NULL;
    PyObject *old = NULL;
    if (current == our_capsule) { /* installed already (sticky, or an outer enter's): nothing to set */
        Py_DECREF(current);
    } else {
        int watching = current == watch_capsule;
        Py_DECREF(current);
        PyObject *const mine[] = {base_capsule, our_capsule, watch_capsule};
        old = install(our_capsule, mine, 3);
        if (old == NULL || old == Py_None) return old;
        if (watching) { /* the recording that installed the watching one puts back what it replaced */
            Py_CLEAR(old);
        } else if (sticky) { /* kept for unstick() */
            Py_XSETREF(kept_prev, old);
            old = NULL;
        }
    }
    frames[depth] = (frame_t){old, cur, peak};
    depth++;
    peak = cur;
    return PyLong_FromLong(depth);
}

/* leave(token) -> int: put the handler enter() replaced back; the most bytes of NumPy data allocated
 * by this thread between the two above what was live at enter (-1 for a None token). */
static PyObject *npmem_leave(PyObject *module, PyObject *token) {
    (void)module;
    if (token == Py_None) return PyLong_FromLong(-1);
    long k = PyLong_Check(token) ? PyLong_AsLong(token) : -1;
    if (k < 1 || k > depth) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "leave() takes a token of an enter() not yet left on this thread (1..%d)", depth);
        return NULL;
    }
    /* Inner enters never left (a leave skipped by an error) end here too: their handlers were
     * replaced by this one's, whose own is what goes back. */
    while (depth > k) {
        depth--;
        if (frames[depth].saved > peak) peak = frames[depth].saved; /* the outer ones' peaks before it */
        Py_CLEAR(frames[depth].old);
    }
    frame_t f = frames[k - 1];
    frames[k - 1].old = NULL;
    int64_t result = peak - f.cur0;
    if (result < 0) result = 0;
    if (f.saved > peak) peak = f.saved; /* an outer measurement still sees this peak */
    if (--depth == 0) {
        if (used > 0 && n_logged <= LOGGED) {
            for (int i = 0; i < n_logged && used > 0; i++) (void)table_pop((void *)logged[i]);
        } else if (used > 0) {
            memset(table, 0, sizeof table);
            used = 0;
        }
        n_logged = 0;
    }
    if (f.old != NULL) { /* the handler enter() replaced, back (none: it stays, see enter) */
        PyObject *back = set_handler(f.old);
        Py_DECREF(f.old);
        if (back == NULL) return NULL;
        Py_DECREF(back);
    }
    return PyLong_FromLongLong((long long)result);
}

/* unstick() -> bool: where a sticky enter() left the counting handler installed on this thread, put
 * back the one it replaced (True); else nothing (False). */
static PyObject *npmem_unstick(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    if (kept_prev == NULL || set_handler == NULL) Py_RETURN_FALSE;
    PyObject *current = get_handler();
    if (current == NULL) return NULL;
    int ours = current == our_capsule;
    Py_DECREF(current);
    PyObject *prev = kept_prev;
    kept_prev = NULL;
    if (ours) { /* (another handler installed since: left be) */
        PyObject *back = set_handler(prev);
        Py_DECREF(prev);
        if (back == NULL) return NULL;
        Py_DECREF(back);
        Py_RETURN_TRUE;
    }
    Py_DECREF(prev);
    Py_RETURN_FALSE;
}

/* watch_enter() -> token: install the watching handler in this thread's context (where NumPy's
 * default handler is in use); None where another handler is in use. The token is the handler to
 * put back. */
static PyObject *npmem_watch_enter(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return install_over_default(watch_capsule);
}

/* watch_leave(token): put back the handler watch_enter() replaced. */
static PyObject *npmem_watch_leave(PyObject *module, PyObject *token) {
    (void)module;
    if (token == Py_None) Py_RETURN_NONE;
    if (!PyCapsule_CheckExact(token)) {
        PyErr_SetString(PyExc_TypeError, "watch_leave() and recycle_leave() take a token from their enter()");
        return NULL;
    }
    PyObject *back = set_handler(token);
    if (back == NULL) return NULL;
    Py_DECREF(back);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ the recycling handler
 * The trace build (opprof/profiler/build.py) makes and drops megabytes of NumPy temporaries: at
 * 20,000 spans ~7 MB at its peak, whose pages malloc maps fresh (large blocks are mmap'ed, and what
 * is freed goes back to the OS) and each first write faults: 1,767 page faults a build, ~1.8 us
 * each here (memory-cgroup charge, zeroing), ~3 ms of a 9 ms stop(), in a process whose heap gave
 * them back every time (whether it does depends on its history). Measured the other way: the same
 * builds in a process whose malloc keeps freed memory (mallopt) took 6.3 ms, with no fault.
 *
 * Installed around a build, this handler gives each block of RECYCLE_MIN bytes or more a size class
 * (rounded up to an eighth of its power of two: at most 12.5 % more), and a block freed through it
 * goes to a list of spares (up to 32 MB in all, ../_spares.h) that the next request of its class takes,
 * its pages written already. Smaller blocks go to NumPy's default handler as they are. Every block
 * carries a header with its class, so a free or realloc knows it whatever size NumPy passes. A
 * block made during a build may be freed long after (a trace's columns), on any thread, with or
 * without the GIL: the spares are under a mutex. */
#define RECYCLE_NAME "opprof_npmem_recycle"
#define RECYCLE_MIN ((size_t)64 << 10)
#define RECYCLE_HEADER 64 /* the data 16-byte aligned as malloc's, and a cache line of its own */

OPPROF_SPARES(spares, 64, (size_t)32 << 20);
static pthread_mutex_t spares_mu = PTHREAD_MUTEX_INITIALIZER;
static PyObject *recycle_capsule = NULL;

/* A forked child has only the forking thread: a lock another thread held at the fork is free there. */
static void spares_after_fork(void) { pthread_mutex_init(&spares_mu, NULL); }

/* The size class of a request: itself below RECYCLE_MIN, else rounded up to an eighth of its power of two. */
static size_t size_class(size_t n) {
    if (n < RECYCLE_MIN) return n ? n : 1;
    size_t p = RECYCLE_MIN;
    while (p <= n / 2) p *= 2;
    size_t step = p / 8;
    return (n + step - 1) / step * step;
}

static void *r_alloc(size_t size, int zero) {
    size_t cap = size_class(size);
    if (cap > SIZE_MAX - RECYCLE_HEADER) return NULL;
    char *block = NULL;
    if (cap >= RECYCLE_MIN) {
        pthread_mutex_lock(&spares_mu);
        block = opprof_spares_take(&spares, cap + RECYCLE_HEADER);
        pthread_mutex_unlock(&spares_mu);
    }
    if (block != NULL) {
        if (zero) memset(block + RECYCLE_HEADER, 0, size);
    } else {
        block = zero ? base.calloc(base.ctx, 1, cap + RECYCLE_HEADER) : base.malloc(base.ctx, cap + RECYCLE_HEADER);
        if (block == NULL) return NULL;
    }
    ((size_t *)block)[0] = cap;
    return block + RECYCLE_HEADER;
}

static void *r_malloc(void *ctx, size_t size) {
    (void)ctx;
    return r_alloc(size, 0);
}

static void *r_calloc(void *ctx, size_t nelem, size_t elsize) {
    (void)ctx;
    if (elsize != 0 && nelem > SIZE_MAX / elsize) return NULL;
    return r_alloc(nelem * elsize, 1);
}

static void r_free(void *ctx, void *ptr, size_t size) {
    (void)ctx;
    (void)size; /* the header knows the block's own */
    if (ptr == NULL) return;
    char *block = (char *)ptr - RECYCLE_HEADER;
    size_t cap = ((size_t *)block)[0];
    if (cap >= RECYCLE_MIN) {
        pthread_mutex_lock(&spares_mu);
        int kept = opprof_spares_give(&spares, block, cap + RECYCLE_HEADER);
        pthread_mutex_unlock(&spares_mu);
        if (kept) return;
    }
    base.free(base.ctx, block, cap + RECYCLE_HEADER);
}

static void *r_realloc(void *ctx, void *ptr, size_t new_size) {
    if (ptr == NULL) return r_alloc(new_size, 0);
    size_t cap = ((size_t *)((char *)ptr - RECYCLE_HEADER))[0];
    if (size_class(new_size) == cap) return ptr; /* its class: it fits, and is freed as it was made */
    void *p = r_alloc(new_size, 0);
    if (p == NULL) return NULL; /* the old block is untouched */
    memcpy(p, ptr, cap < new_size ? cap : new_size);
    r_free(ctx, ptr, 0);
    return p;
}

static PyDataMem_Handler recycle_handler = {RECYCLE_NAME, 1, {NULL, r_malloc, r_calloc, r_realloc, r_free}};

/* recycle_enter() -> token: NumPy's data in this thread through the recycling handler (where NumPy's
 * default handler is in use); None where another is. The token is the handler to put back. */
static PyObject *npmem_recycle_enter(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return install_over_default(recycle_capsule);
}

/* recycle_spares() -> (blocks, bytes) kept for reuse now. */
static PyObject *npmem_recycle_spares(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    pthread_mutex_lock(&spares_mu);
    int n = spares.n;
    size_t bytes = spares.bytes;
    pthread_mutex_unlock(&spares_mu);
    return Py_BuildValue("(in)", n, (Py_ssize_t)bytes);
}

/* counters() -> (cur, peak, depth, table entries) of this thread, for tests. */
static PyObject *npmem_counters(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return Py_BuildValue("(LLii)", (long long)cur, (long long)peak, depth, used);
}

static PyMethodDef methods[] = {
    {"bind", npmem_bind, METH_O, "bind(api_capsule): take NumPy's C-API table and its default data memory handler."},
    {"enter", (PyCFunction)(void (*)(void))npmem_enter, METH_FASTCALL,
     "enter(sticky=False) -> token: count this thread's NumPy data allocations from now (sticky: the handler stays after leave)."},
    {"leave", npmem_leave, METH_O, "leave(token) -> int: stop (on the thread that entered; inner enters not left end too); peak bytes above what was live at enter."},
    {"unstick", npmem_unstick, METH_NOARGS, "unstick() -> bool: the handler a sticky enter() replaced here, back."},
    {"counters", npmem_counters, METH_NOARGS, "counters() -> (cur, peak, depth, table entries) of this thread."},
    {"recycle_enter", npmem_recycle_enter, METH_NOARGS,
     "recycle_enter() -> token: NumPy's data in this thread through the recycling handler (large blocks kept for reuse)."},
    {"recycle_leave", npmem_watch_leave, METH_O, "recycle_leave(token): put back the handler recycle_enter() replaced."},
    {"recycle_spares", npmem_recycle_spares, METH_NOARGS, "recycle_spares() -> (blocks, bytes) kept for reuse now."},
    {"watch_enter", npmem_watch_enter, METH_NOARGS,
     "watch_enter() -> token: NumPy's data in this thread through the watching handler (frees told to the hooks)."},
    {"watch_leave", npmem_watch_leave, METH_O, "watch_leave(token): the handler before watch_enter() back."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "opprof.profiler._npmem",
    "The NumPy data a custom op's Python allocates itself (opprof/profiler/npmem.py is the Python face).", -1, methods,
};

PyMODINIT_FUNC PyInit__npmem(void) {
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    if (our_capsule == NULL) {
        our_capsule = PyCapsule_New(&our_handler, MEM_HANDLER, NULL);
        watch_capsule = PyCapsule_New(&watch_handler, MEM_HANDLER, NULL);
        recycle_capsule = PyCapsule_New(&recycle_handler, MEM_HANDLER, NULL);
        if (our_capsule == NULL || watch_capsule == NULL || recycle_capsule == NULL) {
            Py_DECREF(m);
            return NULL;
        }
        pthread_atfork(NULL, NULL, spares_after_fork);
    }
    /* The record size load_compiled checks: the handler struct this module was built with. */
    PyObject *hooks_capsule = PyCapsule_New(&hooks, NPMEM_HOOKS_CAPSULE, NULL);
    if (hooks_capsule == NULL || PyModule_AddObject(m, "_hooks", hooks_capsule) < 0) {
        Py_XDECREF(hooks_capsule);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "RECORD_SIZE", (long)sizeof(PyDataMem_Handler)) < 0 ||
        PyModule_AddStringConstant(m, "HANDLER_NAME", HANDLER_NAME) < 0 ||
        PyModule_AddStringConstant(m, "WATCH_NAME", WATCH_NAME) < 0 ||
        PyModule_AddStringConstant(m, "RECYCLE_NAME", RECYCLE_NAME) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
