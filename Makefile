# ferrox: the commands a user and CI need. Every target installs what it needs first.
#
# `make serve` and `make run` build only the ferrox binary (113 of the 208 build steps at
# 9f18baa: no test binary or tool) and fetch only the models they use; `make test` builds every
# target and fetches every model the tests use (Gemma 3 270M as well).
BUILD_DIR ?= build
PRESET ?= release
JOBS ?= $(shell nproc)
MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
# The embedding model served beside it (a sentence-transformers safetensors directory).
EMBED_MODEL := models/all-MiniLM-L6-v2
PROMPT ?= What is the capital of France? Answer in one sentence.

.PHONY: all setup setup-test configure build ferrox model model-default model-serve model-gemma3 \
        test run serve clean format

all: build

setup:
	@bash scripts/setup.sh

# The Python packages of the tests as well (clients, reference implementations).
setup-test:
	@bash scripts/setup.sh --test

configure: setup
	@cmake --preset $(PRESET) > /dev/null

# Everything: the libraries, the binary, every test and benchmark tool.
build: configure
	@cmake --build --preset $(PRESET) -j $(JOBS)

# The ferrox binary alone (src/cli/CMakeLists.txt) and the libraries it links.
ferrox: configure
	@cmake --build --preset $(PRESET) -j $(JOBS) --target ferrox

# The default model, at $(MODEL) (tooling relies on that path).
model-default: setup
	@bash scripts/fetch_model.sh

# The models `make serve` serves: the default model and the embedding model.
model-serve: model-default
	@bash scripts/fetch_embedding_model.sh

model-gemma3: setup
	@bash scripts/fetch_model_gemma3.sh

# Every model: the served ones, and Gemma 3 270M for the second architecture's golden tests.
model: model-serve model-gemma3

test: setup-test build model
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 300

HOST ?= 127.0.0.1
PORT ?= 8080

serve: ferrox model-serve
	@$(BUILD_DIR)/bin/ferrox serve -m $(MODEL) -m $(EMBED_MODEL) --host $(HOST) --port $(PORT)

run: ferrox model-default
	@$(BUILD_DIR)/bin/ferrox run -m $(MODEL) --chat -p "$(PROMPT)" -n 64 --temp 0

clean:
	rm -rf build build-debug build-asan
