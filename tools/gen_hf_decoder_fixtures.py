#!/usr/bin/env python3
"""Tiny random-init Hugging Face decoder checkpoints + transformers goldens.

Writes, for each family in gpt2, llama, qwen2, qwen3, a directory
`fucina-nn/tests/fixtures/hf/<family>/` that
`transformers.AutoModelForCausalLM.from_pretrained(dir)` and
`transformers.AutoTokenizer.from_pretrained(dir)` load:

  config.json, generation_config.json     written by `save_pretrained`
  model.safetensors                       f32 weights (llama: sharded into
                                          model-0000k-of-0000n.safetensors
                                          + model.safetensors.index.json)
  tokenizer.json, tokenizer_config.json   one byte-level BPE tokenizer (vocab
                                          384, `<|endoftext|>` = bos/eos/pad)
                                          trained on data/shakespeare.txt,
                                          identical in every family dir
  goldens.safetensors                     transformers' outputs (see below)
  generate.json                           greedy batch generation (see below)

The weights are random (fixed seeds), nothing is downloaded. Each model is
built from its config with `attn_implementation="eager"`, then every norm
weight is set to 1 + 0.2*randn and every bias (GPT-2's LayerNorm and Conv1D
biases, Qwen2's q/k/v biases) to 0.2*randn, so a norm or bias bug cannot
hide behind the default 1/0 init.

goldens.safetensors keys:
  input_ids                int64 [2, 16], random non-special ids, no padding
  {f32,f64}/logits         [2, 16, 384]
  {f32,f64}/loss           [] the shifted mean cross-entropy over the 2*15
                           predicted tokens, in the model's dtype (equal to
                           model(input_ids, labels=input_ids).loss in f32;
                           transformers' own loss would upcast f64 logits to f32)
  {f32,f64}/grad/<name>    p.grad after loss.backward() for every
                           model.named_parameters() (tied weights once, under
                           the embedding's name)

generate.json: two prompts (5 and 9 ids, no special tokens) left-padded with
the pad id plus an attention mask, run through `model.generate(...,
do_sample=False, max_new_tokens=32)` in f32 and f64; the prompt seed is
advanced until every greedy step's top-1/top-2 logit gap is >= 1e-3 in f32
and f32/f64 agree on every token.

float64: the f64 runs use `model.to(torch.float64)`, but transformers keeps
three float32 steps whatever the model dtype: the rotary embedding (inv_freq
and cos/sin), Llama/Qwen RMSNorm (upcast to float32 and back) and the eager
attention's softmax (dtype=float32). For the f64 model the script therefore
recomputes inv_freq in float64 (same math as transformers' default / llama3
rope-init functions) with cos/sin in float64 (`_f64_rotary_forward`), runs
RMSNorm's formula in float64 (`_f64_rms_norm_forward`) and uses SDPA
attention, which stays in float64. The f32 runs use transformers unmodified.

At the end the script reloads every directory with from_pretrained and checks
the f32 logits against the golden, then prints file sizes and margins.

Setup (any venv):  python3 -m venv .venv && .venv/bin/pip install torch transformers tokenizers safetensors
Run:  ${PYTHON:-python3} tools/gen_hf_decoder_fixtures.py
CI never runs this; the outputs are committed. Rerunning gives the same files.
"""
import copy
import json
import math
import os
import pathlib
import shutil
import types

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    GPT2Config,
    LlamaConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
)

torch.set_num_threads(1)

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "fucina-nn" / "tests" / "fixtures" / "hf"
CORPUS = ROOT / "data" / "shakespeare.txt"
VOCAB = 384
EOT = "<|endoftext|>"
SEQ = 16
MAX_NEW = 32
PROMPT_LENS = (5, 9)
MIN_MARGIN = 1e-3
INIT = 0.2


def train_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(CORPUS)], trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    return tok


def configs(eot):
    ids = dict(bos_token_id=eot, eos_token_id=eot, pad_token_id=eot)
    # What Llama, Qwen2 and Qwen3 share: depth, KV heads, positions, norm eps, init.
    rope_family = dict(
        vocab_size=VOCAB,
        num_hidden_layers=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        initializer_range=INIT,
        **ids,
    )

    def rope_model(cls, widths, **options):
        """A Llama, Qwen2 or Qwen3 config: the shared `rope_family` fields, the family's
        widths (hidden size, MLP size, query heads) and its own options (copied)."""
        hidden, intermediate, heads = widths
        return cls(
            hidden_size=hidden,
            intermediate_size=intermediate,
            num_attention_heads=heads,
            **copy.deepcopy(options),
            **rope_family,
        )

    # What Qwen2 and Qwen3 share: the default rope at theta 1e6, no sliding window.
    qwen = dict(
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        use_sliding_window=False,
    )
    return {
        "gpt2": GPT2Config(
            vocab_size=VOCAB,
            n_positions=64,
            n_embd=32,
            n_head=4,
            n_layer=2,
            activation_function="gelu_new",
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            summary_first_dropout=0.0,
            initializer_range=INIT,
            tie_word_embeddings=True,
            **ids,
        ),
        "llama": rope_model(
            LlamaConfig,
            (64, 96, 4),
            head_dim=16,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 10000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
            tie_word_embeddings=False,
            attention_bias=False,
            mlp_bias=False,
        ),
        "qwen2": rope_model(Qwen2Config, (48, 80, 6), tie_word_embeddings=True, **qwen),
        "qwen3": rope_model(
            Qwen3Config,
            (32, 64, 4),
            head_dim=16,
            tie_word_embeddings=False,
            attention_bias=False,
            **qwen,
        ),
    }


