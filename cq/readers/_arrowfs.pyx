# distutils: language = c++
"""Ranged reads of a ``pyarrow.fs`` filesystem's objects by their listed size: one request each.

``pyarrow.fs.FileSystem.open_input_file`` takes a path, and Arrow's S3 file then asks the server for
the object's size (a HEAD request) before the first read: every ranged read cost two requests, the
HEAD and the GET. The store's listing (the read's cut) holds every object's size already, and Arrow's
C++ ``FileSystem::OpenInputFile`` takes a ``FileInfo`` carrying it; pyarrow's declarations leave that
overload out, so this module declares it and reads through it: the GET alone
(docs/object-storage.md#requests). Its twin, ``_arrowfs_py``, opens by path (HEAD and GET).

The module is built against the pyarrow found at build time (setup.py) and refuses to load under
another version (``ImportError``: the twin is used, :mod:`rmqfilter_engine`), since the layout of
pyarrow's ``FileSystem`` object and Arrow's C++ ABI are those of the version it was built with.
"""
from cython.operator cimport dereference as deref
from libc.stdint cimport int64_t, uint8_t
from libcpp.memory cimport shared_ptr
from pyarrow._fs cimport FileSystem
from pyarrow.includes.common cimport CResult
from pyarrow.includes.libarrow cimport CRandomAccessFile
from pyarrow.includes.libarrow_fs cimport CFileInfo, CFileType_File
from pyarrow.lib cimport check_status

import pyarrow

cdef extern from *:
    # the pyarrow version setup.py built this module against (a define of its own)
    const char* RMQFILTER_PYARROW_VERSION

cdef extern from "arrow/filesystem/filesystem.h" nogil:
    # the overload of OpenInputFile pyarrow does not declare: the FileInfo gives the size, so no HEAD
    cdef cppclass _SizedOpen "arrow::fs::FileSystem":
        CResult[shared_ptr[CRandomAccessFile]] OpenInputFile(const CFileInfo& info)

#: The pyarrow version this module was built against.
BUILT_WITH = RMQFILTER_PYARROW_VERSION.decode()
if pyarrow.__version__ != BUILT_WITH:
    raise ImportError(f"cq.readers._arrowfs was built against pyarrow {BUILT_WITH}, "
                      f"this process has {pyarrow.__version__}")

#: Requests a :func:`read_range_into` makes (an S3 server's count): the GET.
REQUESTS_PER_READ = 1


def read_range_into(FileSystem filesystem, str path, int64_t size, int64_t start, uint8_t[::1] out) -> int:
    """Read bytes ``[start, start + len(out))`` of the object at ``path`` of ``filesystem`` (its listed
    size ``size``) into ``out``, without the GIL; the number of bytes read, fewer than ``len(out)`` only
    where the object ends first. A failed request raises pyarrow's ``OSError``."""
    cdef CFileInfo info
    cdef CResult[shared_ptr[CRandomAccessFile]] opened
    cdef CResult[int64_t] read
    cdef shared_ptr[CRandomAccessFile] f
    cdef _SizedOpen* fs = <_SizedOpen*> filesystem.fs
    cdef int64_t want = out.shape[0], got = 0, n
    cdef uint8_t* data
    if want == 0:
        return 0
    data = &out[0]
    info.set_path(path.encode())
    info.set_type(CFileType_File)
    info.set_size(size)
    with nogil:
        # check_status takes the GIL only to raise (pyarrow's OSError for a failed request)
        opened = fs.OpenInputFile(info)
        check_status(opened.status())
        f = deref(opened)
        while got < want:  # a read may return less than asked: go on to the end
            read = f.get().ReadAt(start + got, want - got, data + got)
            check_status(read.status())
            n = deref(read)
            if n <= 0:
                break
            got += n
    return got
