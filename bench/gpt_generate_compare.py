#!/usr/bin/env python3
"""Generation speed: weft-generate (KV cache) against PyTorch 1.13 running the same
checkpoint with a KV cache of its own (a reference loop written here) and with nanoGPT's
generate() (no cache: a full forward over the cropped context per token), interleaved.

    bench/gpt_generate_compare.py [--rounds R] [--model baby|gpt2] [--batches 1,8]
                                  [--prompt-tokens P] [--new-tokens N] [--build DIR]

The model is configs/gpt-char.ini's baby GPT or configs/gpt2-small.ini's GPT-2 small
(byte vocabulary), its weights those weft-train writes after one step (the speed of
generation does not depend on them). Every run generates N tokens after the same P-byte
prompt (the first bytes of the text's validation split), sampling from the full softmax
at temperature 1, for B rows at once (weft-generate --num-samples B; PyTorch on idx
[B, P]); P + N stays within the block, so the cache is never refilled. tokens/s counts
B * N tokens over the time from the prompt to the last token (the prompt's forward
included). PyTorch runs one 4-token warm-up generation first and is then timed;
weft-generate alike with --warmup 4 (weft_t1, weft_t2), and cold as well (weft_cold_t1,
_t2: the process's first generation, which waits for oneDNN to compile its kernels on the
first product, 30-40 ms of CPU; what a one-shot command sees).

Settings per round: weft-generate with 1 and 2 threads, warm and cold; PyTorch's KV-cache loop and
nanoGPT's generate() each with 1 and 2 threads, with and without OMP_WAIT_POLICY=PASSIVE.
Prints tokens/s and ms per step (one token per row) as median (min-max), and weft's best
against the best of each PyTorch loop. Run from the repository root after `make`, on a
quiet machine; PyTorch is Debian's python3-torch (/usr/bin/python3)."""
import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = os.path.join(ROOT, "data/text/kjv-genesis-2kings.txt")
MODELS = {
    # config, the cheap one-step training run that writes the checkpoint
    "baby": ("configs/gpt-char.ini", []),
    "gpt2": ("configs/gpt2-small.ini", ["data.batch_size=1", "data.block_size=32",
                                       "data.val.block_size=32", "train.accumulate=1"]),
}
TORCH_SETTINGS = [("t1", 1, None), ("t1_passive", 1, "PASSIVE"), ("t2", 2, None),
                  ("t2_passive", 2, "PASSIVE")]


def prompt_bytes(p):
    with open(TEXT, "rb") as f:
        data = f.read()
    cut = int(len(data) * 0.9)
    return data[cut:cut + p]


# ---- PyTorch ------------------------------------------------------------------------------

def load_torch_model(checkpoint):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import nanogpt_torch
    spec = importlib.util.spec_from_file_location(
        "check_gpt_checkpoint", os.path.join(ROOT, "scripts/check-gpt-checkpoint.py"))
    ckpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ckpt)
    tensors, meta = ckpt.load_safetensors(checkpoint)
    keys = {"n_layer": int, "n_head": int, "n_embd": int, "block_size": int,
            "vocab_size": int, "dropout": float}
    cfg = {k: conv(meta["model." + k]) for k, conv in keys.items()}
    cfg["bias"] = meta["model.bias"] in ("true", "1")
    cfg["gelu"] = meta.get("model.gelu", "none")
    model = nanogpt_torch.GPT(nanogpt_torch.Config(**cfg))
    model.load_state_dict({k: v for k, v in tensors.items() if not k.startswith("state.")},
                          strict=False)
    model.eval()
    torch.set_grad_enabled(False)
    return model


def last_logits(model, x):
    """nanoGPT's inference tail: ln_f and lm_head on the last position only."""
    t = model.transformer
    return model.lm_head(t.ln_f(x[:, [-1], :]))[:, -1, :]


