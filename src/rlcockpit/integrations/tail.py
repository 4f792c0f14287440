"""Reading files while another process appends to them (follow mode, docs/integrations.md).

Both readers keep a byte offset of what they consumed, so a follower can stop and later continue
exactly where it was (the offset is saved in the follow state), and both leave a record that is
still being written for the next read:

- :class:`LineTail`: JSON Lines and console logs. A line is consumed when its newline is there,
  or — the last line of a writer that does not end its file with a newline — when it already
  parses as one complete JSON value (a truncated JSON object never does; not for console logs).
- :class:`RecordTail`: TFRecord framing of TensorBoard event files (``uint64 length``,
  ``uint32 crc``, ``data``, ``uint32 crc``): a record is consumed once all its bytes are there.

What real trainers do to the files they write, and what the readers do about it:

- **truncated and rewritten** (verl's file logger opens its JSONL with ``"wb"``, so a resumed
  run starts the file again): the file is shorter than the offset, or its first bytes are no
  longer those read before (the head fingerprint) → read again from the start. Re-reading is
  idempotent: the store keys a metric by (run, step, name) and a sample by (run, step, id).
- **rotated or replaced** (a new file under the same name: another inode): the rest of the old
  file is read through the handle still open on it (kept while the file is active, closed after
  ``IDLE_CLOSE_S`` without growth), then the new file from its start. A file replaced while no
  handle was open (the follower was stopped) is read from the start.
"""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path
from typing import Any

CHUNK = 1 << 20
HEADER = 12  # uint64 length + uint32 masked crc of the length
FOOTER = 4  # uint32 masked crc of the data
MAX_RECORD = 1 << 30  # a length beyond this is not a record being written but a corrupt file
HEAD = 64  # bytes of the file's start kept as its fingerprint
IDLE_CLOSE_S = 30.0  # a file that did not grow for this long is not kept open


class _Tracked:
    """The identity of the file a tail reads: an open handle while it is active, its inode and the
    fingerprint of its first bytes (saved with the offset)."""

    def __init__(self, path: Path, offset: int, inode: int | None, head: str) -> None:
        self.path, self.offset = path, int(offset)
        self.inode, self.head = inode, head
        self.rewrites = 0  # times the file was found truncated, rewritten or replaced
        self._handle: Any = None
        self._grew_at = time.monotonic()

    def identity(self) -> dict[str, Any]:
        return {"offset": self.offset, "inode": self.inode, "head": self.head}

    def _stat(self) -> os.stat_result | None:
        try:
            return self.path.stat()
        except FileNotFoundError:
            return None

    def _open(self, st: os.stat_result) -> None:
        if self.inode is not None and st.st_ino != self.inode and self.offset:
            self._restart()  # replaced while nothing was open on it: the new file from its start
        self._handle = self.path.open("rb")
        self.inode = os.fstat(self._handle.fileno()).st_ino

    def _restart(self) -> None:
        self.offset, self.head = 0, ""
        self.rewrites += 1
        self.restarted()

    def restarted(self) -> None:
        """Subclasses reset what depends on the position (line numbers)."""

    def _head_changed(self) -> bool:
        if not self.head or not self.offset:
            return False
        n = len(self.head) // 2
        return os.pread(self._handle.fileno(), n, 0).hex() != self.head

    def _update_head(self) -> None:
        if len(self.head) // 2 < min(self.offset, HEAD):
            self.head = os.pread(self._handle.fileno(), min(self.offset, HEAD), 0).hex()

    def chunks(self) -> tuple[bytes, bytes]:
        """(the rest of a file that was replaced since the last read, this file's new bytes)."""
        st = self._stat()
        if st is None:
            return b"", b""
        old = b""
        if self._handle is not None and os.fstat(self._handle.fileno()).st_ino != st.st_ino:
            old = self._rest_of_old()  # rotated: what the old file got after the last read
            self._close()
            self._restart()
        if self._handle is None:
            self._open(st)
        size = os.fstat(self._handle.fileno()).st_size
        if size < self.offset or self._head_changed():  # truncated, or rewritten from the start
            self._restart()
        new = b""
        if size > self.offset:
            self._handle.seek(self.offset)
            new = self._handle.read(size - self.offset)
            self._grew_at = time.monotonic()
        elif time.monotonic() - self._grew_at > IDLE_CLOSE_S:
            self._close()
        return old, new

    def _rest_of_old(self) -> bytes:
        self._handle.seek(self.offset)
        return self._handle.read()

    def consumed(self, n: int) -> None:
        self.offset += n
        if self._handle is not None:
            self._update_head()

    def _close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class LineTail(_Tracked):
    def __init__(self, path: Path, offset: int = 0, lines: int = 0, *, inode: int | None = None,
                 head: str = "", json_tail: bool = True) -> None:
        super().__init__(path, offset, inode, head)
        self.lines = int(lines)
        self.lines_before_restart = 0
        self.json_tail = json_tail  # a last line without its newline counts when it is whole JSON

    def restarted(self) -> None:
        self.lines_before_restart, self.lines = self.lines, 0

    def read(self) -> list[tuple[int, str]]:
        """(line number, text) of the complete lines appended since the last read (a rotated
        file's last lines first, numbered after the lines read of it)."""
        old, new = self.chunks()
        out = []
        if old:
            lines = old.split(b"\n")
            first = self.lines_before_restart
            out += [(first + i, raw.decode("utf-8", errors="replace")) for i, raw in enumerate(lines, start=1)]
        out += self._lines(new)
        return [(n, text) for n, text in out if text.strip()]

    def _lines(self, data: bytes) -> list[tuple[int, str]]:
        if not data:
            return []
        end = data.rfind(b"\n") + 1
        complete, rest = data[:end], data[end:]
        out = []
        for raw in complete.split(b"\n")[:-1]:
            self.lines += 1
            out.append((self.lines, raw.decode("utf-8", errors="replace")))
        consumed = len(complete)
        if self.json_tail and rest.strip() and _whole_json(rest):  # counted as a line when its newline comes
            out.append((self.lines + 1, rest.decode("utf-8", errors="replace")))
            consumed += len(rest)
        self.consumed(consumed)
        return out


def _whole_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return False
    return True


class RecordTail(_Tracked):
    def __init__(self, path: Path, offset: int = 0, *, inode: int | None = None, head: str = "") -> None:
        super().__init__(path, offset, inode, head)

    def read(self) -> list[bytes]:
        """The records whose bytes are all there, appended since the last read (a rotated file's
        last records first)."""
        old, new = self.chunks()
        return self._records(old, rest_of_old=True) + self._records(new, rest_of_old=False)

    def _records(self, data: bytes, rest_of_old: bool) -> list[bytes]:
        out, pos = [], 0
        while len(data) - pos >= HEADER:
            (length,) = struct.unpack_from("<Q", data, pos)
            if length > MAX_RECORD:
                raise ValueError(f"{self.path}: record at byte {self.offset + pos} claims {length} bytes; "
                                 "not a TensorBoard event file, or a corrupt one")
            end = pos + HEADER + length + FOOTER
            if end > len(data):
                break  # still being written
            out.append(data[pos + HEADER:pos + HEADER + length])
            pos = end
        if not rest_of_old:
            self.consumed(pos)
        return out
