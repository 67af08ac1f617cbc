"""pytest plugin: llama.cpp's server test suite (tools/server/tests) against `ferrox serve`.

Loaded with `-p ferrox_suite_adapter` from bench/llamacpp_suite/run.sh. It changes only where
the models come from, nothing the tests assert:

- the model presets' hub repositories map to the local models in models/ (the hub is
  unreachable); a test whose model has no local stand-in is skipped, saying which;
- ServerPreset.load_all (the session's hub download of every preset) does nothing;
- download_file and requests.get of a huggingface.co URL (draft models, LoRA adapters, test
  images) map to a local model or skip the test.

The server's command line is the one the harness builds for llama-server: the binary it runs
(LLAMA_SERVER_BIN_PATH) is bench/llamacpp_suite/llama-server, which execs `ferrox serve` with
the same arguments; only --hf-repo/--hf-file become --model LOCAL_FILE.
"""
import os
import sys

import pytest

_SUITE_DIR = os.environ.get("LLAMACPP_SUITE_DIR", os.getcwd())
sys.path.insert(0, _SUITE_DIR)

import requests  # noqa: E402
import utils  # noqa: E402  (the suite's harness)

_ROOT = os.environ["FERROX_ROOT"]
SMOLLM2 = os.path.join(_ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA3 = os.path.join(_ROOT, "models/gemma-3-270m-q4_k_m.gguf")
MINILM = os.path.join(_ROOT, "models/all-MiniLM-L6-v2")

# (hf repo, hf file) of the harness's presets -> the local model that stands in for it.
_MODELS = {
    # tinyllama2 (stories260K) and the harness's default: a tiny llama -> SmolLM2 (llama arch)
    ("ggml-org/test-model-stories260K", None): SMOLLM2,
    ("ggml-org/models", "tinyllamas/stories260K.gguf"): SMOLLM2,
    # stories15m_moe (speculative decoding's target) -> SmolLM2
    ("ggml-org/stories15M_MOE", "stories15M_MOE-F16.gguf"): SMOLLM2,
    # bert_bge_small(_with_fa): a 384-wide BERT embedder -> all-MiniLM-L6-v2 (384-wide BERT)
    ("ggml-org/models", "bert-bge-small/ggml-model-f16.gguf"): MINILM,
    # tinygemma3 (a tiny Gemma 3 with a vision tower) -> Gemma 3 270M, text only: for the tests
    # in _TEXT_ONLY_ON_VISION_MODEL; the others need the vision tower and are skipped
    ("ggml-org/tinygemma3-GGUF:Q8_0", None): GEMMA3,
}
_VISION_PRESET = ("ggml-org/tinygemma3-GGUF:Q8_0", None)
_TEXT_ONLY_ON_VISION_MODEL = {"test_slot_save_restore_text_only_on_multimodal"}

# download_file URLs with a local stand-in.
_FILES = {
    # speculative decoding's draft (stories15M, the target's vocabulary) -> SmolLM2 drafts itself
    "https://huggingface.co/ggml-org/tiny-llamas/resolve/main/stories15M-q4_0.gguf": SMOLLM2,
}


def _map_model(server):
    repo, file = server.model_hf_repo, server.model_hf_file
    if server.model_url:
        pytest.skip(f"model from a URL ({server.model_url}): no local stand-in")
    if repo is None and file is None:
        if server.model_file and os.path.exists(server.model_file):
            return
        pytest.skip("router mode (no model: llama-server loads models on demand from the hub or "
                    "--models-dir); no local stand-in")
    if (repo, file) == _VISION_PRESET:
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[-1].split(" ")[0].split("[")[0]
        if test not in _TEXT_ONLY_ON_VISION_MODEL:
            pytest.skip("needs a vision model (tinygemma3 with its mmproj); no local model has a vision tower")
    if (repo, file) == ("ggml-org/test-model-stories260K-infill", None):
        pytest.skip("needs a model with FIM tokens (stories260K-infill); neither local model's vocabulary has them")
    local = _MODELS.get((repo, file))
    if local is None:
        pytest.skip(f"model {repo}{'/' + file if file else ''} has no local stand-in")
    server.model_file = local
    server.model_hf_repo = None
    server.model_hf_file = None


_start = utils.ServerProcess.start


def _start_local(self, *args, **kwargs):
    _map_model(self)
    return _start(self, *args, **kwargs)


def _download_file(url, output_file_path=None):
    if url in _FILES:
        return _FILES[url]
    pytest.skip(f"needs {url} from the hub (unreachable); no local stand-in")


_requests_get = requests.get


def _get(url, *args, **kwargs):
    if "huggingface.co/" in str(url):
        pytest.skip(f"needs {url} from the hub (unreachable); no local stand-in")
    return _requests_get(url, *args, **kwargs)


utils.ServerProcess.start = _start_local
utils.ServerPreset.load_all = staticmethod(lambda: None)
utils.download_file = _download_file
requests.get = _get
