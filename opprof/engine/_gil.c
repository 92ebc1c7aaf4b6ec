/* opprof.engine._gil: who held the GIL, and who waited for it, sampled from a thread of our own.
 *
 * Why C: the question "which thread holds the GIL right now, and which threads are parked on it"
 * cannot be answered from Python (asking needs the GIL, so the asker is always the holder). A plain
 * pthread that never takes the GIL and never touches a Python object can read the interpreter's GIL
 * struct (its `locked` flag and `last_holder` thread state) and each registered thread's CPU clock
 * at several kHz for a small fraction of a core.
 *
 * One sample every `period_ns` (CLOCK_MONOTONIC, the clock of time.monotonic_ns() and
 * time.perf_counter_ns() on Linux) is a fixed-size record (see `record_t`, mirrored by the NumPy
 * dtype in opprof/engine/gil.py):
 *   t         CLOCK_MONOTONIC ns when the sample was taken
 *   on_cpu    bit i: slot i's thread CPU clock advanced since the previous sample
 *   gil_wait  bit i: slot i's thread is parked in futex() on an address inside the GIL struct
 *             (the GIL's mutex and condition variable live there: it waits for the GIL)
 *   blocked   bit i: slot i's thread is in another system call (sleep, read, poll, another lock...)
 *             or blocked outside one (a page fault)
 *   runnable  bit i: slot i's thread is in no system call yet its CPU clock stood (nearly) still: it
 *             waits for a CPU (the OS's run queue), not for the GIL
 *   alive     bit i: slot i held a live registered thread at that sample
 *   switches  the GIL's switch_number (low 32 bits): hand-offs between samples are its difference
 *   holder    the slot of the GIL holder; -1 when the GIL is free or held by an unregistered thread
 *   flags     bit 0: the GIL was locked
 * gil_wait, blocked and runnable come from /proc/self/task/<tid>/syscall, read only for a thread that is not
 * the holder and whose CPU advanced less than half the time since the previous sample (the
 * ambiguous ones: a thread that ran most of the window is running, and reading /proc costs a few
 * microseconds). A waiter wakes every switch interval to ask the holder to drop the GIL, so "did
 * not advance at all" would call it running now and then; "less than half" does not.
 *
 * Where the GIL lives differs per version (and so the module is built per version: see
 * opprof/_gilstruct.h, shared with opprof.engine._handoff). A free-threaded build (Py_GIL_DISABLED) has no GIL: the module then only says so.
 *
 * The GIL struct also holds FORCE_SWITCHING's switch_cond: a holder that was asked to drop the GIL
 * waits there until another thread took it, and counts as waiting for the GIL too (it goes on to
 * wait for it again in take_gil). The holder's own on_cpu bit is recorded as for any thread: a
 * holder whose clock stood still held the GIL without a CPU (a busy machine).
 *
 * One sampler per process (the state below is global); subinterpreters are not supported.
 */
#define PY_SSIZE_T_CLEAN
#ifndef Py_BUILD_CORE_MODULE
#define Py_BUILD_CORE_MODULE /* the internal headers below refuse to be read without it */
#endif
#include <Python.h>

#include "../_monotonic.h" /* monotonic_ns(): the clock perf_counter_ns reads */

#if defined(Py_GIL_DISABLED)
/* ------------------------------------------------------------------ free-threaded: nothing to see */
#define GIL_UNAVAILABLE_REASON "this Python is a free-threaded build: it has no GIL to sample"
#elif !defined(__linux__)
#define GIL_UNAVAILABLE_REASON "GIL sampling needs Linux (/proc/self/task/<tid>/syscall and thread CPU clocks)"
#endif

#ifdef GIL_UNAVAILABLE_REASON

static PyObject *gil_available(PyObject *self, PyObject *unused) { Py_RETURN_FALSE; }
static PyObject *gil_reason(PyObject *self, PyObject *unused) { return PyUnicode_FromString(GIL_UNAVAILABLE_REASON); }

