#!/usr/bin/python3
"""tests/transforms/gen.py: torchvision 0.14's answers for weft's transforms (test_transforms.c).

Run by hand where torchvision is installed:  /usr/bin/python3 tests/transforms/gen.py
It rewrites tests/transforms/fixtures/transforms.txt; the C suite replays it without PyTorch.

Format: one case per line, whitespace-separated tokens, floats as Python's repr.
  OP  P n p1..pn  [U n u1..un]  [I c h w v..]  then  O c h w v..  or  R n r1..rn
  OP names the torchvision call (the C side maps it to its function), P its parameters,
  I the input image (float32 [c, h, w]), O the image torchvision returned, R the integer
  or float parameters a get_params returned. U: the uniform draws in [0, 1) that
  torchvision's random calls were given, in order: torch.empty(1).uniform_(lo, hi) returns
  lo + u * (hi - lo) and torch.randint(lo, hi) lo + floor(u * (hi - lo)) (patched below), so
  weft's samplers, given the same u's, must draw the same parameters.
"""
import math
import os
import random

import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
from torchvision.transforms import InterpolationMode as IM

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "transforms.txt")
PAD_MODES = ["constant", "edge", "reflect", "symmetric"]
INTERP = [IM.NEAREST, IM.BILINEAR]

lines = []
gen = torch.Generator().manual_seed(19)


def image(c, h, w):
    return torch.rand(c, h, w, generator=gen)


def fmt(x):
    return repr(float(x))


def img_tokens(tag, img):
    c, h, w = img.shape
    return [tag, str(c), str(h), str(w)] + [fmt(v) for v in img.flatten().tolist()]


def case(op, params, img, out, draws=None):
    toks = [op, "P", str(len(params))] + [fmt(p) for p in params]
    if draws is not None:
        toks += ["U", str(len(draws))] + [fmt(u) for u in draws]
    if img is not None:
        toks += img_tokens("I", img)
    if isinstance(out, torch.Tensor):
        toks += img_tokens("O", out)
    else:
        toks += ["R", str(len(out))] + [fmt(v) for v in out]
    lines.append(" ".join(toks))


# ---- torchvision's random calls fed from a list of u's ---------------------------------
class Draws:
    def __init__(self, us):
        self.us, self.i = list(us), 0

    def next(self):
        u = self.us[self.i]
        self.i += 1
        return u


draws = None
real_empty, real_randint = torch.empty, torch.randint


class Uniform:
    def uniform_(self, lo, hi):
        lo, hi = float(lo), float(hi)
        return torch.tensor([lo + draws.next() * (hi - lo)], dtype=torch.float64)


def fake_empty(*args, **kw):
    if args and args[0] == 1 or args == ((1,),):
        return Uniform()
    return real_empty(*args, **kw)


def fake_randint(*args, **kw):
    lo, hi = (0, args[0]) if len(args) < 3 and "size" in kw and len(args) == 1 else args[:2]
    return torch.tensor([lo + math.floor(draws.next() * (hi - lo))])


def with_draws(us, fn):
    global draws
    draws = Draws(us)
    torch.empty, torch.randint = fake_empty, fake_randint
    try:
        return fn()
    finally:
        torch.empty, torch.randint = real_empty, real_randint


rnd = random.Random(19)


def us(n):
    return [rnd.random() for _ in range(n)]


# ---- geometry -----------------------------------------------------------------------------
img = image(2, 5, 6)
for mode in range(4):
    for pad in ([2], [1, 3], [1, 2, 3, 0], [0, 4, 5, 1]):
        if mode == 2 and max(pad) >= 5:
            continue
        ltrb = pad * 4 if len(pad) == 1 else (pad * 2 if len(pad) == 2 else pad)
        out = F.pad(img, pad, fill=0.25, padding_mode=PAD_MODES[mode])
        case("pad", ltrb + [mode, 0.25], img, out)

img = image(3, 7, 9)
for top, left, h, w in ((0, 0, 7, 9), (1, 2, 4, 5), (3, 4, 4, 5), (-2, -1, 6, 7), (5, 6, 4, 5)):
    case("crop", [top, left, h, w], img, F.crop(img, top, left, h, w))
case("flip", [1], img, F.hflip(img))
case("flip", [0], img, F.vflip(img))

for c, h, w in ((1, 8, 8), (3, 7, 9), (2, 12, 5)):
    img = image(c, h, w)
    for interp in range(2):
        for size in ([4], [13], [16, 16], [5, 11], [3, 2], [h, w * 2], [h * 2, w], [h, w]):
            out = F.resize(img, size, interpolation=INTERP[interp], antialias=False)
            case("resize", [len(size)] + (size * 2 if len(size) == 1 else size) + [interp], img,
                 out)

