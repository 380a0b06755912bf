//! A small pool of spinning worker threads for the matmul drivers.
//!
//! At decode a token runs about two hundred matmuls of a few hundred microseconds or less;
//! handing each to rayon (wake a sleeping thread, join) costs a noticeable share of that.
//! Here the calling thread publishes a job, works on it itself, and the workers, which spin
//! for a short while after each job before they park, claim tasks from a shared counter.
//! Which thread runs which task never changes a result: every task writes its own outputs.
//!
//! One pool exists per thread count (created on first use, never dropped); [`current`]
//! returns the one matching `rayon::current_num_threads()`, so code running inside a rayon
//! pool's `install` gets a pool of the same size. If two threads use one pool at once, the
//! second runs its job alone on its own thread rather than waiting.

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long an idle worker spins (then yields, then parks) before it sleeps. Jobs at
/// decode arrive every few microseconds; between tokens the gap is longer.
const SPIN: Duration = Duration::from_micros(100);
const YIELD: Duration = Duration::from_micros(1000);

/// One published job: lives on the publishing thread's stack while [`WorkerPool::run`] runs.
struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    n_tasks: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    /// The first panic of a task, re-raised on the publishing thread.
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

impl Job<'_> {
    /// Claims and runs tasks until none are left. A panicking task still counts as done
    /// (so the publisher never waits forever); the publisher re-raises the panic.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Relaxed);
            if i >= self.n_tasks {
                return;
            }
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.f)(i)));
            if let Err(e) = r {
                let mut p = self.panic.lock().unwrap_or_else(|e| e.into_inner());
                p.get_or_insert(e);
            }
            self.done.fetch_add(1, Release);
        }
    }
}

struct Shared {
    /// The current job, or null. Set and cleared only by the publisher.
    job: AtomicPtr<Job<'static>>,
    /// Workers that may be looking at `job`; the publisher waits for zero before its job
    /// (and the closure it borrows) goes away.
    refs: AtomicUsize,
    /// Bumped for every job, so idle workers notice one.
    generation: AtomicU64,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

/// A fixed set of worker threads plus the calling thread.
pub struct WorkerPool {
    n_threads: usize,
    shared: Arc<Shared>,
    /// Held by the thread whose job is published.
    publisher: Mutex<()>,
}

impl WorkerPool {
    /// A pool in which `n_threads` threads (the caller and `n_threads - 1` workers) run jobs.
    fn new(n_threads: usize) -> WorkerPool {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            job: AtomicPtr::new(std::ptr::null_mut()),
            refs: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut started = 1;
        for i in 1..n_threads {
            let s = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("kiln-matmul-{i}"))
                .spawn(move || worker(&s));
            // A pool that could not start a thread still runs every job (on fewer threads).
            if spawned.is_ok() {
                started += 1;
            }
        }
        WorkerPool {
            n_threads: started,
            shared,
            publisher: Mutex::new(()),
        }
    }

