#!/usr/bin/env python3
"""PEFT LoRA on the decoder fixtures, both ways.

For each of the llama, qwen2 and qwen3 fixtures (fucina-nn/tests/fixtures/hf):

1. peft -> fucina: wraps the transformers model with `peft.get_peft_model`
   (LoRA r=4, alpha=8 on all seven projections), sets every `lora_B` to random
   non-zero values (PEFT starts B at zero, which would hide the adapter),
   saves the adapter with `save_pretrained` to `<fam>/peft_adapter/` and
   records the adapted logits (eval mode) for a padded batch.
2. fucina -> peft: loads the adapter fucina wrote to `<fam>/fucina_adapter/`
   (by `cargo test --release -p fucina-nn --test peft_decoders -- --ignored
   write_fucina_adapters`) with `PeftModel.from_pretrained` onto the same
   base and records its logits.

3. The config cases (CASES below), each on one family and both ways as
   above, into `cases/<name>/{peft_adapter/,logits.safetensors}` (logits
   `peft_logits` and, once fucina wrote `cases/<name>/fucina_adapter/`,
   `fucina_logits`; the batch is the family's): a regex `target_modules` with
   a regex `exclude_modules`, `"all-linear"` with an `exclude_modules` list,
   `use_rslora`, `init_lora_weights="gaussian"`, and `modules_to_save=["lm_head"]`
   on qwen2, whose head is tied (PEFT deep-copies the tied `lm_head`; fucina
   unties it with `CausalLm::untie_lm_head` first). The saved module's copy
   is perturbed too, so it matters. Loading fucina's adapter checks that peft
   took every tensor of the file, unchanged (no missing or unexpected key).

fucina-nn/tests/peft_decoders.rs loads both adapters into fucina's CausalLm
and compares the logits (1e-5).

Reproducibility: every adapter seeds torch's global generator before
`get_peft_model` (PEFT draws A from it) and draws B from its own seeded
generator, so a rerun rewrites every file byte for byte.

Run:  ${PYTHON:-python3} tools/gen_peft_decoder_goldens.py
Writes fucina-nn/tests/goldens/peft_decoders/<fam>/{peft_adapter/,logits.safetensors}
and fucina-nn/tests/goldens/peft_decoders/cases/<name>/.
"""
import json
import pathlib
import shutil

import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fucina-nn" / "tests" / "fixtures" / "hf"
OUT = ROOT / "fucina-nn" / "tests" / "goldens" / "peft_decoders"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
IDS = [[5, 17, 33, 9, 61, 2, 40, 7], [12, 3, 88, 19, 0, 0, 0, 0]]
MASK = [[1] * 8, [1, 1, 1, 1, 0, 0, 0, 0]]
# name -> (family, LoraConfig arguments beyond r=4, lora_alpha=8, lora_dropout=0);
# fucina-nn/tests/peft_decoders.rs `cases()` builds the same configs.
CASES = {
    "regex": ("llama", dict(target_modules=r".*\.(q|v|down)_proj", exclude_modules=r".*\.layers\.0\.self_attn\..*")),
    "all_linear": ("qwen3", dict(target_modules="all-linear", exclude_modules=["o_proj"])),
    "rslora": ("qwen2", dict(target_modules=TARGETS, use_rslora=True)),
    "gaussian": ("llama", dict(target_modules=["q_proj", "up_proj"], init_lora_weights="gaussian")),
    "modules_to_save": ("qwen2", dict(target_modules=["q_proj", "v_proj"], modules_to_save=["lm_head"])),
}


def base(fam):
    return AutoModelForCausalLM.from_pretrained(FIXTURES / fam, dtype=torch.float32).eval()


def logits(model):
    with torch.no_grad():
        return model(input_ids=torch.tensor(IDS), attention_mask=torch.tensor(MASK)).logits.contiguous()


def write_config(path, fam):
    cfg = json.loads(path.read_text())
    cfg["base_model_name_or_path"] = f"fucina-nn/tests/fixtures/hf/{fam}"  # not this machine's path
    if isinstance(cfg["target_modules"], list):
        cfg["target_modules"] = sorted(cfg["target_modules"])  # a set in PEFT: a stable order
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def load_checked(fam, adapter_dir):
    """PeftModel.from_pretrained, checking that every tensor of the file landed unchanged."""
    model = PeftModel.from_pretrained(base(fam), adapter_dir).eval()
    file = load_file(adapter_dir / "adapter_model.safetensors")
    got = get_peft_model_state_dict(model)
    assert sorted(got) == sorted(file), (sorted(set(got) ^ set(file)))
    for k, v in file.items():
        assert torch.equal(got[k], v), k
    return model


def save_case(model, out, fam, label, first_tensors):
    """Saves `model`'s adapter to out/peft_adapter, then writes out/logits.safetensors:
    `first_tensors()` (called after the save), plus fucina's logits when out/fucina_adapter exists."""
    model.eval()
    model.save_pretrained(out / "peft_adapter")
    (out / "peft_adapter" / "README.md").unlink(missing_ok=True)
    write_config(out / "peft_adapter" / "adapter_config.json", fam)
    tensors = first_tensors()
    mine = out / "fucina_adapter"
    if mine.exists():
        tensors["fucina_logits"] = logits(load_checked(fam, mine))
    else:
        print(f"{label}: no fucina_adapter yet (run the ignored write_fucina_adapters test, then this again)")
    save_file(tensors, out / "logits.safetensors")
    print(f"{label if label == fam else f'{label} ({fam})'}: wrote {sorted(tensors)}")


def cases():
    for i, (name, (fam, kw)) in enumerate(CASES.items()):
        out = OUT / "cases" / name
        (out / "peft_adapter").exists() and shutil.rmtree(out / "peft_adapter")
        out.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(100 + i)  # PEFT draws A from the global generator
        model = get_peft_model(base(fam), LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, **kw))
        g = torch.Generator().manual_seed(100 + i)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "lora_B" in pname:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.2)
                elif "modules_to_save" in pname:
                    p.add_(torch.randn(p.shape, generator=g) * 0.05)
        save_case(model, out, fam, name, lambda: {"peft_logits": logits(model)})


def main():
    for i, fam in enumerate(["llama", "qwen2", "qwen3"]):
        out = OUT / fam
        (out / "peft_adapter").exists() and shutil.rmtree(out / "peft_adapter")
        out.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(10 + i)  # PEFT draws A from the global generator
        model = get_peft_model(base(fam), LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS))
        g = torch.Generator().manual_seed(10 + i)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.2)
        save_case(model, out, fam, fam, lambda: {"ids": torch.tensor(IDS), "mask": torch.tensor(MASK, dtype=torch.uint8),
                                                 "peft_logits": logits(model), "base_logits": logits(base(fam))})
    cases()


if __name__ == "__main__":
    main()
