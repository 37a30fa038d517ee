//! Training the ViT end to end on a small image set made here (the class is how bright a
//! noisy 8x8 image is, one of four levels): it learns it, logs steps and accuracy evaluations, writes a
//! checkpoint whose logits equal the trainer's, and stops on a NaN loss.

use toy::images::{shard, ImageSet};
use toy::vision::checkpoint::VitCheckpoint;
use toy::vision::train::{evaluate, train, VitRecipe};
use toy::vision::vit::{Vit, VitActs};

fn quadrants(n: usize, seed: u64) -> ImageSet {
    use rand::{Rng, SeedableRng};
    let mut r = rand::rngs::StdRng::seed_from_u64(seed);
    let mut s = ImageSet {
        h: 8,
        w: 8,
        c: 1,
        classes: (0..4).map(|i| format!("q{i}")).collect(),
        ..Default::default()
    };
    for _ in 0..n {
        let q: usize = r.random_range(0..4);
        for _ in 0..64 {
            let noise: u8 = r.random_range(0..40);
            s.pixels.push(20 + 55 * q as u8 + noise);
        }
        s.labels.push(q as u16);
    }
    s
}

fn recipe(dir: &std::path::Path, steps: usize, lr: f32) -> VitRecipe {
    VitRecipe::from_toml(&format!(
        r#"name = "quadrants"
[vit]
image = 8
patch = 4
channels = 1
classes = 4
width = 16
depth = 2
heads = 2
mlp = 32
[data]
dir = "{}"
mean = [0.3]
std = [0.3]
[train]
batch = 32
steps = {steps}
lr = {lr:e}
warmup = 5
weight_decay = 0.01
label_smoothing = 0.1
eval_every = 20
"#,
        dir.display()
    ))
    .unwrap()
}

#[test]
fn a_vit_learns_logs_and_checkpoints_what_it_learned() {
    let root = std::env::temp_dir().join(format!("toy-vit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let data = root.join("data");
    let (train_set, val) = quadrants(640, 1).split(0.2, 0);
    let test = quadrants(100, 2);
    shard::write(
        &data,
        &[("train", &train_set), ("val", &val), ("test", &test)],
        "test",
    )
    .unwrap();
    let r = recipe(&data, 100, 3e-3);
    let run = root.join("run");
    let mut seen = Vec::new();
    let out = train(&r, &run, |e| seen.push(e.clone())).unwrap();
    assert!(out.val_accuracy > 0.9, "val accuracy {}", out.val_accuracy);
    assert!(out.test_accuracy.unwrap() > 0.9);
    let text = std::fs::read_to_string(run.join("events.jsonl")).unwrap();
    assert_eq!(text.matches("\"type\":\"step\"").count(), 100);
    assert_eq!(
        text.matches("\"top1\"").count(),
        5,
        "an accuracy every 20 steps"
    );
    assert_eq!(seen.len(), text.lines().count());
    // the checkpoint gives the trainer's logits, bit for bit
    let ck = VitCheckpoint::open(&out.checkpoint).unwrap();
    assert_eq!(ck.classes, train_set.classes);
    assert_eq!(ck.params, out.params);
    let vit = Vit::new(ck.cfg.clone());
    let (acc, _, _) = evaluate(&vit, &ck.params, &test, &ck.batch_spec());
    assert_eq!(Some(acc), out.test_accuracy);
    let (x, _) = toy::vision::batch::batch(&test, &[0, 1, 2], &ck.batch_spec(), None);
    let (mut a, mut b) = (VitActs::default(), VitActs::default());
    vit.forward(&ck.params, &x, 3, &mut a);
    Vit::new(r.vit.clone()).forward(&out.params, &x, 3, &mut b);
    assert_eq!(a.logits, b.logits);
    // a learning rate that blows up stops the run with the step named
    let e = train(&recipe(&data, 50, 1e30), &root.join("nan"), |_| {})
        .err()
        .expect("a NaN stop");
    assert!(e.contains("loss became"), "{e}");
    let log = std::fs::read_to_string(root.join("nan/events.jsonl")).unwrap();
    assert!(log.contains("\"status\":\"failed"), "{log}");
    // a checkpoint of another kind is refused by name
    let e = VitCheckpoint::open(&data.join("meta.json")).err().unwrap();
    assert!(e.contains("meta.json"), "{e}");
}
