//! The progress bar of a training run (`toy train`, `toy finetune`): step, loss, a moving
//! mean of tokens/s, elapsed time and ETA from the run's events, with evaluations and
//! checkpoints printed above the bar.

use indicatif::{ProgressBar, ProgressStyle};
use toy::train::events::Event;

pub struct RunBar {
    pub pb: ProgressBar,
    tok_s_avg: f64,
}

impl RunBar {
    pub fn new(steps: usize) -> Self {
        // of several ranks, only rank 0 shows a bar
        let pb = match crate::ranks::world().is_root() {
            true => ProgressBar::new(steps as u64),
            false => ProgressBar::hidden(),
        };
        pb.set_style(
            ProgressStyle::with_template(
                "{bar:30} {pos}/{len} steps  {msg}  elapsed {elapsed_precise}  eta {eta_precise}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Self { pb, tok_s_avg: 0.0 }
    }

    /// Shows event `e`; an evaluation is printed as `eval_line(step, val_loss, sample)` says.
    pub fn observe(&mut self, e: &Event, eval_line: impl Fn(usize, f32, &str) -> String) {
        match e {
            Event::RunStart { start_step, .. } => self.pb.set_position(*start_step as u64),
            Event::Step {
                step, loss, tok_s, ..
            } => {
                self.tok_s_avg = if self.tok_s_avg == 0.0 {
                    *tok_s
                } else {
                    0.9 * self.tok_s_avg + 0.1 * tok_s
                };
                self.pb.set_position(*step as u64);
                let avg = self.tok_s_avg;
                self.pb
                    .set_message(format!("loss {loss:.4}  {avg:.0} tok/s"));
            }
            Event::Eval {
                step,
                val_loss,
                sample,
                ..
            } => {
                let sample: String = sample.chars().take(160).collect();
                self.pb.println(eval_line(*step, *val_loss, &sample))
            }
            Event::Checkpoint { path, .. } => self.pb.println(format!("checkpoint {path}")),
            Event::RunEnd { .. } => {}
        }
    }
}
