"""Argument checks of the ops, done in Python before any C call.

They read only what a tensor exposes: `.dtype` (its str() is torch's name,
"torch.float16"), `.shape`, `.stride()`, `.is_contiguous()`, `.device` (with
`.type` and `.index`) and `.data_ptr()`. They never import torch, so CI (no
torch, no GPU) tests them with a stand-in object of those attributes.

These are the checked path of ops.py: thorough, and slow (µs per tensor:
torch.device objects, strings). Each call of an op first tries a fast path
(ops.py's docstring) that falls back here on the first doubt. The fast path
maps a dtype object to its qjit name through _names_by_dtype, which only
dtype_name() fills: the first call with a dtype takes the checked path.

They are also the fake implementations of torch.ops.qjit (qjit/custom_ops.py,
Checker(op, fake=True)): the same checks on FakeTensors or meta tensors, which
give the output's shape and dtype and launch nothing. So sizes are compared,
never converted with int(), where they may be a traced tensor's symbolic ones
(x's leading dimensions): int() would fix them.

A wrong dtype raises TypeError; a wrong shape, stride, device or a size that
does not fit raises ValueError. Each message starts with the op and names the
tensor, what it is and what was expected.
"""

# qjit's dtype names and torch's.
TORCH_NAMES = {
    "fp16": "torch.float16",
    "bf16": "torch.bfloat16",
    "fp32": "torch.float32",
    "int8": "torch.int8",
    "uint8": "torch.uint8",
    "int32": "torch.int32",
    "uint32": "torch.uint32",
    "e4m3": "torch.float8_e4m3fn",
}
_QJIT_NAMES = {v: k for k, v in TORCH_NAMES.items()}
_names_by_dtype = {}  # dtype object -> qjit name (or torch's text for other dtypes)

FLOAT = ("fp16", "bf16", "fp32")
HALF = ("fp16", "bf16")
WORDS = ("int32", "uint32")  # packed 32-bit words


def dtype_name(t):
    """qjit's name of a tensor's dtype ("fp16", "int32", ...), or torch's text for others."""
    d = t.dtype
    name = _names_by_dtype.get(d)
    if name is None:
        text = str(d)
        name = _QJIT_NAMES.get(text, text)
        _names_by_dtype[d] = name
    return name


def _dims(shape):
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


def numel(shape):
    """The product of the sizes (symbolic sizes stay symbolic: a traced x's leading dims are not fixed)."""
    n = 1
    for s in shape:
        n *= s
    return n


class Checker:
    """The checks of one call of op `op`: every tensor on the same CUDA device."""

    def __init__(self, op, fake=False):
        self.op = op
        # The devices a tensor may be on: CUDA, and for a fake call (torch.ops.qjit's fake implementations,
        # qjit/custom_ops.py: shapes only, nothing launched) also "meta".
        self.devices = ("cuda", "meta") if fake else ("cuda",)
        self.device = None  # the first tensor's device
        self.index = None  # its index (what ops._launch takes)
        self.first = None  # its name
        self.like = None  # and the tensor (ops._empty allocates on its device)

    def fail(self, message, cls=ValueError):
        raise cls("%s: %s" % (self.op, message))

    def tensor(self, name, t, dtypes, shape=None, expected=None, ndim=None):
        """Checks tensor `name`; returns its qjit dtype name.

        dtypes: the allowed qjit dtype names. shape: the exact shape (a tuple;
        None entries match anything), described in messages by `expected`
        (e.g. "[K/g, N] = [32, 4096]"). ndim: the number of dimensions, when
        the shape is checked by the caller.
        """
        try:
            dt = dtype_name(t)
            dev = t.device
        except AttributeError:
            self.fail("%s must be a torch.Tensor, got %s" % (name, type(t).__name__), TypeError)
        if dt not in dtypes:
            named = ["%s (%s)" % (d, TORCH_NAMES[d]) for d in dtypes]
            allowed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " or " + named[-1]
            self.fail("%s has dtype %s; expected %s" % (name, TORCH_NAMES.get(dt, dt), allowed), TypeError)
        if dev.type not in self.devices:
            self.fail("%s is on %s; expected a CUDA tensor" % (name, dev))
        if self.device is None:
            self.device, self.index, self.first, self.like = dev, dev.index, name, t
        elif dev.index != self.device.index or dev.type != self.device.type:
            self.fail("%s is on %s but %s is on %s; every tensor of one call must be on the same device"
                      % (name, dev, self.first, self.device))
        if ndim is not None and len(t.shape) != ndim:
            self.fail("%s has %d dimensions (shape %s); expected %d" % (name, len(t.shape), _dims(t.shape), ndim))
        if shape is not None:
            self.shape_is(name, t, shape, expected)
        if not t.is_contiguous():
            self.fail("%s is not contiguous (shape %s, stride %s); qjit takes row-major tensors: pass %s.contiguous()"
                      % (name, _dims(t.shape), tuple(t.stride()), name))
        return dt

    def shape_is(self, name, t, shape, expected=None):
        """The shape alone (of a tensor already checked): a tuple, None entries matching anything."""
        s = tuple(t.shape)
        if len(s) != len(shape) or any(w is not None and a != w for a, w in zip(s, shape)):
            want = expected or _dims(["?" if w is None else w for w in shape])
            self.fail("%s has shape %s; expected %s" % (name, _dims(s), want))

    def optional(self, name, t, dtypes, shape=None, expected=None):
        """As tensor() when t is not None; returns None for None."""
        return None if t is None else self.tensor(name, t, dtypes, shape, expected)

    def numel_is(self, name, t, count, expected):
        """A tensor whose element count, not shape, is fixed (packed words)."""
        if numel(t.shape) != count:
            self.fail("%s has %d elements (shape %s); expected %s = %d"
                      % (name, numel(t.shape), _dims(t.shape), expected, count))

    def choice(self, name, value, allowed):
        if value not in allowed:
            self.fail("%s %r; expected one of %s" % (name, value, ", ".join(allowed)))
        return value

    def divides(self, what, a, b_name, b):
        """a must divide b ("g=128 must divide K=100")."""
        if a <= 0 or b % a:
            self.fail("%s=%d must divide %s=%d" % (what, a, b_name, b))

    def same_dtype(self, name, dt, other_name, other_dt):
        if dt != other_dt:
            self.fail("%s has dtype %s but %s has %s; they must match"
                      % (name, TORCH_NAMES.get(dt, dt), other_name, TORCH_NAMES.get(other_dt, other_dt)), TypeError)