static PyMethodDef gil_methods[] = {
    {"available", gil_available, METH_NOARGS, "False: see reason()."},
    {"reason", gil_reason, METH_NOARGS, "Why GIL sampling is not available here."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef gil_module = {
    PyModuleDef_HEAD_INIT, .m_name = "_gil", .m_doc = "GIL sampling (unavailable here).", .m_size = -1, .m_methods = gil_methods};

PyMODINIT_FUNC PyInit__gil(void) {
    PyObject *m = PyModule_Create(&gil_module);
#ifdef Py_GIL_DISABLED
    /* This stub holds no state and touches nothing: importing it must not turn the GIL back on. */
    if (m != NULL && PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#endif
    return m;
}

#else /* ------------------------------------------------------------------ the sampler */

#include "../_gilstruct.h" /* opprof_main_gil(): the interpreter's GIL struct, per version */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_SLOTS 64
#define DEFAULT_PERIOD_NS 200000LL     /* 5 kHz */
#define DEFAULT_MAX_SAMPLES (1 << 20)  /* 56 MiB of records: ~3.5 min at 5 kHz between drains */

typedef struct {
    int64_t t;
    uint64_t on_cpu;
    uint64_t gil_wait;
    uint64_t blocked;
    uint64_t runnable;
    uint64_t alive;
    uint32_t switches;
    int8_t holder;
    uint8_t flags;
    uint8_t pad[2];
} record_t;

_Static_assert(sizeof(record_t) == 56, "record_t is mirrored by a NumPy dtype of 56 bytes");

enum { SLOT_FREE = 0, SLOT_USED = 1, SLOT_RETIRED = 2 };

typedef struct {
    int state;            /* SLOT_*: RETIRED slots may still be named by undrained samples */
    int dead;             /* the thread was seen to exit (its CPU clock or /proc file vanished) */
    pid_t tid;            /* native id */
    unsigned long ident;  /* threading.get_ident() */
    PyThreadState *tstate;
    clockid_t cpu_clock;
    int syscall_fd;       /* /proc/self/task/<tid>/syscall, -1 if it could not be opened */
    int64_t last_cpu;     /* CPU ns at the previous sample, -1 before the first */
    int last_syscall;     /* syscall_state() at the previous sample, SYS_UNREAD when not read then */
    int foreign;          /* registered by another thread (register_others), for one profile */
    int parked;           /* set by the thread itself while it is parked in one of the engine's C waits */
} slot_t;

static struct _gil_runtime_state *gil_ptr = NULL;
static char unavailable_reason[256] = "";

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* guards everything below */
static slot_t slots[MAX_SLOTS];
static record_t *buf = NULL;
static size_t buf_len = 0, buf_cap = 0, buf_max = DEFAULT_MAX_SAMPLES;
static uint64_t n_samples = 0, n_dropped = 0, n_missed = 0, n_proc_reads = 0;
static int64_t period_ns = DEFAULT_PERIOD_NS;
/* While nothing contends (no registered thread waits for the GIL or for a CPU, at most one runs, and
 * the GIL stayed with one holder), the next sample comes after quiet_ns instead (0: never): on this
 * VM a timer wake alone costs ~20 µs of CPU, so the sampler's cost follows its rate, and a program
 * with one busy thread has nothing for a fine rate to see. Contention brings the fine rate back at
 * the next sample. */
static int64_t quiet_ns = 0;
/* Once threads have contended for sustained_after_ns without a break, samples come every
 * sustained_ns instead (0: never): the timer wake is ~25 µs of CPU here whatever the sample reads
 * (measured: a bare 1 kHz clock_nanosleep loop, 2.8-2.9 % of a core), so a fine rate held through
 * seconds of contention cannot stay under 2 % of a core, and each wake preempts a thread the profiled
 * program is running (opprof.profiler.gil.SUSTAINED_AFTER_NS says what that costs). The onset of
 * contention and every short episode (the known answers' 30-40 ms spins, a 4 ms notebook cell) keep
 * the fine rate; a long one has thousands of samples at either. */
static int64_t sustained_ns = 0, sustained_after_ns = 0;
static int64_t prev_sample_t = 0;
static int running = 0;            /* 0: no sampler thread, 1: sampling, 2: stop() is joining it */
static volatile int stop_flag = 0; /* read by the sampler with __atomic loads */
static pthread_t sampler_thread;
static clockid_t sampler_clock;
static int64_t sampler_cpu_ns_total = 0; /* CPU time of finished sampler runs */
static int sampler_nice = -10;           /* asked for at start() */
static int sampler_nice_applied = 0;     /* whether the sampler got it */
static int sampler_slice_wanted = 1;     /* asked for at start() */
static int sampler_slice_applied = 0;    /* whether the kernel keeps the short slice asked for below */

/* The time slice the sampler asks the scheduler for (Linux 6.12+ EEVDF's custom slice: sched_attr's
 * sched_runtime for SCHED_OTHER; no privilege needed). With the default slice (~3 ms) a busy thread
 * runs on to its slice's end before a woken sampler preempts it: with two Pythons contending, ~20
 * holes of ~4 ms in 0.3 s, one at most of the GIL's switches, ~750 samples a second instead of 1,000,
 * at nice -10 too. With 0.1 ms the woken sampler runs at once: no hole over 2 ms, ~1,050 a second.
 * Older kernels ignore it (sched_getattr then says 0, and `slice_applied` is False). */
#define SAMPLER_SLICE_NS 100000ULL

#if defined(__linux__) && defined(SYS_sched_setattr) && defined(SYS_sched_getattr)
struct opprof_sched_attr { /* the kernel's struct sched_attr (SCHED_ATTR_SIZE_VER0, 48 bytes) */
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
};

/* Ask for a short slice, keeping the policy and nice the thread has; 1 if the kernel kept it. */
static int ask_short_slice(void) {
    struct opprof_sched_attr attr;
    memset(&attr, 0, sizeof(attr));
    if (syscall(SYS_sched_getattr, 0, &attr, sizeof(attr), 0) != 0 || attr.policy != 0 /* SCHED_OTHER */) return 0;
    attr.size = sizeof(attr);
    attr.flags = 0;
    attr.runtime = SAMPLER_SLICE_NS;
    if (syscall(SYS_sched_setattr, 0, &attr, 0) != 0) return 0;
    memset(&attr, 0, sizeof(attr));
    return syscall(SYS_sched_getattr, 0, &attr, sizeof(attr), 0) == 0 && attr.runtime == SAMPLER_SLICE_NS;
}
#else
static int ask_short_slice(void) { return 0; }
#endif

static inline int clock_ns(clockid_t clk, int64_t *out) {
    struct timespec ts;
    if (clock_gettime(clk, &ts) != 0) return -1;
    *out = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    return 0;
}

/* ------------------------------------------------------------------ the sampler thread (no GIL) */

enum { SYS_GIL_WAIT = 1, SYS_OTHER = 0, SYS_NONE = -1, SYS_GONE = -2, SYS_UNREAD = 2 };

/* SYS_GIL_WAIT: parked in futex() on the GIL struct; SYS_OTHER: in another syscall, or blocked
 * outside one ("-1 sp pc": a page fault); SYS_NONE: "running" (on a CPU or on a run queue), or the
 * file is unreadable; SYS_GONE: the thread exited. */
static int syscall_state(slot_t *s) {
    char text[256];
    ssize_t n;
    if (s->syscall_fd < 0) return SYS_NONE;
    n = pread(s->syscall_fd, text, sizeof(text) - 1, 0);
    n_proc_reads++;
    if (n <= 0) return (n < 0 && errno == ESRCH) ? SYS_GONE : SYS_NONE;
    text[n] = '\0';
    if (text[0] == 'r') return SYS_NONE; /* "running" */
    char *end;
    long nr = strtol(text, &end, 10);
    if (end == text) return SYS_NONE;
    if (nr < 0) return SYS_OTHER; /* "-1 sp pc": blocked outside a syscall */
    if (nr == SYS_futex) {
        uintptr_t addr = (uintptr_t)strtoull(end, NULL, 16);
        uintptr_t lo = (uintptr_t)gil_ptr, hi = lo + sizeof(*gil_ptr);
        if (addr >= lo && addr < hi) return SYS_GIL_WAIT;
    }
    return SYS_OTHER;
}

static void retire(slot_t *s) {
    if (s->syscall_fd >= 0) close(s->syscall_fd);
    s->syscall_fd = -1;
    s->state = SLOT_RETIRED;
}

/* Free the slots no sample can name any more (called with the lock held): a retired slot once no
 * undrained sample exists, and first the slot of a thread that exited without unregistering (an
 * engine made and dropped per test leaves dozens). Without this, 64 short-lived threads between
 * two drains would exhaust the slots of a process that never profiles. */
static void reclaim_locked(void) {
    pid_t pid = getpid();
    for (int i = 0; i < MAX_SLOTS; i++) {
        slot_t *s = &slots[i];
        if (s->state == SLOT_USED && (s->dead || (syscall(SYS_tgkill, pid, s->tid, 0) != 0 && errno == ESRCH))) retire(s);
        if (s->state == SLOT_RETIRED && buf_len == 0) {
            memset(s, 0, sizeof(slot_t));
            s->syscall_fd = -1;
        }
    }
}

static int take_sample(void) {
    record_t r;
    memset(&r, 0, sizeof(r));
    pthread_mutex_lock(&lock);
    r.t = monotonic_ns();
    int64_t elapsed = prev_sample_t ? r.t - prev_sample_t : period_ns;
    prev_sample_t = r.t;

    int locked = opprof_gil_locked(gil_ptr);
    void *holder_ts = __atomic_load_n((void *const *)&gil_ptr->last_holder, __ATOMIC_RELAXED);
    r.switches = (uint32_t)__atomic_load_n(&gil_ptr->switch_number, __ATOMIC_RELAXED);
    r.flags = locked ? 1 : 0;
    r.holder = -1;

    for (int i = 0; i < MAX_SLOTS; i++) {
        slot_t *s = &slots[i];
        if (s->state != SLOT_USED || s->dead) continue;
        uint64_t bit = 1ULL << i;
        int64_t cpu;
        if (clock_ns(s->cpu_clock, &cpu) != 0) { /* the thread exited without unregistering */
            s->dead = 1;
            retire(s);
            continue;
        }
        r.alive |= bit;
        int64_t delta = s->last_cpu >= 0 ? cpu - s->last_cpu : 0;
        s->last_cpu = cpu;
        if (delta > 0) r.on_cpu |= bit;
        if (locked && (void *)s->tstate == holder_ts) {
            r.holder = (int8_t)i;
            s->last_syscall = SYS_UNREAD;
            continue;
        }
        if (2 * delta >= elapsed) { /* ran most of the window: running, no need to ask /proc */
            s->last_syscall = SYS_UNREAD;
            continue;
        }
        /* Parked in one of the engine's own waits (a work queue, a program's wait), as it says itself
         * (see set_parked): in a futex that is not the GIL's, which is what /proc would have shown,
         * read here for nothing. Most /proc reads of a busy custom-op profile were of such threads
         * (an engine worker that ran an op since the last sample, then parked). */
        if (__atomic_load_n(&s->parked, __ATOMIC_ACQUIRE)) {
            s->last_syscall = SYS_OTHER;
            r.blocked |= bit;
            continue;
        }
        /* Not scheduled at all since the previous sample (its CPU clock did not move): it is still
         * in the state /proc showed then, read after that sample's clock read. Idle threads cost
         * one clock read per sample, not a /proc read. */
        int st = (delta == 0 && s->last_syscall != SYS_UNREAD) ? s->last_syscall : syscall_state(s);
        s->last_syscall = st;
        if (st == SYS_GIL_WAIT) r.gil_wait |= bit;
        else if (st == SYS_OTHER) r.blocked |= bit;
        else if (st == SYS_NONE) r.runnable |= bit;
        else if (st == SYS_GONE) {
            s->dead = 1;
            r.alive &= ~bit;
            r.on_cpu &= ~bit;
            retire(s);
        }
    }

    n_samples++;
    static uint32_t last_switches = 0;
    int contended = r.gil_wait != 0 || r.runnable != 0 || __builtin_popcountll(r.on_cpu) > 1 || r.switches != last_switches;
    last_switches = r.switches;
    if (buf_len == buf_cap && buf_cap < buf_max) {
        size_t cap = buf_cap ? buf_cap * 2 : 4096;
        if (cap > buf_max) cap = buf_max;
        record_t *grown = realloc(buf, cap * sizeof(record_t));
        if (grown != NULL) {
            buf = grown;
            buf_cap = cap;
        }
    }
    if (buf_len < buf_cap) buf[buf_len++] = r;
    else n_dropped++;
    pthread_mutex_unlock(&lock);
    return contended;
}

/* Sleep until `next` (CLOCK_MONOTONIC, absolute), or until stop() sets stop_flag and wakes it: a futex
 * wait on stop_flag costs the same timer wake as clock_nanosleep, and a stop() no longer waits out
 * the rest of a period (up to 4 ms while quiet: every profile's stop paid ~2 ms of it). A spurious
 * wake takes a sample early. */
static void sleep_until(const struct timespec *next) {
    while (!__atomic_load_n(&stop_flag, __ATOMIC_ACQUIRE)) {
        long r = syscall(SYS_futex, (int *)&stop_flag, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, 0, next, NULL,
                         FUTEX_BITSET_MATCH_ANY);
        if (r == 0 || errno != EINTR) return; /* woken, the time came (ETIMEDOUT), or stopped (EAGAIN) */
    }
}

/* The sampler thread's name (its /proc comm): a profile that counts the CPU time of the process's
 * threads outside Python (a BLAS pool's: opprof.profiler.cpuwait) leaves this one out by it. */
#define SAMPLER_THREAD_NAME "opprof-gil"

static void *sampler_main(void *arg) {
    (void)arg;
    /* Under load the sampler, at the default weight, waits its turn behind busy threads and skips
     * most ticks (2 of 5 kHz taken with 4 spinners on 2 cores); at nice -10 it takes ~90 % of them.
     * Lowering nice needs privilege: without it the sampler runs at the default weight. */
    if (sampler_nice != 0 && setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), sampler_nice) == 0)
        __atomic_store_n(&sampler_nice_applied, 1, __ATOMIC_RELAXED);
    if (sampler_slice_wanted) __atomic_store_n(&sampler_slice_applied, ask_short_slice(), __ATOMIC_RELAXED);
    /* A sample at once: each thread's first state starts at the start, not a period after it (its
     * first millisecond "not sampled": 0.9 ms of a 2 ms sleep in the first call of a profile). */
    take_sample();
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    int64_t step = period_ns, contended_since = 0;
    while (!__atomic_load_n(&stop_flag, __ATOMIC_ACQUIRE)) {
        int64_t ns = next.tv_nsec + step;
        next.tv_sec += ns / 1000000000LL;
        next.tv_nsec = ns % 1000000000LL;
        sleep_until(&next);
        if (__atomic_load_n(&stop_flag, __ATOMIC_ACQUIRE)) break;
        int contended = take_sample();
        int64_t now = monotonic_ns(), due = (int64_t)next.tv_sec * 1000000000LL + next.tv_nsec;
        if (!contended) contended_since = 0;
        else if (contended_since == 0) contended_since = now;
        if (!contended) step = quiet_ns > period_ns ? quiet_ns : period_ns;
        else if (sustained_ns > period_ns && sustained_after_ns > 0 && now - contended_since >= sustained_after_ns) step = sustained_ns;
        else step = period_ns;
        if (now - due >= period_ns) { /* fell behind (descheduled): skip the ticks, count them */
            __atomic_add_fetch(&n_missed, (uint64_t)((now - due) / period_ns), __ATOMIC_RELAXED);
            next.tv_sec = now / 1000000000LL;
            next.tv_nsec = now % 1000000000LL;
        }
    }
    /* One sample more at the stop: each thread's last state reaches the stop, not the last tick's
     * period past it. A profile that went quiet (a sample every 4 ms) left up to 4 ms of its end
     * "not sampled": 0.8 ms of a 2 ms sleep in a custom op's Python, 37 % of three such calls. */
    take_sample();
    int64_t cpu = 0;
    clock_ns(CLOCK_THREAD_CPUTIME_ID, &cpu);
    pthread_mutex_lock(&lock);
    sampler_cpu_ns_total += cpu;
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* ------------------------------------------------------------------ a thread's own word: parked

 * The calling thread's slot, for the word it sets while parked in the engine's C waits
 * (opprof.engine._handoff, given set_parked through the capsule `_set_parked`). Only a thread that
 * registered itself for good has one: its slot is retired only by its own unregister_thread, which
 * clears this, or by its death, so a live thread never writes into a slot reused by another. (A
 * foreign slot is retired by unregister_foreign from another thread, its owner maybe parked.) */
static __thread int my_slot = -1;
static __thread pid_t my_tid = 0;

/* Without the GIL and without the lock: a relaxed check that the slot is still this thread's, then
 * the word. Costs a few ns beside a park's futex wait (a wake is ~20 us of CPU here). */
static void set_parked(int on) {
    int i = my_slot;
    if (i < 0) return;
    slot_t *s = &slots[i];
    if (__atomic_load_n(&s->tid, __ATOMIC_RELAXED) != my_tid || __atomic_load_n(&s->state, __ATOMIC_RELAXED) != SLOT_USED)
        return;
    __atomic_store_n(&s->parked, on, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------------ after fork: no sampler, no threads */

static void after_fork_child(void) {
    pthread_mutex_init(&lock, NULL);
    running = 0;
    stop_flag = 0;
    for (int i = 0; i < MAX_SLOTS; i++) {
        if (slots[i].syscall_fd >= 0) close(slots[i].syscall_fd);
        memset(&slots[i], 0, sizeof(slot_t));
        slots[i].syscall_fd = -1;
    }
    free(buf);
    buf = NULL;
    buf_len = buf_cap = 0;
}

/* ------------------------------------------------------------------ the Python API (with the GIL) */

/* Take the sampler's lock from a Python-facing function without holding the GIL while waiting:
 * the sampler holds the lock while it reads /proc/<tid>/syscall, and the kernel makes that read
 * wait until the thread it asks about is off its CPU. A caller that waited for the lock with the
 * GIL held would stall every Python thread meanwhile (seen: a custom-op thread registering at its
 * start held the GIL for tens of ms, and a pool of two ran its burst in three rounds). */
static void lock_nogil(void) {
    if (pthread_mutex_trylock(&lock) == 0) return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&lock);
    Py_END_ALLOW_THREADS
}

static int check_available(void) {
    if (gil_ptr == NULL) {
        PyErr_Format(PyExc_RuntimeError, "GIL sampling is not available: %s", unavailable_reason);
        return -1;
    }
    return 0;
}

static PyObject *gil_available(PyObject *self, PyObject *unused) { return PyBool_FromLong(gil_ptr != NULL); }

static PyObject *gil_reason(PyObject *self, PyObject *unused) { return PyUnicode_FromString(unavailable_reason); }

/* The slot of thread `tid` with Python state `ts`, taken from the free ones if it has none (called
 * with the lock held; `*fd` is kept by a new slot and set to -1); -1 when every slot is taken. A
 * thread that registers for good (`foreign` 0) is kept past the profile that registered it as foreign. */
static int claim_slot_locked(pid_t tid, unsigned long ident, PyThreadState *ts, clockid_t clk, int *fd, int64_t cpu, int foreign) {
    int found = -1, free_slot = -1;
    for (int i = 0; i < MAX_SLOTS; i++) {
        if (slots[i].state == SLOT_USED && !slots[i].dead && slots[i].tid == tid && slots[i].tstate == ts) found = i;
        if (slots[i].state == SLOT_FREE && free_slot < 0) free_slot = i;
    }
    if (found >= 0) {
        if (!foreign) slots[found].foreign = 0;
        return found;
    }
    if (free_slot < 0) {
        reclaim_locked();
        for (int i = 0; i < MAX_SLOTS && free_slot < 0; i++)
            if (slots[i].state == SLOT_FREE) free_slot = i;
    }
    if (free_slot < 0) return -1;
    slot_t *s = &slots[free_slot];
    s->state = SLOT_USED;
    s->dead = 0;
    s->tid = tid;
    s->ident = ident;
    s->tstate = ts;
    s->cpu_clock = clk;
    s->syscall_fd = *fd;
    s->last_cpu = cpu;
    s->last_syscall = SYS_UNREAD;
    s->foreign = foreign;
    __atomic_store_n(&s->parked, 0, __ATOMIC_RELAXED);
    *fd = -1;
    return free_slot;
}

static PyObject *gil_register_thread(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"foreign", NULL};
    int foreign = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:register_thread", kwlist, &foreign)) return NULL;
    if (check_available() < 0) return NULL;
    PyThreadState *ts = PyThreadState_Get();
    pid_t tid = (pid_t)syscall(SYS_gettid);
    unsigned long ident = PyThread_get_thread_ident();
    clockid_t clk;
    int err = pthread_getcpuclockid(pthread_self(), &clk);
    if (err != 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    int64_t cpu = -1;
    clock_ns(clk, &cpu);
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    lock_nogil();
    int found = claim_slot_locked(tid, ident, ts, clk, &fd, cpu, foreign);
    int kept = found >= 0 && !slots[found].foreign;
    pthread_mutex_unlock(&lock);
    if (kept) { /* see set_parked: only a slot that only this thread retires */
        my_tid = tid;
        my_slot = found;
    }
    if (fd >= 0) close(fd);
    if (found < 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "no free GIL sampler slot: %d threads are registered or named by samples not yet drained", MAX_SLOTS);
        return NULL;
    }
    return PyLong_FromLong(found);
}

/* Register a thread other than the caller, known by its threading ident (its pthread_t on Linux) and
 * native id, marked foreign (retired by unregister_foreign when the profile ends). Its Python thread
 * state is found in the interpreter's list, walked with the GIL held: a thread deletes its state
 * (with the GIL) before it ends, so one still listed is alive, and its pthread_t valid, for as long
 * as the caller holds the GIL. Returns the slot, -1 when the thread has no Python state here (gone,
 * or never ran Python), -2 when every slot is taken. */
static int register_other(unsigned long ident, pid_t tid) {
    PyThreadState *me = PyThreadState_Get();
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me));
    while (ts != NULL && ts->thread_id != ident) ts = PyThreadState_Next(ts);
    if (ts == NULL || ts == me) return -1;
    clockid_t clk;
    if (pthread_getcpuclockid((pthread_t)ident, &clk) != 0) return -1;
    int64_t cpu = -1;
    if (clock_ns(clk, &cpu) != 0) return -1;
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    /* Its clock is read: from here the thread may end (the GIL dropped while waiting for the lock).
     * The slot then keeps a clock that fails and a state pointer never read through, and the
     * sampler retires it at its next sample, as it does a registered thread that exits. */
    lock_nogil();
    int found = claim_slot_locked(tid, ident, ts, clk, &fd, cpu, 1);
    pthread_mutex_unlock(&lock);
    if (fd >= 0) close(fd);
    return found >= 0 ? found : -2;
}

