//! Inference: KV cache, sampler, generation.
