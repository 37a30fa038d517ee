//! The loss along the line between two checkpoints ([`super::lmc`]) as a PNG: the curve,
//! the chord between its ends, and the barrier marked where it is highest.

use super::lmc::Lmc;
use crate::train::plot::{font_available, PlotError};
use plotters::prelude::*;
use std::path::Path;

pub fn plot_lmc(r: &Lmc, title: &str, out: &Path) -> Result<(), PlotError> {
    let draw = |e: &dyn std::fmt::Display| PlotError::Draw(e.to_string());
    let pts: Vec<(f64, f64)> = r.points.iter().map(|p| (p.alpha, p.loss)).collect();
    let (Some(&first), Some(&last)) = (pts.first(), pts.last()) else {
        return Err(PlotError::Draw("no points to plot".into()));
    };
    let (y_min, y_max) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let pad = ((y_max - y_min) * 0.08).max(1e-3);
    let text = font_available();
    let root = BitMapBackend::new(out, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(16);
    if text {
        let caption = format!(
            "{title}: barrier {:.4} at alpha {:.2}",
            r.barrier, r.barrier_alpha
        );
        builder
            .caption(caption, ("sans-serif", 20))
            .x_label_area_size(40)
            .y_label_area_size(56);
    }
    let mut chart = builder
        .build_cartesian_2d(
            first.0..last.0.max(first.0 + 1e-9),
            (y_min - pad)..(y_max + pad),
        )
        .map_err(|e| draw(&e))?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc("alpha (0 = A, 1 = B)")
            .y_desc("loss (nats / token)");
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(|e| draw(&e))?;
    chart
        .draw_series(LineSeries::new([first, last], BLACK.mix(0.4)))
        .map_err(|e| draw(&e))?;
    chart
        .draw_series(LineSeries::new(pts.clone(), BLUE.stroke_width(2)))
        .map_err(|e| draw(&e))?;
    chart
        .draw_series(pts.iter().map(|&p| Circle::new(p, 3, BLUE.filled())))
        .map_err(|e| draw(&e))?;
    root.present().map_err(|e| draw(&e))?;
    Ok(())
}