static PyObject *gil_register_others(PyObject *self, PyObject *threads) {
    if (check_available() < 0) return NULL;
    PyObject *seq = PySequence_Fast(threads, "register_others() takes a sequence of (ident, native_id)");
    if (seq == NULL) return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t k = 0; k < n; k++) {
        unsigned long ident;
        int tid;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, k), "ki:register_others", &ident, &tid)) goto fail;
        int slot = register_other(ident, (pid_t)tid);
        if (slot == -2) break; /* no slot left: the rest go unsampled, as a 65th engine thread would */
        if (slot < 0) continue;
        PyObject *v = PyLong_FromLong(slot);
        if (v == NULL || PyList_Append(out, v) < 0) {
            Py_XDECREF(v);
            goto fail;
        }
        Py_DECREF(v);
    }
    Py_DECREF(seq);
    return out;
fail:
    Py_DECREF(seq);
    Py_DECREF(out);
    return NULL;
}

static PyObject *gil_unregister_foreign(PyObject *self, PyObject *unused) {
    int done = 0;
    lock_nogil();
    for (int i = 0; i < MAX_SLOTS; i++) {
        if (slots[i].state == SLOT_USED && slots[i].foreign) {
            retire(&slots[i]);
            done++;
        }
    }
    if (buf_len == 0) reclaim_locked();
    pthread_mutex_unlock(&lock);
    return PyLong_FromLong(done);
}

