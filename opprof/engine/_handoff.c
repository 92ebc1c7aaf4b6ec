/* opprof.engine._handoff: the engine's work queues, waited on in C so that every hand-off is timed,
 * and made cheaper by polling before parking.
 *
 * Why C: a thread parked in queue.SimpleQueue.get() is woken by the OS and then takes the GIL, and
 * from Python the two cannot be told apart (the first Python line after get() runs with the GIL
 * already taken). Here the wait is a pthread condition variable waited on *without* the GIL, so the
 * moment the OS woke the thread is stamped before the GIL is asked for, and again once it is held:
 *
 *   park   the getter found the queue empty (and polled it, then parked: see below)  (CLOCK_MONOTONIC ns)
 *   put    the item it got was put (the signal)
 *   woke   the OS ran the getter again, or its poll saw the item (still without the GIL)
 *   gil    the getter held the GIL again, and took the item
 *   holder the thread state that held the GIL at "woke" (the GIL struct's last_holder while it is
 *          locked; 0 when it was free): a pointer value, never dereferenced here (its thread may
 *          exit meanwhile); opprof.engine._gil lists each sampled thread's, to name it by
 *
 * so a hand-off splits exactly into waking a thread (put -> woke) and waiting for the GIL
 * (woke -> gil), and the wait names the thread it waited behind, exactly, where the GIL's samples
 * (one a millisecond or four) can only say who held it most around then. A get() that finds an
 * item does not park and logs nothing.
 *
 * A getter that finds its queue empty first polls it for up to the queue's spin_ns (see "spinning
 * before parking"), without the GIL: an item that comes meanwhile costs no wake. Having seen one, it
 * polls the GIL's `locked` flag until the putter lets the GIL go, so as not to park on the GIL's own
 * condition variable either. That flag is the one read from outside the GIL's API (the interpreter's
 * GIL struct, through its internal headers, as opprof.engine._gil reads it; so the module is built
 * per Python version); the rest is public C API.
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
#ifndef Py_BUILD_CORE_MODULE
#define Py_BUILD_CORE_MODULE /* the GIL's struct: read-only, to see whether it is free (see spin_for_gil) */
#endif
#include <Python.h>

#include "../_gilstruct.h" /* opprof_main_gil(), opprof_gil_locked(): the GIL's struct, per version */

#include "../_monotonic.h" /* monotonic_ns(): the clock perf_counter_ns reads */

#if defined(Py_GIL_DISABLED) || !defined(__linux__)
#error "opprof.engine._handoff needs a Linux CPython with a GIL"
#endif

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ the log (one per process) */
typedef struct {
    int64_t park, put, woke, gil;
    int64_t native_id; /* the getter's gettid() */
    int64_t queue;     /* the queue's `kind`, given at construction */
    int64_t holder;    /* the GIL holder's thread state at `woke` (a pointer value), 0: the GIL was free */
} handoff_t;

static handoff_t *log_buf = NULL;
static Py_ssize_t log_len = 0, log_cap = 0;
static unsigned long long log_dropped = 0;
static int logging = 0;

/* This thread's gettid(), asked once (a system call: ~0.2 us on the VM these figures come from, and a
 * trivial custom op's call logs two hand-offs); 0 until then, and again in a forked child. */
static __thread int64_t my_native_id = 0;
static inline int64_t native_id(void) {
    if (my_native_id == 0) my_native_id = (int64_t)syscall(SYS_gettid);
    return my_native_id;
}

static void log_handoff(int64_t park, int64_t put, int64_t woke, int64_t gil, int64_t kind, int64_t holder) {
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
    r->native_id = native_id();
    r->queue = kind;
    r->holder = holder;
}

/* ------------------------------------------------------------------ waits still open
 * A hand-off is logged once its getter has its item (or its gate opened). A thread still parked when
 * the profile stops (each pool thread, after its last work) has logged nothing of that park, and its
 * samples alone said what it did since its last hand-off: a sample that caught it holding the GIL
 * just before it parked stretched "held" over the park, up to the next sample, and the threads that
 * waited meanwhile named it their GIL's holder (a custom-op thread credited with a millisecond it
 * slept through, beside a user's thread that really held the GIL: 2026-12-05). So each wait in
 * progress while the log is on holds a slot here from its park to its end, and open_waits() reads
 * those still held: their threads were parked from then on. */
