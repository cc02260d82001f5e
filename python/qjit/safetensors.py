"""A pure-Python reader and writer of .safetensors files (no torch, no numpy).

The format: an 8-byte little-endian header length, a JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}
(offsets relative to the end of the header), then the tensors' bytes.

write() produces the same bytes as qjit's C++ writer (io/tensor_file.cpp):
keys sorted, compact JSON, the header padded with spaces to a multiple of 8,
tensor data in the order of the sorted names; python/tests checks this
against files `qjit repack --checkpoint` writes.
"""
import json
import os
import struct
from array import array
from collections import namedtuple

# safetensors dtype -> (bytes per element, array typecode or None, torch dtype name)
DTYPES = {
    "BOOL": (1, "B", "bool"),
    "U8": (1, "B", "uint8"),
    "I8": (1, "b", "int8"),
    "U16": (2, "H", "uint16"),
    "I16": (2, "h", "int16"),
    "F16": (2, "H", "float16"),  # read as 16-bit patterns by values()
    "BF16": (2, "H", "bfloat16"),  # likewise
    "U32": (4, "I", "uint32"),
    "I32": (4, "i", "int32"),
    "F32": (4, "f", "float32"),
    "U64": (8, "Q", "uint64"),
    "I64": (8, "q", "int64"),
    "F64": (8, "d", "float64"),
}
_MAX_HEADER = 100 * 1024 * 1024

Tensor = namedtuple("Tensor", "dtype shape data")
Tensor.__doc__ = """One tensor: dtype a safetensors name ("F16", "I32", ...), shape a tuple, data its bytes (little-endian, C order)."""


def _count(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _fail(path, message):
    raise ValueError("%s: %s" % (path, message))


def read_header(path):
    """(entries, metadata): entries maps each name to (dtype, shape, begin, end),
    begin and end absolute offsets in the file; metadata is "__metadata__" or None.
    Every size and offset is checked against the file; a bad file raises ValueError naming it."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        start = f.read(8)
        if len(start) < 8:
            _fail(path, "not a .safetensors file (shorter than 8 bytes)")
        n = struct.unpack("<Q", start)[0]
        if n > size - 8 or n > _MAX_HEADER:
            _fail(path, "header length %d does not fit a file of %d bytes" % (n, size))
        text = f.read(n)
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        _fail(path, "header is not JSON (%s)" % e)
    if not isinstance(header, dict):
        _fail(path, "header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    base = 8 + n
    entries = {}
    for name, e in header.items():
        if not isinstance(e, dict) or e.get("dtype") not in DTYPES:
            _fail(path, "tensor %s: dtype %r is not a safetensors dtype" % (name, e.get("dtype") if isinstance(e, dict) else e))
        shape, offsets = e.get("shape"), e.get("data_offsets")
        if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
            _fail(path, "tensor %s: shape %r is not a list of sizes" % (name, shape))
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(isinstance(o, int) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1] or base + offsets[1] > size):
            _fail(path, "tensor %s: data_offsets %r lie outside the file's %d data bytes" % (name, offsets, size - base))
        nbytes = _count(shape) * DTYPES[e["dtype"]][0]
        if offsets[1] - offsets[0] != nbytes:
            _fail(path, "tensor %s: %s %s needs %d bytes, data_offsets give %d"
                  % (name, e["dtype"], shape, nbytes, offsets[1] - offsets[0]))
        entries[name] = (e["dtype"], tuple(shape), base + offsets[0], base + offsets[1])
    return entries, metadata


def read(path, names=None):
    """{name: Tensor} for every tensor of the file (or those in `names`, each of which must exist)."""
    entries, _ = read_header(path)
    if names is not None:
        for name in names:
            if name not in entries:
                _fail(path, "has no tensor %s" % name)
    out = {}
    with open(path, "rb") as f:
        for name, (dtype, shape, begin, end) in entries.items():
            if names is not None and name not in names:
                continue
            f.seek(begin)
            out[name] = Tensor(dtype, shape, f.read(end - begin))
    return out


def metadata(path):
    return read_header(path)[1]


def file_bytes(tensors, metadata=None):
    """The bytes of a .safetensors file of {name: Tensor}, exactly as qjit's C++ writer lays them out."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    data = []
    for name in sorted(tensors, key=lambda s: s.encode("utf-8")):
        t = tensors[name]
        if t.dtype not in DTYPES:
            raise ValueError("tensor %s: dtype %r is not a safetensors dtype" % (name, t.dtype))
        nbytes = _count(t.shape) * DTYPES[t.dtype][0]
        if len(t.data) != nbytes:
            raise ValueError("tensor %s: %s %s needs %d bytes, has %d" % (name, t.dtype, list(t.shape), nbytes, len(t.data)))
        header[name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
        data.append(bytes(t.data))
    h = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(h)) + h + b"".join(data)


def write(path, tensors, metadata=None):
    """Writes {name: Tensor} to `path` through a temporary file and a rename."""
    blob = file_bytes(tensors, metadata)
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def from_values(dtype, shape, values):
    """A Tensor from a flat sequence of numbers (F16/BF16: their 16-bit patterns)."""
    a = array(DTYPES[dtype][1], values)
    if a.itemsize != DTYPES[dtype][0]:
        raise ValueError("this platform's array(%r) has %d-byte items" % (DTYPES[dtype][1], a.itemsize))
    if _count(shape) != len(a):
        raise ValueError("%d values for shape %s" % (len(a), list(shape)))
    if struct.pack("=H", 1) != struct.pack("<H", 1):
        a.byteswap()
    return Tensor(dtype, tuple(shape), a.tobytes())


def values(t):
    """A tensor's elements as a flat array (F16/BF16: 16-bit patterns)."""
    a = array(DTYPES[t.dtype][1])
    a.frombytes(t.data)
    if struct.pack("=H", 1) != struct.pack("<H", 1):
        a.byteswap()
    return a


def from_torch(t):
    """A Tensor of a torch tensor's bytes (copied to the CPU; no numpy needed)."""
    import ctypes

    import torch

    names = {getattr(torch, v[2]): k for k, v in DTYPES.items() if hasattr(torch, v[2]) and k != "BOOL"}
    names[torch.bool] = "BOOL"
    t = t.detach().to("cpu").contiguous()
    return Tensor(names[t.dtype], tuple(t.shape), ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))


def to_torch(t, device=None):
    """A torch tensor of a Tensor (U32 comes as int32: qjit takes either for packed words)."""
    import torch

    name = "int32" if t.dtype == "U32" else DTYPES[t.dtype][2]
    if not t.data:
        return torch.empty(t.shape, dtype=getattr(torch, name), device=device)
    x = torch.frombuffer(bytearray(t.data), dtype=getattr(torch, name)).reshape(t.shape)
    return x.to(device) if device is not None else x
