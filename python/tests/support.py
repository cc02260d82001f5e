"""What the CPU tests share.

StandIn: a stand-in for torch.Tensor with only what qjit's argument checks read:
dtype (its str() is torch's name), shape, stride(), is_contiguous(), device
(type, index) and data_ptr() for the checked path; is_cuda, get_device() and
numel() for the fast one (qjit/ops.py). It tests the checks without torch or
a GPU; the GPU machine's tests (test_gpu.py) run the same ops on real tensors.
As in torch, a CUDA tensor's device always has an index ("cuda" is cuda:0)."""
import os
import tempfile
import unittest
from collections import namedtuple

# CI sets QJIT_REQUIRE_LIBRARY=1: a missing library or qjit command fails the tests that need it instead of skipping them.
REQUIRED = os.environ.get("QJIT_REQUIRE_LIBRARY") == "1"


def need(find):
    """Calls find() (qjit._lib.load, qjit.find_cli): its QjitError skips the test, or fails it under CI."""
    import qjit

    try:
        return find()
    except qjit.QjitError as e:
        if REQUIRED:
            raise
        raise unittest.SkipTest(str(e)) from None

class CliTest(unittest.TestCase):
    """A test that runs the `qjit` command (need(qjit.find_cli)) in a temporary folder: self.file(name) is a path in it."""

    def setUp(self):
        import qjit

        need(qjit.find_cli)
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def file(self, name):
        return os.path.join(self.tmp.name, name)


Device = namedtuple("Device", "type index")
Device.__str__ = lambda d: d.type if d.index is None else "%s:%d" % (d.type, d.index)

_SIZES = {"torch.float16": 2, "torch.bfloat16": 2, "torch.float32": 4, "torch.float64": 8, "torch.int32": 4,
          "torch.uint32": 4, "torch.uint8": 1, "torch.int8": 1, "torch.int64": 8,
          "torch.float8_e4m3fn": 1}
_next_ptr = [0x7f0000000000]


class StandIn:
    def __init__(self, dtype, shape, device="cuda:0", stride=None):
        self.dtype = "torch." + dtype
        self.shape = tuple(shape)
        kind, _, index = device.partition(":")
        self.device = Device(kind, int(index) if index else 0 if kind == "cuda" else None)
        self._stride = tuple(stride) if stride is not None else self._contiguous_stride()
        self._ptr = _next_ptr[0]
        _next_ptr[0] += 1 << 24

    def _contiguous_stride(self):
        s, out = 1, []
        for d in reversed(self.shape):
            out.append(s)
            s *= d
        return tuple(reversed(out))

    def stride(self):
        return self._stride

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def get_device(self):
        """As torch's: the CUDA device's index, -1 on the CPU."""
        return self.device.index if self.device.type == "cuda" else -1

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def is_contiguous(self):
        return all(d == 1 or s == c for d, s, c in zip(self.shape, self._stride, self._contiguous_stride()))

    def data_ptr(self):
        return self._ptr

    def element_size(self):
        return _SIZES[self.dtype]

    def t(self):
        """The transpose of a 2-D tensor (a non-contiguous view)."""
        return StandIn(self.dtype[len("torch."):], self.shape[::-1], str(self.device), self._stride[::-1])


def T(dtype, *shape, device="cuda:0"):
    return StandIn(dtype, shape, device)