#define MAX_OPEN 256 /* waits in progress at once (a pool's threads and the program's): more are not kept */
typedef struct {
    int64_t native_id, park, queue; /* native_id 0: a free slot */
} open_wait_t;
static open_wait_t open_w[MAX_OPEN];
static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;

/* A wait that parked at ``park``: its slot (-1: not logging, or none free). Without the GIL. */
static int open_begin(int64_t park, long queue) {
    if (!__atomic_load_n(&logging, __ATOMIC_RELAXED)) return -1;
    int64_t me = native_id();
    int slot = -1;
    pthread_mutex_lock(&open_mu);
    for (int i = 0; i < MAX_OPEN; i++)
        if (open_w[i].native_id == 0) {
            open_w[i] = (open_wait_t){me, park, queue};
            slot = i;
            break;
        }
    pthread_mutex_unlock(&open_mu);
    return slot;
}

static void open_end(int slot) {
    if (slot < 0) return;
    pthread_mutex_lock(&open_mu);
    open_w[slot].native_id = 0;
    pthread_mutex_unlock(&open_mu);
}

static PyObject *handoff_open_waits(PyObject *self, PyObject *unused) {
    open_wait_t got[MAX_OPEN];
    int n = 0;
    pthread_mutex_lock(&open_mu);
    for (int i = 0; i < MAX_OPEN; i++)
        if (open_w[i].native_id != 0) got[n++] = open_w[i];
    pthread_mutex_unlock(&open_mu);
    return PyBytes_FromStringAndSize((const char *)got, n * (Py_ssize_t)sizeof(open_wait_t));
}

static PyObject *handoff_start(PyObject *self, PyObject *args) {
    Py_ssize_t cap = 1 << 18; /* 56 bytes each: 14 MB at most */
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
    int spinning;    /* getters polling the queue for an item, without mu (see spin_for_item) */
    int64_t spin_ns; /* how long a getter that finds the queue empty polls it before parking (0: never) */
    long kind;
} Queue;