def perturb(model):
    """Norm weights -> 1 + 0.2*randn, biases -> 0.2*randn (in place)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            is_norm = "norm" in name or ".ln_" in name or name.startswith("transformer.ln_f")
            if leaf == "bias":
                p.copy_(torch.randn_like(p) * 0.2)
            elif is_norm and leaf == "weight":
                p.copy_(1.0 + torch.randn_like(p) * 0.2)


def _inv_freq_f64(config):
    """transformers' default / llama3 rope-init math, in float64."""
    rp = config.rope_parameters
    base = rp["rope_theta"]
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(dim * rp.get("partial_rotary_factor", 1.0))
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim))
    if rp["rope_type"] == "default":
        return inv_freq
    assert rp["rope_type"] == "llama3", rp
    factor = rp["factor"]
    low_freq_factor = rp["low_freq_factor"]
    high_freq_factor = rp["high_freq_factor"]
    old_context_len = rp["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


def _f64_rotary_forward(self, x, position_ids):
    self._f64_calls += 1
    freqs = position_ids[..., None].to(torch.float64) * self.inv_freq_f64.to(x.device)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * self.attention_scaling
    sin = emb.sin() * self.attention_scaling
    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def _f64_rms_norm_forward(self, x):
    # transformers' Llama/Qwen RMSNorm upcasts to float32 and back; for a float64
    # model that would round every norm to float32: the same formula in float64.
    variance = x.pow(2).mean(-1, keepdim=True)
    return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))


def to_f64(model):
    """A float64 copy computed in float64 throughout: the rotary embedding in float64,
    RMSNorm without its float32 round trip, and SDPA attention (eager Llama/Qwen
    attention takes its softmax in float32)."""
    m = copy.deepcopy(model).to(torch.float64)
    if m.config.model_type != "gpt2":
        m.config._attn_implementation = "sdpa"
        for mod in m.modules():
            if type(mod).__name__.endswith("RMSNorm"):
                mod.forward = types.MethodType(_f64_rms_norm_forward, mod)
    rot = getattr(getattr(m, "model", None), "rotary_emb", None)
    if rot is not None:
        assert rot.attention_scaling == 1.0
        f32_inv = model.model.rotary_emb.inv_freq
        rot.inv_freq_f64 = _inv_freq_f64(m.config)
        assert torch.allclose(rot.inv_freq_f64.float(), f32_inv, rtol=1e-6, atol=0), "f64 inv_freq mismatch"
        rot._f64_calls = 0
        rot.forward = types.MethodType(_f64_rotary_forward, rot)
    return m


def rotary_calls(model):
    rot = getattr(getattr(model, "model", None), "rotary_emb", None)
    return None if rot is None else rot._f64_calls


def goldens(model, m64, input_ids):
    out = {"input_ids": input_ids.clone()}
    for tag, m in (("f32", model), ("f64", m64)):
        m.zero_grad(set_to_none=True)
        res = m(input_ids)
        # transformers' loss upcasts the logits to float32 (ForCausalLMLoss), which would
        # make the f64 golden f32-accurate: the same shifted mean cross-entropy in the
        # model's dtype instead (equal to res.loss in f32).
        v = res.logits.shape[-1]
        loss = torch.nn.functional.cross_entropy(
            res.logits[:, :-1].reshape(-1, v), input_ids[:, 1:].reshape(-1), ignore_index=-100
        )
        if tag == "f32":
            ref = m(input_ids, labels=input_ids).loss
            assert torch.allclose(loss, ref, rtol=1e-6, atol=0), (loss, ref)
        loss.backward()
        out[f"{tag}/logits"] = res.logits.detach().clone()
        out[f"{tag}/loss"] = loss.detach().clone().reshape([])
        for name, p in m.named_parameters():
            assert p.grad is not None, name
            out[f"{tag}/grad/{name}"] = p.grad.detach().clone()
        m.zero_grad(set_to_none=True)
    return out


def greedy(m, input_ids, attention_mask, eot):
    with torch.no_grad():
        g = m.generate(
            input_ids,
            attention_mask=attention_mask,
            do_sample=False,
            max_new_tokens=MAX_NEW,
            pad_token_id=eot,
            eos_token_id=eot,
            output_scores=True,
            return_dict_in_generate=True,
        )
    seq = g.sequences
    new = seq[:, input_ids.shape[1]:]
    margin = math.inf
    for step, s in enumerate(g.scores):
        # `scores` are the processed logits; greedy picks their argmax.
        top = torch.topk(s.double(), 2, dim=-1)
        for row in range(s.shape[0]):
            if (new[row, :step] == eot).any():
                continue  # a finished row only emits pad
            assert top.indices[row, 0].item() == new[row, step].item()
            margin = min(margin, (top.values[row, 0] - top.values[row, 1]).item())
    return seq, new, margin


