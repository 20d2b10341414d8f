//! The pool that parses and decides alerts, off the async I/O threads and fair between strategies.
//!
//! A body can take a while to parse (up to hundreds of milliseconds for hostile 256 KiB text). On the async
//! workers that time would stall every other connection; here it runs on a few dedicated threads instead. And
//! so that one webhook's bodies cannot queue ahead of another's, jobs are queued per strategy, at most one job
//! per strategy runs at a time, and strategies take turns (round robin): an alert for another strategy waits
//! at most for the bodies already running, one per thread, never for a strategy's whole queue.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Queues {
    /// Jobs waiting, per strategy.
    waiting: HashMap<String, VecDeque<Job>>,
    /// Strategies with waiting jobs and none running, in turn order.
    turns: VecDeque<String>,
    /// Strategies with a job running.
    running: HashSet<String>,
    /// Strategies whose turn a job kept past its end ([`CpuPool::keep_turn`]): `false` while the job still runs,
    /// `true` once it ended and left the strategy running for its [`Turn`].
    kept: HashMap<String, bool>,
    stopping: bool,
}

impl Queues {
    /// After a job of `key` ended: its turn passes on, unless the job kept it.
    fn job_ended(&mut self, key: &str, ready: &Condvar) {
        if let Some(kept) = self.kept.get_mut(key) {
            *kept = true;
            return;
        }
        self.release(key, ready);
    }

    /// `key` runs nothing any more: the jobs queued meanwhile (which found it running and took no turn) take it.
    fn release(&mut self, key: &str, ready: &Condvar) {
        self.running.remove(key);
        match self.waiting.get(key) {
            Some(rest) if !rest.is_empty() => {
                self.turns.push_back(key.to_owned());
                ready.notify_one();
            }
            _ => {
                self.waiting.remove(key);
            }
        }
    }
}

/// A strategy's turn kept by one of its jobs past the job's end ([`CpuPool::keep_turn`]): its next jobs wait until
/// this is dropped, and no pool thread is held meanwhile.
pub struct Turn {
    shared: Arc<Shared>,
    key: String,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut q = self.shared.queues.lock().unwrap_or_else(|e| e.into_inner());
        // Still running (`false`): the job's end passes the turn on, as if it had never been kept.
        if q.kept.remove(&self.key) == Some(true) {
            q.release(&self.key, &self.shared.ready);
        }
    }
}

struct Shared {
    queues: Mutex<Queues>,
    ready: Condvar,
}

/// A fixed set of threads running jobs keyed by strategy (see the module).
pub struct CpuPool {
    shared: Arc<Shared>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// What [`CpuPool::run_here`] came to.
pub enum Here<T, F> {
    /// It ran and returned this.
    Done(T),
    /// It ran and panicked (as a pool job's dropped answer: the caller answers busy).
    Panicked,
    /// The key was busy or the pool stopping: not run, here it is back.
    Busy(F),
}

/// The pool has stopped (the server is shutting down) and did not run the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the decision pool has stopped")]
pub struct Stopped;

impl CpuPool {
    /// Starts `threads` threads (at least one).
    pub fn new(threads: usize) -> std::io::Result<CpuPool> {
        let shared = Arc::new(Shared { queues: Mutex::default(), ready: Condvar::new() });
        let mut handles = Vec::new();
        for i in 0..threads.max(1) {
            let shared = Arc::clone(&shared);
            handles.push(std::thread::Builder::new().name(format!("decide-{i}")).spawn(move || work(&shared))?);
        }
        Ok(CpuPool { shared, threads: Mutex::new(handles) })
    }

    /// Runs `f` on the pool in `key`'s turn and returns its result.
    pub async fn run<T, F>(&self, key: &str, f: F) -> Result<T, Stopped>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        {
            let mut q = self.shared.queues.lock().unwrap_or_else(|e| e.into_inner());
            if q.stopping {
                return Err(Stopped);
            }
            let first = q.waiting.get(key).map_or(true, VecDeque::is_empty);
            q.waiting.entry(key.to_owned()).or_default().push_back(job);
            if first && !q.running.contains(key) {
                q.turns.push_back(key.to_owned());
            }
        }
        self.shared.ready.notify_one();
        rx.await.map_err(|_| Stopped)
    }

    /// Keeps `key`'s turn past the end of the job of `key` that calls this (and must be running): until the returned
    /// [`Turn`] is dropped, `key`'s other jobs wait, whether they were queued or come later. For a job that has to
    /// wait for something before it can decide (a read back): it gives its thread back and waits outside the pool.
    pub fn keep_turn(&self, key: &str) -> Turn {
        let mut q = self.shared.queues.lock().unwrap_or_else(|e| e.into_inner());
        debug_assert!(q.running.contains(key), "a turn is kept by its running job only");
        q.kept.insert(key.to_owned(), false);
        Turn { shared: Arc::clone(&self.shared), key: key.to_owned() }
    }