static int queue_init(Queue *self, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"kind", "spin_ns", NULL};
    long kind = 0;
    long long spin = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|lL", kw, &kind, &spin)) return -1;
    if (spin < 0 || spin > 1000000000LL) {
        PyErr_Format(PyExc_ValueError, "spin_ns must be between 0 and 1e9 (1 s), got %lld", spin);
        return -1;
    }
    self->kind = kind;
    self->spin_ns = spin;
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
    /* Wake a parked getter unless a spinning one will take the item: one spinner per item. (A
     * spinner that stops counts itself out before it parks, and looks at the queue under mu first.) */
    if (self->parked > 0 && self->len > __atomic_load_n(&self->spinning, __ATOMIC_ACQUIRE)) pthread_cond_signal(&self->cv);
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ spinning before parking
 *
 * A getter that finds its queue empty polls it for a while, without the GIL and without mu, before
 * it parks: a thread parked on a condition variable is woken by the OS, and where idle CPUs halt (a
 * VM) that wake costs 35-49 us, against ~1 us for a thread still polling. How long it polls adapts
 * per thread, as KVM's halt polling does: up to the queue's spin_ns, growing when an item came soon
 * after a spin had given up (a longer one would have caught it), halving when the wait was longer
 * than spin_ns anyway, and none once it falls under SPIN_FLOOR_NS. So a thread whose work comes back
 * quickly (a trivial custom op's round trip: 30-150 us) spins to meet it, and an engine left idle
 * spins 2 * spin_ns at most before its threads park for good. A spin takes a CPU only while another
 * is left for the thread running Python (at most CPUs - 1 spinners in the process). */
#define SPIN_FLOOR_NS 10000 /* under this the spin is dropped: no wake to save is that short */

static int spinners = 0;              /* getters spinning now, in all queues */
static __thread int thread_cpus = 0;  /* CPUs this thread may run on (its affinity), read at its first spin */
static __thread int64_t spin_window = -1; /* this thread's spin (ns) before it parks; -1: not yet set */
static unsigned long long n_spin_refused = 0, n_spin_caught = 0, n_spin_timeout = 0; /* spin_stats() */

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

static struct _gil_runtime_state *gil_ptr = NULL;
/* opprof.engine._gil's set_parked (its capsule `_set_parked`; NULL without it): a thread parked here
 * says so in its sampler slot, and the sampler need not read its /proc/<tid>/syscall to learn that
 * it was blocked (~4-5 us a read here, ~3 of them a sample in a busy custom-op profile). Set around
 * the blocking call only: a spin runs, and a thread woken and taking the GIL is read from /proc. */
static void (*gil_set_parked)(int) = NULL;
#define PARKED(on) \
    do { \
        if (gil_set_parked != NULL) gil_set_parked(on); \
    } while (0)
/* How long a getter that saw its item polls the GIL before it waits for it as any thread does: a
 * putter finishing its Python lets the GIL go within ~10 us (the engine hop's median GIL wait, 8 us),
 * and a longer holder (the program pushing for milliseconds) should not keep a CPU and the poller's
 * slot from another thread that could poll for its own work meanwhile. */
#define GIL_POLL_NS 50000

/* Without the GIL: the thread state holding it now (its pointer value, for the log), 0 if it is free. */
static int64_t gil_holder_now(void) {
    if (gil_ptr == NULL || !opprof_gil_locked(gil_ptr)) return 0;
    return (int64_t)(intptr_t)__atomic_load_n((void *const *)&gil_ptr->last_holder, __ATOMIC_RELAXED);
}

/* Without the GIL, an item seen: poll the GIL until it looks free, for up to `until`. Taking it while
 * its holder still runs would park this thread on the GIL's condition variable, and the holder's
 * release would then have to wake it from a halted CPU: the very wake the spin saves. */
static void spin_for_gil(int64_t until) {
    if (gil_ptr == NULL) return;
    for (;;) {
        for (int i = 0; i < 32; i++) {
            if (!opprof_gil_locked(gil_ptr)) return;
            cpu_relax();
        }
        if (monotonic_ns() >= until) return;
    }
}

/* Take one of the CPUs - 1 spinner slots: a spin takes a CPU only while another is left for the thread
 * running Python (none on one CPU, where a spinner only delays the thread it waits for). A thread
 * that just released the GIL often finds the slot held by the thread taking it: that one lets go
 * within a microsecond or two, so the slot is asked for again for up to SLOT_WAIT_NS. */
#define SLOT_WAIT_NS 5000
static int take_spinner_slot(void) {
    int64_t until = 0;
    for (;;) {
        int n = __atomic_load_n(&spinners, __ATOMIC_ACQUIRE);
        if (n < thread_cpus - 1) {
            if (__atomic_compare_exchange_n(&spinners, &n, n + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 1;
            continue;
        }
        int64_t now = monotonic_ns();
        if (until == 0) until = now + SLOT_WAIT_NS;
        else if (now >= until) return 0;
        cpu_relax();
    }
}

/* This thread's spin for a queue whose most is max_ns. */
static int64_t spin_for(int64_t max_ns) {
    if (spin_window < 0 || spin_window > max_ns) spin_window = max_ns;
    return spin_window;
}

/* After a get that parked: its item came waited_ns after the park (caught: by the spin). */
static void adapt_spin(int64_t max_ns, int caught, int64_t waited_ns) {
    if (caught || max_ns <= 0) return;
    if (waited_ns <= max_ns) { /* a longer spin would have caught it: reach past it */
        int64_t w = spin_window * 2;
        if (w < waited_ns + waited_ns / 4) w = waited_ns + waited_ns / 4;
        if (w < SPIN_FLOOR_NS) w = SPIN_FLOOR_NS;
        spin_window = w < max_ns ? w : max_ns;
    } else {
        spin_window /= 2;
        if (spin_window < SPIN_FLOOR_NS) spin_window = 0;
    }
}

/* Without the GIL and without mu: poll the queue for up to this thread's spin; when an item came, the
 * moment it was seen (the getter's "woke": it then polls the GIL, which is waiting for the GIL), else
 * 0. A put does not wake a parked getter for an item a spinner will take (see queue_put). */
static int64_t spin_for_item(Queue *self, int64_t *holder) {
    int64_t spin_ns = spin_for(self->spin_ns);
    if (spin_ns <= 0) return 0;
    if (thread_cpus == 0) {
        cpu_set_t set;
        thread_cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    }
    if (!take_spinner_slot()) {
        __atomic_add_fetch(&n_spin_refused, 1, __ATOMIC_RELAXED);
        return 0;
    }
    __atomic_add_fetch(&self->spinning, 1, __ATOMIC_ACQ_REL);
    /* Polling for an item is parked as the readers see it (the hand-off's park -> put is BLOCKED,
     * whatever the samples said), so the sampler is told so too and reads no /proc for it: /proc
     * would say "running" and cost a read (of the reads left in a busy profile, most). */
    PARKED(1);
    int64_t until = monotonic_ns() + spin_ns;
    int got = 0;
    for (;;) {
        for (int i = 0; i < 32; i++) {
            if (__atomic_load_n(&self->len, __ATOMIC_ACQUIRE) > 0) {
                got = 1;
                break;
            }
            cpu_relax();
        }
        if (got || monotonic_ns() >= until) break;
    }
    PARKED(0);
    __atomic_sub_fetch(&self->spinning, 1, __ATOMIC_ACQ_REL);
    __atomic_add_fetch(got ? &n_spin_caught : &n_spin_timeout, 1, __ATOMIC_RELAXED);
    int64_t seen = got ? monotonic_ns() : 0;
    if (got) *holder = gil_holder_now();
    /* Still a spinner while it polls the GIL: a CPU is taken until it holds the GIL or gives up. */
    if (got) spin_for_gil(seen + (self->spin_ns < GIL_POLL_NS ? self->spin_ns : GIL_POLL_NS));
    __atomic_sub_fetch(&spinners, 1, __ATOMIC_ACQ_REL);
    return seen;
}

static PyObject *handoff_spin_stats(PyObject *self, PyObject *unused) {
    return Py_BuildValue("{sKsKsK}", "caught", n_spin_caught, "timed_out", n_spin_timeout, "refused", n_spin_refused);
}

static PyObject *queue_get(Queue *self, PyObject *unused) {
    /* The item is taken only with the GIL held, as queue.SimpleQueue does: until the woken thread
     * runs Python again, the item stays in the queue for all to see, and qsize() counts it. (The
     * custom-op pool once read qsize() to decide whether to start a thread; it counts its tasks
     * itself now, under its own lock, since a thread that has taken an item has not yet said so.)
     * A thread holding the GIL may take it first: the woken one then parks again. */
    int64_t park = 0, woke = 0, holder = 0;
    int waited = 0, caught = 0, slot = -1;
    for (;;) {
        pthread_mutex_lock(&self->mu);
        if (self->len > 0) {
            item_t it = pop_locked(self);
            pthread_mutex_unlock(&self->mu);
            /* The GIL and the item held: the hop's end, stamped before the open wait's slot is
             * given back (a mutex shared by every parking thread: not the hand-off's cost). */
            int64_t got = waited ? monotonic_ns() : 0;
            open_end(slot);
            if (waited) {
                log_handoff(park, it.put, woke, got, self->kind, holder);
                adapt_spin(self->spin_ns, caught, it.put - park);
            }
            return it.obj;
        }
        /* Empty: park without the GIL (mu is held across the release, which blocks on nothing). */
        Py_BEGIN_ALLOW_THREADS
        if (!waited && slot < 0) {
            park = monotonic_ns(); /* the first park: a wake that found its item taken parks again */
            slot = open_begin(park, self->kind);
        }
        caught = 0;                          /* a spin's item taken by another getter: park this time */
        if (!waited && self->spin_ns > 0) {
            pthread_mutex_unlock(&self->mu);
            int64_t seen = spin_for_item(self, &holder);
            pthread_mutex_lock(&self->mu);
            /* An item here came while it polled, or after the poll gave up but before mu was taken
             * again: no wake either way, and a hand-off all the same (logged as one). */
            if (self->len > 0) {
                waited = caught = 1;
                if (!seen) holder = gil_holder_now();
                woke = seen ? seen : monotonic_ns();
            }
        }
        if (!caught) {
            self->parked++;
            PARKED(1);
            while (self->len == 0) {
                waited = 1;
                pthread_cond_wait(&self->cv, &self->mu);
            }
            PARKED(0);
            self->parked--;
            woke = monotonic_ns();
            holder = gil_holder_now();
        }
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


/* ------------------------------------------------------------------ the gate (a program's wait)
 *
 * A thread that waits for the engine (wait_to_read, waitall: WaitForVar, WaitForAll) blocks on a
 * closed gate that the engine opens once the ops it waits for are done. A threading.Lock did that,
 * and the thread's parked time then showed only in the GIL's samples, one per millisecond: in the
 * demo, a third of the program's waits were sampled as holding the GIL (a sample just before the
 * wait, stretched over its period). A Gate is waited on here, without the GIL, and logged as a
 * hand-off of its own kind: parked at acquire(), opened at release() (the put), run again by the OS
 * (woke) and holding the GIL again (gil). A gate already open when acquired logs nothing.
 *
 * A semaphore, not a condition variable: sem_wait returns on a signal (EINTR), so a Ctrl-C reaches
 * Python's handler at once, as it does a thread blocked in threading.Lock.acquire; the handler may
 * raise (acquire() then raises) or defer it (the wait goes on). */
typedef struct {
    PyObject_HEAD sem_t sem;
    int64_t put; /* monotonic ns of release(), 0 before it */
    int open;
    long kind;
} Gate;

static int gate_init(Gate *self, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"kind", NULL};
    long kind = 2;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|l", kw, &kind)) return -1;
    self->kind = kind;
    return 0;
}

static PyObject *gate_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Gate *self = (Gate *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    if (sem_init(&self->sem, 0, 0) != 0) {
        Py_DECREF(self);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    self->kind = 2;
    return (PyObject *)self;
}

static void gate_dealloc(Gate *self) {
    sem_destroy(&self->sem);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Open the gate (once: a second release changes nothing), waking the thread waiting at it. Called
 * with the GIL held, as the engine completes an op: the GIL serialises it against acquire(). */
static PyObject *gate_release(Gate *self, PyObject *unused) {
    if (!self->open) {
        self->open = 1;
        self->put = monotonic_ns();
        sem_post(&self->sem);
    }
    Py_RETURN_NONE;
}

static PyObject *gate_acquire(Gate *self, PyObject *unused) {
    if (sem_trywait(&self->sem) == 0) Py_RETURN_TRUE; /* open already: no wait */
    int64_t park = monotonic_ns(), woke = 0, holder = 0;
    int slot = open_begin(park, self->kind);
    for (;;) {
        int r, err = 0;
        Py_BEGIN_ALLOW_THREADS
        PARKED(1);
        r = sem_wait(&self->sem);
        PARKED(0);
        if (r != 0) err = errno;
        woke = monotonic_ns();
        holder = gil_holder_now();
        Py_END_ALLOW_THREADS
        if (r == 0) break;
        if (err != EINTR) {
            open_end(slot);
            errno = err;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        if (PyErr_CheckSignals() < 0) { /* the handler raised (Ctrl-C): the wait ends with it */
            open_end(slot);
            return NULL;
        }
    }
    int64_t got = monotonic_ns(); /* the GIL held: stamped before the slot's mutex, as in queue_get */
    open_end(slot);
    log_handoff(park, self->put, woke, got, self->kind, holder);
    Py_RETURN_TRUE;
}

static PyObject *gate_locked(Gate *self, PyObject *unused) { return PyBool_FromLong(!self->open); }

static PyMethodDef gate_methods[] = {
    {"acquire", (PyCFunction)gate_acquire, METH_NOARGS,
     "acquire() -> True: wait, without the GIL, until the gate is opened (logged as a hand-off while logging is on)."},
    {"release", (PyCFunction)gate_release, METH_NOARGS, "release(): open the gate (once), stamping the moment."},
    {"locked", (PyCFunction)gate_locked, METH_NOARGS, "locked() -> bool: not opened yet."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject GateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "opprof.engine._handoff.Gate",
    .tp_basicsize = sizeof(Gate),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Gate(kind=2): closed until release(); acquire() waits in C and times the wait (see the module).",
    .tp_new = gate_new,
    .tp_init = (initproc)gate_init,
    .tp_dealloc = (destructor)gate_dealloc,
    .tp_methods = gate_methods,
};

static PyMethodDef module_methods[] = {
    {"start", handoff_start, METH_VARARGS,
     "start(capacity=262144) -> bool: log hand-offs from now on (False if logging already)."},
    {"stop", handoff_stop, METH_NOARGS, "stop() -> bool: stop logging (False if it was not)."},
    {"spin_stats", handoff_spin_stats, METH_NOARGS, "spin_stats() -> dict: spins that caught an item, timed out, were refused."},
    {"open_waits", handoff_open_waits, METH_NOARGS,
     "open_waits() -> bytes: the waits in progress that began while logging (int64 native_id, park, queue kind "
     "each): their threads have been parked since, and have logged nothing of it yet."},
    {"drain", handoff_drain, METH_NOARGS,
     "drain() -> (bytes, dropped): the hand-offs logged since the last drain, RECORD_SIZE bytes each "
     "(int64 park, put, woke, gil, native_id, queue kind, GIL holder's thread state), and how many a full log dropped."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef handoff_module = {
    PyModuleDef_HEAD_INIT, .m_name = "_handoff",
    .m_doc = "The engine's work queues, waited on in C: each hand-off's wake and GIL wait, timed.", .m_size = -1,
    .m_methods = module_methods};

/* A forked child has none of the parent's threads: none of them polls there, whatever the count said. */
static void after_fork_child(void) {
    spinners = 0;
    my_native_id = 0; /* the forking thread's: this one has its own */
    memset(open_w, 0, sizeof(open_w)); /* the parent's waits are not this process's */
    pthread_mutex_init(&open_mu, NULL);
}

PyMODINIT_FUNC PyInit__handoff(void) {
    static int once = 0;
    if (PyType_Ready(&QueueType) < 0 || PyType_Ready(&GateType) < 0) return NULL;
    gil_ptr = opprof_main_gil();
    /* Optional: without the sampler module (a build that skipped it), /proc tells the same. Not
     * PyCapsule_Import, which walks attributes from "opprof" down: while opprof.engine is still
     * being imported (it imports this), opprof has no attribute "engine" yet. */
    PyObject *sampler = PyImport_ImportModule("opprof.engine._gil");
    PyObject *capsule = sampler != NULL ? PyObject_GetAttrString(sampler, "_set_parked") : NULL;
    gil_set_parked = capsule != NULL ? (void (*)(int))PyCapsule_GetPointer(capsule, "opprof.engine._gil._set_parked") : NULL;
    Py_XDECREF(capsule);
    Py_XDECREF(sampler);
    if (gil_set_parked == NULL) PyErr_Clear();
    if (!once) {
        pthread_atfork(NULL, NULL, after_fork_child);
        once = 1;
    }
    PyObject *m = PyModule_Create(&handoff_module);
    if (m == NULL) return NULL;
    Py_INCREF(&QueueType);
    Py_INCREF(&GateType);
    if (PyModule_AddObject(m, "Queue", (PyObject *)&QueueType) < 0 || PyModule_AddObject(m, "Gate", (PyObject *)&GateType) < 0 ||
        PyModule_AddIntConstant(m, "RECORD_SIZE", (long)sizeof(handoff_t)) < 0 ||
        PyModule_AddIntConstant(m, "TELLS_SAMPLER", gil_set_parked != NULL) < 0) {
        Py_DECREF(&QueueType);
        Py_DECREF(&GateType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
