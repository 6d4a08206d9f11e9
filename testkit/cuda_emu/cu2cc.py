#!/usr/bin/env python3
"""testkit/cuda_emu/cu2cc.py: turns a .cu file into the C++ that weft's CUDA emulator
compiles, rewriting only what C++ cannot say itself:

  kernel<<<grid, block, shmem, stream>>>(args)
      -> ::wemu::make_launcher(kernel, "kernel", BOUND, grid, block, shmem, stream)(args)
     (BOUND: the kernel's __launch_bounds__, read from its definition in the file, or 0;
     a template kernel whose launch leaves template arguments to deduce from the
     arguments, as <<<>>> allows, is called through a generic lambda instead:
     make_deduced_launcher([](auto... a) { kernel(a...); }, ...)(args))
  __shared__ T name[N];
      -> static char key; T (&name)[N] = ::wemu::shared_var<T[N]>(&key, "name");
  extern __shared__ __align__(A) T name[];
      -> T *const name = ::wemu::shared_dynamic<T>(A, "name");

Everything else (qualifiers, built-in variables, intrinsics) is left to
weft_cuda_emu/device.h, which the build includes first as nvcc includes cuda_runtime.h.
Lines keep their numbers and a #line directive names the .cu file, so compiler messages
and sanitizer reports point into the original source. Kernel bodies need no #ifdef.

Usage: cu2cc.py INPUT.cu OUTPUT.cc
"""
import re
import sys


