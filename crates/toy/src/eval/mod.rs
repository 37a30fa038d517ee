//! Evaluation: teacher-forced scoring, perplexity, and comparisons of two models (loss along
//! the line between them, token drift).

pub mod drift;
pub mod drift_grad;
pub mod lmc;
pub mod lmc_plot;
pub mod perplexity;
pub mod score;
