/* The clock opprof's compiled parts stamp with: CLOCK_MONOTONIC in ns, which is what Python's
 * time.perf_counter_ns reads on Linux. A recording mixes stamps from Python and from C (the GIL
 * sampler's samples, the hand-offs' wake times, the recorder's spans), so all of them read this
 * one definition: opprof/engine/_gil.c, opprof/engine/_handoff.c, opprof/profiler/_spanlog.c. */
#ifndef OPPROF_MONOTONIC_H
#define OPPROF_MONOTONIC_H

#include <stdint.h>
#include <time.h>

static inline int64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#endif