def code_mask(text):
    """mask[i] is True where text[i] is code (not in a comment, string or char literal)."""
    mask = [True] * len(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                mask[k] = False
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                mask[k] = False
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            for k in range(i, j):
                mask[k] = False
            i = j
        else:
            i += 1
    return mask


def fail(path, text, pos, why):
    line = text.count("\n", 0, pos) + 1
    sys.exit(f"{path}:{line}: cu2cc: {why}")


def match_forward(text, mask, pos, open_ch, close_ch):
    """Index of the close_ch that closes the open_ch at pos (code only)."""
    depth = 0
    for i in range(pos, len(text)):
        if not mask[i]:
            continue
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i
    return -1


def split_top(args):
    """args split at commas outside <>, (), [] and {}."""
    parts, depth, cur = [], 0, ""
    for ch in args:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def kernel_templates(text):
    """Kernel name -> how many of its template parameters a launch must name (those
    without a default); kernels that are not templates are absent."""
    kernels = {}
    for m in re.finditer(r"template\s*<", text):
        i, depth = m.end() - 1, 0
        for j in range(i, len(text)):
            if text[j] == "<":
                depth += 1
            elif text[j] == ">":
                depth -= 1
                if depth == 0:
                    break
        params = text[i + 1:j]
        k = re.match(r"\s*__global__\s+void\s+(?:__launch_bounds__\s*\([^()]*\)\s*)?(\w+)\s*\(",
                     text[j + 1:])
        if k:
            kernels[k.group(1)] = sum("=" not in p for p in split_top(params))
    return kernels


def launch_bounds(text):
    """Kernel name -> its __launch_bounds__ (max threads) expression."""
    bounds = {}
    for m in re.finditer(r"__launch_bounds__\s*\(([^()]*)\)\s*(\w+)\s*\(", text):
        bounds[m.group(2)] = m.group(1).split(",")[0].strip()
    return bounds


def kernel_start(text, mask, pos, path):
    """Start of the kernel expression ending just before pos (the <<<)."""
    i = pos - 1
    while i >= 0 and (text[i].isspace() or text[i] == "\\"):
        i -= 1
    if i >= 0 and text[i] == ">":  # template arguments
        depth = 0
        while i >= 0:
            if mask[i] and text[i] == ">":
                depth += 1
            elif mask[i] and text[i] == "<":
                depth -= 1
                if depth == 0:
                    break
            i -= 1
        i -= 1
        while i >= 0 and text[i].isspace():
            i -= 1
    end = i + 1
    while i >= 0 and (text[i].isalnum() or text[i] in "_:"):
        i -= 1
    if i + 1 == end:
        fail(path, text, pos, "no kernel name before <<<")
    return i + 1


def rewrite_launches(text, path):
    bounds = launch_bounds(text)
    templates = kernel_templates(text)
    out, last = [], 0
    mask = code_mask(text)
    pos = 0
    while True:
        pos = text.find("<<<", pos)
        if pos < 0:
            break
        if not mask[pos]:
            pos += 3
            continue
        start = kernel_start(text, mask, pos, path)
        # the configuration: up to >>> at parenthesis depth 0
        depth, j = 0, pos + 3
        while j < len(text):
            if mask[j]:
                if text[j] in "([{":
                    depth += 1
                elif text[j] in ")]}":
                    depth -= 1
                elif depth == 0 and text.startswith(">>>", j):
                    break
            j += 1
        if j >= len(text):
            fail(path, text, pos, "no >>> after <<<")
        cfg_end = j
        k = j + 3
        while k < len(text) and (text[k].isspace() or text[k] == "\\"):
            k += 1
        if k >= len(text) or text[k] != "(":
            fail(path, text, pos, "no argument list after >>>")
        close = match_forward(text, mask, k, "(", ")")
        if close < 0:
            fail(path, text, pos, "unbalanced argument list")
        kernel = text[start:pos]
        name = " ".join(kernel.replace("\\", " ").split())
        base = re.split(r"[<\s]", name)[0].split("::")[-1]
        bound = bounds.get(base, "0")
        args = text[k + 1:close]
        named = len(split_top(name[name.index("<") + 1:name.rindex(">")])) if "<" in name else 0
        out.append(text[last:start])
        if named < templates.get(base, 0):
            # template arguments left to deduce from the launch's arguments, as a call would
            kernel = f"[](auto... wemu_a) {{ {kernel.rstrip()}(wemu_a...); }}" + \
                "\n" * kernel.count("\n")
            out.append(f'::wemu::make_deduced_launcher({kernel}, "{name}", {bound}, '
                       f"{text[pos + 3:cfg_end]}){text[cfg_end + 3:k]}({args})")
        else:
            out.append(f'::wemu::make_launcher({kernel}, "{name}", {bound}, {text[pos + 3:cfg_end]})'
                       f"{text[cfg_end + 3:k]}({args})")
        last = close + 1
        pos = close + 1
    out.append(text[last:])
    return "".join(out)


DECL = re.compile(r"^(?P<type>.*?[\w>*&\s])\s*\b(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(\[[^\]]*\]\s*)*)$",
                  re.S)


def rewrite_shared(text, path):
    out, last, count = [], 0, 0
    mask = code_mask(text)
    for m in re.finditer(r"\b__shared__\b", text):
        if not mask[m.start()]:
            continue
        # the declaration: from the start of its statement (which may say extern) to ;
        s = m.start()
        while s > 0 and text[s - 1] not in ";{}\n":
            s -= 1
        prefix = text[s:m.start()]
        is_extern = "extern" in prefix.split()
        semi = text.find(";", m.end())
        if semi < 0:
            fail(path, text, m.start(), "__shared__ declaration without ;")
        decl = text[m.end():semi]
        align = "0"
        am = re.search(r"__align__\s*\(([^()]*)\)", decl)
        if am:
            align = am.group(1).strip()
            decl = decl[:am.start()] + decl[am.end():]
        if "," in decl or "=" in decl:
            fail(path, text, m.start(), "one __shared__ declarator without initializer, please")
        d = DECL.match(decl.strip())
        if not d:
            fail(path, text, m.start(), "cannot read this __shared__ declaration")
        ty, name, dims = d.group("type").strip(), d.group("name"), "".join(d.group("dims").split())
        newlines = "\n" * decl.count("\n")
        indent = prefix.replace("extern", "") if is_extern else prefix
        if is_extern:
            if dims != "[]":
                fail(path, text, m.start(), "extern __shared__ must be an array of unknown size")
            repl = f'{ty} *const {name} = ::wemu::shared_dynamic<{ty}>({align}, "{name}");'
        else:
            count += 1
            key = f"wemu_shared_key_{name}_{count}"
            ref = f"{ty} (&{name}){dims}" if dims else f"{ty} &{name}"
            repl = (f"static char {key}; {ref} = "
                    f'::wemu::shared_var<{ty}{dims}>(&{key}, "{name}");')
        out.append(text[last:s])
        out.append(indent + repl + newlines)
        last = semi + 1
    out.append(text[last:])
    return "".join(out)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    text = rewrite_shared(rewrite_launches(text, src), src)
    with open(dst, "w", encoding="utf-8") as f:
        f.write(f'#line 1 "{src}"\n')
        f.write(text)


if __name__ == "__main__":
    main()