static PyObject *gil_unregister_thread(PyObject *self, PyObject *unused) {
    pid_t tid = (pid_t)syscall(SYS_gettid);
    int done = 0;
    my_slot = -1;
    lock_nogil();
    for (int i = 0; i < MAX_SLOTS; i++) {
        if (slots[i].state == SLOT_USED && slots[i].tid == tid) {
            retire(&slots[i]);
            done = 1;
        }
    }
    if (buf_len == 0) reclaim_locked(); /* no sample names it: free at once */
    pthread_mutex_unlock(&lock);
    return PyBool_FromLong(done);
}

static PyObject *gil_start(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"period_ns",          "max_samples",        "nice",        "quiet_period_ns",
                             "sustained_period_ns", "sustained_after_ns", "short_slice", NULL};
    long long period = DEFAULT_PERIOD_NS, max_samples = DEFAULT_MAX_SAMPLES, quiet = 0, sustained = 0, after = 0;
    int nice = -10, short_slice = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|LLiLLLp:start", kwlist, &period, &max_samples, &nice, &quiet, &sustained,
                                     &after, &short_slice))
        return NULL;
    if (quiet < 0 || quiet > 1000000000LL) {
        PyErr_SetString(PyExc_ValueError, "quiet_period_ns must be between 0 (off) and 1_000_000_000");
        return NULL;
    }
    if (sustained < 0 || sustained > 1000000000LL || after < 0) {
        PyErr_SetString(PyExc_ValueError, "sustained_period_ns must be between 0 (off) and 1_000_000_000, sustained_after_ns >= 0");
        return NULL;
    }
    if (check_available() < 0) return NULL;
    if (period < 10000 || period > 1000000000LL) {
        PyErr_SetString(PyExc_ValueError, "period_ns must be between 10_000 (100 kHz) and 1_000_000_000 (1 Hz)");
        return NULL;
    }
    if (max_samples < 1) {
        PyErr_SetString(PyExc_ValueError, "max_samples must be positive");
        return NULL;
    }
    lock_nogil();
    if (running != 0) { /* sampling already, or another thread's stop() is still joining */
        pthread_mutex_unlock(&lock);
        Py_RETURN_FALSE;
    }
    period_ns = period;
    quiet_ns = quiet;
    sustained_ns = sustained;
    sustained_after_ns = after;
    buf_max = (size_t)max_samples;
    sampler_nice = nice;
    sampler_slice_wanted = short_slice;
    sampler_nice_applied = 0;
    sampler_slice_applied = 0;
    prev_sample_t = 0;
    /* stats() counts one run: a profile's metadata said "sampler_cpu_ns" of every sampler run of the
     * process since it started (the tenth profile of a notebook, ten times its own). */
    n_samples = n_dropped = n_proc_reads = 0;
    __atomic_store_n(&n_missed, 0, __ATOMIC_RELAXED);
    sampler_cpu_ns_total = 0;
    for (int i = 0; i < MAX_SLOTS; i++) /* CPU advance counts from the first sample on */
        if (slots[i].state == SLOT_USED && !slots[i].dead) {
            if (clock_ns(slots[i].cpu_clock, &slots[i].last_cpu) != 0) slots[i].last_cpu = -1;
            slots[i].last_syscall = SYS_UNREAD;
        }
    stop_flag = 0;
    /* The sampler takes no signal: Python's handlers expect them on its own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&sampler_thread, NULL, sampler_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err == 0) {
        running = 1;
        /* Named here, before start() returns, not by the thread itself: on a busy machine it had not
         * yet run when the profile listed its threads, and went by "python" (a CI run of 3.13). */
        pthread_setname_np(sampler_thread, SAMPLER_THREAD_NAME);
        if (pthread_getcpuclockid(sampler_thread, &sampler_clock) != 0) sampler_clock = (clockid_t)-1;
    }
    pthread_mutex_unlock(&lock);
    if (err != 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_TRUE;
}

