#!/usr/bin/python3
"""tests/rnn/gen.py: PyTorch 1.13's answers for weft's recurrent layers (tests/test_rnn.c).

Run by hand where PyTorch is installed:  /usr/bin/python3 tests/rnn/gen.py
It rewrites tests/rnn/fixtures/cases.txt and errors.txt; the C suite replays them
without PyTorch.

cases.txt, one block per case:
  case NAME mode I H layers bias batch_first bidirectional proj_size has_h0 enforce_sorted
  lengths N l1..lN          (N = 0: no lengths)
  t NAME ndim shape.. values..   (float64 as Python's repr), until
  end
Tensors: every parameter under PyTorch's name, input, h0 (and c0) when has_h0; output,
h_n (and c_n) of the forward in float64; w.output, w.h_n (w.c_n): the weights of the loss
sum(output * w.output) + sum(h_n * w.h_n) (+ sum(c_n * w.c_n)); and g.NAME, the loss's
gradient for every parameter, input, h0 and c0. With lengths, the input goes through
pack_padded_sequence(enforce_sorted=...) and the output through
pad_packed_sequence(total_length=T).

errors.txt: KEY<TAB>PyTorch's error text, one per line.
"""
import os

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")

MODES = {"tanh": 0, "relu": 1, "lstm": 2, "gru": 3}

# name, mode, I, H, layers, bias, batch_first, bidirectional, proj, h0, T, B, lengths, sorted
CASES = [
    ("rnn_tanh", "tanh", 3, 4, 1, True, False, False, 0, False, 5, 2, None, True),
    ("rnn_relu_2layer_bidir_bf", "relu", 3, 4, 2, True, True, True, 0, True, 4, 3, None, True),
    ("rnn_tanh_nobias_lengths", "tanh", 2, 3, 1, False, False, False, 0, True, 5, 3,
     [5, 3, 1], True),
    ("lstm", "lstm", 3, 4, 1, True, False, False, 0, True, 5, 2, None, True),
    ("lstm_2layer_bidir", "lstm", 3, 4, 2, True, False, True, 0, False, 4, 3, None, True),
    ("lstm_proj_2layer_bidir", "lstm", 3, 5, 2, True, True, True, 2, True, 4, 2, None, True),
    ("lstm_lengths_bidir", "lstm", 3, 4, 1, True, True, True, 0, True, 6, 3, [6, 4, 2], True),
    ("lstm_proj_lengths", "lstm", 2, 4, 1, True, False, False, 3, True, 5, 3, [5, 5, 2], True),
    ("lstm_unbatched", "lstm", 3, 4, 2, True, False, True, 0, True, 4, 0, None, True),
    ("gru", "gru", 3, 4, 1, True, False, False, 0, False, 5, 2, None, True),
    ("gru_2layer_bidir_bf", "gru", 3, 4, 2, True, True, True, 0, True, 4, 3, None, True),
    ("gru_lengths_unsorted", "gru", 3, 4, 2, False, False, True, 0, True, 5, 4,
     [3, 5, 1, 4], False),
]


def fmt(x):
    return repr(float(x))


def put(f, name, t):
    t = t.detach().to(torch.float64).contiguous()
    f.write("t %s %d %s %s\n" % (name, t.dim(), " ".join(str(s) for s in t.shape),
                                 " ".join(fmt(v) for v in t.reshape(-1).tolist())))


def make(mode, I, H, layers, bias, batch_first, bidir, proj):
    kw = dict(num_layers=layers, bias=bias, batch_first=batch_first, bidirectional=bidir)
    if mode == "lstm":
        return nn.LSTM(I, H, proj_size=proj, **kw)
    if mode == "gru":
        return nn.GRU(I, H, **kw)
    return nn.RNN(I, H, nonlinearity=mode, **kw)


