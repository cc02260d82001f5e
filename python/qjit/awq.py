"""AWQ's packing of 4-bit weights, in pure Python, to make AWQ-format
checkpoints (tests, examples) and to read them.

AWQ packs 8 values along N into one int32: nibble i (bits 4i..4i+3) of word
(row, c) holds the value of column 8c + AWQ_ORDER[i]. The order is a fact of
the AWQ project's packer (AutoAWQ, `WQLinear_GEMM.from_linear`:
order_map = [0, 2, 4, 6, 1, 3, 5, 7]); qjit's C++ reference uses the same
(tuner/reference/awq_dequant.h, kAwqOrder). qweight is [K, N/8] from q[K][N],
qzeros [K/g, N/8] from z[K/g][N], the same way; scales [K/g, N] unpacked.
"""

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def pack(values, rows, n):
    """[rows][n] 4-bit values (a flat sequence, row-major) -> rows·n/8 int32 words, AWQ order."""
    if n % 8:
        raise ValueError("n=%d is not a multiple of 8" % n)
    if len(values) != rows * n:
        raise ValueError("%d values for [%d, %d]" % (len(values), rows, n))
    out = []
    for base in range(0, rows * n, 8):
        word = 0
        for i, col in enumerate(AWQ_ORDER):
            v = values[base + col]
            if not 0 <= v <= 15:
                raise ValueError("value %r at %d is not 4-bit" % (v, base + col))
            word |= v << (4 * i)
        out.append(word - (1 << 32) if word >= 1 << 31 else word)  # int32, as AWQ stores it
    return out


def unpack(words, rows, n):
    """The inverse of pack: rows·n/8 int32 words -> [rows][n] values, flat."""
    if len(words) * 8 != rows * n:
        raise ValueError("%d words for [%d, %d]" % (len(words), rows, n))
    out = [0] * (rows * n)
    for w, word in enumerate(words):
        for i, col in enumerate(AWQ_ORDER):
            out[8 * w + col] = (word >> (4 * i)) & 15
    return out
