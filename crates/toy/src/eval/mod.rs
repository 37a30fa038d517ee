//! Evaluation: teacher-forced scoring and perplexity.

pub mod perplexity;
pub mod score;
