//! The ranks of `mpirun -np N toy train|finetune` (and `srun --mpi=pmix`): joining the MPI
//! job at start (with the `mpi` feature), the threads each rank takes, and what only rank 0
//! does: make the run folder, talk, and show the bar. A rank that fails prints its error
//! with its rank and stops the whole job (MPI_Abort), so no rank waits forever on a dead one.

use std::sync::OnceLock;
use toy::ranks::Ranks;

static WORLD: OnceLock<Ranks> = OnceLock::new();

/// This process's ranks: the MPI job's, or one process.
pub fn world() -> Ranks {
    WORLD.get().cloned().unwrap_or_default()
}

/// Keeps MPI initialised until dropped (at the end of `main`).
pub struct Guard {
    #[cfg(feature = "mpi")]
    _universe: Option<toy::ranks::mpi::Universe>,
}

/// Joins the MPI job when an MPI launcher started this process; returns the guard and the
/// threads each rank should take when `-t` is not given (the cores shared among the ranks on
/// this machine).
#[cfg(feature = "mpi")]
pub fn join() -> Result<(Guard, Option<usize>), String> {
    if !toy::ranks::mpi::launched() {
        return Ok((Guard { _universe: None }, None));
    }
    let (universe, ranks, local) = toy::ranks::mpi::init()?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (ranks.parallel()).then_some((cores / local).max(1));
    let _ = WORLD.set(ranks);
    Ok((
        Guard {
            _universe: Some(universe),
        },
        threads,
    ))
}

/// Without the `mpi` feature: refuses to run as one of several ranks (each would train alone).
#[cfg(not(feature = "mpi"))]
pub fn join() -> Result<(Guard, Option<usize>), String> {
    let size = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse::<usize>().ok());
    match size {
        Some(n) if n > 1 => Err(format!(
            "started as one of {n} MPI ranks, but this toy was built without MPI: build it with \
             `cargo build --release -p toy-cli --features mpi` (needs libopenmpi-dev and libclang-dev)"
        )),
        _ => Ok((Guard {}, None)),
    }
}

/// Ends a rank that failed. A refusal every rank reaches alike (`RanksError`: a batch that
/// does not divide, ranks that differ) is printed once, by rank 0, and every rank exits;
/// any other error is printed naming this rank, which then stops the whole job (MPI_Abort),
/// so no rank waits forever on it.
pub fn fail(e: anyhow::Error) -> std::process::ExitCode {
    let w = world();
    if e.downcast_ref::<toy::ranks::RanksError>().is_some() {
        if w.is_root() {
            eprintln!("error: {e:#}");
        }
        return std::process::ExitCode::FAILURE;
    }
    eprintln!("error (rank {} of {}): {e:#}", w.rank(), w.size());
    w.abort(1)
}

/// Refuses to start unless every rank runs the same binary and the same resolved recipe.
pub fn check_same(recipe_toml: &str) -> anyhow::Result<()> {
    let w = world();
    if !w.parallel() {
        return Ok(());
    }
    w.check_same("recipes (resolved)", recipe_toml.as_bytes())?;
    let exe = std::env::current_exe().and_then(std::fs::read)?;
    w.check_same("binaries", &exe)?;
    Ok(())
}

/// On rank 0, `make()`'s path; on the others, rank 0's (a run folder all ranks then share).
pub fn root_makes(
    make: impl FnOnce() -> anyhow::Result<std::path::PathBuf>,
) -> anyhow::Result<std::path::PathBuf> {
    let w = world();
    if !w.parallel() {
        return make();
    }
    // rank 0's failure reaches the others as an empty path
    let mine = match w.is_root() {
        true => make(),
        false => Ok(std::path::PathBuf::new()),
    };
    let text = mine
        .as_ref()
        .map_or(String::new(), |p| p.display().to_string());
    let path = w.broadcast(&text);
    let mine = mine?;
    if path.is_empty() {
        anyhow::bail!("rank 0 could not make the run folder");
    }
    Ok(match w.is_root() {
        true => mine,
        false => path.into(),
    })
}

/// Of several ranks: the share of the run rank 0 spent in the ranks' sums (stderr).
pub fn report_sums(wall: f64) {
    let w = world();
    if w.parallel() {
        let s = toy::ranks::seconds_in_sums();
        eprintln!(
            "{} ranks: {s:.2} s of {wall:.2} s in the sums of losses and gradients ({:.1}%)",
            w.size(),
            100.0 * s / wall.max(1e-9)
        );
    }
}

/// " over N ranks" in a run's opening line, when there are several.
pub fn over_ranks() -> String {
    match world().size() {
        1 => String::new(),
        n => format!(" over {n} ranks"),
    }
}
