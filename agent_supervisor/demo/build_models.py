"""Build the tiny local models the CPU demo and the tests serve (no hub needed).

Run with the *engine's* Python (it needs torch, transformers and tokenizers, which the
supervisor itself never imports)::

    .engine-venv/bin/python agent_supervisor/demo/build_models.py OUT_DIR [--steps 300] [--seed 0]

It writes, each directory loadable by vLLM and transformers:

    OUT_DIR/tokenizer/   byte-level BPE trained on generated agent-like text
    OUT_DIR/target/      LlamaForCausalLM, hidden 128, 2 layers        (the served model)
    OUT_DIR/draft/       LlamaForCausalLM, hidden 64, 1 layer           (draft-model speculation)
    OUT_DIR/mimo/        MiMoForCausalLM (Qwen2 body) + one MTP layer   (method "mtp")
    OUT_DIR/BUILD.json   what was built, with the training losses and seconds taken

The MTP layer's weights are stored under the names vLLM's ``mimo_mtp.py`` loads
(``model.mtp_layers.0.{token_layernorm,hidden_layernorm,input_proj,final_layernorm,
self_attn.*,mlp.*,input_layernorm,post_attention_layernorm}``; vllm 0.32.0
``vllm/model_executor/models/mimo_mtp.py``, ``MiMoMTP.hf_to_vllm_mapper``). vLLM picks the
MTP drafter from ``architectures[0] == "MiMoForCausalLM"`` (``vllm/config/speculative.py``).
The MTP layer is deliberately left untrained: on the CPU engine this makes MTP a real case
of speculation that does not pay for itself (acceptance of a few percent), which the
speculative-decoding guard must notice. The target and the draft are trained on the same
text, so draft-model and n-gram speculation are accepted often.

This file is self-contained on purpose: the engine's environment carries an unrelated
package also named ``supervisor`` (supervisord, a vLLM dependency), so nothing from this
project may be imported here.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

# ChatML with Hermes-style tools (the format vLLM's `hermes` tool parser reads:
# vllm/tool_parsers/hermes_tool_parser.py, `<tool_call>{"name", "arguments"}</tool_call>`),
# so agents that send tools, assistant tool calls and tool results can use the demo
# (issue 33). Without tools the text is the plain ChatML of earlier builds, byte for byte.
CHAT_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\\n' }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{{ (messages[0]['content'] or '') + '\\n\\n' }}{% endif %}"
    "{{ '# Tools\\n<tools>\\n' }}{% for tool in tools %}{{ tool | tojson + '\\n' }}"
    "{% endfor %}{{ '</tools>\\nCall a tool as <tool_call>{\"name\": ..., "
    "\"arguments\": {...}}</tool_call><|im_end|>\\n' }}{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' and tools and loop.first %}"
    "{% elif message['role'] == 'assistant' and message.get('tool_calls') %}"
    "{{ '<|im_start|>assistant\\n' + (message['content'] or '') }}"
    "{% for call in message['tool_calls'] %}{% set args = call['function']['arguments'] %}"
    "{{ '<tool_call>{\"name\": ' + call['function']['name'] | tojson + ', \"arguments\": '"
    " + (args if args is string else args | tojson) + '}</tool_call>' }}{% endfor %}"
    "{{ '<|im_end|>\\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 1024
#: The models' context (max_position_embeddings, the tokenizer's model_max_length). Long
#: enough for a real coding agent's first request (issue 33): Claude Code 2.1.332's in
#: print mode (system prompt, 12 tools, the first user turn: 48,706 characters) is 33,313
#: tokens of this 1,024-token vocabulary (1.46 characters a token; about 12,000 in a
#: large model's vocabulary), so 65,536 leaves room for a few turns. These are RoPE models
#: (Llama, Qwen2): positions are rotations, not learned weights, so a long context costs
#: no parameters and no training time (training still runs on 128-token windows; the
#: model's text past them is nonsense, which the tests never read as text).
MAX_POSITIONS = 65536
#: The served model's attention window: its training window (``train``'s seq_len).
SLIDING_WINDOW = 128

_VERBS = ["read", "open", "list", "search", "patch", "run", "build", "test", "check", "write"]
_NOUNS = ["file", "module", "function", "test", "config", "log", "table", "request", "model"]
_NAMES = ["main.py", "server.py", "utils.py", "README.md", "policy.yaml", "store.py", "cli.py"]
_TOOLS = ["read_file", "run_tests", "grep", "apply_patch", "list_dir", "shell"]
_WORDS = ["the", "agent", "engine", "memory", "token", "queue", "value", "result", "error", "step"]


def _sentence(rng: random.Random) -> str:
    return (
        f"I will {rng.choice(_VERBS)} the {rng.choice(_NOUNS)} in {rng.choice(_NAMES)} "
        f"and then {rng.choice(_VERBS)} the {rng.choice(_NOUNS)}."
    )


def _tool_call(rng: random.Random) -> str:
    args = {"path": rng.choice(_NAMES), "line": rng.randint(1, 400)}
    return json.dumps({"name": rng.choice(_TOOLS), "arguments": args})


def _code(rng: random.Random) -> str:
    name = rng.choice(_WORDS)
    return (
        f"def {rng.choice(_VERBS)}_{name}({name}):\n"
        f"    if {name} is None:\n        return {rng.randint(0, 9)}\n"
        f"    return {name} + {rng.randint(0, 9)}\n"
    )


def generate_corpus(n_docs: int, seed: int) -> list[str]:
    """Agent-like chat transcripts: prose, JSON tool calls and small code blocks.

    Returns: n_docs strings in the chat template's format, each ending with <|endoftext|>.
    """
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        parts = []
        for _turn in range(rng.randint(1, 3)):
            user = " ".join(_sentence(rng) for _ in range(rng.randint(1, 2)))
            body = rng.choice([_sentence, _tool_call, _code])(rng)
            answer = f"{_sentence(rng)}\n{body}"
            parts.append(f"<|im_start|>user\n{user}<|im_end|>\n")
            parts.append(f"<|im_start|>assistant\n{answer}<|im_end|>\n")
        docs.append("".join(parts) + "<|endoftext|>")
    return docs


def build_tokenizer(corpus: list[str], out: Path) -> None:
    """Train a byte-level BPE tokenizer and save tokenizer.json + tokenizer_config.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": MAX_POSITIONS,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")


