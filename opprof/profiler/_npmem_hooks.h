/* What opprof/profiler/_npmem.c tells opprof/profiler/_memlog.c, through its ``_hooks`` capsule: the
 * hooks its NumPy data-memory handlers call on each block they free or move, and the capsules of the
 * handlers (an array whose ``mem_handler`` is one of them had its data allocated there). One
 * definition for both modules; the version changes with the struct. */
#ifndef OPPROF_NPMEM_HOOKS_H
#define OPPROF_NPMEM_HOOKS_H

#include <Python.h>

#define NPMEM_HOOKS_VERSION 2
#define NPMEM_HOOKS_CAPSULE "opprof.profiler._npmem._hooks"

typedef void (*npmem_free_hook_t)(void *ptr);
typedef void (*npmem_move_hook_t)(void *old, void *new_ptr);

typedef struct {
    int version;                     /* NPMEM_HOOKS_VERSION */
    npmem_free_hook_t *free_hook;    /* set by the watcher, called under the GIL */
    npmem_move_hook_t *move_hook;
    PyObject **capsule;              /* the counting handler's (custom ops' Pythons) */
    PyObject **watch_capsule;        /* the watching handler's (the recording thread) */
} npmem_hooks_t;

#endif