static PyObject *gil_stop(PyObject *self, PyObject *unused) {
    lock_nogil();
    if (running != 1) { /* nothing runs, or another thread's stop() joins it */
        pthread_mutex_unlock(&lock);
        Py_RETURN_FALSE;
    }
    running = 2;
    pthread_t joined = sampler_thread;
    __atomic_store_n(&stop_flag, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, (int *)&stop_flag, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, NULL, NULL, 0); /* see sleep_until */
    pthread_mutex_unlock(&lock);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(joined, NULL);
    Py_END_ALLOW_THREADS
    lock_nogil();
    running = 0;
    pthread_mutex_unlock(&lock);
    Py_RETURN_TRUE;
}

static PyObject *gil_running(PyObject *self, PyObject *unused) {
    lock_nogil();
    int r = running == 1;
    pthread_mutex_unlock(&lock);
    return PyBool_FromLong(r);
}

/* (slot, native_id, ident, registered, thread state address) for every slot that samples may name; Python objects are
 * built from a copy taken under the lock so the sampler never waits for an allocation. */
static PyObject *slot_list(slot_t *copy, int with_retired) {
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    for (int i = 0; i < MAX_SLOTS; i++) {
        slot_t *s = &copy[i];
        if (s->state == SLOT_FREE || (!with_retired && (s->state != SLOT_USED || s->dead))) continue;
        PyObject *item = with_retired ? Py_BuildValue("(iikOK)", i, (int)s->tid, s->ident, s->state == SLOT_USED && !s->dead ? Py_True : Py_False,
                                                      (unsigned long long)(uintptr_t)s->tstate)
                                      : Py_BuildValue("(iik)", i, (int)s->tid, s->ident);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
    }
    return out;
}

