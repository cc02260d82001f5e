"""Decode speed and accuracy of a Llama-2-7B-shaped transformers model, fp16 against qjit and PyTorch's int4.

  python3 python/benchmarks/decode.py                          # 32 layers, batch 1 and 16 (the GPU machine)
  python3 python/benchmarks/decode.py --layers 8 --variants qjit-int4,torch-int4 --json out.json
  python3 python/benchmarks/decode.py --dry --tiny --layers 1  # no GPU: arguments, models, conversions, table

The model: transformers' LlamaForCausalLM built from a LlamaConfig of
Llama-2-7B's shape (hidden 4096, intermediate 11008, 32 heads, vocabulary
32000; --layers of its 32 decoder layers), weights drawn as transformers
initialises them (normal, std 0.02, the scale of the trained model's
linears), nothing downloaded. Each variant generates greedily from a random
prompt (--prompt tokens) with a static KV cache, --new tokens at each
--batch size:

  fp16         transformers in fp16, eager (generate(disable_compile=True))
  fp16-graphs  the same, its decode step compiled by transformers
               (CompileConfig(mode="reduce-overhead"): inductor, CUDA graphs)
  qjit-int4    qjit.nn.quantize_model(model, "int4"): 4 bits, g 128, integer
               zero points (wq_gemm; the MLP's gate and up through fused_ffn
               for 1..8 rows), compiled with CUDA graphs as fp16-graphs
  torch-int4   PyTorch's int4 weight-only path (aten._weight_int4pack_mm,
               "tinygemm") on qjit-int4's codes, scales and zero points, in
               bf16 (the op takes bf16 activations), compiled the same way
  qjit-w8a8    quantize_model(model, "w8a8"): int8 W per block of 128, x
               quantized on the fly (w8a8_gemm), compiled the same way
  qjit-fp8     quantize_model(model, "fp8"): e4m3 (compute capability 8.9+)

The output head stays in fp16 everywhere (quantize_model's default). A decode
step's time is (the time of generate with --new tokens − with 1 token) /
(--new − 1), each the median of --reps calls after a warm-up call that
compiles and captures, all on one StaticCache (reset before each call), so
the prefill (run eagerly by transformers) and compilation are left out;
tokens/s = batch / that time. "1st tok ms" is the generate of 1 token: the
prefill and the call's set-up.

Accuracy, beside the speed of each quantized variant: its logits against
the same model in fp16 on the weights the variant multiplies (its float
twin, qjit.nn.load_dequantized; torch-int4 against qjit-int4's twin: the same
codes), teacher-forced for --accuracy-steps decode steps on the twin's own
greedy continuation of the prompt: per step, |logits − twin's| / |twin's|
(L2 over the vocabulary, averaged over the batch), reported as the mean and
the largest over the steps, and the share of steps and rows whose greedy
token (argmax) is the twin's.

qjit's kernels come from its cache ($QJIT_CACHE): untuned shapes use their
default config, compiled on first use; --tune BUDGET runs `qjit tune` on the
model's wq_gemm and fused_ffn specs first. Each compiled variant compiles a
32-layer decode step at each batch size (minutes each, less with inductor's
cache, TORCHINDUCTOR_CACHE_DIR, from an earlier run), and the eager fp16
variant generates 256 tokens of a 7B model several times: --variants,
--batch and --layers split or shorten a run to fit a time limit.

--dry (no GPU, torch and transformers only): builds the model on the CPU and
each variant's conversion (torch-int4 but its CUDA packing), times nothing,
and prints the table and --json with empty cells: what a CPU test exercises.
--tiny: a model of hidden 256 instead of Llama-2-7B's shape.
"""
import argparse
import copy
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

DEVICE = "cuda"  # where a run that is not --dry builds the model
VARIANTS = ("fp16", "fp16-graphs", "qjit-int4", "torch-int4", "qjit-w8a8", "qjit-fp8")
SCHEME = {"qjit-int4": "int4", "qjit-w8a8": "w8a8", "qjit-fp8": "fp8"}
COMPILED = ("fp16-graphs", "qjit-int4", "torch-int4", "qjit-w8a8", "qjit-fp8")

LLAMA2_7B = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_attention_heads=32,
                 num_key_value_heads=32, max_position_embeddings=4096, rms_norm_eps=1e-5)
TINY = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=4,
            max_position_embeddings=1024, rms_norm_eps=1e-5)


def ints(text):
    return [int(v) for v in text.split(",") if v]