def _batches(ids: list[int], seq_len: int, batch: int, rng: random.Random):
    import torch

    while True:
        starts = [rng.randrange(0, len(ids) - seq_len - 1) for _ in range(batch)]
        yield torch.tensor([ids[s : s + seq_len + 1] for s in starts])


def train(model, ids: list[int], steps: int, seed: int) -> list[float]:
    """Next-token training with AdamW. Returns the loss every 50 steps."""
    import torch

    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    losses = []
    gen = _batches(ids, seq_len=128, batch=16, rng=random.Random(seed))
    model.train()
    for step in range(steps):
        chunk = next(gen)
        out = model(input_ids=chunk[:, :-1], labels=chunk[:, :-1])
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        if step % 50 == 0 or step == steps - 1:
            losses.append(round(float(out.loss.detach()), 4))
    model.eval()
    return losses


def _common(eos_id: int, pad_id: int) -> dict:
    return {
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "bos_token_id": eos_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "torch_dtype": "float32",
    }


def _copy_tokenizer(tok_dir: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for f in tok_dir.iterdir():
        shutil.copy(f, out / f.name)


def _write_generation_config(out: Path, eos_id: int, pad_id: int) -> None:
    cfg = {"eos_token_id": eos_id, "pad_token_id": pad_id, "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def build_llama(out: Path, tok_dir: Path, ids, *, hidden: int, layers: int, steps: int,
                seed: int, eos_id: int, pad_id: int) -> list[float]:
    """Train and save a LlamaForCausalLM of the given width and depth."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    # head_dim 32 for every model: vLLM's CPU attention rejects head_dim 16 at the first
    # request ("Unsupported CPU attention configuration: head_dim=16"), after start-up.
    heads = hidden // 32
    config = LlamaConfig(
        hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=max(1, heads // 2), head_dim=32,
        **_common(eos_id, pad_id),
    )
    model = LlamaForCausalLM(config)
    losses = train(model, ids, steps, seed)
    model.save_pretrained(out, safe_serialization=True)
    _copy_tokenizer(tok_dir, out)
    _write_generation_config(out, eos_id, pad_id)
    return losses


def build_mimo(out: Path, tok_dir: Path, ids, *, steps: int, seed: int, eos_id: int,
               pad_id: int) -> list[float]:
    """Train a Qwen2 body, then save it as MiMoForCausalLM with one untrained MTP layer."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    hidden, inter = 128, 256
    # Sliding-window attention over the training window (every layer: max_window_layers
    # 0), as Mistral-style models do: at any depth of a long prompt (a coding agent's 33k
    # tokens) the model sees what it was trained on, so it answers in its trained shape
    # and ends its turn (full attention over 33k untrained distances gave noise that never
    # reached <|im_end|>), and prefill costs O(n x window) instead of O(n^2). Within the
    # window the model is the full-attention one (same weights, same text). vLLM reads it
    # from config.json (sliding_window with use_sliding_window, Qwen2's layer_types).
    config = Qwen2Config(
        hidden_size=hidden, intermediate_size=inter, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, use_sliding_window=True,
        sliding_window=SLIDING_WINDOW, max_window_layers=0, **_common(eos_id, pad_id),
    )
    model = Qwen2ForCausalLM(config)
    losses = train(model, ids, steps, seed)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}

    # One MTP layer: a Qwen2 decoder block plus MiMo's norms and input projection,
    # named as vllm/model_executor/models/mimo_mtp.py loads them (checkpoint names are
    # 0-indexed and without the `mtp_block` wrapper).
    gen = torch.Generator().manual_seed(seed + 1)
    kv = config.num_key_value_heads * (hidden // config.num_attention_heads)

    def rand(*shape):
        return (torch.randn(*shape, generator=gen) * 0.02).contiguous()

    p = "model.mtp_layers.0."
    mtp = {
        p + "token_layernorm.weight": torch.ones(hidden),
        p + "hidden_layernorm.weight": torch.ones(hidden),
        p + "final_layernorm.weight": torch.ones(hidden),
        p + "input_layernorm.weight": torch.ones(hidden),
        p + "post_attention_layernorm.weight": torch.ones(hidden),
        p + "input_proj.weight": rand(hidden, 2 * hidden),
        p + "self_attn.q_proj.weight": rand(hidden, hidden),
        p + "self_attn.q_proj.bias": torch.zeros(hidden),
        p + "self_attn.k_proj.weight": rand(kv, hidden),
        p + "self_attn.k_proj.bias": torch.zeros(kv),
        p + "self_attn.v_proj.weight": rand(kv, hidden),
        p + "self_attn.v_proj.bias": torch.zeros(kv),
        p + "self_attn.o_proj.weight": rand(hidden, hidden),
        p + "mlp.gate_proj.weight": rand(inter, hidden),
        p + "mlp.up_proj.weight": rand(inter, hidden),
        p + "mlp.down_proj.weight": rand(hidden, inter),
    }
    state.update(mtp)
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = config.to_dict()
    cfg["architectures"] = ["MiMoForCausalLM"]
    cfg["num_nextn_predict_layers"] = 1
    (out / "config.json").write_text(json.dumps(cfg, indent=2, default=str) + "\n")
    _copy_tokenizer(tok_dir, out)
    _write_generation_config(out, eos_id, pad_id)
    return losses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(max(1, min(4, torch.get_num_threads())))
    t0 = time.monotonic()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    corpus = generate_corpus(4000, args.seed)
    tok_dir = out / "tokenizer"
    build_tokenizer(corpus, tok_dir)

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    ids = [i for doc in corpus for i in tok.encode(doc).ids]
    eos_id, pad_id = tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")
    common = {"steps": args.steps, "seed": args.seed, "eos_id": eos_id, "pad_id": pad_id}
    report = {"corpus_tokens": len(ids), "vocab_size": VOCAB_SIZE, "steps": args.steps}
    t = time.monotonic()
    report["target_losses"] = build_llama(out / "target", tok_dir, ids, hidden=128, layers=2,
                                          **common)
    report["target_seconds"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    report["draft_losses"] = build_llama(out / "draft", tok_dir, ids, hidden=64, layers=1,
                                         **common)
    report["draft_seconds"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    report["mimo_losses"] = build_mimo(out / "mimo", tok_dir, ids, **common)
    report["mimo_seconds"] = round(time.monotonic() - t, 1)
    report["total_seconds"] = round(time.monotonic() - t0, 1)
    (out / "BUILD.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
