//! The mesh-scale benchmark's message count (`agent/simulate.rs`,
//! `examples/mesh_bench.rs`): calls this process's mesh servers answered,
//! and cluster views they sent on Watch streams. The counters exist only
//! with the `simulation` feature (and in unit tests); in a production
//! build the two hooks the mesh calls are empty.
#[cfg(any(test, feature = "simulation"))]
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(any(test, feature = "simulation"))]
static CALLS_SERVED: AtomicU64 = AtomicU64::new(0);
#[cfg(any(test, feature = "simulation"))]
static VIEWS_SENT: AtomicU64 = AtomicU64::new(0);

/// A mesh call was answered (or refused).
#[inline]
pub fn call_served() {
    #[cfg(any(test, feature = "simulation"))]
    CALLS_SERVED.fetch_add(1, Ordering::Relaxed);
}

/// A cluster view was sent on a Watch stream.
#[inline]
pub fn view_sent() {
    #[cfg(any(test, feature = "simulation"))]
    VIEWS_SENT.fetch_add(1, Ordering::Relaxed);
}

/// Calls served plus views sent, since the start or the last `reset`.
#[cfg(any(test, feature = "simulation"))]
pub fn messages() -> u64 {
    CALLS_SERVED.load(Ordering::Relaxed) + VIEWS_SENT.load(Ordering::Relaxed)
}

#[cfg(any(test, feature = "simulation"))]
pub fn reset() {
    CALLS_SERVED.store(0, Ordering::Relaxed);
    VIEWS_SENT.store(0, Ordering::Relaxed);
}
