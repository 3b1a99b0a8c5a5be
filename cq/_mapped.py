"""What CommitLog, ConsumeQueue and ConsumeQueueExt share: a read-only mapped-file queue (spec §1)."""
from __future__ import annotations

from . import format as fmt


class MappedFileQueue:
    """Files of one queue, mapped read-only on first use and released by :meth:`close`.

    Subclasses set ``_files`` (``(start_offset, path)``, ascending) and ``_maps = {}``.
    """

    _files: list[tuple[int, str]]
    _maps: dict[int, memoryview]

    @property
    def files(self) -> list[tuple[int, str]]:
        """``(start_offset, path)`` of each file, ascending."""
        return list(self._files)

    def _map(self, index: int) -> memoryview:
        m = self._maps.get(index)
        if m is None:
            m = fmt.map_file(self._files[index][1])
            self._maps[index] = m
        return m

    def close(self) -> None:
        """Release the mapped files."""
        fmt.release_maps(self._maps)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
