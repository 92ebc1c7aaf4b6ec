/* Freed memory blocks kept for reuse, shared by _spanlog.c (a stopped recording's log chunks) and
 * _npmem.c (the trace build's NumPy blocks): a fresh block's pages each cost their first write a
 * page fault (~1.8 us here, memory-cgroup charge and zeroing), where a kept one is written already.
 * A list of (block, bytes), bounded in entries and in bytes; a request takes a kept block of exactly
 * its size (the callers' sizes come in few classes). No locking: each caller holds its own (the GIL,
 * or a mutex). */
#ifndef OPPROF_SPARES_H
#define OPPROF_SPARES_H

#include <stddef.h>

typedef struct {
    void *block;
    size_t bytes;
} opprof_spare_t;

typedef struct {
    opprof_spare_t *slots;
    int n, cap;
    size_t bytes, max_bytes;
} opprof_spares_t;

/* A list of at most `cap` blocks and `max_bytes` bytes, named `name`, at file scope. */
#define OPPROF_SPARES(name, cap, max_bytes)                  \
    static opprof_spare_t name##_slots[cap];                 \
    static opprof_spares_t name = {name##_slots, 0, (cap), 0, (max_bytes)}

/* A kept block of exactly `bytes`, taken off the list; NULL if none. */
static inline void *opprof_spares_take(opprof_spares_t *s, size_t bytes) {
    for (int i = s->n - 1; i >= 0; i--) {
        if (s->slots[i].bytes == bytes) {
            void *block = s->slots[i].block;
            s->slots[i] = s->slots[--s->n];
            s->bytes -= bytes;
            return block;
        }
    }
    return NULL;
}

/* Keep `block` (of `bytes`) if the list has room: 1, else 0 (the caller frees it). */
static inline int opprof_spares_give(opprof_spares_t *s, void *block, size_t bytes) {
    if (s->n >= s->cap || s->bytes + bytes > s->max_bytes) return 0;
    s->slots[s->n].block = block;
    s->slots[s->n++].bytes = bytes;
    s->bytes += bytes;
    return 1;
}

#endif
