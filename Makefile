# weft: a thin wrapper over Meson. The real build lives in meson.build.
#   make train   deps + build + train configs/mnist-mlp.ini on the shipped data (the first command)
#   make deps    install what is missing (Debian packages, apt-get; onnxruntime-node from npm
#                into build-onnx/ for the ONNX export tests: make onnx-deps is the same)
#   make info    deps + build + run weft-info
#   make         build (release: -O2, OpenMP)
#   make test    build, run every suite, then all again under ASan+UBSan
#   make bench   build and print the benchmark figures
#   make install [PREFIX=/usr/local] [DESTDIR=stage]   install the libraries, headers,
#                plugins, apps and .pc files; the apps and plugins find libweft and the
#                plugins relative to themselves (no LD_LIBRARY_PATH, no WEFT_PLUGIN_PATH)
#   make sparse-data   generate data/sparse/{train,test}.svm (scripts/make-sparse-libsvm.py)
#   make train-sparse  deps + build + sparse data + train configs/sparse-logreg.ini
#   make train-gpt     deps + build + train configs/gpt-char.ini (a byte-level baby GPT) + a sample
#   make fuzz    clang + libFuzzer build (build-fuzz, ASan+UBSan), each fuzz/ target for
#                FUZZ_SECONDS (60) on its seed corpus, one target a core at a time
#                (FUZZ_JOBS); fails on any crash (fuzz/run.sh)

BUILD      ?= build
ASAN_BUILD ?= build-asan
MESON      ?= meson
NINJA      ?= ninja

DEB_PACKAGES = meson ninja-build pkg-config gcc g++ libcriterion-dev libinih-dev \
               libopenblas-openmp-dev libdnnl-dev zlib1g-dev python3 \
               libopenmpi-dev openmpi-bin librsvg2-bin python3-onnx \
               libmicrohttpd-dev prometheus curl

# ONNX Runtime for the ONNX export's tests and `weft-train export --check` (docs/export.md):
# npm's onnxruntime-node (no Debian package exists), into build-onnx/ (ignored, kept by
# make clean), with --ignore-scripts: its install script would download GPU binaries, and
# the CPU ones ship in the package. node and npm come from Debian where they are missing.
ONNX_DIR ?= build-onnx
ONNXRUNTIME_NODE ?= onnxruntime-node@1
NODE_DEB_PACKAGES = $(if $(shell command -v node),,nodejs) $(if $(shell command -v npm),,npm)

# What `make fuzz` needs besides: clang, and libFuzzer (Debian ships it, with the
# sanitizer runtimes, in libclang-rt-14-dev).
FUZZ_DEB_PACKAGES = clang libclang-rt-14-dev
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=

CONFIG ?= configs/mnist-mlp.ini

PYTHON ?= python3

.PHONY: all deps fuzz-deps onnx-deps onnx-runtime build train info test test-release test-asan bench install clean \
        bench-baseline bench-check \
        sparse-data train-sparse train-gpt fuzz

all: build

deps fuzz-deps:
	@missing=""; \
	for p in $(if $(filter fuzz-deps,$@),$(FUZZ_DEB_PACKAGES),$(DEB_PACKAGES) $(NODE_DEB_PACKAGES)); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make $@: installing$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	else \
	  echo "make $@: all dependencies present"; \
	fi
	$(if $(filter deps,$@),@$(MAKE) --no-print-directory onnx-runtime)

onnx-deps: deps

onnx-runtime: $(ONNX_DIR)/node_modules/onnxruntime-node/package.json

$(ONNX_DIR)/node_modules/onnxruntime-node/package.json:
	mkdir -p $(ONNX_DIR)
	cd $(ONNX_DIR) && npm install --ignore-scripts --no-audit --no-fund --no-save $(ONNXRUNTIME_NODE)

$(BUILD)/build.ninja:
	$(MESON) setup $(BUILD) --buildtype=release

build: $(BUILD)/build.ninja
	$(NINJA) -C $(BUILD)

# A config that reads the generated sparse data gets it generated first.
# TRAIN_ARGS passes weft-train arguments: a second `make train` is refused, the first
# run's files kept, until TRAIN_ARGS=--overwrite (or --resume ...) says what to do.
TRAIN_ARGS ?=
train: deps build $(if $(findstring sparse-logreg,$(CONFIG)),sparse-data)
	$(BUILD)/apps/weft-train $(CONFIG) $(TRAIN_ARGS)

# The sparse example's data is generated (about 80 MB, ~15 s), never committed:
# data/sparse/ ignores itself through the .gitignore the script writes there.
data/sparse/train.svm: scripts/make-sparse-libsvm.py
	$(PYTHON) scripts/make-sparse-libsvm.py --out data/sparse

data/sparse/test.svm: data/sparse/train.svm

sparse-data: data/sparse/train.svm data/sparse/test.svm

