//! `toy`: train, evaluate, inspect and run small language models. A thin `main` that
//! parses the command line and hands each command to its own file.

mod cmd_bench;
mod cmd_bench_train;
mod cmd_chat;
mod cmd_compare;
mod cmd_data;
mod cmd_devices;
mod cmd_eval;
mod cmd_eval_choice;
mod cmd_eval_kld;
mod cmd_finetune;
mod cmd_generate;
mod cmd_imatrix;
mod cmd_inspect;
mod cmd_merge;
mod cmd_plot;
mod cmd_quantize;
mod cmd_runs;
mod cmd_score;
mod cmd_serve;
mod cmd_tap;
mod cmd_template;
mod cmd_tokenize;
mod cmd_train;
mod cmd_vision;
mod common;
mod progress;
mod ranks;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "toy",
    version,
    about = "A small-language-model toolkit: run, chat, evaluate, quantize, train"
)]
struct Cli {
    /// Worker threads (default: all cores).
    #[arg(short = 't', long, global = true)]
    threads: Option<usize>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate text after a prompt.
    #[command(
        after_help = "Examples:\n  toy generate -p \"Once upon a time\" -n 64\n  toy generate -m models/gemma-3-270m-q4_k_m.gguf -p \"def fib(n):\" --temp 0\n  toy generate -p \"The answer:\" --json-schema schema.json --json"
    )]
    Generate(cmd_generate::Args),
    /// Chat interactively, with the model's chat template.
    #[command(
        after_help = "Examples:\n  toy chat\n  toy chat --system \"You are terse.\" --temp 0.3\n  toy chat --lora runs/<id>/ckpt-000120.gguf"
    )]
    Chat(cmd_chat::Args),
    /// Show a model's metadata, tensors and layer-by-layer flow.
    #[command(
        after_help = "Examples:\n  toy inspect models/SmolLM2-135M-Instruct.Q4_1.gguf\n  toy inspect MODEL.gguf --json | head"
    )]
    Inspect(cmd_inspect::Args),
    /// Turn text into token ids and pieces.
    #[command(
        after_help = "Examples:\n  toy tokenize \"Hello world\"\n  toy tokenize -m models/gemma-3-270m-q4_k_m.gguf --json \"<start_of_turn>user\""
    )]
    Tokenize(cmd_tokenize::Args),
    /// Teacher-forced log-probabilities of a continuation.
    #[command(
        after_help = "Examples:\n  toy score --prompt \"The capital of France is\" --continuation \" Paris\"\n  toy score --prompt-ids 1,2,3 --continuation-ids 4,5 --json"
    )]
    Score(cmd_score::Args),
    /// Activations at named points of a forward pass: statistics, or .npy files.
    #[command(
        after_help = "Examples:\n  toy tap -p \"Hello\" --at 'blk.*.resid,logits'\n  toy tap -p \"Hello\" --at blk.3.ffn_out --out taps/"
    )]
    Tap(cmd_tap::Args),
    /// Evaluate a model.
    #[command(subcommand)]
    Eval(cmd_eval::EvalCmd),
    /// Render a chat with the model's template.
    #[command(
        after_help = "Examples:\n  toy template --messages chat.json\n  toy template --messages chat.json --no-generation-prompt"
    )]
    Template(cmd_template::Args),
    /// Rewrite a model in one of llama-quantize's file types (Q4_K_M, Q8_0, IQ4_XS, ...).
    #[command(
        after_help = "Examples:\n  toy quantize model-f32.gguf model-q4km.gguf --type Q4_K_M\n  toy quantize model-f32.gguf model-q4km.gguf --type Q4_K_M --imatrix imatrix.gguf\n  toy quantize runs/<id>/ckpt-000120.gguf small.gguf --type Q8_0 --pure"
    )]
    Quantize(cmd_quantize::Args),
    /// List the CPU's features and the NVIDIA GPUs, or why there is none.
    #[command(after_help = "Examples:\n  toy devices\n  toy devices --json")]
    Devices(cmd_devices::Args),
    /// Compute an importance matrix over a text, for `toy quantize --imatrix`.
    #[command(
        after_help = "Examples:\n  toy imatrix -m model-f32.gguf -f data/text/gpl-3.txt -o imatrix.gguf\n  toy imatrix -m model-f32.gguf -f train.txt -c 512 --chunks 100"
    )]
    Imatrix(cmd_imatrix::Args),
    /// Fine-tune a GGUF (LoRA on the stored weights, or full) on chat SFT data, or resume.
    #[command(
        after_help = "Examples:\n  toy finetune recipes/sft-smollm2-lora.toml\n  toy finetune recipes/sft-smollm2-lora.toml --set train.steps=40 --set finetune.rank=8\n  toy finetune --resume runs/<id>\n  mpirun -np 2 toy finetune recipes/sft-smollm2-lora.toml   (built with --features mpi)"
    )]
    Finetune(cmd_finetune::Args),
    /// Merge a LoRA adapter into its base model.
    #[command(
        after_help = "Examples:\n  toy merge BASE.gguf runs/<id>/ckpt-000120.gguf merged.gguf\n  toy merge BASE.gguf ADAPTER.gguf merged-q4.gguf --type Q4_1"
    )]
    Merge(cmd_merge::Args),
    /// Measure prefill and decode speed (as llama-bench).
    #[command(
        after_help = "Examples:\n  toy bench -p 512 -n 128\n  toy bench -m MODEL.gguf -p 512 -n 128 -d 4096 --json\n  toy bench --train recipes/small.toml --steps 5"
    )]
    Bench(cmd_bench::Args),
    /// The top classes of image files under a trained image classifier.
    Classify(cmd_vision::ClassifyArgs),
    /// Prepare training data.
    #[command(subcommand)]
    Data(cmd_data::DataCmd),
    /// Train a model from scratch with a recipe, or resume a run.
    #[command(
        after_help = "Examples:\n  toy train recipes/tiny.toml\n  toy train recipes/tiny.toml --set train.steps=500 --set model.arch=gpt2\n  toy train --resume runs/<id>\n  mpirun -np 2 toy train recipes/tiny.toml   (built with --features mpi)"
    )]
    Train(cmd_train::Args),
    /// List training runs.
    #[command(after_help = "Examples:\n  toy runs\n  toy runs --runs-dir elsewhere")]
    Runs(cmd_runs::Args),
    /// Plot a run's training and validation loss to a PNG.
    #[command(after_help = "Examples:\n  toy plot runs/<id>")]
    Plot(cmd_plot::Args),
    /// Serve models behind an OpenAI-compatible API, with a web page.
    #[command(
        after_help = "Examples:\n  toy serve\n  toy serve -m A.gguf -m B.gguf --parallel 4 --api-key KEY\n  toy serve --spec ngram --cors-origins http://localhost:3000\n  curl -s localhost:4567/v1/chat/completions -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}'"
    )]
    Serve(cmd_serve::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // the server runs its model on an engine thread with a pool of its own, and its
    // HTTP runtime beside it, not on a worker of this pool
    if let Cmd::Serve(a) = cli.cmd {
        return report(cmd_serve::run(a, cli.threads));
    }
    // every other command prints and ends: a reader that stops early (`toy inspect M | head`)
    // ends it quietly, as it does any Unix tool, instead of a panic in println!
    // SAFETY: setting a signal's disposition to the default before any thread starts.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // A training step frees and allocates the same large buffers every step: glibc would hand
    // them back to the OS (mmap above 128 KiB, heap trimming) and each step would fault the
    // pages in again. Up to 32 MiB from the heap, and no trimming below 1 GiB free, keeps
    // them. SAFETY: mallopt before any thread starts.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
    // under mpirun: join the job; each rank takes its share of this machine's cores
    let (_mpi, rank_threads) = match ranks::join() {
        Ok(j) => j,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut pool = rayon::ThreadPoolBuilder::new();
    if let Some(t) = cli.threads.or(rank_threads) {
        pool = pool.num_threads(t.max(1));
    }
    let pool = match pool.build() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: cannot start {:?} threads: {e}", cli.threads);
            return ExitCode::FAILURE;
        }
    };
    // The command runs on a worker of the pool, so each parallel kernel starts on this thread
    // and only wakes the others: no hand-off to the pool and back (two context switches) for
    // each of the ~150 kernels of a decode step.
    let result = pool.install(|| run(cli.cmd));
    match result {
        Err(e) if ranks::world().parallel() => ranks::fail(e),
        r => report(r),
    }
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Generate(a) => cmd_generate::run(a),
        Cmd::Chat(a) => cmd_chat::run(a),
        Cmd::Inspect(a) => cmd_inspect::run(a),
        Cmd::Tokenize(a) => cmd_tokenize::run(a),
        Cmd::Score(a) => cmd_score::run(a),
        Cmd::Tap(a) => cmd_tap::run(a),
        Cmd::Eval(c) => cmd_eval::run(c),
        Cmd::Template(a) => cmd_template::run(a),
        Cmd::Quantize(a) => cmd_quantize::run(a),
        Cmd::Imatrix(a) => cmd_imatrix::run(a),
        Cmd::Devices(a) => cmd_devices::run(a),
        Cmd::Finetune(a) => cmd_finetune::run(a),
        Cmd::Merge(a) => cmd_merge::run(a),
        Cmd::Bench(a) => cmd_bench::run(a),
        Cmd::Classify(a) => cmd_vision::classify(a),
        Cmd::Data(c) => cmd_data::run(c),
        Cmd::Train(a) => cmd_train::run(a),
        Cmd::Runs(a) => cmd_runs::run(a),
        Cmd::Plot(a) => cmd_plot::run(a),
        Cmd::Serve(a) => cmd_serve::run(a, None),
    }
}
