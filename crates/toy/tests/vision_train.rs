//! Training the ViT end to end on a small image set made here (the class is how bright a
//! noisy 8x8 image is, one of four levels): it learns it, logs steps and accuracy evaluations, writes a
//! checkpoint whose logits equal the trainer's, stops on a NaN loss, and resumes an interrupted
//! run bit for bit.

use toy::images::{shard, ImageSet};
use toy::vision::checkpoint::VitCheckpoint;
use toy::vision::train::{evaluate, train, VitHooks, VitRecipe};
use toy::vision::vit::{Pool, Vit, VitActs};

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
[optim]
lr = {lr:e}
min_lr = 0.0
warmup = 5
weight_decay = 0.01
beta2 = 0.999
grad_clip = 0.0
[train]
batch = 32
steps = {steps}
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
    // the head reads the patch rows' mean here (the resume test below keeps the CLS row)
    let mut r = recipe(&data, 100, 3e-3);
    r.vit.pool = Pool::Mean;
    let run = root.join("run");
    let mut seen = Vec::new();
    let out = train(&r, &run, &VitHooks::default(), |e| seen.push(e.clone())).unwrap();
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
    // a checkpoint at each evaluation, the last one the final weights
    let (step, _) = toy::train::checkpoint::latest(&run).unwrap();
    assert_eq!(step, 100);
    assert!(run.join("ckpt-000020.gguf").is_file());
    // the checkpoint gives the trainer's logits, bit for bit
    let ck = VitCheckpoint::open(&out.checkpoint).unwrap();
    assert_eq!(ck.classes, train_set.classes);
    assert_eq!(ck.cfg, r.vit, "the shape and pooling read back");
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
    let e = train(
        &recipe(&data, 50, 1e30),
        &root.join("nan"),
        &VitHooks::default(),
        |_| {},
    )
    .err()
    .expect("a NaN stop");
    assert!(e.contains("training loss is"), "{e}");
    let log = std::fs::read_to_string(root.join("nan/events.jsonl")).unwrap();
    assert!(log.contains("\"status\":\"failed"), "{log}");
    // a checkpoint of another kind is refused by name
    let e = VitCheckpoint::open(&data.join("meta.json")).err().unwrap();
    assert!(e.contains("meta.json"), "{e}");
}

/// A run stopped after step 7 (checkpoints every 3 steps) and resumed from step 6 ends with
/// the parameters of the same run done in one go, bit for bit.
#[test]
fn an_interrupted_vit_run_resumes_bit_for_bit() {
    let root = std::env::temp_dir().join(format!("toy-vit-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let data = root.join("data");
    let (train_set, val) = quadrants(400, 3).split(0.2, 0);
    shard::write(&data, &[("train", &train_set), ("val", &val)], "test").unwrap();
    let mut r = recipe(&data, 12, 3e-3);
    r.train.checkpoint_every = 3;
    r.data.crop_pad = 1;
    r.data.flip = true;
    let straight = train(&r, &root.join("a"), &VitHooks::default(), |_| {}).unwrap();
    let stop = VitHooks {
        stop_after: Some(7),
        ..VitHooks::default()
    };
    let part = train(&r, &root.join("b"), &stop, |_| {}).unwrap();
    assert!(!part.finished && part.steps == 7);
    assert!(
        part.checkpoint.ends_with("ckpt-000006.gguf"),
        "{:?}",
        part.checkpoint
    );
    let resume = VitHooks {
        resume: true,
        ..VitHooks::default()
    };
    let mut starts = Vec::new();
    let rest = train(&r, &root.join("b"), &resume, |e| {
        if let toy::train::events::Event::RunStart { start_step, .. } = e {
            starts.push(*start_step)
        }
    })
    .unwrap();
    assert_eq!(starts, [6]);
    assert!(rest.finished && rest.steps == 12);
    assert_eq!(rest.params, straight.params);
    // resuming a folder with no checkpoint says so
    let e = train(&r, &root.join("empty"), &resume, |_| {})
        .err()
        .unwrap();
    assert!(e.contains("no complete checkpoint"), "{e}");
}

/// The committed image recipes parse and their shapes check out.
#[test]
fn the_committed_vit_recipes_parse() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../recipes");
    for name in ["vit-fashion.toml", "vit-tiny.toml"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(toy::vision::train::is_vit_recipe(&text), "{name}");
        let r = VitRecipe::from_toml(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.vit.classes, 10, "{name}");
    }
    let tiny =
        VitRecipe::from_toml(&std::fs::read_to_string(dir.join("vit-tiny.toml")).unwrap()).unwrap();
    assert_eq!(
        (
            tiny.vit.image,
            tiny.vit.patch,
            tiny.vit.width,
            tiny.vit.depth,
            tiny.vit.heads
        ),
        (224, 16, 192, 12, 3)
    );
}

/// The ViT recipe has the language models' `[optim]` section (the old `[train]` keys are
/// still read, as the same optimizer), and its training loop clips and accumulates as theirs
/// does: clipping changes the weights, and two accumulated batches of 16 are one step.
#[test]
fn vit_optim_section_clipping_and_accumulation() {
    let root = std::env::temp_dir().join(format!("toy-vit-optim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let data = root.join("data");
    let (train_set, val) = quadrants(200, 5).split(0.2, 0);
    shard::write(&data, &[("train", &train_set), ("val", &val)], "test").unwrap();
    let new = recipe(&data, 4, 3e-3);
    let old_text = format!(
        "name = \"q\"\n[vit]\nimage = 8\npatch = 4\nchannels = 1\nclasses = 4\nwidth = 16\n\
         depth = 2\nheads = 2\nmlp = 32\n[data]\ndir = \"{}\"\nmean = [0.3]\nstd = [0.3]\n\
         [train]\nbatch = 32\nsteps = 4\nlr = 3e-3\nwarmup = 5\nweight_decay = 0.01\n\
         label_smoothing = 0.1\neval_every = 20\n",
        data.display()
    );
    let old = VitRecipe::from_toml(&old_text).expect("the old form still reads");
    assert_eq!(
        old.optim(),
        new.optim(),
        "the old keys are the same optimizer"
    );
    let both = old_text.replace(
        "[train]",
        "[optim]\nlr = 1e-3\nmin_lr = 0.0\nwarmup = 1\n[train]",
    );
    let e = VitRecipe::from_toml(&both).expect_err("both forms");
    assert!(e.contains("train.lr") && e.contains("optim.lr"), "{e}");

    let run = |r: &VitRecipe, name: &str| {
        train(r, &root.join(name), &VitHooks::default(), |_| {})
            .unwrap()
            .params
    };
    let plain = run(&new, "plain");
    let mut clipped = new.clone();
    clipped.optim.as_mut().unwrap().grad_clip = 1e-3;
    assert_ne!(
        run(&clipped, "clipped"),
        plain,
        "clipping reaches the update"
    );
    let mut accum = new.clone();
    accum.train.grad_accum = 2;
    accum.train.batch = 16;
    let a = run(&accum, "accum");
    let text = std::fs::read_to_string(root.join("accum/events.jsonl")).unwrap();
    assert_eq!(
        text.matches("\"type\":\"step\"").count(),
        4,
        "one event a step"
    );
    assert!(a.iter().all(|v| v.is_finite()));
    assert_ne!(a, plain, "other batches, other weights");
    let mut one = accum.clone();
    one.train.grad_accum = 1;
    assert_ne!(run(&one, "one"), a, "the second batch counts");
}