for c, h, w in ((1, 9, 9), (3, 8, 11)):
    img = image(c, h, w)
    for interp in range(2):
        for angle, tx, ty, scale, shx, shy in ((0, 0, 0, 1, 0, 0), (30, 0, 0, 1, 0, 0),
                                                (-17.5, 2, -1, 1.13, 0, 0),
                                                (90, 0, 0, 1, 0, 0), (12, 1, 3, 0.87, 10, -6)):
            for fill in (None, [0.0], [0.3] * c):
                out = F.affine(img, angle, [tx, ty], scale, [shx, shy], INTERP[interp], fill)
                nf = 0 if fill is None else len(fill)
                case("affine", [angle, tx, ty, scale, shx, shy, interp, nf] + (fill or []), img,
                     out)
        for angle in (25.0, -140.0):
            out = F.rotate(img, angle, INTERP[interp], fill=[0.5])
            case("rotate", [angle, interp, 1, 0.5], img, out)

# ---- values -------------------------------------------------------------------------------
img = image(3, 6, 7)
case("normalize", [3, 0.485, 0.456, 0.406, 0.229, 0.224, 0.225], img,
     F.normalize(img, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]))
case("normalize", [1, 0.5, 0.25], img, F.normalize(img, [0.5], [0.25]))
for c in (1, 3):
    img = image(c, 6, 7)
    for factor in (0.0, 0.6, 1.0, 1.7):
        case("brightness", [factor], img, F.adjust_brightness(img, factor))
        case("contrast", [factor], img, F.adjust_contrast(img, factor))
        if c == 3:
            case("saturation", [factor], img, F.adjust_saturation(img, factor))
img = image(3, 6, 7)
case("erase", [1, 2, 3, 4, 1, 0.5], img, F.erase(img, 1, 2, 3, 4, torch.tensor(0.5)))
case("erase", [0, 0, 2, 7, 3, 0.1, 0.2, 0.3], img,
     F.erase(img, 0, 0, 2, 7, torch.tensor([0.1, 0.2, 0.3])[:, None, None]))

# ---- random parameters ----------------------------------------------------------------------
for h, w, th, tw in ((10, 12, 8, 8), (10, 12, 10, 12), (9, 9, 1, 9)):
    u = us(2)
    r = with_draws(u, lambda: T.RandomCrop.get_params(torch.zeros(1, h, w), (th, tw)))
    case("crop_params", [h, w, th, tw], None, list(r), u)
for h, w, scale, ratio in ((20, 30, (0.08, 1.0), (3 / 4, 4 / 3)), (20, 30, (0.5, 0.6), (1, 1)),
                           (28, 28, (0.9, 1.0), (0.2, 0.25)),   # never fits: fallback, tall
                           (10, 40, (0.95, 1.0), (1.0, 1.2)),   # fallback, wide
                           (10, 12, (1.0, 1.0), (1.0, 1.2))):  # fallback, within the range
    for _ in range(4):
        u = us(40)
        r = with_draws(u, lambda: T.RandomResizedCrop.get_params(torch.zeros(1, h, w), list(scale),
                                                                 list(ratio)))
        case("rrc_params", [h, w, *scale, *ratio], None, list(r), u)
for h, w, scale, ratio in ((20, 30, (0.02, 0.33), (0.3, 3.3)), (8, 8, (0.9, 1.0), (1, 1))):
    for _ in range(4):
        u = us(40)
        r = with_draws(u, lambda: T.RandomErasing.get_params(torch.zeros(3, h, w), scale, ratio,
                                                             [0.0]))
        found = not (r[0] == 0 and r[1] == 0 and r[2] == h and r[3] == w)
        case("erasing_params", [h, w, *scale, *ratio], None, list(r[:4]) + [int(found)], u)
for degrees, translate, scale, shear in (([-30, 30], None, None, None),
                                         ([-10, 20], [0.1, 0.2], [0.8, 1.2], [-5, 5]),
                                         ([0, 0], [0.3, 0.3], None, [-5, 5, -10, 3])):
    for _ in range(3):
        u = us(8)
        r = with_draws(u, lambda: T.RandomAffine.get_params(degrees, translate, scale, shear,
                                                            [13, 17]))
        angle, (tx, ty), sc, (shx, shy) = r
        params = [17, 13, *degrees, int(translate is not None), *(translate or [0, 0]),
                  int(scale is not None), *(scale or [1, 1]), len(shear or []),
                  *((shear or []) + [0] * (4 - len(shear or [])))]
        case("affine_params", params, None, [angle, tx, ty, sc, shx, shy], u)

with open(OUT, "w") as f:
    f.write("\n".join(lines) + "\n")
print(f"{len(lines)} cases -> {OUT}")
