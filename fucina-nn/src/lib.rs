//! fucina-nn: modules, layers, models, LoRA and safetensors state dicts.
