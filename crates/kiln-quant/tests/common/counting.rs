//! A global allocator that counts allocations, for the tests that check a call allocates
//! nothing. A test binary installs it with
//! `#[global_allocator] static GLOBAL: counting::Counting = counting::Counting;` and reads
//! [`allocations`] before and after; it counts every thread's allocations, the test
//! harness's included, so such a binary holds one test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

/// Allocations (and reallocations) so far, on every thread.
pub fn allocations() -> usize {
    ALLOCS.load(Ordering::Relaxed)
}

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
