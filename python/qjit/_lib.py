"""libqjit_runtime.so through ctypes: where it is found, the C API's argument
structs and entry points (runtime/include/qjit/qjit_c.h), and errors.

Every struct below mirrors its C typedef field for field, in order; the CI test
python/tests/test_c_abi.py compiles the header with `cc` and compares sizes,
offsets and field names, and checks that every entry of the header is declared
in ENTRIES. Adding an op to the C API means one Structure here, one line in
STRUCT_ENTRIES, and one wrapper in qjit/ops.py.

The library is loaded on first use, not on `import qjit`, so the pure-Python
parts (safetensors, repack through the CLI) work without it.
"""
import ctypes
import os
import shutil
import struct
import threading
from ctypes import Structure, c_char_p, c_int, c_longlong, c_void_p

LIBRARY_NAME = "libqjit_runtime.so"

# qjit_status (qjit_c.h)
STATUS_NAMES = {
    0: "ok",
    1: "invalid_argument",
    2: "no_device",
    3: "compile",
    4: "cache",
    5: "driver",
    6: "internal",
    7: "not_tuned",  # QJIT_REQUIRE_TUNED=1 and the shape has no tuned kernel for this GPU
}
INVALID_ARGUMENT = 1


class QjitError(RuntimeError):
    """A qjit call failed; the message is the C library's qjit_last_error()
    (or the CLI's error output). `status` is the qjit_status name."""

    def __init__(self, message, status="internal"):
        super().__init__(message)
        self.status = status


class QjitArgumentError(QjitError, ValueError):
    """The C library refused an argument (QJIT_ERROR_INVALID_ARGUMENT): nothing was launched."""


# ---- argument structs (qjit_c.h, field for field) -----------------------------


class DenseFfnArgs(Structure):
    _fields_ = [
        ("d", c_int), ("h", c_int), ("m", c_int),
        ("dtype", c_char_p),
        ("act", c_char_p),
        ("x", c_void_p),
        ("w1", c_void_p),
        ("w3", c_void_p),
        ("y", c_void_p),
    ]
    c_name = "qjit_dense_ffn_args"


class WqGemmArgs(Structure):
    _fields_ = [
        ("k", c_int), ("n", c_int), ("bits", c_int), ("g", c_int),
        ("zero", c_char_p),
        ("scales_dtype", c_char_p),
        ("x_dtype", c_char_p),
        ("bias", c_int), ("residual", c_int),
        ("act", c_char_p),
        ("x", c_void_p),
        ("qweight", c_void_p),
        ("scales", c_void_p),
        ("zeros", c_void_p),
        ("bias_ptr", c_void_p),
        ("residual_ptr", c_void_p),
        ("y", c_void_p),
        ("m", c_int),
    ]
    c_name = "qjit_wq_gemm_args"


class AwqDequantArgs(Structure):
    _fields_ = [
        ("k", c_int), ("n", c_int), ("g", c_int),
        ("layout", c_char_p),
        ("symmetric", c_int),
        ("scales_dtype", c_char_p),
        ("out_dtype", c_char_p),
        ("qweight", c_void_p),
        ("qzeros", c_void_p),
        ("scales", c_void_p),
        ("out", c_void_p),
    ]
    c_name = "qjit_awq_dequant_args"


class QuantFfnArgs(Structure):
    _fields_ = [
        ("d", c_int), ("h", c_int), ("m", c_int), ("bits", c_int), ("g", c_int),
        ("zero", c_char_p),
        ("scales_dtype", c_char_p),
        ("x_dtype", c_char_p),
        ("act", c_char_p),
        ("x", c_void_p),
        ("qweight1", c_void_p),
        ("scales1", c_void_p),
        ("zeros1", c_void_p),
        ("qweight3", c_void_p),
        ("scales3", c_void_p),
        ("zeros3", c_void_p),
        ("y", c_void_p),
    ]
    c_name = "qjit_quant_ffn_args"


class GruQuantArgs(Structure):
    _fields_ = [
        ("t", c_int), ("n", c_int), ("c", c_int), ("h", c_int),
        ("params", c_char_p),
        ("x", c_void_p),
        ("h0", c_void_p),
        ("W", c_void_p),
        ("R", c_void_p),
        ("bw", c_void_p),
        ("br", c_void_p),
        ("y", c_void_p),
        ("y_float", c_void_p),
    ]
    c_name = "qjit_gru_quant_args"


class W8a8GemmArgs(Structure):
    _fields_ = [
        ("k", c_int), ("n", c_int), ("block", c_int),
        ("x_dtype", c_char_p),
        ("quant_a", c_char_p),
        ("quant_w", c_char_p),
        ("bias", c_int),
        ("act", c_char_p),
        ("x", c_void_p),
        ("wq", c_void_p),
        ("w_scale", c_void_p),
        ("w_offset", c_void_p),
        ("w_sum", c_void_p),
        ("bias_ptr", c_void_p),
        ("y", c_void_p),
        ("m", c_int),
        ("format", c_char_p),
    ]
    c_name = "qjit_w8a8_gemm_args"


