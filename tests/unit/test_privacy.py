"""Secrets are masked before anything is stored: argv, environments, log text."""

from __future__ import annotations

import json

import pytest

from agent_supervisor.privacy import MASK, is_secret_name, mask_argv, mask_env, mask_text


@pytest.mark.parametrize("name", [
    "--api-key", "--hf-token", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY",
    "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD", "--ssl-keyfile-password",
    "db.password", "GITHUB_AUTH", "APIKEY", "client_secret",
])
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", [
    "--max-num-batched-tokens", "--tokenizer", "--tokenizer-mode", "--ssl-keyfile",
    "--max-model-len", "--kv-cache-memory-bytes", "--speculative-config", "PATH",
    "CUDA_VISIBLE_DEVICES", "--num-speculative-tokens", "--author",
])
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)


def test_mask_argv_both_flag_forms_env_words_and_json_values() -> None:
    argv = ["env", "HF_TOKEN=hf_x", "vllm", "serve", "m", "--api-key", "sk-1",
            "--hf-token=hf_y", "--max-num-batched-tokens", "8192",
            "--hf-overrides", '{"auth": {"password": "p"}, "n": 1}',
            "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}',
            "--api-key", "--port", "8000"]
    masked = mask_argv(argv)
    assert masked[:10] == ["env", f"HF_TOKEN={MASK}", "vllm", "serve", "m", "--api-key",
                           MASK, f"--hf-token={MASK}", "--max-num-batched-tokens", "8192"]
    assert json.loads(masked[11]) == {"auth": MASK, "n": 1}
    assert masked[13] == argv[13]                     # nothing secret: left as written
    assert masked[14:] == ["--api-key", "--port", "8000"]  # no value to mask
    assert argv[6] == "sk-1"                          # a copy, the input is untouched
    assert not {"sk-1", "hf_x", "hf_y"} & set(" ".join(masked).split())


def test_mask_env() -> None:
    env = {"HF_TOKEN": "x", "PATH": "/bin", "VLLM_API_KEY": "k", "OMP_NUM_THREADS": "2"}
    assert mask_env(env) == {"HF_TOKEN": MASK, "PATH": "/bin", "VLLM_API_KEY": MASK,
                             "OMP_NUM_THREADS": "2"}


def test_mask_text_as_vllm_logs_its_arguments() -> None:
    line = ("(APIServer pid=1) INFO non-default args: {'model_tag': 'm', 'api_key': "
            "['sk-1', 'sk-2'], 'hf_token': 'hf_x', 'max_num_batched_tokens': 8192}")
    masked = mask_text(line)
    assert "'api_key': ['***']" in masked and "'hf_token': '***'" in masked
    assert "'max_num_batched_tokens': 8192" in masked
    assert mask_text("cmd --api-key=sk-1 --hf-token hf_x HF_TOKEN=hf_z") == \
        "cmd --api-key=*** --hf-token *** HF_TOKEN=***"
    assert mask_text('Authorization: Bearer abc.def-1') == "Authorization: Bearer ***"
    assert mask_text('{"api_key": "sk-9"}') == '{"api_key": "***"}'
    assert mask_text(None) is None and mask_text("") == ""
