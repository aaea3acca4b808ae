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

fucina-nn/tests/peft_decoders.rs loads both adapters into fucina's CausalLm
and compares the logits (1e-5).

Run:  ${PYTHON:-python3} tools/gen_peft_decoder_goldens.py
Writes fucina-nn/tests/goldens/peft_decoders/<fam>/{peft_adapter/,logits.safetensors}.
"""
import json
import pathlib
import shutil

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fucina-nn" / "tests" / "fixtures" / "hf"
OUT = ROOT / "fucina-nn" / "tests" / "goldens" / "peft_decoders"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
IDS = [[5, 17, 33, 9, 61, 2, 40, 7], [12, 3, 88, 19, 0, 0, 0, 0]]
MASK = [[1] * 8, [1, 1, 1, 1, 0, 0, 0, 0]]


def base(fam):
    return AutoModelForCausalLM.from_pretrained(FIXTURES / fam, dtype=torch.float32).eval()


def logits(model):
    with torch.no_grad():
        return model(input_ids=torch.tensor(IDS), attention_mask=torch.tensor(MASK)).logits.contiguous()


def main():
    for i, fam in enumerate(["llama", "qwen2", "qwen3"]):
        out = OUT / fam
        (out / "peft_adapter").exists() and shutil.rmtree(out / "peft_adapter")
        out.mkdir(parents=True, exist_ok=True)
        model = get_peft_model(base(fam), LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS))
        g = torch.Generator().manual_seed(10 + i)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.2)
        model.eval()
        model.save_pretrained(out / "peft_adapter")
        (out / "peft_adapter" / "README.md").unlink(missing_ok=True)
        cfg_path = out / "peft_adapter" / "adapter_config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["base_model_name_or_path"] = f"fucina-nn/tests/fixtures/hf/{fam}"  # not this machine's path
        cfg["target_modules"] = sorted(cfg["target_modules"])  # a set in PEFT: a stable order
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        tensors = {"ids": torch.tensor(IDS), "mask": torch.tensor(MASK, dtype=torch.uint8),
                   "peft_logits": logits(model), "base_logits": logits(base(fam))}
        mine = out / "fucina_adapter"
        if mine.exists():
            tensors["fucina_logits"] = logits(PeftModel.from_pretrained(base(fam), mine).eval())
        else:
            print(f"{fam}: no fucina_adapter yet (run the ignored write_fucina_adapters test, then this again)")
        save_file(tensors, out / "logits.safetensors")
        print(f"{fam}: wrote {sorted(tensors)}")


if __name__ == "__main__":
    main()
