#!/usr/bin/python3
"""Writes tests/fixtures/mnist-resnet.safetensors: the proof that configs/mnist-resnet.ini
(a graph model: BatchNorm, residual adds) is scripts/mnist_resnet_torch.py's MnistResNet,
name for name and value for value.

Run by hand where PyTorch is installed (Debian's python3-torch, 1.13 here):
    /usr/bin/python3 scripts/make-resnet-fixture.py [OUTDIR]   (default tests/fixtures)
The test suite (tests/test_graph.c) reads the file and needs no PyTorch.

The weights are drawn in float32 by PyTorch's own initialisation (seed 36), and the
BatchNorm running statistics are set to values of their own (so evaluation mode is not
the identity on them); the reference then runs in float64:

    model.<name>    every state_dict entry, in state_dict order (float64 of the float32
                    values; num_batches_tracked int64)
    x, y            a batch of 6 inputs [6, 1, 28, 28] and class labels [6]
    logits_eval     the eval-mode forward (running statistics)
    logits, loss    the train-mode forward (batch statistics), cross_entropy
    grad.<name>     d loss / d parameter, every parameter
    after.<name>    every buffer after that training forward (the running statistics'
                    momentum update, num_batches_tracked + 1)

The safetensors writer is scripts/make-gpt-fixture.py's.
"""
import importlib.util
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mnist_resnet_torch import MnistResNet  # noqa: E402

spec = importlib.util.spec_from_file_location("gptfix", os.path.join(HERE, "make-gpt-fixture.py"))
gptfix = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gptfix)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "fixtures")
    torch.manual_seed(36)
    model = MnistResNet()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    state = [(k, v.clone()) for k, v in model.state_dict().items()]
    x = torch.randn(6, 1, 28, 28, dtype=torch.float64)
    y = torch.tensor([3, 1, 4, 1, 5, 9])

    model = model.double()
    model.eval()
    with torch.no_grad():
        logits_eval = model(x)
    model.train()
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits, y)
    loss.backward()
    grads = [("grad." + n, p.grad.clone()) for n, p in model.named_parameters()]
    after = [("after." + n, b.clone()) for n, b in model.named_buffers()]

    tensors = [("model." + k, v.double() if v.is_floating_point() else v) for k, v in state]
    tensors += [("x", x), ("y", y), ("logits_eval", logits_eval), ("logits", logits),
                ("loss", loss.detach())] + grads
    tensors += [(n, b.double() if b.is_floating_point() else b) for n, b in after]
    path = os.path.join(out, "mnist-resnet.safetensors")
    gptfix.save_safetensors(path, tensors, {"torch_version": torch.__version__})
    print("%s: loss %.6f, %d parameters" % (path, loss.item(),
                                            sum(p.numel() for p in model.parameters())))


if __name__ == "__main__":
    main()