static PyObject *gil_thread_slots(PyObject *self, PyObject *unused) {
    slot_t copy[MAX_SLOTS];
    lock_nogil();
    memcpy(copy, slots, sizeof(copy));
    pthread_mutex_unlock(&lock);
    return slot_list(copy, 0);
}

static PyObject *gil_drain(PyObject *self, PyObject *unused) {
    slot_t copy[MAX_SLOTS];
    lock_nogil();
    record_t *taken = buf;
    size_t n = buf_len;
    buf = NULL;
    buf_len = buf_cap = 0;
    memcpy(copy, slots, sizeof(copy));
    for (int i = 0; i < MAX_SLOTS; i++) /* no sample left names a retired slot: it may be reused */
        if (slots[i].state == SLOT_RETIRED) memset(&slots[i], 0, sizeof(slot_t)), slots[i].syscall_fd = -1;
    pthread_mutex_unlock(&lock);
    PyObject *data = PyBytes_FromStringAndSize((const char *)taken, (Py_ssize_t)(n * sizeof(record_t)));
    free(taken);
    if (data == NULL) return NULL;
    PyObject *table = slot_list(copy, 1);
    if (table == NULL) {
        Py_DECREF(data);
        return NULL;
    }
    return Py_BuildValue("(NN)", data, table);
}

