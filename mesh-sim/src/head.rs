//! One simulated agent on threads of its own (the head, for the mesh
//! benchmark): a runtime of its own whose threads' CPU time is its own.
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An agent's lifecycle on a runtime of its own, with two workers as the
/// others' (a real head has a machine to itself).
pub(crate) struct HeadThread {
    tids: Arc<Mutex<Vec<i32>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HeadThread {
    /// Runs `life` (the agent's lifecycle) there until it ends or this is dropped.
    pub(crate) fn start(life: impl Future<Output = ()> + Send + 'static) -> std::io::Result<HeadThread> {
        let tids = Arc::new(Mutex::new(Vec::new()));
        let seen = tids.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("simulated-head")
            .on_thread_start(move || seen.lock().expect("not poisoned").push(nix::unistd::gettid().as_raw()))
            .enable_all()
            .build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new().name("simulated-head".into()).spawn(move || {
            rt.block_on(async {
                tokio::select! {
                    _ = rt_spawn(life) => {}
                    _ = stopped => {}
                }
            });
            rt.shutdown_timeout(Duration::from_millis(200));
        })?;
        Ok(HeadThread { tids, stop: Some(stop), thread: Some(thread) })
    }

    /// The CPU time of the runtime's threads: the first field of each one's
    /// schedstat, in ns.
    pub(crate) fn cpu(&self) -> Option<Duration> {
        let mut ns = 0u64;
        for tid in self.tids.lock().expect("not poisoned").iter() {
            let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
            ns += text.split_whitespace().next()?.parse::<u64>().ok()?;
        }
        Some(Duration::from_nanos(ns))
    }
}

/// Runs `f` as a task of the current runtime (on its workers, not on the
/// thread that blocks on it).
async fn rt_spawn(f: impl Future<Output = ()> + Send + 'static) {
    let _ = tokio::spawn(f).await;
}

impl Drop for HeadThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
