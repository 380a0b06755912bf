//! `--threads`: how many workers the forward pass runs on, and their pool.

use crate::error::CliError;

/// Every core the process may use (1 when that cannot be told).
pub fn available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The `--threads` count: as given, else [`available`]; 0 is refused.
pub fn count(requested: Option<usize>) -> Result<usize, CliError> {
    match requested.unwrap_or_else(available) {
        0 => Err(CliError::Usage("--threads must be at least 1".into())),
        n => Ok(n),
    }
}

/// A rayon pool of `threads` workers; the model's kernels run on the pool they are
/// `install`ed in.
pub fn pool(threads: usize) -> Result<rayon::ThreadPool, CliError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| CliError::Usage(format!("cannot start {threads} threads: {e}")))
}
