"""Reading files while another process appends to them (follow mode, docs/integrations.md).

Both readers keep a byte offset of what they consumed, so a follower can stop and later continue
exactly where it was (the offset is saved in the follow state), and both leave a record that is
still being written for the next read:

- :class:`LineTail`: JSON Lines. A line is consumed when its newline is there, or — the last line
  of a writer that does not end its file with a newline — when it already parses as one complete
  JSON value (a truncated JSON object never does).
- :class:`RecordTail`: TFRecord framing of TensorBoard event files (``uint64 length``,
  ``uint32 crc``, ``data``, ``uint32 crc``): a record is consumed once all its bytes are there.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

CHUNK = 1 << 20
HEADER = 12  # uint64 length + uint32 masked crc of the length
FOOTER = 4  # uint32 masked crc of the data
MAX_RECORD = 1 << 30  # a length beyond this is not a record being written but a corrupt file


class LineTail:
    def __init__(self, path: Path, offset: int = 0, lines: int = 0) -> None:
        self.path, self.offset, self.lines = path, int(offset), int(lines)

    def read(self) -> list[tuple[int, str]]:
        """(line number, text) of the complete lines appended since the last read."""
        data = self._new_bytes()
        if not data:
            return []
        end = data.rfind(b"\n") + 1
        complete, rest = data[:end], data[end:]
        out = []
        for raw in complete.split(b"\n")[:-1]:
            self.lines += 1
            out.append((self.lines, raw.decode("utf-8", errors="replace")))
        consumed = len(complete)
        if rest.strip() and _whole_json(rest):  # counted as a line when its newline comes
            out.append((self.lines + 1, rest.decode("utf-8", errors="replace")))
            consumed += len(rest)
        self.offset += consumed
        return [(n, text) for n, text in out if text.strip()]

    def _new_bytes(self) -> bytes:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return b""
        if size < self.offset:  # rewritten from the start: read it again (writes are idempotent)
            self.offset = self.lines = 0
        if size == self.offset:
            return b""
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            return handle.read(size - self.offset)


def _whole_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return False
    return True


class RecordTail:
    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path, self.offset = path, int(offset)

    def read(self) -> list[bytes]:
        """The records whose bytes are all there, appended since the last read."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size <= self.offset:
            return []
        out = []
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            data = handle.read(size - self.offset)
        pos = 0
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
        self.offset += pos
        return out
