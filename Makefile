# ferrox: the commands a user and CI need. Every target installs what it needs first.
BUILD_DIR ?= build
PRESET ?= release
JOBS ?= $(shell nproc)
MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
# The embedding model served beside it (a sentence-transformers safetensors directory).
EMBED_MODEL := models/all-MiniLM-L6-v2
PROMPT ?= What is the capital of France? Answer in one sentence.

.PHONY: all setup build model model-gemma3 test run serve clean format

all: build

setup:
	@bash scripts/setup.sh

build: setup
	@cmake --preset $(PRESET) > /dev/null
	@cmake --build --preset $(PRESET) -j $(JOBS)

# The default model, and Gemma 3 270M for the second architecture's golden tests.
model: setup
	@bash scripts/fetch_model.sh
	@bash scripts/fetch_embedding_model.sh
	@bash scripts/fetch_model_gemma3.sh

model-gemma3: setup
	@bash scripts/fetch_model_gemma3.sh

test: build model
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 300

HOST ?= 127.0.0.1
PORT ?= 8080

serve: build model
	@$(BUILD_DIR)/bin/ferrox serve -m $(MODEL) -m $(EMBED_MODEL) --host $(HOST) --port $(PORT)

run: build model
	@$(BUILD_DIR)/bin/ferrox run -m $(MODEL) --chat -p "$(PROMPT)" -n 64 --temp 0

clean:
	rm -rf build build-debug build-asan