static PyObject *gil_stats(PyObject *self, PyObject *unused) {
    /* Copied under the lock, built after it: no Python allocation (and so no GC, no finalizer that
     * might call back in) while the sampler may be waiting for the lock. */
    lock_nogil();
    int64_t cpu = sampler_cpu_ns_total, live = 0;
    if (running == 1 && sampler_clock != (clockid_t)-1 && clock_ns(sampler_clock, &live) == 0) cpu += live;
    unsigned long long samples = n_samples, dropped = n_dropped, proc_reads = n_proc_reads;
    unsigned long long missed = __atomic_load_n(&n_missed, __ATOMIC_RELAXED);
    long long period = period_ns;
    int is_running = running == 1, nice = sampler_nice;
    int nice_applied = __atomic_load_n(&sampler_nice_applied, __ATOMIC_RELAXED);
    int slice_applied = __atomic_load_n(&sampler_slice_applied, __ATOMIC_RELAXED);
    Py_ssize_t buffered = (Py_ssize_t)buf_len;
    pthread_mutex_unlock(&lock);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:L,s:L,s:O,s:n,s:K,s:K,s:i,s:O,s:O}", "samples", samples, "dropped", dropped,
                         "missed", missed, "proc_reads", proc_reads, "sampler_cpu_ns", (long long)cpu, "period_ns", period,
                         "running", is_running ? Py_True : Py_False, "buffered", buffered, "gil_address",
                         (unsigned long long)(uintptr_t)gil_ptr, "gil_size", (unsigned long long)sizeof(*gil_ptr), "nice",
                         nice, "nice_applied", nice_applied ? Py_True : Py_False, "slice_applied",
                         slice_applied ? Py_True : Py_False);
}