def names(text):
    chosen = [v for v in text.split(",") if v]
    for v in chosen:
        if v not in VARIANTS:
            raise argparse.ArgumentTypeError("variant %r; expected some of %s" % (v, ", ".join(VARIANTS)))
    return chosen


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=32, help="decoder layers (default 32, Llama-2-7B's)")
    p.add_argument("--batch", type=ints, default=[1, 16], help="batch sizes, comma-separated (default 1,16)")
    p.add_argument("--prompt", type=int, default=128, help="prompt tokens (default 128)")
    p.add_argument("--new", type=int, default=256, help="tokens generated (default 256)")
    p.add_argument("--variants", type=names, default=list(VARIANTS),
                   help="comma-separated, of %s (default all)" % ", ".join(VARIANTS))
    p.add_argument("--accuracy-steps", type=int, default=64, help="teacher-forced steps of the accuracy (default 64)")
    p.add_argument("--reps", type=int, default=3, help="timed calls per measurement, the median kept (default 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tune", metavar="BUDGET", help="`qjit tune --budget BUDGET` of the int4 specs first")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--tiny", action="store_true", help="hidden 256 instead of Llama-2-7B's shape")
    p.add_argument("--dry", action="store_true", help="on the CPU: build and convert, time nothing")
    a = p.parse_args(argv)
    if a.new < 2 or a.prompt < 1 or a.layers < 1 or a.reps < 1 or not a.batch:
        p.error("--new must be at least 2, --prompt, --layers and --reps at least 1, --batch not empty")
    return a


def llama_config(args):
    from transformers import LlamaConfig

    shape = TINY if args.tiny else LLAMA2_7B
    return LlamaConfig(num_hidden_layers=args.layers, tie_word_embeddings=False, bos_token_id=1, eos_token_id=None,
                       pad_token_id=0, initializer_range=0.02, **shape)


def build_model(config, device, dtype, seed):
    """LlamaForCausalLM(config) on `device` in `dtype`, in eval mode, initialised by transformers from `seed`."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(saved)
    return model.eval()


def torch_int4_linear_class():
    """The torch-int4 variant's module class (defined on first use: this file imports without torch)."""
    import torch

    class Int4Linear(torch.nn.Module):
        """PyTorch's int4 weight-only linear (aten._weight_int4pack_mm) on a qjit QuantLinear's codes q, scales s
        and integer zero points z: the op computes (q − 8)·s + m per group and column, so m = (8 − z)·s gives
        (q − z)·s. Scales and m in bf16, the op's type. pack=False keeps the codes unpacked (the CUDA packing
        op needs a GPU): forward then cannot run."""

        def __init__(self, quant, pack=True, inner_k_tiles=8):
            super().__init__()
            from qjit import wq

            k, n = quant.in_features, quant.out_features
            q = wq.unpack(quant.qweight, k, n).t().contiguous().to(torch.int32)  # [N, K]
            packed = ((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8)  # k even in the high nibble
            if pack:
                try:
                    packed = torch.ops.aten._convert_weight_to_int4pack(packed, inner_k_tiles)
                except RuntimeError:  # torch before 2.5 takes the codes as int32 [N, K]
                    packed = torch.ops.aten._convert_weight_to_int4pack(q, inner_k_tiles)
            self.register_buffer("weight_int4", packed)
            s = quant.scales.float()
            self.register_buffer("scales_and_zeros", torch.stack([s, (8 - quant.zeros.float()) * s], -1)
                                 .to(torch.bfloat16).contiguous())
            self.group_size, self.out_features = quant.group_size, n

        def forward(self, x):
            y = torch.ops.aten._weight_int4pack_mm(x.reshape(-1, x.shape[-1]), self.weight_int4, self.group_size,
                                                   self.scales_and_zeros)
            return y.reshape(*x.shape[:-1], self.out_features)

    return Int4Linear


def make_torch_int4(base, replaced, pack=True):
    """A bf16 copy of float `base` whose Linears named in `replaced` (qjit-int4's QuantLinears) run through
    aten._weight_int4pack_mm on the same codes. On the GPU one layer is checked against x·Wᵀ of its weights
    first: a packing torch reads otherwise fails here, not as a wrong accuracy."""
    import torch

    from qjit import nn as qnn

    Int4Linear = torch_int4_linear_class()
    model = copy.deepcopy(base).to(torch.bfloat16)
    for name, quant in replaced.items():
        qnn._replace(model, name, Int4Linear(quant, pack=pack))
    if pack:
        name, quant = next(iter(replaced.items()))
        x = torch.randn(3, quant.in_features, device=quant.qweight.device, dtype=torch.bfloat16)
        want = x.float() @ quant.dequantized_weight().t()
        err = float((model.get_submodule(name)(x).float() - want).abs().max())
        if err > 2e-2 * float(want.abs().max()):
            raise RuntimeError("torch-int4: %s gives x·Wᵀ within %.3g of max |x·Wᵀ| = %.3g: this torch packs "
                               "int4 otherwise" % (name, err, float(want.abs().max())))
    return model


def generate_kwargs(variant):
    """transformers compiles a generate's decode step when the cache is static, unless told not to."""
    from transformers import CompileConfig

    if variant in COMPILED:
        return dict(compile_config=CompileConfig(mode="reduce-overhead"))
    return dict(disable_compile=True)


def generate(model, ids, new, kwargs, cache=None):
    """Greedy: `new` tokens after `ids` [B, P], with `cache` (a StaticCache, reset first) or a dynamic one."""
    import torch

    if cache is not None:
        cache.reset()
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False,
                              past_key_values=cache, **kwargs)


