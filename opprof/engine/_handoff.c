/* opprof.engine._handoff: the engine's work queues, waited on in C so that every hand-off is timed.
 *
 * Why C: a thread parked in queue.SimpleQueue.get() is woken by the OS and then takes the GIL, and
 * from Python the two cannot be told apart (the first Python line after get() runs with the GIL
 * already taken). Here the wait is a pthread condition variable waited on *without* the GIL, so the
 * moment the OS woke the thread is stamped before the GIL is asked for, and again once it is held:
 *
 *   park   the getter found the queue empty and parked      (CLOCK_MONOTONIC ns)
 *   put    the item it got was put (the signal)
 *   woke   the OS ran the getter again (still without the GIL)
 *   gil    the getter held the GIL again, and took the item
 *
 * so a hand-off splits exactly into waking a thread (put -> woke) and waiting for the GIL
 * (woke -> gil), with public C API only. A get() that finds an item does not park and logs nothing.
 *
 * The log is one per process, on while a profile records (start()/stop()/drain()); it is appended
 * with the GIL held (after Py_END_ALLOW_THREADS), so the GIL serialises it. A full log counts drops.
 *
 * The queue holds its items under its own mutex, taken only for a few instructions; a thread never
 * waits for the GIL while holding it, so the mutex and the GIL cannot deadlock.
 *
 * A free-threaded build is not supported (the module is not built for it and the engine uses
 * queue.SimpleQueue there).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_monotonic.h" /* monotonic_ns(): the clock perf_counter_ns reads */

#if defined(Py_GIL_DISABLED) || !defined(__linux__)
#error "opprof.engine._handoff needs a Linux CPython with a GIL"
#endif

#include <pthread.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ the log (one per process) */
typedef struct {
    int64_t park, put, woke, gil;
    int64_t native_id; /* the getter's gettid() */
    int64_t queue;     /* the queue's `kind`, given at construction */
} handoff_t;

static handoff_t *log_buf = NULL;
static Py_ssize_t log_len = 0, log_cap = 0;
static unsigned long long log_dropped = 0;
static int logging = 0;

static void log_handoff(int64_t park, int64_t put, int64_t woke, int64_t gil, int64_t kind) {
    if (!logging) return;
    if (log_len >= log_cap) {
        log_dropped++;
        return;
    }
    handoff_t *r = &log_buf[log_len++];
    r->park = park;
    r->put = put;
    r->woke = woke;
    r->gil = gil;
    r->native_id = (int64_t)syscall(SYS_gettid);
    r->queue = kind;
}

static PyObject *handoff_start(PyObject *self, PyObject *args) {
    Py_ssize_t cap = 1 << 18; /* 48 bytes each: 12 MB at most */
    if (!PyArg_ParseTuple(args, "|n", &cap)) return NULL;
    if (cap < 1) {
        PyErr_SetString(PyExc_ValueError, "capacity must be positive");
        return NULL;
    }
    if (logging) Py_RETURN_FALSE;
    handoff_t *buf = PyMem_RawRealloc(log_buf, (size_t)cap * sizeof(handoff_t));
    if (buf == NULL) return PyErr_NoMemory();
    log_buf = buf;
    log_cap = cap;
    log_len = 0;
    log_dropped = 0;
    logging = 1;
    Py_RETURN_TRUE;
}

static PyObject *handoff_stop(PyObject *self, PyObject *unused) {
    int was = logging;
    logging = 0;
    return PyBool_FromLong(was);
}

static PyObject *handoff_drain(PyObject *self, PyObject *unused) {
    PyObject *out = PyBytes_FromStringAndSize((const char *)log_buf, log_len * (Py_ssize_t)sizeof(handoff_t));
    if (out == NULL) return NULL;
    PyObject *res = Py_BuildValue("(NK)", out, log_dropped);
    log_len = 0;
    log_dropped = 0;
    return res;
}

/* ------------------------------------------------------------------ the queue */
typedef struct {
    PyObject *obj;
    int64_t put;
} item_t;

typedef struct {
    PyObject_HEAD pthread_mutex_t mu;
    pthread_cond_t cv;
    item_t *buf;
    Py_ssize_t cap, head, len;
    int parked;
    long kind;
} Queue;

static int queue_init(Queue *self, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"kind", NULL};
    long kind = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|l", kw, &kind)) return -1;
    self->kind = kind;
    return 0;
}