def generation(model, m64, eot):
    seed = 1000
    while True:
        g = torch.Generator().manual_seed(seed)
        prompts = [
            [int(t) for t in torch.randint(0, VOCAB, (n,), generator=g)] for n in PROMPT_LENS
        ]
        if any(t == eot for p in prompts for t in p):
            seed += 1
            continue
        width = max(PROMPT_LENS)
        ids = torch.full((len(prompts), width), eot, dtype=torch.int64)
        mask = torch.zeros((len(prompts), width), dtype=torch.int64)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        s32, n32, m32 = greedy(model, ids, mask, eot)
        s64, n64, m64_ = greedy(m64, ids, mask, eot)
        if m32 >= MIN_MARGIN and torch.equal(s32, s64):
            break
        print(f"  prompt seed {seed}: margin {m32:.3g}, f32==f64 {torch.equal(s32, s64)}; next seed")
        seed += 1
    return {
        "prompts": prompts,
        "prompt_seed": seed,
        "padding_side": "left",
        "pad_token_id": eot,
        "eos_token_id": eot,
        "max_new_tokens": MAX_NEW,
        "input_ids": ids.tolist(),
        "attention_mask": mask.tolist(),
        "f32": {"sequences": s32.tolist(), "new_tokens": n32.tolist()},
        "f64": {"sequences": s64.tolist(), "new_tokens": n64.tolist()},
        "min_margin_f32": m32,
        "min_margin_f64": m64_,
    }


def build(family, config, seed, eot):
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    perturb(model)
    model.generation_config = GenerationConfig(bos_token_id=eot, eos_token_id=eot, pad_token_id=eot)
    model.eval()
    return model


def main():
    tok = train_tokenizer()
    eot = tok.token_to_id(EOT)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=EOT, eos_token=EOT, pad_token=EOT, unk_token=None
    )
    hf_tok.padding_side = "left"
    hf_tok.model_max_length = 64

    summary = {}
    for i, (family, config) in enumerate(configs(eot).items()):
        d = OUT / family
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        model = build(family, config, 1234 + i, eot)
        m64 = to_f64(model)

        g = torch.Generator().manual_seed(42 + i)
        input_ids = torch.randint(0, VOCAB, (2, SEQ), generator=g, dtype=torch.int64)
        input_ids[input_ids == eot] = eot + 1  # no special tokens
        gold = goldens(model, m64, input_ids)
        calls = rotary_calls(m64)
        assert calls is None or calls > 0, "f64 rotary not used"
        save_file({k: v.contiguous() for k, v in gold.items()}, str(d / "goldens.safetensors"))

        gen = generation(model, m64, eot)
        (d / "generate.json").write_text(json.dumps(gen, indent=1) + "\n")

        if family == "llama":
            model.save_pretrained(d, safe_serialization=True, max_shard_size="200KB")
        else:
            model.save_pretrained(d, safe_serialization=True)
        hf_tok.save_pretrained(d)
        summary[family] = (gen["min_margin_f32"], gen["min_margin_f64"], gen["prompt_seed"], gold)

    print("\nreload checks:")
    for family, (_, _, _, gold) in summary.items():
        d = OUT / family
        m = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
        t = AutoTokenizer.from_pretrained(d)
        with torch.no_grad():
            logits = m(gold["input_ids"]).logits
        diff = (logits - gold["f32/logits"]).abs().max().item()
        assert diff <= 1e-6, (family, diff)
        text = "To be, or not to be: that is the question.\n  Ünïcode ✓"
        enc = t(text)["input_ids"]
        assert t.decode(enc) == text, (family, t.decode(enc))
        assert t.eos_token_id == t.pad_token_id == t.bos_token_id == eot
        gc = json.loads((d / "generation_config.json").read_text())
        assert gc["bos_token_id"] == gc["eos_token_id"] == gc["pad_token_id"] == eot, gc
        print(f"  {family}: {type(m).__name__} logits max|diff| {diff:.3g}; tokenizer {type(t).__name__} "
              f"round-trips ({len(enc)} ids)")

    print("\nfiles:")
    total = 0
    for f in sorted(OUT.rglob("*")):
        if f.is_file():
            total += f.stat().st_size
            print(f"  {f.relative_to(OUT)}  {f.stat().st_size}")
    print(f"  total {total} bytes ({total / 1e6:.2f} MB)")
    print("\nmin top1-top2 margins (f32 / f64), prompt seed:")
    for family, (m32, m64, seed, _) in summary.items():
        print(f"  {family}: {m32:.4g} / {m64:.4g}  seed {seed}")
    print(f"\n{EOT} id = {eot}")


if __name__ == "__main__":
    main()