def timed(model, ids, new, kwargs, reps):
    """(decode ms per step, first token ms): medians of `reps` generate calls of `new` tokens and of 1 token. One
    static cache serves every call: a cache made by each generate would sit at new addresses, and the CUDA graphs
    of a compiled step would be recorded again in each timed call."""
    import torch
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=ids.shape[1] + new)

    def once(tokens):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        generate(model, ids, tokens, kwargs, cache)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    once(new)  # warm-up: compiles, captures the graphs, loads or compiles qjit's kernels
    full = statistics.median(once(new) for _ in range(reps))
    first = statistics.median(once(1) for _ in range(reps))
    return (full - first) / (new - 1), first


def teacher_forced_logits(model, ids, tokens):
    """float32 logits [steps, B, V] of each decode step, the prompt `ids` then `tokens` [B, steps] fed one a step
    (eager, a dynamic cache: the decode kernels at M = B rows)."""
    import torch

    logits = []
    with torch.no_grad():
        out = model(ids, use_cache=True)
        for t in range(tokens.shape[1]):
            logits.append(out.logits[:, -1].float())
            if t + 1 < tokens.shape[1]:
                out = model(tokens[:, t:t + 1], past_key_values=out.past_key_values, use_cache=True)
    return torch.stack(logits)


def accuracy(model, twin_logits, ids, tokens):
    """{rel_err_mean, rel_err_max, same_token} of model's teacher-forced logits against the twin's."""
    got = teacher_forced_logits(model, ids, tokens)
    rel = ((got - twin_logits).norm(dim=-1) / twin_logits.norm(dim=-1)).mean(dim=1)  # per step, over the batch
    same = (got.argmax(-1) == twin_logits.argmax(-1)).float().mean()
    return {"rel_err_mean": float(rel.mean()), "rel_err_max": float(rel.max()), "same_token": float(same)}


