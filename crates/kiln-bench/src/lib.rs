//! # kiln-bench
//!
//! Benchmark statistics (percentiles, bootstrap confidence intervals, CV-based stopping),
//! KL-divergence and perplexity suites.
//!
//! **Owns:** measurement and its statistics.
//!
//! **Must never:** print fixed numbers or measure anything it did not run.