    /// Runs `f` on the calling thread, now, when `key` has no job queued or running: the one-job-per-strategy
    /// rule and the turns hold as if it had been queued and run at once, without the two thread switches. For
    /// small jobs only (a short body's decision): the caller's thread is an async worker. Gives `f` back when
    /// `key` is busy or the pool is stopping (then queue it with [`CpuPool::run`]).
    pub fn run_here<T, F>(&self, key: &str, f: F) -> Here<T, F>
    where
        F: FnOnce() -> T,
    {
        {
            let mut q = self.shared.queues.lock().unwrap_or_else(|e| e.into_inner());
            if q.stopping || q.running.contains(key) || q.waiting.get(key).is_some_and(|w| !w.is_empty()) {
                return Here::Busy(f);
            }
            q.running.insert(key.to_owned());
        }
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let mut q = self.shared.queues.lock().unwrap_or_else(|e| e.into_inner());
        // Jobs queued meanwhile found the key running and did not take a turn: they take it now (or when the turn
        // the job kept is dropped).
        q.job_ended(key, &self.shared.ready);
        drop(q);
        match out {
            Ok(v) => Here::Done(v),
            Err(_) => Here::Panicked,
        }
    }

    /// Runs `f` on the calling thread when `short` and `key` is idle ([`CpuPool::run_here`]), otherwise queues
    /// it ([`CpuPool::run`]). A panic answers as a pool job's would: [`Stopped`].
    pub async fn run_short_here<T, F>(&self, key: &str, short: bool, f: F) -> Result<T, Stopped>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let f = if short {
            match self.run_here(key, f) {
                Here::Done(v) => return Ok(v),
                Here::Panicked => return Err(Stopped),
                Here::Busy(f) => f,
            }
        } else {
            f
        };
        self.run(key, f).await
    }

    /// Runs what is queued, then stops the threads.
    pub fn stop(&self) {
        self.shared.queues.lock().unwrap_or_else(|e| e.into_inner()).stopping = true;
        self.shared.ready.notify_all();
        let handles = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for h in handles {
            let _ = h.join();
        }
    }
}