    /// Threads that run a job (the caller included).
    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Runs `f(0) .. f(n_tasks - 1)`, each once, on the calling thread and the workers;
    /// returns when all have finished.
    pub fn run(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if n_tasks == 0 {
            return;
        }
        let guard = if self.n_threads > 1 && n_tasks > 1 {
            self.publisher.try_lock().ok()
        } else {
            None
        };
        let Some(_guard) = guard else {
            // One thread, one task, or another thread is publishing: run here.
            (0..n_tasks).for_each(f);
            return;
        };
        let job = Job {
            f,
            n_tasks,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            panic: Mutex::new(None),
        };
        let s = &*self.shared;
        // The lifetime is erased for the workers; `job` outlives every use of the pointer:
        // it is cleared below, and we wait until no worker holds a reference.
        let ptr = (&job as *const Job<'_>).cast_mut().cast::<Job<'static>>();
        s.job.store(ptr, SeqCst);
        s.generation.fetch_add(1, SeqCst);
        if s.sleepers.load(SeqCst) > 0 {
            let _l = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        job.work();
        while job.done.load(Acquire) < n_tasks {
            std::hint::spin_loop();
        }
        s.job.store(std::ptr::null_mut(), SeqCst);
        while s.refs.load(SeqCst) > 0 {
            std::hint::spin_loop();
        }
        let panic = job.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
    }
}

fn worker(s: &Shared) {
    let mut seen = s.generation.load(SeqCst);
    loop {
        // Wait for a new generation: spin, then yield, then park.
        let t0 = Instant::now();
        let mut spins = 0u32;
        loop {
            let g = s.generation.load(Acquire);
            if g != seen {
                seen = g;
                break;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(64) {
                std::hint::spin_loop();
                continue;
            }
            let idle = t0.elapsed();
            if idle < SPIN {
                std::hint::spin_loop();
            } else if idle < YIELD {
                std::thread::yield_now();
            } else {
                let mut l = s.lock.lock().unwrap_or_else(|e| e.into_inner());
                s.sleepers.fetch_add(1, SeqCst);
                while s.generation.load(SeqCst) == seen {
                    l = s.wake.wait(l).unwrap_or_else(|e| e.into_inner());
                }
                s.sleepers.fetch_sub(1, SeqCst);
                drop(l);
                seen = s.generation.load(SeqCst);
                break;
            }
        }
        s.refs.fetch_add(1, SeqCst);
        let p = s.job.load(SeqCst);
        if !p.is_null() {
            // SAFETY: `p` was published by `run`, which clears it and then waits for `refs`
            // to reach zero before its `Job` goes away; we incremented `refs` before loading
            // `p` (both SeqCst), so the job is alive until we decrement it.
            let job = unsafe { &*p };
            job.work();
        }
        s.refs.fetch_sub(1, SeqCst);
    }
}

/// The pool for `n_threads` threads, created on first use.
pub fn pool_for(n_threads: usize) -> &'static WorkerPool {
    static POOLS: OnceLock<Mutex<Vec<&'static WorkerPool>>> = OnceLock::new();
    thread_local! {
        static CACHED: std::cell::Cell<Option<&'static WorkerPool>> = const { std::cell::Cell::new(None) };
    }
    let n = n_threads.max(1);
    if let Some(p) = CACHED.get().filter(|p| p.n_threads == n) {
        return p;
    }
    let pools = POOLS.get_or_init(|| Mutex::new(Vec::new()));
    let mut pools = pools.lock().unwrap_or_else(|e| e.into_inner());
    let p = match pools.iter().find(|p| p.n_threads == n) {
        Some(p) => *p,
        None => {
            let p: &'static WorkerPool = Box::leak(Box::new(WorkerPool::new(n)));
            pools.push(p);
            p
        }
    };
    CACHED.set(Some(p));
    p
}

/// The pool matching the current rayon pool's size.
pub fn current() -> &'static WorkerPool {
    pool_for(rayon::current_num_threads())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_exactly_once() {
        let pool = pool_for(3);
        for n in [0usize, 1, 2, 7, 100, 1000] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(n, &|i| {
                hits[i].fetch_add(1, Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Relaxed) == 1), "n = {n}");
        }
    }

    #[test]
    fn concurrent_publishers_both_complete() {
        let pool = pool_for(2);
        std::thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    for _ in 0..200 {
                        let sum = AtomicUsize::new(0);
                        pool.run(50, &|i| {
                            sum.fetch_add(i, Relaxed);
                        });
                        assert_eq!(sum.load(Relaxed), 50 * 49 / 2);
                    }
                });
            }
        });
    }

    #[test]
    fn a_panicking_task_reaches_the_publisher_and_the_pool_survives() {
        let pool = pool_for(2);
        let r = std::panic::catch_unwind(|| {
            pool.run(16, &|i| {
                if i == 11 {
                    panic!("task 11");
                }
            })
        });
        assert!(r.is_err());
        let sum = AtomicUsize::new(0);
        pool.run(8, &|i| {
            sum.fetch_add(i, Relaxed);
        });
        assert_eq!(sum.load(Relaxed), 28);
    }

    #[test]
    fn a_parked_worker_wakes_for_the_next_job() {
        let pool = pool_for(2);
        pool.run(4, &|_| {});
        std::thread::sleep(YIELD * 3);
        let sum = AtomicUsize::new(0);
        pool.run(64, &|i| {
            sum.fetch_add(i, Relaxed);
        });
        assert_eq!(sum.load(Relaxed), 64 * 63 / 2);
    }
}
