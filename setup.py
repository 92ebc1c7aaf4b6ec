"""The one thing pyproject.toml cannot say: the optional C extension (metadata stays in [project]).

opprof.engine._gil samples who holds the GIL (opprof/engine/_gil.c); opprof.engine._handoff is the
engine's work queue, waited on in C so each hand-off's wake and GIL wait are timed
(opprof/engine/_handoff.c); opprof.profiler._spanlog is the recorder's hot path for plain ops
(opprof/profiler/_spanlog.c), and opprof.profiler._memlog memory recording's (opprof/profiler/_memlog.c), and opprof.profiler._npmem
counts the NumPy data a custom op's Python allocates (opprof/profiler/_npmem.c).
All are optional: without a C compiler or the Python headers the build skips them and opprof runs
on its pure-Python path (opprof/engine/gil.py and handoff.py say what is then missing).

data_files installs the Jupyter server config that enables opprof's server extension (it serves
BokehJS to notebook pages: opprof/jupyter/server.py) as <prefix>/etc/jupyter/jupyter_server_config.d/opprof.json.
"""

from setuptools import Extension, setup
from setuptools.dist import Distribution


class _Distribution(Distribution):
    """An editable install (`pip install -e .`, what `make` does) skips data_files without this:
    setuptools' editable_wheel installs the "data" category only if the distribution has a
    ``has_data`` method, and distutils names it ``has_data_files``."""

    def has_data(self) -> bool:
        return self.has_data_files()


setup(
    distclass=_Distribution,
    ext_modules=[
        Extension(
            "opprof.engine._gil",
            ["opprof/engine/_gil.c"],
            depends=["opprof/_monotonic.h", "opprof/_gilstruct.h"],
            optional=True,  # no compiler, no headers, not Linux: opprof installs without it
            extra_compile_args=["-O2", "-std=gnu11"],
        ),
        Extension(
            "opprof.profiler._spanlog",
            ["opprof/profiler/_spanlog.c"],
            depends=["opprof/_monotonic.h", "opprof/_frames.h", "opprof/_int64.h", "opprof/profiler/_spares.h"],
            optional=True,
            extra_compile_args=["-O2", "-std=gnu11"],
        ),
        Extension(
            "opprof.profiler._memlog",
            ["opprof/profiler/_memlog.c"],
            depends=["opprof/_monotonic.h", "opprof/_frames.h", "opprof/_int64.h", "opprof/profiler/_npmem_hooks.h", "opprof/profiler/_ptrtable.h"],
            optional=True,
            extra_compile_args=["-O2", "-std=gnu11"],
        ),
        Extension(
            "opprof.profiler._npmem",
            ["opprof/profiler/_npmem.c"],
            depends=["opprof/profiler/_npmem_hooks.h", "opprof/profiler/_ptrtable.h", "opprof/profiler/_spares.h"],
            optional=True,  # also needs NumPy >= 1.22 at run time, not its headers at build time
            extra_compile_args=["-O2", "-std=gnu11"],
        ),
        Extension(
            "opprof.engine._handoff",
            ["opprof/engine/_handoff.c"],
            depends=["opprof/_monotonic.h", "opprof/_gilstruct.h"],
            optional=True,
            extra_compile_args=["-O2", "-std=gnu11"],
        ),
    ],
    data_files=[("etc/jupyter/jupyter_server_config.d", ["jupyter-config/jupyter_server_config.d/opprof.json"])],
)
