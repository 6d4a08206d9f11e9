#!/usr/bin/env python3
"""tests/cuda_emu/mutations.py: do the emulated CUDA suites catch broken kernels?

Copies the tree (what git tracks, and new files it does not ignore) into a scratch
directory, builds it once (release, -Dcuda=disabled: the emulated plugins only), checks
that the suites pass there, then breaks one thing at a time -- a kernel's index, a
barrier, a shuffle, a stream wait -- rebuilds and runs the suites that should notice.
A mutation is caught when one of them fails. The working tree is never touched.

Run it by hand (it rebuilds a whole copy of weft, then a plugin per mutation):
    python3 tests/cuda_emu/mutations.py                 # every mutation
    python3 tests/cuda_emu/mutations.py --list
    python3 tests/cuda_emu/mutations.py NAME...         # some of them
    python3 tests/cuda_emu/mutations.py --work DIR      # keep (and reuse) the copy in DIR
The last lines are a table: each mutation, caught or not, and by which suite.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

# name, file, text, replacement, occurrence (0: the first), suites that should fail, what
MUTATIONS = [
    ("block-reduce-barrier", "plugins/cuda/cuda_plugin.h",
     "        smem[warp] = v;\n    __syncthreads();\n", "        smem[warp] = v;\n", 0,
     ["conformance_cuda_emu", "cuda_ops_emu"],
     "block_reduce reads the warps' partial results without waiting for them"),
    ("block-reduce-reuse-barrier", "plugins/cuda/cuda_plugin.h",
     "    __syncthreads(); /* smem may be reused at once */\n", "", 0,
     ["conformance_cuda_emu", "cuda_ops_emu"],
     "block_reduce returns before every thread has read the shared partials"),
    ("attention-tile-barrier", "plugins/cuda/kernels_attention.cu",
     "            __syncthreads(); /* the previous tile is read by everyone */\n", "", 0,
     ["cuda_ops_emu"],
     "flash_fwd stages the next key tile while others still read the previous one"),
    ("warp-reduce-level", "plugins/cuda/cuda_plugin.h",
     "for (int mask = 16; mask > 0; mask >>= 1)", "for (int mask = 16; mask > 1; mask >>= 1)", 0,
     ["conformance_cuda_emu"],
     "warp_reduce skips its last shuffle (lanes 2k and 2k+1 never combine)"),
    ("sddmm-shuffle", "plugins/sparse/cuda/sddmm_kernels.cu",
     "for (int offset = kWarp / 2; offset > 0; offset /= 2)",
     "for (int offset = kWarp / 4; offset > 0; offset /= 2)", 0,
     ["sparse_cuda_emu"],
     "weft's SDDMM kernel sums half of the warp's lanes"),
    ("im2col-dilation", "plugins/cuda/kernels_conv.cu",
     "int64_t y = (l / g.OW) * g.sh - g.ph + i * g.dh;",
     "int64_t y = (l / g.OW) * g.sh - g.ph + i;", 0,
     ["conformance_cuda_emu"],
     "im2col ignores the vertical dilation"),
    ("reduce-split-finish", "plugins/cuda/kernels_reduce.cu",
     "for (int64_t s = 1; s < g.splits; s++)", "for (int64_t s = 2; s < g.splits; s++)", 0,
     ["conformance_cuda_emu"],
     "finish_kernel drops the second partial of a split reduction"),
    ("softmax-stride", "plugins/cuda/kernels_softmax.cu",
     "for (int64_t i = threadIdx.x; i < len; i += blockDim.x)\n            sum +=",
     "for (int64_t i = threadIdx.x; i < len; i += 32)\n            sum +=", 0,
     ["conformance_cuda_emu", "train_cuda_emu"],
     "softmax's sum strides by a warp instead of the block (elements counted twice)"),
    ("vector-tail-past-the-end", "plugins/cuda/kernels_elementwise.cu",
     "for (int j = 0; j < VEC && i + j < n; j++)", "for (int j = 0; j < VEC; j++)", 0,
     ["conformance_cuda_emu", "cuda_emu"],
     "the contiguous kernel's tail writes a whole vector, up to 3 elements past its output"),
    ("vector-misaligned", "plugins/cuda/kernels_elementwise.cu",
     "contiguous = aligned(o, sizeof *o * kVec) &&", "contiguous = true || aligned(o, sizeof *o * kVec) &&",
     0, ["conformance_cuda_emu", "cuda_emu"],
     "the vectorised path takes views that are not aligned to a vector"),
    ("scatter-add-not-atomic", "plugins/cuda/kernels_index.cu",
     "        atomicAdd(p, v);\n", "        *p += v;\n", 0,
     ["conformance_cuda_emu"],
     "scatter_add's float and double adds are plain read-modify-writes"),
    ("peer-copy-no-wait", "plugins/cuda/backend.c",
     "rc = CUDA_CHECK(cudaStreamWaitEvent(stream, src_ready, 0));", "rc = 0;", 0,
     ["cuda_emu"],
     "a copy between devices does not wait for the work that writes its source"),
    ("side-copy-no-wait", "plugins/cuda/backend.c",
     "CUDA_CHECK(cudaStreamWaitEvent(d->copy_stream, d->compute_mark, 0)) != 0 ||", "", 0,
     ["cuda_emu"],
     "the side copy does not wait for the work queued before it on the current stream"),
    ("pinned-block-no-event", "plugins/cuda/backend.c",
     "if (!ha || host_allocator_record_event(ha, host, stream) >= 0)", "if (1)", 0,
     ["cuda_emu"],
     "a pinned block released during its async copy is reused before the copy has read it"),
    ("col2im-stride", "plugins/cuda/kernels_conv.cu",
     "if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.OH)", "if (ty < 0 || ty / g.sh >= g.OH)", 0,
     ["conformance_cuda_emu", "train_cuda_emu"],
     "col2im adds taps that fall between the vertical stride's rows"),
    ("max-pool-dilation", "plugins/cuda/kernels_conv.cu",
     "for (int64_t c = x0; c < x1; c += g.dw)", "for (int64_t c = x0; c < x1; c++)", 0,
     ["conformance_cuda_emu"],
     "max_pool2d reads every column of its window, not every dilation-th"),
    ("softmax-block-too-big", "plugins/cuda/kernels_softmax.cu",
     "t > kThreads ? kThreads : t", "t > 2048 ? 2048 : t", 0,
     ["conformance_cuda_emu"],
     "softmax launches rows longer than 1024 with up to 2048 threads a block"),
    ("gemm-batch-stride", "plugins/cuda/kernels_matmul.c",
     "o->batch_stride = t->shape[0] == 1 ? 0 : t->stride[0];", "o->batch_stride = 0;", 0,
     ["conformance_cuda_emu", "cuda_emu"],
     "a batched matmul hands cuBLAS a batch stride of 0 (every batch reads the first)"),
    ("coo-columns-shifted", "plugins/sparse/cuda/context.c",
     "rows + (size_t)nnz * sizeof(int64_t), values,", "rows + (size_t)(nnz - 1) * sizeof(int64_t), values,", 0,
     ["sparse_cuda_emu"],
     "the COO descriptor's column indices start one entry early (the last row index first)"),
    ("nccl-no-order", "plugins/dist/nccl.c",
     "err = cudaStreamWaitEvent(g->stream, ready, 0);", "err = cudaSuccess;", 0,
     ["dist_nccl_cuda_emu", "train_ddp_cuda_emu"],
     "a collective does not wait for the work weft queued on its stream (its input)"),
    ("sort-ties-reversed", "plugins/cuda/kernels_scan_sort.cu",
     "(j < i && !before<C>(v, w, descending))", "(j > i && !before<C>(v, w, descending))", 0,
     ["cuda_ops_emu"],
     "sort places equal elements in reverse order (not stable: other indices)"),
    ("scan-line-stride", "plugins/cuda/kernels_scan_sort.cu",
     "C v = D::load(in + a + i * g.along_a);", "C v = D::load(in + a + i);", 0,
     ["cuda_ops_emu"],
     "a scan reads its line as if the line were contiguous"),
]


def sh(cmd, cwd, log, timeout=None):
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        return subprocess.call(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)


def copy_tree(root, dst):
    files = subprocess.check_output(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root).split(b"\0")
    for name in files:
        if not name:
            continue
        rel = name.decode()
        src = os.path.join(root, rel)
        if not os.path.isfile(src):
            continue
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dst, rel))


def run_suites(build, suites, log):
    """The suites that failed (meson test names)."""
    failed = []
    for s in suites:
        rc = sh(["meson", "test", "-C", build, "--no-rebuild", "--print-errorlogs", s],
                build, log, timeout=1800)
        if rc != 0:
            failed.append(s)
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="mutations to run (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutations and stop")
    ap.add_argument("--work", help="the copy's directory (kept; reused when it exists)")
    args = ap.parse_args()
    if args.list:
        for m in MUTATIONS:
            print(f"{m[0]:28} {m[1]}: {m[6]}")
        return 0
    chosen = [m for m in MUTATIONS if not args.names or m[0] in args.names]
    unknown = set(args.names) - {m[0] for m in MUTATIONS}
    if unknown:
        sys.exit(f"mutations: unknown {', '.join(sorted(unknown))} (--list names them)")
    root = subprocess.check_output(["git", "rev-parse", "--show-toplevel"],
                                   cwd=os.path.dirname(os.path.abspath(__file__))).decode().strip()
    work = args.work or tempfile.mkdtemp(prefix="weft-mutations.")
    # the build inside the copy, as a worktree's: the same relative paths on the compiler's
    # command lines as in the working tree's build/, so ccache serves the unmutated files
    src, log = os.path.join(work, "src"), os.path.join(work, "log.txt")
    build = os.path.join(src, "build")
    print(f"mutations: copy and build in {work} (log: {log})", flush=True)
    if not os.path.isdir(src):
        copy_tree(root, src)
    if not os.path.isfile(os.path.join(build, "build.ninja")):
        if sh(["meson", "setup", build, "--buildtype=release", "-Dcuda=disabled"], src, log):
            sys.exit("mutations: meson setup failed (see the log)")
    if sh(["ninja", "-C", build], src, log):
        sys.exit("mutations: the copy does not build (see the log)")
    suites = sorted({s for m in chosen for s in m[5]})
    t0 = time.time()
    failed = run_suites(build, suites, log)
    if failed:
        sys.exit(f"mutations: the unmutated copy already fails {', '.join(failed)}")
    print(f"mutations: baseline passes ({', '.join(suites)}, {time.time() - t0:.0f} s)", flush=True)
    results = []
    for name, rel, old, new, nth, mutation_suites, what in chosen:
        path = os.path.join(src, rel)
        with open(path) as f:
            text = f.read()
        at = -1
        for _ in range(nth + 1):
            at = text.find(old, at + 1)
        if at < 0:
            results.append((name, "MISSING", "the text to break is not in " + rel))
            continue
        with open(path, "w") as f:
            f.write(text[:at] + new + text[at + len(old):])
        try:
            if sh(["ninja", "-C", build], src, log):
                results.append((name, "NO BUILD", "the mutation does not compile"))
                continue
            t0 = time.time()
            failed = run_suites(build, mutation_suites, log)
            verdict = "caught" if failed else "NOT CAUGHT"
            results.append((name, verdict, (", ".join(failed) if failed else
                                            ", ".join(mutation_suites) + " pass") +
                            f" ({time.time() - t0:.0f} s)"))
        finally:
            with open(path, "w") as f:
                f.write(text)
        print(f"mutations: {name}: {results[-1][1]}: {results[-1][2]}", flush=True)
    sh(["ninja", "-C", build], src, log)
    print("\nmutation                      verdict     by")
    for name, verdict, by in results:
        print(f"{name:29} {verdict:11} {by}")
    if not args.work:
        print(f"(the copy stays in {work}: remove it when done)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