fn work(shared: &Shared) {
    let mut q = shared.queues.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let Some(key) = q.turns.pop_front() else {
            if q.stopping {
                return;
            }
            q = shared.ready.wait(q).unwrap_or_else(|e| e.into_inner());
            continue;
        };
        let Some(job) = q.waiting.get_mut(&key).and_then(VecDeque::pop_front) else { continue };
        q.running.insert(key.clone());
        drop(q);
        // A panicking job must not take a thread with it; its caller sees the dropped answer as `Stopped`.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        q = shared.queues.lock().unwrap_or_else(|e| e.into_inner());
        q.job_ended(&key, &shared.ready);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_strategy_runs_one_job_at_a_time_and_others_get_their_turn() {
        let pool = Arc::new(CpuPool::new(2).unwrap());
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut busy = Vec::new();
        for _ in 0..10 {
            let (pool, running, most) = (Arc::clone(&pool), Arc::clone(&running), Arc::clone(&most));
            busy.push(tokio::spawn(async move {
                pool.run("flood", move || {
                    let n = running.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    most.fetch_max(n, std::sync::atomic::Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(50));
                    running.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                })
                .await
                .unwrap();
            }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Ten 50 ms jobs are queued for "flood"; another strategy does not wait behind them.
        let t = Instant::now();
        assert_eq!(pool.run("other", || 7).await, Ok(7));
        assert!(t.elapsed() < Duration::from_millis(40), "waited {:?}", t.elapsed());
        for b in busy {
            b.await.unwrap();
        }
        assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), 1, "one job per strategy at a time");
        pool.stop();
        assert_eq!(pool.run("x", || ()).await, Err(Stopped));
    }

    /// `run_here`, once the pool's thread has freed `key`: it frees it just after a job's answer was sent, so a
    /// caller that awaited the answer can find it still taken for a moment.
    fn when_free<T, F: FnOnce() -> T>(pool: &CpuPool, key: &str, mut f: F) -> Here<T, F> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match pool.run_here(key, f) {
                Here::Busy(back) if Instant::now() < deadline => {
                    f = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                other => return other,
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_runs_here_only_while_its_strategy_is_idle_and_the_queue_goes_on_after_it() {
        let pool = Arc::new(CpuPool::new(1).unwrap());
        assert!(matches!(pool.run_here("s", || 5), Here::Done(5)));
        // While a job of "s" runs on the pool, "s" is busy here; another strategy is not.
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let held = {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move {
                pool.run("s", move || {
                    started_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                })
                .await
            })
        };
        started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(matches!(pool.run_here("s", || 1), Here::Busy(_)), "one job per strategy at a time");
        assert!(matches!(pool.run_here("t", || 2), Here::Done(2)));
        release_tx.send(()).unwrap();
        held.await.unwrap().unwrap();
        // A job queued while one runs here waits for it, then runs on the pool.
        let order = Arc::new(Mutex::new(Vec::new()));
        let queued = {
            let (pool, order) = (Arc::clone(&pool), Arc::clone(&order));
            move || {
                let (pool, order) = (Arc::clone(&pool), Arc::clone(&order));
                tokio::spawn(async move { pool.run("s", move || order.lock().unwrap().push("queued")).await })
            }
        };
        let mut later = None;
        let here = when_free(&pool, "s", || {
            later = Some(queued());
            std::thread::sleep(Duration::from_millis(50));
            order.lock().unwrap().push("here");
        });
        assert!(matches!(here, Here::Done(())));
        later.unwrap().await.unwrap().unwrap();
        assert_eq!(*order.lock().unwrap(), vec!["here", "queued"]);
        assert!(matches!(when_free(&pool, "s", || -> i32 { panic!("a bug") }), Here::Panicked));
        assert!(matches!(pool.run_here("s", || 3), Here::Done(3)), "a panic leaves the strategy free");
        pool.stop();
        assert!(matches!(pool.run_here("s", || 4), Here::Busy(_)), "a stopped pool runs nothing");
    }

    /// A job that keeps its turn gives its thread back: another strategy runs meanwhile, and its own strategy's
    /// next jobs wait for the turn to be dropped, then run in their order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kept_turn_holds_its_strategy_but_no_thread() {
        let pool = Arc::new(CpuPool::new(1).unwrap());
        let order = Arc::new(Mutex::new(Vec::new()));
        let turn = {
            let p = Arc::clone(&pool);
            pool.run("s", move || p.keep_turn("s")).await.unwrap()
        };
        let queued = {
            let (pool, order) = (Arc::clone(&pool), Arc::clone(&order));
            tokio::spawn(async move { pool.run("s", move || order.lock().unwrap().push("s later")).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(matches!(pool.run_here("s", || 1), Here::Busy(_)), "the kept turn is the strategy's");
        // The only thread is free for another strategy.
        let t = Instant::now();
        assert_eq!(pool.run("t", || 7).await, Ok(7));
        assert!(t.elapsed() < Duration::from_millis(500));
        assert!(order.lock().unwrap().is_empty(), "a job ran in a kept turn");
        order.lock().unwrap().push("kept");
        drop(turn);
        queued.await.unwrap().unwrap();
        assert_eq!(*order.lock().unwrap(), vec!["kept", "s later"]);
        // Kept by a job run here, and dropped before the job's end: the turn passes on as usual.
        let p = Arc::clone(&pool);
        assert!(matches!(when_free(&pool, "s", move || drop(p.keep_turn("s"))), Here::Done(())));
        assert!(matches!(pool.run_here("s", || 3), Here::Done(3)));
        let p = Arc::clone(&pool);
        let Here::Done(turn) = when_free(&pool, "s", move || p.keep_turn("s")) else { panic!("not run here") };
        assert!(matches!(pool.run_here("s", || 4), Here::Busy(_)));
        drop(turn);
        assert!(matches!(pool.run_here("s", || 5), Here::Done(5)));
        pool.stop();
    }

    #[tokio::test]
    async fn with_one_thread_strategies_take_turns() {
        let pool = Arc::new(CpuPool::new(1).unwrap());
        let order = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        // Hold the only thread until everything is queued.
        let g = Arc::clone(&gate);
        let first = {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move {
                pool.run("a", move || {
                    let (m, c) = &*g;
                    let mut open = m.lock().unwrap();
                    while !*open {
                        open = c.wait(open).unwrap();
                    }
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut jobs = Vec::new();
        for key in ["a", "a", "a", "b", "b", "c"] {
            let (pool, order) = (Arc::clone(&pool), Arc::clone(&order));
            jobs.push(tokio::spawn(async move { pool.run(key, move || order.lock().unwrap().push(key)).await }));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        first.await.unwrap().unwrap();
        for j in jobs {
            j.await.unwrap().unwrap();
        }
        // "b" and "c" queued after three "a" jobs, yet each waits for at most one of them.
        assert_eq!(*order.lock().unwrap(), vec!["b", "c", "a", "b", "a", "a"]);
        pool.stop();
    }
}
