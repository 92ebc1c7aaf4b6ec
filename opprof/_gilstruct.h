/* The main interpreter's GIL struct, read (never written) by opprof's C parts: opprof.engine._gil
 * samples its holder and `locked` flag, opprof.engine._handoff polls `locked` to take the GIL only
 * once its holder has let it go. Where it lives differs per version, so every module that includes
 * this is built per Python version:
 *   3.10, 3.11  _PyRuntime.ceval.gil           (struct _gil_runtime_state)
 *   3.12, 3.13  interp->ceval.gil              (a pointer, per interpreter; the main one's is used)
 * The includer defines Py_BUILD_CORE_MODULE before Python.h (the internal headers refuse otherwise). */
#ifndef OPPROF_GILSTRUCT_H
#define OPPROF_GILSTRUCT_H

#include <Python.h>
#if PY_VERSION_HEX >= 0x030C0000
#include "internal/pycore_interp.h" /* PyInterpreterState.ceval.gil */
#else
#include "internal/pycore_runtime.h" /* _PyRuntime.ceval.gil */
#endif

/* The GIL struct of the main interpreter, or NULL; call with the GIL held (at module init). */
static inline struct _gil_runtime_state *opprof_main_gil(void) {
#if PY_VERSION_HEX >= 0x030C0000
    PyInterpreterState *interp = PyInterpreterState_Main();
    return interp != NULL ? interp->ceval.gil : NULL;
#else
    return &_PyRuntime.ceval.gil;
#endif
}

/* Whether the GIL is held now (1), as any thread may read it without taking it. */
static inline int opprof_gil_locked(const struct _gil_runtime_state *gil) {
    return __atomic_load_n((const int *)&gil->locked, __ATOMIC_ACQUIRE) == 1;
}

#endif
