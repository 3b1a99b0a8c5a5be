"""The IndexFile writer (cq.writer.index): it rebuilds, byte for byte, the IndexFiles RocketMQ's own IndexService
wrote for the golden store, from that store's CommitLog."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import DATA

from cq.readers.indexfile import IndexFiles
from cq.writer.index import write_index_files

GOLDEN = DATA / "golden_store"


def test_the_golden_stores_index_rebuilt_byte_for_byte(tmp_path):
    root = tmp_path / "golden"
    shutil.copytree(GOLDEN, root)
    written = write_index_files(root, hash_slot_num=64, index_num=512)  # the golden broker's settings
    originals = sorted((GOLDEN / "index").iterdir())
    assert len(written) == len(originals) == 2
    for path, original in zip(written, originals):
        assert Path(path).read_bytes() == original.read_bytes(), original.name
    index = IndexFiles(root)
    assert [f.header.index_count for f in index.files] == [512, 72]
    index.close()


def test_up_to_leaves_the_tail_unindexed_and_bad_geometry_is_refused(tmp_path):
    root = tmp_path / "golden"
    shutil.copytree(GOLDEN, root)
    write_index_files(root, hash_slot_num=64, index_num=512, up_to=70020)
    index = IndexFiles(root)
    assert max(f.header.end_phy_offset for f in index.files) < 70020
    index.close()
    with pytest.raises(ValueError, match="index_num >= 2"):
        write_index_files(root, index_num=1)