def case(f, index, spec):
    name, mode, I, H, layers, bias, bf, bidir, proj, has_h0, T, B, lengths, srt = spec
    torch.manual_seed(1000 + index)
    m = make(mode, I, H, layers, bias, bf, bidir, proj).double()
    D = 2 if bidir else 1
    P = proj or H
    unbatched = B == 0
    if unbatched:
        x = torch.randn(T, I, dtype=torch.float64)
    else:
        x = torch.randn(*((B, T, I) if bf else (T, B, I)), dtype=torch.float64)
    x.requires_grad_()
    hshape = (layers * D, P) if unbatched else (layers * D, B, P)
    cshape = (layers * D, H) if unbatched else (layers * D, B, H)
    h0 = torch.randn(*hshape, dtype=torch.float64, requires_grad=True) if has_h0 else None
    c0 = torch.randn(*cshape, dtype=torch.float64, requires_grad=True) \
        if has_h0 and mode == "lstm" else None
    hx = (h0, c0) if mode == "lstm" and has_h0 else h0
    inp = x
    if lengths:
        inp = pack_padded_sequence(x, torch.tensor(lengths), batch_first=bf, enforce_sorted=srt)
    res = m(inp, hx)
    out, hn = res
    cn = None
    if mode == "lstm":
        hn, cn = hn
    if lengths:
        out, _ = pad_packed_sequence(out, batch_first=bf, total_length=T)
    w_out = torch.randn_like(out)
    w_hn = torch.randn_like(hn)
    loss = (out * w_out).sum() + (hn * w_hn).sum()
    w_cn = None
    if cn is not None:
        w_cn = torch.randn_like(cn)
        loss = loss + (cn * w_cn).sum()
    loss.backward()
    f.write("case %s %d %d %d %d %d %d %d %d %d %d\n" % (
        name, MODES[mode], I, H, layers, bias, bf, bidir, proj, has_h0, srt))
    f.write("lengths %d %s\n" % (len(lengths or []), " ".join(str(v) for v in lengths or [])))
    for pname, p in m.named_parameters():
        put(f, pname, p)
    put(f, "input", x)
    if h0 is not None:
        put(f, "h0", h0)
    if c0 is not None:
        put(f, "c0", c0)
    put(f, "output", out)
    put(f, "h_n", hn)
    if cn is not None:
        put(f, "c_n", cn)
    put(f, "w.output", w_out)
    put(f, "w.h_n", w_hn)
    if w_cn is not None:
        put(f, "w.c_n", w_cn)
    for pname, p in m.named_parameters():
        put(f, "g." + pname, p.grad)
    put(f, "g.input", x.grad)
    if h0 is not None:
        put(f, "g.h0", h0.grad)
    if c0 is not None:
        put(f, "g.c0", c0.grad)
    f.write("end\n")


def error_text(fn):
    try:
        fn()
    except Exception as ex:  # PyTorch's text is what the C suite compares
        return str(ex).split("\n")[0]
    raise SystemExit("expected an error")


def errors(f):
    lstm = nn.LSTM(4, 3, num_layers=2)
    gru = nn.GRU(4, 3)
    rnn = nn.RNN(4, 3, bidirectional=True)
    x = torch.randn(5, 2, 4)
    z = torch.zeros
    cases = {
        "input_size": lambda: lstm(torch.randn(5, 2, 3)),
        "input_dims": lambda: gru(torch.randn(5, 2, 2, 4)),
        "lstm_h0_shape": lambda: lstm(x, (z(2, 3, 3), z(2, 2, 3))),
        "lstm_c0_shape": lambda: lstm(x, (z(2, 2, 3), z(1, 2, 3))),
        "gru_h0_shape": lambda: gru(x, z(2, 2, 3)),
        "rnn_h0_shape": lambda: rnn(x, z(1, 2, 3)),
        "rnn_h0_dims": lambda: rnn(x, z(2, 3)),
        "rnn_unbatched_h0_dims": lambda: rnn(torch.randn(5, 4), z(2, 1, 3)),
        "lstm_h0_dims": lambda: lstm(x, (z(2, 3), z(2, 3))),
        "dtype": lambda: lstm(x.double()),
        "empty": lambda: lstm(z(0, 2, 4)),
        "lengths_unsorted": lambda: pack_padded_sequence(x, torch.tensor([3, 5])),
        "lengths_zero": lambda: pack_padded_sequence(x, torch.tensor([5, 0])),
        "lengths_count": lambda: pack_padded_sequence(x, torch.tensor([5, 4, 3])),
        "lengths_dims": lambda: pack_padded_sequence(x, torch.tensor([[5, 4]])),
        "proj_too_big": lambda: nn.LSTM(4, 3, proj_size=3),
        "proj_not_lstm": lambda: nn.GRU(4, 3, proj_size=2),
        "dropout_range": lambda: nn.LSTM(4, 3, dropout=1.5),
    }
    for k, fn in cases.items():
        f.write("%s\t%s\n" % (k, error_text(fn)))


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "cases.txt"), "w") as f:
        for index, spec in enumerate(CASES):
            case(f, index, spec)
    with open(os.path.join(OUT, "errors.txt"), "w") as f:
        errors(f)


if __name__ == "__main__":
    main()
