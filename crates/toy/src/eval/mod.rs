//! Evaluation: teacher-forced scoring, perplexity, KL divergence against a base
//! (llama-perplexity's `--kl-divergence`), multiple-choice scoring (its `--hellaswag`), and
//! comparisons of two models (loss along the line between them, token drift and its causes).

pub mod choice;
pub mod drift;
pub mod drift_grad;
pub mod kld;
pub mod kld_base;
pub mod kld_run;
pub mod lmc;
pub mod lmc_plot;
pub mod perplexity;
pub mod score;
