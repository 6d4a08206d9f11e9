# Sourced by the shell tests that train the small blobs classifier (train-iters.sh,
# train-ddp.sh, cuda_emu/train-ddp-cuda.sh): blobs_model prints its [data] and
# [layer.*] sections, the part they share; each test adds [runtime], [optimizer] and
# [train] of its own around them.
blobs_model() {
    cat <<INI
[data]
reader = synthetic
kind = blobs
samples = 600
features = 2
classes = 3
batch_size = 25
shuffle = true
validation_split = 0.2

[layer.fc1]
type = linear
in_features = 2
out_features = 16

[layer.act]
type = relu

[layer.fc2]
type = linear
in_features = 16
out_features = 3

INI
}
