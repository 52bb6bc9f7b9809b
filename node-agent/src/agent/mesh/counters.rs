//! A hook on the mesh's traffic: calls this process's mesh servers answered,
//! and cluster views they sent on Watch streams. None is installed in a
//! production agent (each hook is then one empty check); the mesh
//! simulation (crate `syndeo-mesh-sim`) installs one to count messages.
use std::sync::OnceLock;

/// Told of each mesh message this process's servers send.
pub trait MeshCounter: Send + Sync {
    /// A mesh call was answered (or refused).
    fn call_served(&self);
    /// A cluster view was sent on a Watch stream.
    fn view_sent(&self);
}

static HOOK: OnceLock<&'static dyn MeshCounter> = OnceLock::new();

/// Installs `counter` for the rest of the process; false if one was already.
pub fn install(counter: &'static dyn MeshCounter) -> bool {
    HOOK.set(counter).is_ok()
}

/// A mesh call was answered (or refused).
#[inline]
pub fn call_served() {
    if let Some(c) = HOOK.get() {
        c.call_served();
    }
}

/// A cluster view was sent on a Watch stream.
#[inline]
pub fn view_sent() {
    if let Some(c) = HOOK.get() {
        c.view_sent();
    }
}
