"""qjit.safetensors, qjit.awq and qjit.repack_checkpoint, without a GPU.

The repack tests write an AWQ checkpoint of random weights in Python (qjit.awq
packs in AWQ's order), convert it with the C++ `qjit repack --checkpoint`,
and read the result back in Python: the zero points and scales must be the
ones written, the native words must decode (by the layout as
tuner/reference/wq_gemm.h describes it, re-read here independently) to the
same 4-bit values, and qjit.safetensors must lay out the same tensors in the
same bytes as the C++ writer. They need the `qjit` command (QJIT_CLI, PATH or
the repository's build/); with QJIT_REQUIRE_LIBRARY=1 (CI) they fail
rather than skip without it.
"""
import json
import os
import random
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qjit  # noqa: E402
from qjit import awq  # noqa: E402
from qjit import safetensors as st  # noqa: E402
from support import CliTest  # noqa: E402


def decode_native4(words, k, n):
    """q[k][n] (flat) from 4-bit native words: 16-row (n) × 64-k tiles, tile nt·(K/64) + kc;
    lane l (gq = l/4, t = l%4) holds registers R = 0..15, step s = R/4, r = R%4, at
    n = 16nt + gq + 8(r%2), k = 64kc + 16t + 2s + 8(r/2) + (0 lo, 1 hi); register R is
    field R%4 of the lane's word R/4 (lo at bits 4i, hi at 4(i+4)); the lane's word j
    lies at tile·128 + slot·4 + j with slot = l ^ ((l/8) % 4)."""
    q = [None] * (k * n)
    for nt in range(n // 16):
        for kc in range(k // 64):
            tile = nt * (k // 64) + kc
            for lane in range(32):
                gq, t, slot = lane // 4, lane % 4, lane ^ ((lane // 8) % 4)
                for reg in range(16):
                    s, r = reg // 4, reg % 4
                    word = words[tile * 128 + slot * 4 + reg // 4]
                    row = 16 * nt + gq + 8 * (r % 2)
                    col = 64 * kc + 16 * t + 2 * s + 8 * (r // 2)
                    for e, shift in ((0, 4 * (reg % 4)), (1, 4 * (reg % 4 + 4))):
                        q[(col + e) * n + row] = (word >> shift) & 15
    return q


def random_awq_layer(rng, k, n, g):
    """(q, z, scale bits, tensors of an AWQ layer) with random 4-bit q, z and fp16 scales."""
    q = [rng.randrange(16) for _ in range(k * n)]
    z = [rng.randrange(16) for _ in range(k // g * n)]
    s = [rng.randrange(0x1800, 0x2c00) for _ in range(k // g * n)]  # fp16 patterns of 2^-6 .. 2^-3
    tensors = {"qweight": st.from_values("I32", (k, n // 8), awq.pack(q, k, n)),
               "qzeros": st.from_values("I32", (k // g, n // 8), awq.pack(z, k // g, n)),
               "scales": st.from_values("F16", (k // g, n), s)}
    return q, z, s, tensors


class Awq(unittest.TestCase):
    def test_order(self):
        # Nibble i holds column AWQ_ORDER[i]: values 0..7 pack to 0x75316420.
        self.assertEqual(awq.pack(list(range(8)), 1, 8), [0x75316420])
        self.assertEqual(awq.pack([15] * 8, 1, 8), [-1])  # int32, as AWQ stores it
        rng = random.Random(1)
        v = [rng.randrange(16) for _ in range(4 * 32)]
        self.assertEqual(awq.unpack(awq.pack(v, 4, 32), 4, 32), v)
        with self.assertRaises(ValueError):
            awq.pack([16] + [0] * 7, 1, 8)


class Safetensors(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "t.safetensors")

    def tearDown(self):
        self.tmp.cleanup()

    def test_round_trip(self):
        tensors = {"b": st.from_values("F32", (2, 3), [1.5, -2, 0, 3.25, 1e-3, 7]),
                   "a.weight": st.from_values("I8", (5,), [-128, -1, 0, 1, 127]),
                   "empty": st.Tensor("U8", (0, 4), b"")}
        st.write(self.path, tensors, {"format": "test"})
        back = st.read(self.path)
        self.assertEqual(back, tensors)
        self.assertEqual(st.metadata(self.path), {"format": "test"})
        self.assertEqual(list(st.values(back["b"])), [1.5, -2, 0, 3.25, struct.unpack("<f", struct.pack("<f", 1e-3))[0], 7])
        with open(self.path, "rb") as f:
            blob = f.read()
        n = struct.unpack("<Q", blob[:8])[0]
        self.assertEqual(n % 8, 0)
        header = json.loads(blob[8:8 + n])
        # Data in the order of the sorted names, as qjit's C++ writer lays it out.
        self.assertEqual(header["a.weight"]["data_offsets"], [0, 5])
        self.assertEqual(header["b"]["data_offsets"], [5, 29])
        self.assertEqual(st.read(self.path, ["b"]).keys(), {"b"})
        with self.assertRaisesRegex(ValueError, "has no tensor c"):
            st.read(self.path, ["c"])

    def test_damaged_files_are_named(self):
        st.write(self.path, {"x": st.from_values("I32", (4,), [1, 2, 3, 4])})
        with open(self.path, "rb") as f:
            blob = f.read()
        bad = os.path.join(self.tmp.name, "bad.safetensors")
        for data, words in ((blob[:-1], "lie outside"), (blob[:5], "shorter than 8 bytes"),
                            (struct.pack("<Q", 1 << 40) + blob[8:], "header length"),
                            (blob.replace(b'"I32"', b'"I33"'), "dtype 'I33'"),
                            (blob.replace(b"[4]", b"[5]"), "needs 20 bytes")):
            with open(bad, "wb") as f:
                f.write(data)
            with self.assertRaises(ValueError) as cm:
                st.read(bad)
            self.assertIn(bad, str(cm.exception))
            self.assertIn(words, str(cm.exception))
        with self.assertRaisesRegex(ValueError, "needs 8 bytes, has 4"):
            st.write(bad, {"x": st.Tensor("F16", (4,), b"1234")})


class RepackCheckpoint(CliTest):
    def test_awq_checkpoint_bit_exact(self):
        rng = random.Random(7)
        layers = {"model.layers.0.mlp.up_proj": (128, 32, 64), "model.layers.0.mlp.down_proj": (64, 48, 32),
                  "model.layers.1.mlp.up_proj": (128, 32, 64)}
        tensors, made = {}, {}
        for prefix, (k, n, g) in layers.items():
            q, z, s, t = random_awq_layer(rng, k, n, g)
            made[prefix] = (q, z, s)
            tensors.update({prefix + "." + name: v for name, v in t.items()})
        tensors["model.norm.weight"] = st.from_values("F16", (64,), [0x3c00 + i for i in range(64)])  # not quantized
        src, dst, manifest = self.file("awq.safetensors"), self.file("native.safetensors"), self.file("specs.jsonl")
        st.write(src, tensors)
        with open(self.file("config.json"), "w") as f:
            json.dump({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 64}}, f)
        # group_size 64 in the config, but down_proj has g = 32: refused, naming the layer.
        with self.assertRaises(qjit.QjitError) as cm:
            qjit.repack_checkpoint(src, dst, config=self.file("config.json"))
        self.assertEqual(cm.exception.status, "invalid_argument")
        self.assertIn("model.layers.0.mlp.down_proj: group size 32", str(cm.exception))
        self.assertFalse(os.path.exists(dst))

        summary = qjit.repack_checkpoint(src, dst, manifest=manifest, from_="awq")
        self.assertEqual((summary["from"], summary["layers"], summary["carried"]), ("awq", 3, 1))
        out = st.read(dst)
        self.assertEqual(out["model.norm.weight"], tensors["model.norm.weight"])  # carried over unchanged
        self.assertEqual(st.metadata(dst), {"format": "qjit-native", "from": "awq"})
        for prefix, (k, n, g) in layers.items():
            q, z, s = made[prefix]
            self.assertEqual(out[prefix + ".qweight"].dtype, "U32")
            self.assertEqual(out[prefix + ".qweight"].shape, (k * n // 8,))
            self.assertEqual(decode_native4(st.values(out[prefix + ".qweight"]), k, n), q, prefix)
            self.assertEqual(out[prefix + ".zeros"], st.from_values("U8", (k // g, n), z), prefix)
            self.assertEqual(out[prefix + ".scales"], tensors[prefix + ".scales"], prefix)
        # The Python writer lays the same tensors out in the C++ writer's bytes.
        with open(dst, "rb") as f:
            self.assertEqual(st.file_bytes(out, st.metadata(dst)), f.read())
        with open(manifest) as f:
            specs = [json.loads(line) for line in f]
        self.assertEqual(sorted((s["shape"], tuple(s["layers"])) for s in specs), [
            ("k=128,n=32,g=64,bits=4,zero=int", ("model.layers.0.mlp.up_proj", "model.layers.1.mlp.up_proj")),
            ("k=64,n=48,g=32,bits=4,zero=int", ("model.layers.0.mlp.down_proj",))])

    def test_bad_layer_is_named(self):
        rng = random.Random(3)
        _, _, _, t = random_awq_layer(rng, 128, 32, 64)
        t["scales"] = st.from_values("F16", (3, 32), [0x2000] * 96)  # 3 groups do not divide K = 128
        src = self.file("awq.safetensors")
        st.write(src, {"l." + k: v for k, v in t.items()})
        with self.assertRaises(qjit.QjitError) as cm:
            qjit.repack_checkpoint(src, self.file("out.safetensors"), from_="awq")
        self.assertIn("l.scales [3, 32] does not fit", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
