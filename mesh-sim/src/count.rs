//! The mesh benchmark's message count: calls this process's mesh servers
//! answered plus cluster views they sent on Watch streams, counted by the
//! hook the agent's library offers (`node_agent::agent::MeshCounter`).
use std::sync::atomic::{AtomicU64, Ordering};

use node_agent::agent::{install_mesh_counter, MeshCounter};

struct Counter {
    calls_served: AtomicU64,
    views_sent: AtomicU64,
}

static COUNTER: Counter = Counter { calls_served: AtomicU64::new(0), views_sent: AtomicU64::new(0) };

impl MeshCounter for Counter {
    fn call_served(&self) {
        self.calls_served.fetch_add(1, Ordering::Relaxed);
    }

    fn view_sent(&self) {
        self.views_sent.fetch_add(1, Ordering::Relaxed);
    }
}

/// Installs the count in this process, once (later calls do nothing).
pub(crate) fn install() {
    install_mesh_counter(&COUNTER);
}

/// Mesh calls served plus cluster views streamed, in this process, since
/// the first simulation started or the last `reset_messages`.
pub fn messages() -> u64 {
    COUNTER.calls_served.load(Ordering::Relaxed) + COUNTER.views_sent.load(Ordering::Relaxed)
}

/// Starts the count of `messages` again from 0.
pub fn reset_messages() {
    COUNTER.calls_served.store(0, Ordering::Relaxed);
    COUNTER.views_sent.store(0, Ordering::Relaxed);
}