class QConv2dArgs(Structure):
    _fields_ = [
        ("n", c_int), ("ci", c_int), ("h", c_int), ("w", c_int), ("co", c_int), ("kh", c_int), ("kw", c_int),
        ("stride_h", c_int), ("stride_w", c_int), ("pad_h", c_int), ("pad_w", c_int), ("dil_h", c_int),
        ("dil_w", c_int),
        ("layout", c_char_p),
        ("bits", c_int), ("block", c_int),
        ("x_dtype", c_char_p),
        ("bias", c_int),
        ("act", c_char_p),
        ("x", c_void_p),
        ("qweight", c_void_p),
        ("scales", c_void_p),
        ("offsets", c_void_p),
        ("bias_ptr", c_void_p),
        ("y", c_void_p),
    ]
    c_name = "qjit_qconv2d_args"


STRUCTS = [DenseFfnArgs, WqGemmArgs, AwqDequantArgs, QuantFfnArgs, GruQuantArgs, W8a8GemmArgs, QConv2dArgs]

_PACK_CODES = {c_int: "i", c_longlong: "q", c_char_p: "P", c_void_p: "P"}


def packer(cls):
    """The bytes of Structure `cls` from its fields: packer(cls)(*fields) == bytes(cls(*fields)), 4x cheaper.

    cls(*fields) sets each field through ctypes (about 1.5 µs for 18 fields);
    this is one struct.Struct of the same native layout (about 0.3 µs). The
    fields are plain ints: a char* field takes the address of a bytes object
    (see ops._p), which the caller keeps alive until the C call returns, and a
    NULL pointer is 0. The C entries of STRUCT_ENTRIES take these bytes as
    their struct pointer (their argument is declared char*, so ctypes hands
    over the bytes object's buffer without a copy). The layout is checked
    against ctypes' here, and the bytes against cls(*fields) and the C
    compiler by test_c_abi.py.
    """
    codes = "".join(_PACK_CODES[t] for _, t in cls._fields_)
    widest = max(codes, key=struct.calcsize)
    layout = struct.Struct("@" + codes + "0" + widest)  # "0P": the tail padding C adds
    if layout.size != ctypes.sizeof(cls):
        raise QjitError("%s: struct layout %r is %d bytes, ctypes says %d"
                        % (cls.__name__, layout.format, layout.size, ctypes.sizeof(cls)))
    return layout.pack


# The entries that take one argument struct (and the stream): their struct, passed as packed bytes (packer).
STRUCT_ENTRIES = {
    "qjit_dense_ffn": DenseFfnArgs,
    "qjit_wq_gemm": WqGemmArgs,
    "qjit_awq_dequant": AwqDequantArgs,
    "qjit_quant_ffn": QuantFfnArgs,
    "qjit_gru_quant": GruQuantArgs,
    "qjit_w8a8_gemm": W8a8GemmArgs,
    "qjit_qconv2d": QConv2dArgs,
}

# Every function of qjit_c.h: name -> argument types (all return qjit_status but
# qjit_last_error). The stream is a CUstream passed as void*.
ENTRIES = {
    "qjit_fused_ffn": [c_int, c_int, c_int, c_char_p, c_char_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p],
    "qjit_fp_lut": [c_char_p, c_longlong, c_char_p, c_char_p, c_char_p, c_void_p, c_void_p, c_void_p],
    **{name: [c_char_p, c_void_p] for name in STRUCT_ENTRIES},  # the struct's packed bytes, the stream
    "qjit_set_cache_path": [c_char_p],
    "qjit_last_error": [],
    "qjit_preload_begin": [],
    "qjit_preload_end": [],
}

# The functions of qjit_c.h that return nothing.
VOID_ENTRIES = {"qjit_preload_begin": None, "qjit_preload_end": None}

# ---- finding the library and the qjit command -------------------------------

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# python/qjit/ -> the repository root, when the package runs from a checkout.
_REPO_ROOT = os.path.dirname(os.path.dirname(_PACKAGE_DIR))


def _exists(path):
    return path if path and os.path.isfile(path) else None


def library_candidates():
    """The places searched for libqjit_runtime.so, in order (see find_library)."""
    out = []
    env = os.environ.get("QJIT_LIBRARY")
    if env:
        out.append(("QJIT_LIBRARY", env))
    out.append(("bundled", os.path.join(_PACKAGE_DIR, LIBRARY_NAME)))
    cli = shutil.which("qjit")
    if cli:
        bindir = os.path.dirname(os.path.realpath(cli))
        out.append(("qjit on PATH", os.path.join(os.path.dirname(bindir), "lib", LIBRARY_NAME)))
        out.append(("qjit on PATH", os.path.join(bindir, LIBRARY_NAME)))  # a build folder
    for sub in ("build", os.path.join(".dist", "lib")):
        out.append(("repository", os.path.join(_REPO_ROOT, sub, LIBRARY_NAME)))
    return out


