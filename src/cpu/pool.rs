//! The CPU engine's threads for large matrix products (natively; the page has one thread).
//!
//! A decoder step's products take 20–200 µs, so handing out work must cost about a
//! microsecond. Starting scoped threads per product (tens of µs, 100 µs and more on a busy
//! VM) and rayon's pool (its caller blocks on a condition variable and is woken through the
//! kernel) both made two threads slower than one here. So the workers spin: each waits on its
//! own slot for a task pointer, runs it, and clears the slot; the caller posts a task to every
//! worker it needs, runs its own share and spins until the slots are clear. A worker with no
//! task for [`SPIN`] parks, and the next post wakes it. A panic in a worker is caught there and
//! raised again on the caller's thread, after every worker has finished with the caller's
//! data. Callers on several threads take turns (a lock around each call): a slot holds one
//! task at a time.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before it parks: longer than the gaps between a decoder
/// step's large products, shorter than a person notices a core busy.
const SPIN: Duration = Duration::from_millis(2);

/// One unit of work for one worker: call `job(index)`.
struct Task {
    /// Borrowed from the caller of [`Pool::for_each_mut`], which waits until every worker has
    /// cleared its slot before returning (or unwinding), so the borrow outlives every use.
    job: &'static (dyn Fn(usize) + Sync),
    index: usize,
}

/// A worker's mailbox.
#[derive(Default)]
struct Slot {
    /// Null when idle; else the task to run, owned by the poster until it is null again.
    task: AtomicPtr<Task>,
    sleeping: AtomicBool,
    panicked: AtomicBool,
    stop: AtomicBool,
}

struct Worker {
    slot: Arc<Slot>,
    handle: Option<JoinHandle<()>>,
}

/// `threads - 1` spinning workers beside the calling thread.
pub struct Pool {
    workers: Vec<Worker>,
    /// Held for a whole [`Pool::for_each_mut`]: a second caller's post would overwrite the
    /// first's task in a slot (or be cleared by the worker finishing the first's), and part of
    /// its work would silently not run.
    turn: Mutex<()>,
}

/// The operating system would not start a worker.
#[derive(Debug, thiserror::Error)]
#[error("could not start {0} threads for the CPU engine ({1}); try --threads 1")]
pub struct PoolError(usize, String);

impl Pool {
    /// Starts `threads - 1` workers (none for 0 or 1, and none on wasm, which has no threads
    /// here).
    pub fn new(threads: usize) -> Result<Self, PoolError> {
        let threads = if cfg!(target_arch = "wasm32") {
            1
        } else {
            threads
        };
        let mut pool = Self {
            workers: Vec::new(),
            turn: Mutex::new(()),
        };
        for i in 1..threads {
            let slot = Arc::new(Slot::default());
            let theirs = Arc::clone(&slot);
            let handle = std::thread::Builder::new()
                .name(format!("webnmt-cpu-{i}"))
                .spawn(move || work(&theirs))
                .map_err(|e| PoolError(threads, e.to_string()))?;
            pool.workers.push(Worker {
                slot,
                handle: Some(handle),
            });
        }
        Ok(pool)
    }

    /// Threads a call can use: the workers and the caller.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Calls `f(i, &mut items[i])` for every item, item 0 on this thread and the next ones on
    /// the workers, one each (items beyond the threads run on this thread after item 0).
    /// Returns when all are done; a panic in any of them is raised here. Calls from several
    /// threads run one after another.
    pub fn for_each_mut<T: Send>(&self, items: &mut [T], f: impl Fn(usize, &mut T) + Sync) {
        // A panic of an earlier call leaves nothing to repair: its workers finished (`Wait`).
        let _turn = self.turn.lock().unwrap_or_else(PoisonError::into_inner);
        /// The items' base pointer, shared by the threads, each using its own index.
        struct Base<T>(*mut T);
        // SAFETY: every index is used by exactly one thread (below), and `T: Send`.
        unsafe impl<T: Send> Sync for Base<T> {}
        impl<T> Base<T> {
            /// SAFETY: `i` is in bounds and no other reference to item `i` exists.
            #[allow(clippy::mut_from_ref)]
            unsafe fn item(&self, i: usize) -> &mut T {
                unsafe { &mut *self.0.add(i) }
            }
        }
        let len = items.len();
        let base = Base(items.as_mut_ptr());
        let call = |i: usize| {
            // SAFETY: `i < len`, and each index is passed to exactly one call.
            f(i, unsafe { base.item(i) })
        };
        let job: &(dyn Fn(usize) + Sync) = &call;
        // SAFETY: only the lifetime is erased; `Wait` below keeps this frame alive until no
        // worker holds the task any more.
        let job: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(job) };
        let helpers = &self.workers[..len.saturating_sub(1).min(self.workers.len())];
        // A worker's panic that an earlier call did not raise (its own item 0 panicked first).
        for worker in helpers {
            worker.slot.panicked.store(false, Ordering::Relaxed);
        }
        let tasks: Vec<Task> = (0..helpers.len())
            .map(|w| Task { job, index: w + 1 })
            .collect();
        let wait = Wait(helpers);
        for (worker, task) in helpers.iter().zip(&tasks) {
            let slot = &worker.slot;
            slot.task
                .store(std::ptr::from_ref(task).cast_mut(), Ordering::SeqCst);
            if slot.sleeping.load(Ordering::SeqCst)
                && let Some(handle) = &worker.handle
            {
                handle.thread().unpark();
            }
        }
        if len > 0 {
            call(0);
        }
        for i in helpers.len() + 1..len {
            call(i);
        }
        drop(wait);
        if helpers
            .iter()
            .any(|w| w.slot.panicked.swap(false, Ordering::Relaxed))
        {
            panic!("a CPU engine thread panicked (its message is above)");
        }
    }
}