static PyMethodDef gil_methods[] = {
    {"available", gil_available, METH_NOARGS, "available() -> bool: whether the GIL can be sampled here."},
    {"reason", gil_reason, METH_NOARGS, "reason() -> str: why not, or '' when available."},
    {"register_thread", (PyCFunction)(void (*)(void))gil_register_thread, METH_VARARGS | METH_KEYWORDS,
     "register_thread(foreign=False) -> int: sample the calling thread (idempotent); returns its slot (0..63). "
     "foreign=True: only until unregister_foreign() (a thread started during a profile)."},
    {"register_others", gil_register_others, METH_O,
     "register_others([(ident, native_id), ...]) -> [slot]: sample these other threads too (those with a Python "
     "thread state here), until unregister_foreign()."},
    {"unregister_foreign", gil_unregister_foreign, METH_NOARGS,
     "unregister_foreign() -> int: stop sampling the threads register_others() added; their slots are reused after the next drain()."},
    {"unregister_thread", gil_unregister_thread, METH_NOARGS,
     "unregister_thread() -> bool: stop sampling the calling thread; its slot is reused after the next drain()."},
    {"start", (PyCFunction)(void (*)(void))gil_start, METH_VARARGS | METH_KEYWORDS,
     "start(period_ns=200000, max_samples=1048576, nice=-10, quiet_period_ns=0, sustained_period_ns=0, sustained_after_ns=0, "
     "short_slice=True) -> bool: start the sampler thread "
     "(False if it runs already); it asks for `nice` (0: leave it) and runs at the default weight when refused; "
     "while nothing contends it samples every quiet_period_ns instead (0: never), and every sustained_period_ns "
     "once threads have contended for sustained_after_ns without a break (0: never); short_slice asks the "
     "scheduler for a 0.1 ms time slice (stats()['slice_applied'] says whether it kept it)."},
    {"stop", gil_stop, METH_NOARGS, "stop() -> bool: stop and join the sampler thread (False if none ran)."},
    {"running", gil_running, METH_NOARGS, "running() -> bool"},
    {"drain", gil_drain, METH_NOARGS,
     "drain() -> (bytes, [(slot, native_id, ident, registered)]): the samples taken since the last drain "
     "(RECORD_SIZE-byte records, see opprof.engine.gil) and every slot they may name."},
    {"thread_slots", gil_thread_slots, METH_NOARGS, "thread_slots() -> [(slot, native_id, ident)] of the registered threads."},
    {"stats", gil_stats, METH_NOARGS,
     "stats() -> dict: of the last (or running) sampler run: samples, dropped (buffer full), missed (ticks skipped when late), "
     "proc_reads, sampler_cpu_ns, ..."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef gil_module = {
    PyModuleDef_HEAD_INIT, .m_name = "_gil",
    .m_doc = "Samples which registered thread holds the GIL and which wait for it, from a thread that never takes it.",
    .m_size = -1, .m_methods = gil_methods};

static void find_gil(void) {
    if (access("/proc/self/task", R_OK) != 0) {
        snprintf(unavailable_reason, sizeof(unavailable_reason), "/proc/self/task is not readable");
        return;
    }
    gil_ptr = opprof_main_gil();
    if (gil_ptr == NULL) snprintf(unavailable_reason, sizeof(unavailable_reason), "the interpreter has no GIL struct");
}

PyMODINIT_FUNC PyInit__gil(void) {
    static int once = 0;
    PyObject *m = PyModule_Create(&gil_module);
    if (m == NULL) return NULL;
    if (!once) {
        once = 1;
        for (int i = 0; i < MAX_SLOTS; i++) slots[i].syscall_fd = -1;
        find_gil();
        pthread_atfork(NULL, NULL, after_fork_child);
    }
    if (PyModule_AddIntConstant(m, "RECORD_SIZE", (long)sizeof(record_t)) < 0 ||
        PyModule_AddIntConstant(m, "MAX_THREADS", MAX_SLOTS) < 0 ||
        PyModule_AddIntConstant(m, "DEFAULT_PERIOD_NS", (long)DEFAULT_PERIOD_NS) < 0 ||
        PyModule_AddStringConstant(m, "SAMPLER_THREAD_NAME", SAMPLER_THREAD_NAME) < 0 ||
        PyModule_AddObject(m, "_set_parked", PyCapsule_New((void *)set_parked, "opprof.engine._gil._set_parked", NULL)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

#endif