def find_library():
    """The path of libqjit_runtime.so: $QJIT_LIBRARY (which must exist when set),
    else next to this package (a bundled copy), else PREFIX/lib of the `qjit`
    found on PATH (or beside it, in a build folder), else build/ or .dist/lib/
    of the repository this package sits in."""
    candidates = library_candidates()
    env = os.environ.get("QJIT_LIBRARY")
    if env:
        if not _exists(env):
            raise QjitError("QJIT_LIBRARY=%s: no such file" % env)
        return env
    for _, path in candidates:
        if _exists(path):
            return path
    raise QjitError(
        "cannot find %s; looked in: %s. Set QJIT_LIBRARY to its path, or put the qjit install's bin/ on PATH"
        % (LIBRARY_NAME, ", ".join(p for _, p in candidates)), "internal")


def find_cli():
    """The `qjit` command: $QJIT_CLI, else `qjit` on PATH, else beside the loaded
    library's folder (PREFIX/bin, or the build folder itself), else the repository's
    build/ or .dist/bin/."""
    env = os.environ.get("QJIT_CLI")
    if env:
        if not _exists(env):
            raise QjitError("QJIT_CLI=%s: no such file" % env)
        return env
    found = shutil.which("qjit")
    if found:
        return found
    places = []
    try:
        libdir = os.path.dirname(os.path.realpath(find_library()))
        places += [os.path.join(os.path.dirname(libdir), "bin", "qjit"), os.path.join(libdir, "qjit")]
    except QjitError:
        pass
    places += [os.path.join(_REPO_ROOT, "build", "qjit"), os.path.join(_REPO_ROOT, ".dist", "bin", "qjit")]
    for p in places:
        if _exists(p) and os.access(p, os.X_OK):
            return p
    raise QjitError("cannot find the qjit command; looked for $QJIT_CLI, qjit on PATH, " + ", ".join(places))


# ---- loading and calling ----------------------------------------------------

_lock = threading.Lock()
_library = None
_functions = {}


def load():
    """The loaded library, its entries declared (loads it on the first call)."""
    global _library
    if _library is not None:
        return _library
    with _lock:
        if _library is None:
            path = find_library()
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                raise QjitError("cannot load %s: %s" % (path, e)) from None
            for name, argtypes in ENTRIES.items():
                try:
                    f = getattr(lib, name)
                except AttributeError:
                    raise QjitError("%s has no %s (a library older than this package?)" % (path, name)) from None
                f.argtypes = argtypes
                f.restype = VOID_ENTRIES.get(name, c_char_p if name == "qjit_last_error" else c_int)
                _functions[name] = f
            lib.qjit_path = path
            _library = lib
    return _library


def function(name):
    """The declared C function `name` (for callers that time the bare call)."""
    if _library is None:
        load()
    return _functions[name]


def error_for(status):
    """The exception for a non-zero qjit_status, with qjit_last_error()'s text."""
    text = function("qjit_last_error")().decode("utf-8", "replace")
    name = STATUS_NAMES.get(status, "status %d" % status)
    cls = QjitArgumentError if status == INVALID_ARGUMENT else QjitError
    return cls(text or name, name)


def call(name, *args):
    """Calls C entry `name` (a struct entry with its Structure, or the struct's packed bytes, and the stream);
    raises QjitError (QjitArgumentError for a refused argument) on a non-zero status."""
    f = _functions.get(name) or function(name)
    if args and isinstance(args[0], Structure):
        status = f(bytes(args[0]), *args[1:])  # args[0] keeps its char* fields' strings alive
    else:
        status = f(*args)
    if status:
        raise error_for(status)


class preload:
    """A context manager: calls made inside it (on this thread) check their
    arguments and make their kernels and the stream's workspace ready, and
    launch nothing (qjit_preload_begin/end). Run a model once inside it before
    CUDA graph capture, so that capture never compiles or allocates:

        with qjit.preload():
            model(x)
    """

    def __enter__(self):
        function("qjit_preload_begin")()
        return self

    def __exit__(self, *exc):
        function("qjit_preload_end")()
        return False


def set_cache_path(path):
    """Use another kernel cache file for this process (qjit_set_cache_path)."""
    call("qjit_set_cache_path", os.fsencode(path))


__all__ = ["QjitError", "QjitArgumentError", "find_library", "find_cli", "load", "call", "set_cache_path", "preload"]
