//! Evaluation: teacher-forced scoring, perplexity, KL divergence against a base
//! (llama-perplexity's `--kl-divergence`).

pub mod kld;
pub mod kld_base;
pub mod kld_run;
pub mod perplexity;
pub mod score;
