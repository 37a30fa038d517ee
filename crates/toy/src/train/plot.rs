//! `toy plot`: the training and validation loss curves of a run, from its `events.jsonl`,
//! drawn to a PNG with `plotters` (bitmap backend). Text needs a TrueType font; plotters'
//! `ab_glyph` backend takes one from memory, so a system font (DejaVu, Liberation, ...) is
//! loaded when one is found, and without one the chart is drawn with its axes and grid but
//! no text.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;

use super::events::{read_events, Event};

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{0} has no step events to plot")]
    Empty(std::path::PathBuf),
    #[error("drawing the plot: {0}")]
    Draw(String),
}

/// Where system fonts usually are; the first that exists is used.
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

/// Registers a system font as "sans-serif" once; whether text can be drawn.
pub(crate) fn font_available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        FONT_PATHS.iter().any(|p| {
            let Ok(bytes) = std::fs::read(p) else {
                return false;
            };
            // plotters keeps fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
        })
    })
}

/// The curves of a run: (step, loss) for training (the last value logged for each step, so a
/// resumed run's repeated steps count once) and (step, val_loss).
pub type Curves = (Vec<(f64, f64)>, Vec<(f64, f64)>);

pub fn read_curves(events: &Path) -> Result<Curves, PlotError> {
    let evs = read_events(events).map_err(|source| PlotError::Io {
        path: events.to_path_buf(),
        source,
    })?;
    let (mut train, mut val) = (BTreeMap::new(), BTreeMap::new());
    for e in evs {
        match e {
            Event::Step { step, loss, .. } if loss.is_finite() => {
                train.insert(step, f64::from(loss));
            }
            Event::Eval {
                step,
                val_loss,
                metrics: None,
                ..
            } if val_loss.is_finite() => {
                val.insert(step, f64::from(val_loss));
            }
            _ => {}
        }
    }
    let pts = |m: BTreeMap<usize, f64>| m.into_iter().map(|(s, l)| (s as f64, l)).collect();
    Ok((pts(train), pts(val)))
}

/// Draws the loss curves of `events` (a run's `events.jsonl`) to `out` (PNG, w x h).
pub fn plot_run(events: &Path, title: &str, out: &Path, w: u32, h: u32) -> Result<(), PlotError> {
    let (train, val) = read_curves(events)?;
    if train.is_empty() {
        return Err(PlotError::Empty(events.to_path_buf()));
    }
    let draw = |e: &dyn std::fmt::Display| PlotError::Draw(e.to_string());
    let text = font_available();
    let x_max = train.last().map_or(1.0, |p| p.0).max(1.0);
    let ys = train.iter().chain(&val).map(|p| p.1);
    let (y_min, y_max) = ys.fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
    let pad = ((y_max - y_min) * 0.05).max(1e-3);

    let root = BitMapBackend::new(out, (w, h)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(16);
    if text {
        builder
            .caption(title, ("sans-serif", 22))
            .x_label_area_size(40)
            .y_label_area_size(56);
    } else {
        builder.x_label_area_size(8).y_label_area_size(8);
    }
    let mut chart = builder
        .build_cartesian_2d(0.0..x_max, (y_min - pad)..(y_max + pad))
        .map_err(|e| draw(&e))?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc("step")
            .y_desc("loss")
            .x_label_formatter(&|x| format!("{x:.0}"));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(|e| draw(&e))?;

    // Raw step losses are noisy (one small batch each): drawn faint, with a moving average.
    let window = (train.len() / 60).max(1);
    let smooth = moving_average(&train, window);
    chart
        .draw_series(LineSeries::new(train, BLUE.mix(0.25)))
        .map_err(|e| draw(&e))?;
    let train_series = chart
        .draw_series(LineSeries::new(smooth, BLUE.stroke_width(2)))
        .map_err(|e| draw(&e))?;
    if text {
        train_series
            .label(format!("train (mean of {window} steps)"))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    }
    if !val.is_empty() {
        let style = RED.stroke_width(2);
        let s = chart
            .draw_series(LineSeries::new(val.clone(), style))
            .map_err(|e| draw(&e))?;
        if text {
            s.label("validation")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED.stroke_width(2)));
        }
        chart
            .draw_series(val.into_iter().map(|p| Circle::new(p, 3, RED.filled())))
            .map_err(|e| draw(&e))?;
    }
    if text {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| draw(&e))?;
    }
    root.present().map_err(|e| draw(&e))?;
    Ok(())
}

/// The mean of each run of `window` points ending at each point (fewer at the start).
fn moving_average(pts: &[(f64, f64)], window: usize) -> Vec<(f64, f64)> {
    let mut sum = 0.0;
    pts.iter()
        .enumerate()
        .map(|(i, &(x, y))| {
            sum += y;
            if i >= window {
                sum -= pts[i - window].1;
            }
            (x, sum / (i + 1).min(window) as f64)
        })
        .collect()
}
