//! The confusion matrix of [`super::eval::Report`] as a PNG: one cell per (true, predicted)
//! class, shaded by the share of the true class's images, the diagonal in blue.

use super::eval::Report;
use crate::train::plot::{font_available, PlotError};
use plotters::prelude::*;
use std::path::Path;

pub fn plot_confusion(r: &Report, title: &str, out: &Path) -> Result<(), PlotError> {
    let draw = |e: &dyn std::fmt::Display| PlotError::Draw(e.to_string());
    let k = r.confusion.len();
    if k == 0 {
        return Err(PlotError::Draw("no classes to plot".into()));
    }
    let text = font_available();
    let root = BitMapBackend::new(out, (720, 680)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(16);
    if text {
        let caption = format!("{title}: top-1 {:.2}% of {}", 100.0 * r.top1, r.images);
        builder
            .caption(caption, ("sans-serif", 20))
            .x_label_area_size(40)
            .y_label_area_size(110);
    }
    let mut chart = builder
        .build_cartesian_2d((0..k - 1).into_segmented(), (0..k - 1).into_segmented())
        .map_err(|e| draw(&e))?;
    let names: Vec<String> = r.per_class.iter().map(|c| c.0.clone()).collect();
    // labels at the centres of the cells: class numbers across, names down (top row first)
    let x_fmt = |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) => i.to_string(),
        _ => String::new(),
    };
    let y_fmt = |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) if *i < k => names[k - 1 - i].clone(),
        _ => String::new(),
    };
    let mut mesh = chart.configure_mesh();
    mesh.disable_mesh();
    if text {
        mesh.x_desc("predicted")
            .y_desc("true")
            .x_labels(k)
            .y_labels(k)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt);
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(|e| draw(&e))?;
    // row t (true class) is drawn top to bottom
    let cells = r.confusion.iter().enumerate().flat_map(|(t, row)| {
        let total = row.iter().sum::<usize>().max(1) as f64;
        row.iter().enumerate().map(move |(p, &n)| {
            let share = n as f64 / total;
            let base = if p == t { BLUE } else { RED };
            let y = k - 1 - t;
            let (x0, y0) = (SegmentValue::Exact(p), SegmentValue::Exact(y));
            let (x1, y1) = (SegmentValue::Exact(p + 1), SegmentValue::Exact(y + 1));
            Rectangle::new([(x0, y0), (x1, y1)], base.mix(share.max(0.02)).filled())
        })
    });
    chart.draw_series(cells).map_err(|e| draw(&e))?;
    root.present().map_err(|e| draw(&e))?;
    Ok(())
}