/// Spins, also while unwinding, until the workers have cleared their slots.
struct Wait<'a>(&'a [Worker]);

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        for worker in self.0 {
            while !worker.slot.task.load(Ordering::Acquire).is_null() {
                std::hint::spin_loop();
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for worker in &mut self.workers {
            worker.slot.stop.store(true, Ordering::SeqCst);
            if let Some(handle) = worker.handle.take() {
                handle.thread().unpark();
                let _ = handle.join();
            }
        }
    }
}

/// A worker's loop: wait for a task (spinning, then parked), run it, clear the slot.
fn work(slot: &Slot) {
    loop {
        let mut idle_since = Instant::now();
        let mut spins = 0u32;
        let task = loop {
            let task = slot.task.load(Ordering::Acquire);
            if !task.is_null() {
                break task;
            }
            if slot.stop.load(Ordering::Relaxed) {
                return;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(64) || idle_since.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            // A poster stores the task, then reads `sleeping`; this thread sets `sleeping`,
            // then reads the task: one of the two sees the other's write (SeqCst), so a post
            // is never missed, and an unpark before the park makes the park return at once.
            slot.sleeping.store(true, Ordering::SeqCst);
            if slot.task.load(Ordering::SeqCst).is_null() && !slot.stop.load(Ordering::SeqCst) {
                std::thread::park();
            }
            slot.sleeping.store(false, Ordering::SeqCst);
            idle_since = Instant::now();
        };
        // SAFETY: the poster keeps the task alive until this thread clears the slot.
        let task = unsafe { &*task };
        if catch_unwind(AssertUnwindSafe(|| (task.job)(task.index))).is_err() {
            slot.panicked.store(true, Ordering::Relaxed);
        }
        slot.task.store(std::ptr::null_mut(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::Pool;

    #[test]
    fn every_item_is_visited_once_by_its_own_index() {
        for threads in [1, 2, 3] {
            let pool = Pool::new(threads).expect("threads start");
            for len in [0, 1, 2, 3, 5] {
                // Many rounds: the workers spin, park and are woken in between.
                for round in 0..200 {
                    let mut items = vec![0usize; len];
                    pool.for_each_mut(&mut items, |i, item| *item += i * 1000 + round);
                    let want: Vec<usize> = (0..len).map(|i| i * 1000 + round).collect();
                    assert_eq!(items, want, "{threads} threads, {len} items");
                    if round == 100 {
                        std::thread::sleep(super::SPIN * 2);
                    }
                }
            }
        }
    }

    /// The cost of handing out work: a round trip to one spinning worker with nothing to do.
    #[test]
    #[ignore = "timing, not a test: run with --ignored --nocapture"]
    fn round_trip_timing() {
        let pool = Pool::new(2).expect("threads start");
        let mut items = [0u64; 2];
        let rounds: u32 = 200_000;
        let start = std::time::Instant::now();
        for _ in 0..rounds {
            pool.for_each_mut(&mut items, |i, item| *item += i as u64);
        }
        let ns = start.elapsed().as_secs_f64() / f64::from(rounds) * 1e9;
        assert_eq!(items[1], u64::from(rounds));
        eprintln!("one round trip to a spinning worker: {ns:.0} ns");
    }

    #[test]
    fn a_panic_in_a_worker_reaches_the_caller_and_the_pool_still_works() {
        let pool = Pool::new(2).expect("threads start");
        let mut items = vec![0u8; 2];
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.for_each_mut(&mut items, |i, _| assert!(i != 1, "worker fails"))
        }));
        assert!(caught.is_err());
        pool.for_each_mut(&mut items, |i, item| *item = i as u8 + 1);
        assert_eq!(items, [1, 2]);
        // The caller's own item panics too, so the worker's panic is not raised by that call;
        // the next call must not raise it either.
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.for_each_mut(&mut items, |_, _| panic!("every item fails"))
        }));
        assert!(caught.is_err());
        pool.for_each_mut(&mut items, |i, item| *item = i as u8 + 3);
        assert_eq!(items, [3, 4]);
    }

    #[test]
    fn callers_on_two_threads_each_get_all_their_work_done() {
        let pool = Pool::new(3).expect("threads start");
        std::thread::scope(|scope| {
            for caller in 0..2usize {
                let pool = &pool;
                scope.spawn(move || {
                    for round in 0..500 {
                        let mut items = vec![0usize; 3];
                        pool.for_each_mut(&mut items, |i, item| *item = caller + i * 10 + round);
                        let want: Vec<usize> = (0..3).map(|i| caller + i * 10 + round).collect();
                        assert_eq!(items, want, "caller {caller}, round {round}");
                    }
                });
            }
        });
    }
}