def nanogpt_generate(model, idx, new_tokens):
    """nanoGPT's model.generate(idx, max_new_tokens) at temperature 1, no top_k, with its
    forward(targets=None) (the full context each step, logits of the last position)."""
    import torch
    import torch.nn.functional as F
    t = model.transformer
    bs = model.config.block_size
    for _ in range(new_tokens):
        cond = idx if idx.size(1) <= bs else idx[:, -bs:]
        pos = torch.arange(0, cond.size(1), dtype=torch.long)
        x = t.drop(t.wte(cond) + t.wpe(pos))
        for block in t.h:
            x = block(x)
        probs = F.softmax(last_logits(model, x), dim=-1)
        idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
    return idx


def kv_generate(model, idx, new_tokens):
    """The same sampling with a KV cache: per layer, keys and values of the positions seen
    so far in preallocated [B, nh, P + N, hd] buffers; the prompt in one forward (causal
    mask), then one position per token attending to every cached one."""
    import math
    import torch
    import torch.nn.functional as F
    t, c = model.transformer, model.config
    B, P = idx.shape
    nh, C = c.n_head, c.n_embd
    hd = C // nh
    L = P + new_tokens
    K = [torch.empty(B, nh, L, hd) for _ in t.h]
    V = [torch.empty(B, nh, L, hd) for _ in t.h]
    causal = torch.tril(torch.ones(L, L, dtype=torch.bool))
    out = [idx]
    cur, pos0 = idx, 0
    for _ in range(new_tokens):
        T = cur.size(1)
        x = t.wte(cur) + t.wpe(torch.arange(pos0, pos0 + T, dtype=torch.long))
        for l, block in enumerate(t.h):
            a = block.attn
            q, k, v = a.c_attn(block.ln_1(x)).split(C, dim=2)
            q = q.view(B, T, nh, hd).transpose(1, 2)
            K[l][:, :, pos0:pos0 + T] = k.view(B, T, nh, hd).transpose(1, 2)
            V[l][:, :, pos0:pos0 + T] = v.view(B, T, nh, hd).transpose(1, 2)
            keys, values = K[l][:, :, :pos0 + T], V[l][:, :, :pos0 + T]
            att = (q @ keys.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            if T > 1:
                att = att.masked_fill(~causal[pos0:pos0 + T, :pos0 + T], float("-inf"))
            y = F.softmax(att, dim=-1) @ values
            x = x + a.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
            x = x + block.mlp(block.ln_2(x))
        probs = F.softmax(last_logits(model, x), dim=-1)
        cur = torch.multinomial(probs, num_samples=1)
        out.append(cur)
        pos0 += T
    return torch.cat(out, dim=1)


def torch_worker(checkpoint, loop, batch, prompt, new_tokens, threads):
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(1337)
    model = load_torch_model(checkpoint)
    fn = kv_generate if loop == "kv" else nanogpt_generate
    idx = torch.tensor([list(prompt)] * batch, dtype=torch.long)
    fn(model, idx, 4)  # warm-up: thread pool, allocator, first-call paths
    t0 = time.perf_counter()
    out = fn(model, idx, new_tokens)
    seconds = time.perf_counter() - t0
    assert out.shape == (batch, len(prompt) + new_tokens)
    print(json.dumps(dict(tps=batch * new_tokens / seconds, ms=1e3 * seconds / new_tokens)))


def torch_run(checkpoint, loop, batch, prompt_len, new_tokens, threads, policy):
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--torch-worker",
                          checkpoint, "--loop", loop, "--batch", str(batch),
                          "--prompt-tokens", str(prompt_len), "--new-tokens", str(new_tokens),
                          "--threads", str(threads)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# ---- weft ---------------------------------------------------------------------------------

TIMING = re.compile(r"weft-generate: (?:\d+ x )?\d+ tokens in ([0-9.]+) s \(([0-9.]+) tokens/s\)")


def make_checkpoint(build, model, tmp):
    config, sets = MODELS[model]
    path = os.path.join(tmp, model + ".safetensors")
    cmd = [os.path.join(ROOT, build, "apps/weft-train"), config,
           "--set", "train.max_iters=1", "--set", "train.eval_iters=1",
           "--set", "train.eval_interval=0", "--set", "train.checkpoint=" + path,
           "--set", "train.log=" + os.path.join(tmp, model + ".csv")]
    for kv in sets:
        cmd += ["--set", kv]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    return path


def weft_run(build, checkpoint, batch, prompt, new_tokens, threads, warmup):
    cmd = [os.path.join(ROOT, build, "apps/weft-generate"), checkpoint,
           "--prompt", prompt.decode("latin-1"), "--max-new-tokens", str(new_tokens),
           "--num-samples", str(batch), "--threads", str(threads), "--warmup", str(warmup)]
    r = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    m = TIMING.search(r.stderr.decode("utf-8", "replace"))
    if not m:
        raise SystemExit("weft-generate printed no timing line:\n" + r.stderr.decode())
    # tokens/s, not the seconds: weft-generate prints those to 10 ms, a fifth of the baby's
    # 48 tokens (its tokens/s come from the unrounded time)
    tps = float(m.group(2))
    return dict(tps=tps, ms=1e3 * batch / tps)


def summary(values, fmt):
    return (fmt + " (" + fmt + "-" + fmt + ")") % (statistics.median(values), min(values),
                                                   max(values))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", choices=sorted(MODELS), default="baby")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=None,
                    help="default: 48 for baby (its block is 64), 64 for gpt2")
    ap.add_argument("--no-nanogpt", action="store_true", help="leave nanoGPT's generate() out")
    ap.add_argument("--build", default="build")
    ap.add_argument("--torch-worker", metavar="CHECKPOINT", help=argparse.SUPPRESS)
    ap.add_argument("--loop", default="kv", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    new_tokens = args.new_tokens or (48 if args.model == "baby" else 64)
    if args.torch_worker:
        torch_worker(args.torch_worker, args.loop, args.batch, prompt_bytes(args.prompt_tokens),
                     new_tokens, args.threads)
        return
    prompt = prompt_bytes(args.prompt_tokens)
    if b"\0" in prompt or max(prompt) >= 128:
        raise SystemExit("the prompt is not plain ASCII (a command-line argument of "
                         "weft-generate): choose another --prompt-tokens")
    batches = [int(b) for b in args.batches.split(",")]
    have_torch = subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                                capture_output=True).returncode == 0
    loops = ["kv"] + ([] if args.no_nanogpt else ["nanogpt"])
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = make_checkpoint(args.build, args.model, tmp)
        print("# %s (%s): prompt %d bytes, %d new tokens per row; %d rounds, interleaved" %
              (args.model, MODELS[args.model][0], len(prompt), new_tokens, args.rounds))
        sys.stdout.flush()
        results = {}  # (batch, name) -> [runs]
        for r in range(args.rounds):
            for batch in batches:
                for threads in (1, 2):
                    for warmup, kind in ((4, ""), (0, "cold_")):
                        results.setdefault((batch, "weft_%st%d" % (kind, threads)), []).append(
                            weft_run(args.build, checkpoint, batch, prompt, new_tokens, threads,
                                     warmup))
                if not have_torch:
                    continue
                for loop in loops:
                    for name, threads, policy in TORCH_SETTINGS:
                        results.setdefault((batch, "torch_%s_%s" % (loop, name)), []).append(
                            torch_run(checkpoint, loop, batch, len(prompt), new_tokens,
                                      threads, policy))
            print("# round %d/%d done" % (r + 1, args.rounds), file=sys.stderr)
    print("%-6s %-24s %-26s %s" % ("batch", "setting", "tokens/s med (min-max)",
                                   "ms/step med (min-max)"))
    for (batch, name), runs in results.items():
        print("%-6d %-24s %-26s %s" % (batch, name, summary([x["tps"] for x in runs], "%.1f"),
                                       summary([x["ms"] for x in runs], "%.2f")))
    for batch in batches:
        med = {name: statistics.median(x["tps"] for x in runs)
               for (b, name), runs in results.items() if b == batch}
        warm = max((n for n in med if n.startswith("weft_t")), key=med.get)
        cold = max((n for n in med if n.startswith("weft_cold_")), key=med.get)
        for loop in loops:
            names = [n for n in med if n.startswith("torch_%s_" % loop)]
            if names:
                best = max(names, key=med.get)
                for weft in (warm, cold):
                    print("batch %d: %s / %s: %.2fx" % (batch, weft, best,
                                                        med[weft] / med[best]))


if __name__ == "__main__":
    main()