train-sparse: deps build sparse-data
	$(BUILD)/apps/weft-train configs/sparse-logreg.ini $(TRAIN_ARGS)

# The baby GPT on the shipped text: prints the validation loss against the text's unigram
# (byte) entropy, then a 200-byte sample from the checkpoint the run wrote last (the
# "checkpoint:" line it ends with, so GPT_ARGS may move it) when weft-generate is built
# (one thread: a token of this model is too little work to share).
# GPT_ARGS passes overrides: make train-gpt GPT_ARGS="--set train.max_iters=500".
# The output goes through tee, which ignores Ctrl-C so that the interrupted run's resume
# line still gets through; the run's own exit status is the recipe's.
GPT_TEXT   = data/text/kjv-genesis-2kings.txt
GPT_PROMPT ?= And God said
GPT_ARGS   ?=
train-gpt: deps build
	@out=$$(mktemp) && trap 'rm -f "$$out" "$$out.rc"' EXIT && \
	{ $(BUILD)/apps/weft-train configs/gpt-char.ini $(GPT_ARGS); echo $$? >"$$out.rc"; } | \
	  (trap '' INT; tee "$$out") && \
	rc=$$(cat "$$out.rc") && [ "$$rc" = 0 ] || exit $${rc:-1}; \
	$(PYTHON) -c 'import collections, math, sys; d = open(sys.argv[1], "rb").read(); n = len(d); \
	  print("unigram entropy of %s: %.4f nats/byte (the loss of a model without context)" % \
	  (sys.argv[1], -sum(c / n * math.log(c / n) for c in collections.Counter(d).values())))' $(GPT_TEXT); \
	ckpt=$$(sed -n 's/^checkpoint: //p' "$$out" | tail -n 1); \
	if [ ! -x $(BUILD)/apps/weft-generate ]; then \
	  echo "train-gpt: $(BUILD)/apps/weft-generate is not built: no sample"; \
	elif [ -z "$$ckpt" ] || [ "$$ckpt" = "(none)" ]; then \
	  echo "train-gpt: the run saved no checkpoint: no sample"; \
	else \
	  echo "sample from $$ckpt:"; \
	  $(BUILD)/apps/weft-generate "$$ckpt" --prompt "$(GPT_PROMPT)" \
	    --max-new-tokens 200 --temperature 0.8 --threads 1; \
	fi

info: deps build
	$(BUILD)/apps/weft-info

test: test-release test-asan

test-release: build
	$(MESON) test -C $(BUILD) --print-errorlogs

$(ASAN_BUILD)/build.ninja:
	$(MESON) setup $(ASAN_BUILD) --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled

test-asan: $(ASAN_BUILD)/build.ninja
	$(NINJA) -C $(ASAN_BUILD)
	$(MESON) test -C $(ASAN_BUILD) --print-errorlogs --timeout-multiplier 4

bench: build
	$(BUILD)/bench/weft-bench

# The regression gate (bench/bench-check.py): bench-baseline keeps this build as the
# baseline; bench-check runs it and the current build interleaved on the MLP, CNN and GPT
# configs and fails on training or data-loader throughput down > 3% beyond the spread,
# peak memory up > 5%, or a layout copy in a step that had none. On a quiet machine; CI
# runs only its self-test.
BENCH_BASELINE ?= .bench-baseline
bench-baseline: build
	bench/bench-check.py baseline $(BUILD) $(BENCH_BASELINE)

bench-check: build
	bench/bench-check.py check $(BUILD) $(BENCH_BASELINE)

# PREFIX (re)configures the build's prefix (the compiled-in plugin directory follows it);
# DESTDIR stages the install under another root, as packagers do.
PREFIX ?=
DESTDIR ?=
install: $(BUILD)/build.ninja
	$(if $(PREFIX),$(MESON) configure $(BUILD) -Dprefix=$(abspath $(PREFIX)))
	$(NINJA) -C $(BUILD)
	$(if $(DESTDIR),DESTDIR=$(abspath $(DESTDIR)) )$(MESON) install -C $(BUILD) --no-rebuild

# The libraries and plugins get the fuzzer's coverage (fuzzer-no-link); the targets link
# libFuzzer. Tests, CUDA and oneDNN are left out: the targets need none of them.
$(FUZZ_BUILD)/build.ninja:
	CC=clang $(MESON) setup $(FUZZ_BUILD) --buildtype=debug -Doptimization=1 -Dfuzz=true \
	  -Dtests=false -Dcuda=disabled -Donednn=disabled -Db_sanitize=address,undefined \
	  -Db_lundef=false -Dc_args=-fsanitize=fuzzer-no-link

fuzz: fuzz-deps $(FUZZ_BUILD)/build.ninja
	$(NINJA) -C $(FUZZ_BUILD) fuzz
	fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
