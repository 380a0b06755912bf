//! `cargo xtask models [--quiet] [NAME...]`: fetch the known models (or the named ones)
//! into the cache, and say where each one is and how big.

use std::time::Instant;

use kiln_hub::{FetchOptions, known_models};

use crate::XtaskError;

/// `cargo xtask models`: fetch the known models into the cache.
#[derive(clap::Args, Debug)]
pub struct ModelsArgs {
    /// No progress bars.
    #[arg(long, short = 'q')]
    quiet: bool,
    /// Models to fetch (default: every known one).
    names: Vec<String>,
}

pub fn run(a: &ModelsArgs) -> Result<(), XtaskError> {
    let options = FetchOptions {
        progress: !a.quiet,
        offline: false,
    };
    let mut names = a.names.clone();
    if names.is_empty() {
        names = known_models().iter().map(|m| m.name.to_string()).collect();
    }

    println!("cache: {}", kiln_hub::cache_dir().display());
    let mut failed = Vec::new();
    for name in &names {
        let was_cached = kiln_hub::is_cached(name);
        let started = Instant::now();
        match kiln_hub::fetch(name, &options) {
            Ok(path) => {
                let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                let how = if was_cached {
                    "cached".to_string()
                } else {
                    format!("fetched in {:.1}s", started.elapsed().as_secs_f64())
                };
                println!(
                    "{name:<20} {:>8.1} MB  {how:<18} {}",
                    size as f64 / 1e6,
                    path.display()
                );
            }
            Err(e) => {
                eprintln!("{name:<20} FAILED: {e}");
                failed.push(name.clone());
            }
        }
    }
    // Every model is tried and reported before failing.
    if failed.is_empty() {
        Ok(())
    } else {
        Err(XtaskError::ModelsFailed { names: failed })
    }
}
