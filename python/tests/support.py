"""What the CPU tests share.

StandIn: a stand-in for torch.Tensor with only what qjit's argument checks read:
dtype (its str() is torch's name), shape, stride(), is_contiguous(), device
(type, index) and data_ptr() for the checked path; is_cuda, get_device() and
numel() for the fast one (qjit/ops.py). It tests the checks without torch or
a GPU; the GPU machine's tests (test_gpu.py) run the same ops on real tensors.
As in torch, a CUDA tensor's device always has an index ("cuda" is cuda:0)."""
import os
import sys
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
        self.dtype = sys.intern("torch." + dtype)  # one object per dtype, as torch's dtypes
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


class Fields:
    """A C argument struct as its fields (attributes, `_fields_` as the ctypes Structure's), compared by value."""

    def __init__(self, struct):
        self._fields_ = struct._fields_
        for name, _ in struct._fields_:
            setattr(self, name, getattr(struct, name))

    def values(self):
        return tuple(getattr(self, name) for name, _ in self._fields_)

    def __eq__(self, other):
        return isinstance(other, Fields) and self._fields_ == other._fields_ and self.values() == other.values()

    def __repr__(self):
        return "Fields(%s)" % ", ".join("%s=%r" % (name, getattr(self, name)) for name, _ in self._fields_)


def decoded(entry, args):
    """A launch's arguments (qjit.ops._launch's) as the C side reads them: the packed bytes of a struct
    entry's argument as Fields, its char* fields read now, while the strings they point to are alive."""
    from qjit import _lib

    cls = _lib.STRUCT_ENTRIES.get(entry)
    if cls is None:
        return args
    return (Fields(cls.from_buffer_copy(args[0])),) + tuple(args[1:])


class TorchAsCuda:
    """While entered, torch's CPU tensors answer as tensors on cuda:0 (is_cuda, get_device() and device,
    patched on torch.Tensor in this process) and qjit.ops._launch records each launch instead of calling
    the library: the torch side of qjit (qjit.nn, the ops' fast paths) on a machine without a GPU.
    `launches` holds (device index, entry, *args) tuples, a struct argument as Fields (decoded)."""

    def __init__(self):
        self.launches = []

    def __enter__(self):
        import torch
        from qjit import ops

        cuda0 = torch.device("cuda", 0)
        torch.Tensor.is_cuda = property(lambda self: True)
        torch.Tensor.get_device = lambda self: 0
        torch.Tensor.device = property(lambda self: cuda0)
        self.saved_launch = ops._launch
        ops._launch = lambda index, entry, *args: self.launches.append((index, entry) + decoded(entry, args))
        return self

    def __exit__(self, *exc):
        import torch
        from qjit import ops

        for name in ("is_cuda", "get_device", "device"):
            delattr(torch.Tensor, name)
        ops._launch = self.saved_launch
        return False


def tiny_llama(seed=0, dtype=None, device="cpu", **overrides):
    """A small random transformers LlamaForCausalLM, built from a LlamaConfig (nothing downloaded), in eval mode:
    2 layers, hidden 256 (4 heads of 64, 2 KV heads), intermediate 512, vocabulary 512, untied head, no EOS
    (generate runs every step asked). Every Linear fits each scheme of qjit.nn.quantize_model (K and N
    multiples of 128). `overrides` go to the LlamaConfig."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False, bos_token_id=0,
               eos_token_id=None, pad_token_id=0)
    cfg.update(overrides)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**cfg)).eval()
    return model.to(device=device, dtype=dtype) if dtype is not None else model.to(device)


def have_transformers():
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers"))
