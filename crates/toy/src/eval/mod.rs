//! Evaluation: teacher-forced scoring, perplexity, KL divergence against a base
//! (llama-perplexity's `--kl-divergence`) and multiple-choice scoring (its `--hellaswag`).

pub mod choice;
pub mod kld;
pub mod kld_base;
pub mod kld_run;
pub mod perplexity;
pub mod score;
