"""Build the Cython engines of rmqfilter.

Every ``_*.pyx`` file in the four packages and their sub-packages (``cq/kernels``) is
one extension module. Compiler directives are set here, once, for all of them (see
STYLE: not per function).

Before the store kernels compile, ``cq/kernels/_layout.h`` is written from
``cq/format.py`` (through ``cq/kernels/layout.py``, loaded by path: the package is not
built yet): the kernels' byte offsets have one home, the format module.

Developer switch: ``RMQFILTER_BUILD=bloom,cq`` builds only those packages'
extensions (handy while another package's engine is being edited); ``RMQFILTER_BUILD=none``
builds none. ``make setup`` installs the package editable with ``none`` and then builds every
extension once with ``build_ext --inplace``: pip's editable build compiles into a temporary
directory that ``build_ext`` cannot reuse, so letting pip build them would compile every module
twice on a fresh clone.

``cq/readers/_arrowfs.pyx`` (``ARROW_MODULES``) is C++ against pyarrow's headers and libraries: it is
built where pyarrow is installed when this runs (``make setup`` installs it first) and skipped
elsewhere, its pure-Python twin serving instead (docs/contributing.md#engines).

Both steps use every core: Cython translates the modules in parallel (``nthreads``) and
``build_ext`` compiles them in parallel (its ``parallel`` option, set here as the default).
"""
import importlib.util
import os
from glob import glob

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

PACKAGES = ("bloom", "selector", "cq", "pyspark_udfs")
DIRECTIVES = {
    "language_level": "3",
    "boundscheck": False,
    "wraparound": False,
    "cdivision": True,
    "initializedcheck": False,
    "nonecheck": False,
    "embedsignature": True,
}
#: Extension modules that link zlib: the record walk's body CRCs, the inflater's bodies.
ZLIB_MODULES = {"cq.kernels._record", "cq.kernels._inflate"}
#: Extension modules in C++ against the pyarrow found at build time (its headers and libraries); built
#: only where pyarrow is installed, else their twins are used (``cq/readers/_arrowfs.pyx``).
ARROW_MODULES = {"cq.readers._arrowfs"}
HERE = os.path.dirname(os.path.abspath(__file__))


def write_layout_header():
    """Write ``cq/kernels/_layout.h`` from ``cq/format.py`` (only when its text changes: no needless rebuild)."""
    kernels = os.path.join(HERE, "cq", "kernels")
    spec = importlib.util.spec_from_file_location("_rmqfilter_layout", os.path.join(kernels, "layout.py"))
    layout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layout)
    text = layout.header(layout.layout(layout.load_format(os.path.join(HERE, "cq"))))
    path = os.path.join(kernels, "_layout.h")
    old = None
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
    if old != text:
        with open(path, "w") as f:
            f.write(text)


def arrow_build_args():
    """The compile and link arguments of an :data:`ARROW_MODULES` module, or None without pyarrow.

    pyarrow's wheels ship ``libarrow.so.<major>`` without the unversioned name a ``-larrow`` looks for,
    so the library is named by its file; the rpath finds it where the module is loaded before pyarrow.
    """
    try:
        import pyarrow
    except ImportError:
        return None
    libdir = pyarrow.get_library_dirs()[0]
    arrow = sorted(glob(os.path.join(libdir, "libarrow.so.*")), key=len)
    if not arrow:
        return None
    return {
        "language": "c++",
        "include_dirs": [pyarrow.get_include()],
        "library_dirs": [libdir],
        "libraries": ["arrow_python"],
        "extra_link_args": [f"-l:{os.path.basename(arrow[0])}", f"-Wl,-rpath,{libdir}"],
        "define_macros": [("RMQFILTER_PYARROW_VERSION", f'"{pyarrow.__version__}"')],
        "extra_compile_args": ["-std=c++20"],
    }


def extensions():
    only = {p for p in os.environ.get("RMQFILTER_BUILD", "").split(",") if p}
    exts = []
    for package in PACKAGES:
        if only and package not in only:
            continue
        for pyx in sorted(glob(os.path.join(package, "_*.pyx")) + glob(os.path.join(package, "*", "_*.pyx"))):
            name = pyx[:-4].replace(os.sep, ".")
            extra = {}
            if name in ARROW_MODULES:
                extra = arrow_build_args()
                if extra is None:  # no pyarrow here: the twin serves
                    continue
            exts.append(
                Extension(
                    name,
                    [pyx],
                    # the module's own folder: its .h files (cq/kernels/_bytes.h, _layout.h, ...)
                    include_dirs=[numpy.get_include(), os.path.dirname(pyx), *extra.pop("include_dirs", [])],
                    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"), *extra.pop("define_macros", [])],
                    extra_compile_args=["-O3", *extra.pop("extra_compile_args", [])],
                    libraries=(["z"] if name in ZLIB_MODULES else []) + extra.pop("libraries", []),
                    **extra,
                )
            )
    return exts


CORES = os.cpu_count() or 1
write_layout_header()
setup(
    ext_modules=cythonize(extensions(), compiler_directives=DIRECTIVES, quiet=True, nthreads=CORES),
    options={"build_ext": {"parallel": CORES}},
)