static PyObject *queue_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Queue *self = (Queue *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    pthread_mutex_init(&self->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&self->cv, &attr);
    pthread_condattr_destroy(&attr);
    self->cap = 16;
    self->buf = PyMem_RawMalloc((size_t)self->cap * sizeof(item_t));
    if (self->buf == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void queue_dealloc(Queue *self) {
    for (Py_ssize_t i = 0; i < self->len; i++) Py_XDECREF(self->buf[(self->head + i) % self->cap].obj);
    PyMem_RawFree(self->buf);
    pthread_cond_destroy(&self->cv);
    pthread_mutex_destroy(&self->mu);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* With mu held: take the head item. */
static item_t pop_locked(Queue *self) {
    item_t it = self->buf[self->head];
    self->head = (self->head + 1) % self->cap;
    self->len--;
    return it;
}

static PyObject *queue_put(Queue *self, PyObject *obj) {
    int64_t t = monotonic_ns();
    pthread_mutex_lock(&self->mu);
    if (self->len == self->cap) {
        Py_ssize_t cap = self->cap * 2;
        item_t *buf = PyMem_RawMalloc((size_t)cap * sizeof(item_t));
        if (buf == NULL) {
            pthread_mutex_unlock(&self->mu);
            return PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < self->len; i++) buf[i] = self->buf[(self->head + i) % self->cap];
        PyMem_RawFree(self->buf);
        self->buf = buf;
        self->cap = cap;
        self->head = 0;
    }
    Py_INCREF(obj);
    self->buf[(self->head + self->len) % self->cap] = (item_t){obj, t};
    self->len++;
    if (self->parked > 0) pthread_cond_signal(&self->cv);
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_NONE;
}

static PyObject *queue_get(Queue *self, PyObject *unused) {
    /* The item is taken only with the GIL held, as queue.SimpleQueue does: until the woken thread
     * runs Python again, the item stays in the queue for all to see, and qsize() counts it. (The
     * custom-op pool once read qsize() to decide whether to start a thread; it counts its tasks
     * itself now, under its own lock, since a thread that has taken an item has not yet said so.)
     * A thread holding the GIL may take it first: the woken one then parks again. */
    int64_t park = 0, woke = 0;
    int waited = 0;
    for (;;) {
        pthread_mutex_lock(&self->mu);
        if (self->len > 0) {
            item_t it = pop_locked(self);
            pthread_mutex_unlock(&self->mu);
            if (waited) log_handoff(park, it.put, woke, monotonic_ns(), self->kind);
            return it.obj;
        }
        /* Empty: park without the GIL (mu is held across the release, which blocks on nothing). */
        Py_BEGIN_ALLOW_THREADS
        if (!waited) park = monotonic_ns(); /* the first park: a wake that found its item taken parks again */
        self->parked++;
        while (self->len == 0) {
            waited = 1;
            pthread_cond_wait(&self->cv, &self->mu);
        }
        self->parked--;
        woke = monotonic_ns();
        pthread_mutex_unlock(&self->mu);
        Py_END_ALLOW_THREADS
    }
}

static PyObject *queue_qsize(Queue *self, PyObject *unused) {
    pthread_mutex_lock(&self->mu);
    Py_ssize_t n = self->len;
    pthread_mutex_unlock(&self->mu);
    return PyLong_FromSsize_t(n);
}

static PyObject *queue_empty(Queue *self, PyObject *unused) {
    pthread_mutex_lock(&self->mu);
    int e = self->len == 0;
    pthread_mutex_unlock(&self->mu);
    return PyBool_FromLong(e);
}

static PyMethodDef queue_methods[] = {
    {"put", (PyCFunction)queue_put, METH_O, "put(item): append; wake one parked getter, stamping the moment."},
    {"get", (PyCFunction)queue_get, METH_NOARGS,
     "get() -> item: the oldest item, parking without the GIL while there is none (the hand-off is logged "
     "while logging is on)."},
    {"qsize", (PyCFunction)queue_qsize, METH_NOARGS, "qsize() -> int"},
    {"empty", (PyCFunction)queue_empty, METH_NOARGS, "empty() -> bool"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject QueueType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "opprof.engine._handoff.Queue",
    .tp_basicsize = sizeof(Queue),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Queue(kind=0): a FIFO whose get() parks in C and times the hand-off (see the module).",
    .tp_new = queue_new,
    .tp_init = (initproc)queue_init,
    .tp_dealloc = (destructor)queue_dealloc,
    .tp_methods = queue_methods,
};

static PyMethodDef module_methods[] = {
    {"start", handoff_start, METH_VARARGS,
     "start(capacity=262144) -> bool: log hand-offs from now on (False if logging already)."},
    {"stop", handoff_stop, METH_NOARGS, "stop() -> bool: stop logging (False if it was not)."},
    {"drain", handoff_drain, METH_NOARGS,
     "drain() -> (bytes, dropped): the hand-offs logged since the last drain, RECORD_SIZE bytes each "
     "(int64 park, put, woke, gil, native_id, queue kind), and how many a full log dropped."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef handoff_module = {
    PyModuleDef_HEAD_INIT, .m_name = "_handoff",
    .m_doc = "The engine's work queues, waited on in C: each hand-off's wake and GIL wait, timed.", .m_size = -1,
    .m_methods = module_methods};

PyMODINIT_FUNC PyInit__handoff(void) {
    if (PyType_Ready(&QueueType) < 0) return NULL;
    PyObject *m = PyModule_Create(&handoff_module);
    if (m == NULL) return NULL;
    Py_INCREF(&QueueType);
    if (PyModule_AddObject(m, "Queue", (PyObject *)&QueueType) < 0 ||
        PyModule_AddIntConstant(m, "RECORD_SIZE", (long)sizeof(handoff_t)) < 0) {
        Py_DECREF(&QueueType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
