//! `toy eval images -m CKPT`: a trained ViT's accuracy on a split of image shards (top-1,
//! top-5, per class, the confusion matrix); `toy classify -m CKPT IMAGE...`: the top classes of
//! image files with their probabilities.

use anyhow::{anyhow, Result};
use std::path::PathBuf;
use toy::vision::checkpoint::VitCheckpoint;

#[derive(clap::Args)]
pub struct EvalImagesArgs {
    /// The checkpoint (`model.gguf` of a `toy train` run with a [vit] recipe).
    #[arg(short = 'm', long)]
    model: PathBuf,
    /// Image shards (`toy data images`).
    #[arg(long, default_value = "data/fashion-mnist")]
    data: PathBuf,
    /// The split to score.
    #[arg(long, default_value = "test")]
    split: String,
    /// Also draw the confusion matrix into this PNG.
    #[arg(long)]
    confusion: Option<PathBuf>,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn eval_images(a: EvalImagesArgs) -> Result<()> {
    let ck = VitCheckpoint::open(&a.model).map_err(|e| anyhow!(e))?;
    let set = toy::images::shard::read(&a.data, &a.split)?;
    if (set.h, set.w, set.c) != (ck.cfg.image, ck.cfg.image, ck.cfg.channels) && set.c != 1 {
        eprintln!(
            "note: {}x{}x{} images are resized to the model's {}x{}x{}",
            set.h, set.w, set.c, ck.cfg.image, ck.cfg.image, ck.cfg.channels
        );
    }
    let r = toy::vision::eval::report(&ck, &set);
    if let Some(png) = &a.confusion {
        let title = format!("{}/{}", a.data.display(), a.split);
        toy::vision::confusion_plot::plot_confusion(&r, &title, png)?;
        eprintln!("confusion matrix: {}", png.display());
    }
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    println!(
        "{} images of {}/{}: top-1 {:.2}%, top-5 {:.2}%",
        r.images,
        a.data.display(),
        a.split,
        100.0 * r.top1,
        100.0 * r.top5
    );
    for (name, acc, n) in &r.per_class {
        println!("  {name:<14} {:6.2}% of {n}", 100.0 * acc);
    }
    println!("confusion (rows: true class, columns: predicted):");
    for row in &r.confusion {
        println!(
            "  {}",
            row.iter().map(|c| format!("{c:5}")).collect::<String>()
        );
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct ClassifyArgs {
    /// The checkpoint (`model.gguf` of a `toy train` run with a [vit] recipe).
    #[arg(short = 'm', long)]
    model: PathBuf,
    /// Image files (PNG, JPEG, BMP, GIF).
    #[arg(required = true)]
    images: Vec<PathBuf>,
    /// Classes shown per image.
    #[arg(long, default_value_t = 3)]
    top: usize,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn classify(a: ClassifyArgs) -> Result<()> {
    let ck = VitCheckpoint::open(&a.model).map_err(|e| anyhow!(e))?;
    let mut out = Vec::new();
    for p in &a.images {
        let top = toy::vision::eval::classify(&ck, p, a.top.max(1)).map_err(|e| anyhow!(e))?;
        if a.json {
            let list: Vec<_> = top
                .iter()
                .map(|(c, prob)| serde_json::json!({"class": c, "probability": prob}))
                .collect();
            out.push(serde_json::json!({"image": p.display().to_string(), "top": list}));
        } else {
            let s: Vec<String> = top
                .iter()
                .map(|(c, prob)| format!("{c} {:.1}%", 100.0 * prob))
                .collect();
            println!("{}: {}", p.display(), s.join(", "));
        }
    }
    if a.json {
        println!("{}", serde_json::Value::Array(out));
    }
    Ok(())
}
