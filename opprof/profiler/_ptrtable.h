/* Open-addressing tables keyed by a pointer, shared by _npmem.c (each block's size while a custom
 * op's Python is measured) and _memlog.c (the storages a recording watches): one hash, one probe and
 * one deletion for both. An entry is any struct whose first field is its ``uintptr_t`` key (0: an
 * empty slot); the table has a power-of-two number of slots (``mask`` = slots - 1) and is never
 * full (both keep it at most 3/4 full); probing is linear. The functions take the entry size so one
 * body serves both entry types; inlined with a constant size, the copies are plain moves. */
#ifndef OPPROF_PTRTABLE_H
#define OPPROF_PTRTABLE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A pointer's home slot: its low bits are alignment, so mix first (Fibonacci hashing). */
static inline size_t opprof_ptr_home(uintptr_t key, size_t mask) {
    key ^= key >> 17;
    key *= (uintptr_t)0x9E3779B97F4A7C15ull;
    return (size_t)(key >> 16) & mask;
}

static inline uintptr_t opprof_ptr_key(const void *entries, size_t size, size_t i) {
    uintptr_t key;
    memcpy(&key, (const char *)entries + i * size, sizeof(key));
    return key;
}

/* The slot holding ``key``, else the empty slot where it would go. */
static inline size_t opprof_ptr_probe(const void *entries, size_t size, size_t mask, uintptr_t key) {
    size_t i = opprof_ptr_home(key, mask);
    for (uintptr_t k; (k = opprof_ptr_key(entries, size, i)) != 0 && k != key;) i = (i + 1) & mask;
    return i;
}

/* Empty slot ``i`` by backward shift: each later entry of its run that may live in the hole (its home
 * is not cyclically in (hole, j]) moves into it, so every run stays findable without tombstones. */
static inline void opprof_ptr_delete(void *entries, size_t size, size_t mask, size_t i) {
    char *e = entries;
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & mask;
        uintptr_t k = opprof_ptr_key(e, size, j);
        if (k == 0) break;
        size_t home = opprof_ptr_home(k, mask);
        int stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!stays) {
            memcpy(e + hole * size, e + j * size, size);
            hole = j;
        }
    }
    memset(e + hole * size, 0, sizeof(uintptr_t));
}

#endif
