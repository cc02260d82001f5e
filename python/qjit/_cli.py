"""The parts of qjit that live in the `qjit` command (tuner, checkpoint
repack), run as a subprocess with --json output."""
import json
import os
import subprocess

from ._lib import QjitError, find_cli

# The command's exit codes (docs/cli.md, "Exit codes and output").
EXIT_STATUS = {1: "failed", 2: "invalid_argument", 3: "no_device", 4: "not_cached"}


def run(args, check=True):
    """Runs `qjit ARGS`; returns (exit code, stdout). A non-zero exit raises
    QjitError with the command's error output (status: the exit code's meaning)
    unless check=False."""
    cmd = [find_cli()] + [str(a) for a in args]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if p.returncode and check:
        err = QjitError("`%s` exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip() or p.stdout.strip()),
                        EXIT_STATUS.get(p.returncode, "failed"))
        err.returncode, err.stdout = p.returncode, p.stdout
        raise err
    return p.returncode, p.stdout


def spec_text(shape):
    """"k=4096,n=11008" from a dict {"k": 4096, "n": 11008} (a str is returned as it is)."""
    if isinstance(shape, dict):
        return ",".join("%s=%s" % (k, v) for k, v in shape.items())
    return str(shape)


def m_text(m):
    if isinstance(m, (list, tuple)):
        return ",".join(str(int(v)) for v in m)
    return str(m)


def tune(op, shape, m=None, *, budget=None, only=None, retune=False, cache=None):
    """Tunes op `op` for `shape` (a dict or "k=...,n=..." text) and caches the winner:
    `qjit tune --op OP --shape SHAPE [--m M] [--budget B] [--only JSON] [--retune] --json`.

    m: an int, "1-16", or a list of M. budget: seconds ("30s") or a trial count.
    cache: a cache file (default: $QJIT_CACHE or ~/.cache/qjit/kernels.db).
    Returns the command's JSON report, one entry per kernel tuned. Without a
    GPU the command compiles the default kernel and exits 3: QjitError with
    status "no_device".
    """
    args = ["tune", "--op", op, "--shape", spec_text(shape), "--json"]
    if m is not None:
        args += ["--m", m_text(m)]
    if budget is not None:
        args += ["--budget", budget]
    if only is not None:
        args += ["--only", only if isinstance(only, str) else json.dumps(only)]
    if retune:
        args.append("--retune")
    if cache is not None:
        args += ["--cache", os.fspath(cache)]
    return json.loads(run(args)[1])


def import_shipped(*, cache=None):
    """Brings in the tuning records shipped with qjit for this GPU (common model
    shapes): `qjit import --shipped --json`. Each is compiled, verified against
    the CPU reference and timed here first; specs already tuned in the cache are
    skipped. Returns one entry per record (spec, config, status "verified" or
    "failed", best_us). Without a GPU: QjitError with status "no_device".
    """
    args = ["import", "--shipped", "--json"]
    if cache is not None:
        args += ["--cache", os.fspath(cache)]
    return json.loads(run(args)[1])


def repack_checkpoint(src, dst, config=None, manifest=None, *, from_=None, sym=False, gptq_v1=False):
    """Every 4-bit AWQ/GPTQ layer of .safetensors `src` to wq_gemm's native layout in `dst`:
    `qjit repack --checkpoint SRC --out DST [--config CONFIG] [--manifest MANIFEST] --json`,
    so the result is the C++ packer's, bit for bit.

    config: the checkpoint's config.json (its quantization_config gives the
    method and is checked); else from_="awq" or "gptq". manifest: a .jsonl
    file listing each wq_gemm spec with its layers (for `qjit tune --manifest`).
    dst holds per layer PREFIX.qweight (uint32 words), PREFIX.zeros (uint8
    [K/g, N], unless symmetric) and PREFIX.scales. Returns the command's JSON
    summary (from, layers, specs).
    """
    args = ["repack", "--checkpoint", os.fspath(src), "--out", os.fspath(dst), "--json"]
    if config is not None:
        args += ["--config", os.fspath(config)]
    if manifest is not None:
        args += ["--manifest", os.fspath(manifest)]
    if from_ is not None:
        args += ["--from", from_]
    if sym:
        args.append("--sym")
    if gptq_v1:
        args.append("--gptq-v1")
    return json.loads(run(args)[1])
