"""Build the Cython engines of rmqfilter.

Every ``_*.pyx`` file in the four packages is one extension module. Compiler
directives are set here, once, for all of them (see STYLE: not per function).

Developer switch: ``RMQFILTER_BUILD=bloom,cq`` builds only those packages'
extensions (handy while another package's engine is being edited).
"""
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


def extensions():
    only = {p for p in os.environ.get("RMQFILTER_BUILD", "").split(",") if p}
    exts = []
    for package in PACKAGES:
        if only and package not in only:
            continue
        for pyx in sorted(glob(os.path.join(package, "_*.pyx"))):
            name = pyx[:-4].replace(os.sep, ".")
            exts.append(
                Extension(
                    name,
                    [pyx],
                    include_dirs=[numpy.get_include()],
                    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                    extra_compile_args=["-O3"],
                    # the CommitLog decoder checks body CRCs with zlib's crc32
                    libraries=["z"] if name == "cq._scan" else [],
                )
            )
    return exts


setup(ext_modules=cythonize(extensions(), compiler_directives=DIRECTIVES, quiet=True))
