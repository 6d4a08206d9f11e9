"""configs/mnist-resnet.ini as a torch.nn.Module: the same layers under the same names, so
a checkpoint weft-train writes for that config loads into it as it is:

    import safetensors.torch  # or any safetensors reader
    model = MnistResNet()
    model.load_state_dict(safetensors.torch.load_file("runs/mnist-resnet/model.safetensors"))

Every [layer.NAME] section of the config is the attribute NAME here, declared in the
config's order (so state_dict() lists the entries in weft's order), and forward() is the
graph the sections' `inputs` keys describe. Used by scripts/make-resnet-fixture.py (the
fixture tests/test_graph.c checks weft against) and bench/contention_torch.py.
"""
import torch.nn as nn


class MnistResNet(nn.Module):
    def __init__(self):
        super().__init__()
        conv = lambda cin, cout, k=3, s=1: nn.Conv2d(cin, cout, k, stride=s, padding=k // 2,
                                                      bias=False)
        # stem: [N, 1, 28, 28] -> [N, 16, 14, 14]
        self.conv1 = conv(1, 16)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        # block 1: 16 -> 16 at 14x14, identity shortcut
        self.b1_conv1 = conv(16, 16)
        self.b1_bn1 = nn.BatchNorm2d(16)
        self.b1_relu1 = nn.ReLU()
        self.b1_conv2 = conv(16, 16)
        self.b1_bn2 = nn.BatchNorm2d(16)
        self.b1_relu2 = nn.ReLU()
        # block 2: 16 -> 32, 14x14 -> 7x7, a 1x1 convolution with stride 2 as the shortcut
        self.b2_conv1 = conv(16, 32, s=2)
        self.b2_bn1 = nn.BatchNorm2d(32)
        self.b2_relu1 = nn.ReLU()
        self.b2_conv2 = conv(32, 32)
        self.b2_bn2 = nn.BatchNorm2d(32)
        self.b2_down = conv(16, 32, k=1, s=2)
        self.b2_down_bn = nn.BatchNorm2d(32)
        self.b2_relu2 = nn.ReLU()
        # head: global average pooling and a linear classifier
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.pool1(self.relu1(self.bn1(self.conv1(x))))
        h = self.b1_relu1(self.b1_bn1(self.b1_conv1(x)))
        x = self.b1_relu2(self.b1_bn2(self.b1_conv2(h)) + x)          # [layer.b1_add]
        h = self.b2_relu1(self.b2_bn1(self.b2_conv1(x)))
        x = self.b2_relu2(self.b2_bn2(self.b2_conv2(h)) + self.b2_down_bn(self.b2_down(x)))
        return self.fc(self.flatten(self.gap(x)))
