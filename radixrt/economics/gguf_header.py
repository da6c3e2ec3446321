"""The metadata and tensor shapes at the head of a .gguf file, read without loading the weights.

Pure Python (no numpy, no `gguf` package): it reads the key/value section and the tensor
infos, then stops, so it takes a fraction of a second where `gguf.GGUFReader` parses every
tokenizer array into numpy first (3.7 s on the default SmolLM2 file). GGUF versions 2 and 3.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
# GGUF value type -> struct format of one scalar (little-endian).
_SCALARS = {
    0: "<B",  # uint8
    1: "<b",  # int8
    2: "<H",  # uint16
    3: "<h",  # int16
    4: "<I",  # uint32
    5: "<i",  # int32
    6: "<f",  # float32
    7: "<?",  # bool
    10: "<Q",  # uint64
    11: "<q",  # int64
    12: "<d",  # float64
}
_STRING = 8
_ARRAY = 9


@dataclass(frozen=True, slots=True)
class GGUFHeader:
    """What a .gguf file says about itself before its tensor data."""

    version: int
    metadata: dict[str, Any]  # key -> int | float | bool | str | list of those
    tensor_shapes: dict[str, tuple[int, ...]]  # tensor name -> its dims as GGUF lists them

    @property
    def num_params(self) -> int:
        """Elements over all tensors (quantized ones counted by their logical shape)."""
        total = 0
        for shape in self.tensor_shapes.values():
            n = 1
            for d in shape:
                n *= d
            total += n
        return total


def read_gguf_header(path: str | Path) -> GGUFHeader:
    """Read a .gguf file's metadata and tensor shapes; ValueError if it is not GGUF v2/v3."""
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise ValueError(f"{path} is not a GGUF file (no GGUF magic)")
        (version,) = _unpack(f, "<I")
        if version not in SUPPORTED_VERSIONS:
            raise ValueError(f"{path}: GGUF version {version} is not supported (2 or 3 only)")
        num_tensors, num_kv = _unpack(f, "<QQ")
        metadata = {}
        for _ in range(num_kv):
            key = _read_string(f)
            (value_type,) = _unpack(f, "<I")
            metadata[key] = _read_value(f, value_type)
        shapes = {}
        for _ in range(num_tensors):
            name = _read_string(f)
            (num_dims,) = _unpack(f, "<I")
            shapes[name] = _unpack(f, "<" + "Q" * num_dims)
            _unpack(f, "<IQ")  # ggml type, data offset
    return GGUFHeader(version, metadata, shapes)


def _unpack(f: BinaryIO, fmt: str) -> tuple[Any, ...]:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("truncated GGUF header")
    return struct.unpack(fmt, data)


def _read_string(f: BinaryIO) -> str:
    (length,) = _unpack(f, "<Q")
    data = f.read(length)
    if len(data) != length:
        raise ValueError("truncated GGUF header")
    return data.decode("utf-8", errors="replace")


def _read_value(f: BinaryIO, value_type: int) -> Any:
    if value_type in _SCALARS:
        return _unpack(f, _SCALARS[value_type])[0]
    if value_type == _STRING:
        return _read_string(f)
    if value_type == _ARRAY:
        item_type, count = _unpack(f, "<IQ")
        if item_type in _SCALARS:  # one read for the whole array
            fmt = _SCALARS[item_type]
            return list(_unpack(f, fmt[0] + fmt[1] * count))
        return [_read_value(f, item_type) for _ in range(count)]
    raise ValueError(f"unknown GGUF value type {value_type}")