def int4_specs(config):
    """The wq_gemm and fused_ffn specs of the model's 4-bit layers (for --tune)."""
    d, h, kv = config.hidden_size, config.intermediate_size, config.num_key_value_heads * (
        config.hidden_size // config.num_attention_heads)
    shapes = sorted({(d, d), (d, kv), (d, h), (h, d)})
    return ([("wq_gemm", "k=%d,n=%d,g=128,bits=4,zero=int" % s) for s in shapes]
            + [("fused_ffn", "d=%d,h=%d,weights=native,bits=4,g=128,zero=int" % (d, h))])


def tune(config, args):
    import qjit

    rows = sorted(set(args.batch) | {b * args.prompt for b in args.batch})
    for op, spec in int4_specs(config):
        m = [r for r in rows if r <= 8] if op == "fused_ffn" else rows
        if m:
            print("# tune %s %s m=%s" % (op, spec, ",".join(map(str, m))), flush=True)
            qjit.tune(op, spec, m=m, budget=args.tune)


def row(variant, batch, ms=None, first=None, acc=None, note=""):
    r = {"variant": variant, "batch": batch, "ms_per_token": ms, "tokens_per_s": batch * 1e3 / ms if ms else None,
         "first_token_ms": first, "rel_err_mean": None, "rel_err_max": None, "same_token": None, "note": note}
    r.update(acc or {})
    return r


def table(rows, title):
    """The results as text: one line per variant and batch, the speed-up over fp16-graphs at the same batch."""
    base = {r["batch"]: r["ms_per_token"] for r in rows if r["variant"] == "fp16-graphs" and r["ms_per_token"]}
    f = lambda v, fmt: fmt % v if v is not None else "-"  # noqa: E731
    lines = [title, "%-12s %5s %9s %9s %8s %10s %18s %10s  %s" % (
        "variant", "batch", "ms/token", "tokens/s", "vs graphs", "1st tok ms", "rel err mean / max", "same token",
        "note")]
    for r in rows:
        ms, b = r["ms_per_token"], base.get(r["batch"])
        err = ("%.2e / %.2e" % (r["rel_err_mean"], r["rel_err_max"])) if r["rel_err_mean"] is not None else "-"
        lines.append("%-12s %5d %9s %9s %8s %10s %18s %10s  %s" % (
            r["variant"], r["batch"], f(ms, "%.2f"), f(r["tokens_per_s"], "%.1f"),
            f(b / ms if ms and b else None, "%.2fx"), f(r["first_token_ms"], "%.1f"), err,
            f(r["same_token"] * 100 if r["same_token"] is not None else None, "%.1f%%"), r["note"]))
    return "\n".join(lines)


def run(args):
    """Every variant at every batch size: a list of row() dicts (each variant's failure its row's note)."""
    import torch

    from qjit import nn as qnn

    dry = args.dry
    device = "cpu" if dry else DEVICE
    for name in ("cache_size_limit", "recompile_limit"):  # a compile per model and batch, more than the default 8
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    config = llama_config(args)
    if args.tune and not dry:
        tune(config, args)
    base = build_model(config, device, torch.float16, args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1)
    prompts = {b: torch.randint(2, config.vocab_size, (b, args.prompt), generator=gen).to(device) for b in args.batch}
    rows = []

    def measure(variant, model, twin=None):
        """Rows of `variant` at each batch: its speed, and its accuracy against `twin` (a float model)."""
        for b in args.batch:
            if dry:
                rows.append(row(variant, b, note="dry: built, not run"))
                continue
            try:
                torch._dynamo.reset()
                ms, first = timed(model, prompts[b], args.new, generate_kwargs(variant), args.reps)
                acc = None
                if twin is not None:
                    ids = prompts[b]
                    tokens = generate(twin, ids, args.accuracy_steps, generate_kwargs("fp16"))[:, ids.shape[1]:]
                    acc = accuracy(model, teacher_forced_logits(twin, ids, tokens), ids, tokens)
                rows.append(row(variant, b, ms, first, acc, "bf16" if variant == "torch-int4" else ""))
            except Exception as e:
                rows.append(row(variant, b, note=failed(e)))
            print(table(rows[-1:], "").splitlines()[-1], flush=True)

    for variant in ("fp16", "fp16-graphs"):
        if variant in args.variants:
            measure(variant, base)
    for variant in ("qjit-int4", "qjit-w8a8", "qjit-fp8"):
        wanted = [v for v in (variant, "torch-int4" if variant == "qjit-int4" else None) if v in args.variants]
        if not wanted:
            continue
        if variant == "qjit-fp8" and not dry and torch.cuda.get_device_capability() < (8, 9):
            rows.extend(row(variant, b, note="skipped: e4m3 needs compute capability 8.9+") for b in args.batch)
            continue
        try:
            model = copy.deepcopy(base)
            replaced = qnn.quantize_model(model, SCHEME[variant])
            twin = qnn.load_dequantized(copy.deepcopy(base), replaced)
        except Exception as e:
            rows.extend(row(v, b, note=failed(e)) for v in wanted for b in args.batch)
            continue
        if variant in wanted:
            measure(variant, model, twin)
        if "torch-int4" in wanted:
            try:
                int4 = make_torch_int4(base, replaced, pack=not dry)
            except Exception as e:
                rows.extend(row("torch-int4", b, note=failed(e)) for b in args.batch)
            else:
                measure("torch-int4", int4, twin)
                del int4
        del model, twin, replaced
        if not dry:
            torch.cuda.empty_cache()
    return config, rows


def failed(e):
    """A row's note for a variant that could not run (a missing op, too little memory): the others go on."""
    return "failed: %s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:160])


def title(config, args):
    import torch
    import transformers

    device = "CPU (dry run)" if args.dry else torch.cuda.get_device_name()
    return ("# decode: LlamaForCausalLM %s, %d layers (hidden %d, intermediate %d, vocabulary %d), prompt %d, %d new "
            "tokens, greedy, static KV cache; %s, torch %s, transformers %s"
            % ("tiny" if args.tiny else "Llama-2-7B shape", config.num_hidden_layers, config.hidden_size,
               config.intermediate_size, config.vocab_size, args.prompt, args.new, device, torch.__version__,
               transformers.__version__))


def main(argv=None):
    args = parse_args(argv)
    config, rows = run(args)
    head = title(config, args)
    print(table(rows, head))
    if args.json:
        import torch
        import transformers

        doc = {"title": head, "device": "cpu" if args.dry else torch.cuda.get_device_name(),
               "torch": torch.__version__, "transformers": transformers.__version__,
               "args": {k: v for k, v in vars(args).items() if k != "json"},
               "config": {k: getattr(config, k) for k in ("num_hidden_layers", "hidden_size", "intermediate_size",
                                                          "num_attention_heads", "num_key_value_heads", "vocab_size")},
               "rows": rows}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
