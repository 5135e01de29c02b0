"""Write the tiny random models the real-engine tests serve (seconds, about 1.5 MB each).

    <vllm venv>/bin/python scripts/tiny_models.py hf OUT_DIR       # Llama folder for vLLM
    <llamacpp venv>/bin/python scripts/tiny_models.py gguf OUT.gguf  # the same shape as GGUF for llama.cpp

The weights are random: the engines' speed, scheduling and metrics are what the tests look at,
not the text.  Shape: hidden 128, 2 layers, 4 heads of 32 dims (vLLM's CPU attention kernels start
at head dim 32), 2 KV heads, fp32.  The end-of-sequence row of the output head is zero while the
other rows are large, so a random model almost never stops early and answers run to max_tokens.
Each mode imports only what its engine's environment has (transformers + tokenizers, or gguf).
"""

from __future__ import annotations

import sys
from pathlib import Path

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, CONTEXT = 128, 2, 4, 2, 256, 2048
HEAD_DIM = HIDDEN // HEADS
SEED = 0
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
_WORDS = Path(__file__).resolve().parents[1] / "src" / "turbogate" / "emulator" / "words.txt"


def _corpus() -> list[str]:
    words = _WORDS.read_text().split() if _WORDS.exists() else ["the", "quick", "brown", "fox", "jumps"]
    return [" ".join(words[i:i + 12]) for i in range(0, len(words), 12)] * 4


def write_hf(out: Path) -> None:
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(_corpus(), vocab_size=512, min_frequency=1, special_tokens=["<s>", "</s>", "<unk>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>", model_max_length=CONTEXT)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(out)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                         max_position_embeddings=CONTEXT, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, tie_word_embeddings=False, torch_dtype="float32")
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(50.0)
        model.lm_head.weight[tok.eos_token_id].zero_()
    model.save_pretrained(out, safe_serialization=True)


def write_gguf(out: Path) -> None:
    import gguf
    import numpy as np

    rng = np.random.default_rng(SEED)
    # SentencePiece-style vocabulary of bytes only: every text tokenizes by byte fallback.
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    vocab = len(tokens)

    def rand(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    out.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name("turbogate-tiny-random")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * vocab)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_chat_template(CHAT_TEMPLATE)
    # numpy shapes are (out, in), as PyTorch's Linear; the writer reverses them into ggml's order.
    w.add_tensor("token_embd.weight", rand(vocab, HIDDEN, scale=1.0))
    for i in range(LAYERS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", rand(HEADS * HEAD_DIM, HIDDEN))
        w.add_tensor(f"blk.{i}.attn_k.weight", rand(KV_HEADS * HEAD_DIM, HIDDEN))
        w.add_tensor(f"blk.{i}.attn_v.weight", rand(KV_HEADS * HEAD_DIM, HIDDEN))
        w.add_tensor(f"blk.{i}.attn_output.weight", rand(HIDDEN, HEADS * HEAD_DIM))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", rand(FFN, HIDDEN))
        w.add_tensor(f"blk.{i}.ffn_up.weight", rand(FFN, HIDDEN))
        w.add_tensor(f"blk.{i}.ffn_down.weight", rand(HIDDEN, FFN))
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    head = rand(vocab, HIDDEN, scale=1.0)
    head[2] = 0.0  # end of sequence: never the most likely token
    w.add_tensor("output.weight", head)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("hf", "gguf"):
        print(__doc__, file=sys.stderr)
        return 2
    (write_hf if argv[0] == "hf" else write_gguf)(Path(argv[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
