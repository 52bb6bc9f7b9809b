//! The plugin's `unsafe` side and its entry points: the `slurm_spank_*`
//! functions Slurm calls, each of which catches panics and returns -1, and
//! hands the hook a real [`Spank`] (`handle.rs`) and a real [`Node`]
//! (`crate::system`). Dependencies point one way: ffi -> hooks -> the traits.
//!
//! Slurm dlopens this library into srun/sbatch/salloc, slurmd and slurmstepd;
//! nothing here keeps state between hooks beyond what Slurm hands back
//! through `spank_t`.
use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use slurm_sys as sys;

use crate::node::Node;
use crate::spank::Spank;
use crate::system::System;
use crate::{hooks, HookResult};

mod handle;
mod log;
pub mod os;
mod slurm;
mod symbols;

pub use handle::Handle;

/// Called by Slurm when `--syndeo` is parsed (also in slurmstepd, `remote`).
extern "C" fn option_callback(_val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    guard(|| {
        let value = if optarg.is_null() {
            None
        } else {
            // SAFETY: Slurm passes a NUL-terminated string or NULL.
            Some(unsafe { CStr::from_ptr(optarg) }.to_string_lossy().into_owned())
        };
        hooks::submit::option_given(value.as_deref(), remote != 0)
    })
}

/// Runs `f`, turning a panic or an `Err` into -1 for Slurm; an error's
/// message goes to the log here, once.
fn guard(f: impl FnOnce() -> HookResult) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            log::log_error(&e.0);
            -1
        }
        Err(_) => {
            log::log_error("syndeo: internal error (panic) in the SPANK plugin; see slurmd's log");
            -1
        }
    }
}

type Hook = fn(&dyn Spank, &dyn Node) -> HookResult;

fn hook(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char, f: Hook) -> c_int {
    guard(|| {
        let spank = Handle::new(sp, ac, av);
        let node = System::new(&spank, os::set_nonblocking, os::write_without_sigpipe);
        f(&spank, &node)
    })
}

#[no_mangle]
pub extern "C" fn slurm_spank_init(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    hook(sp, ac, av, |sp, _| hooks::init(sp))
}

#[no_mangle]
pub extern "C" fn slurm_spank_init_post_opt(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    hook(sp, ac, av, hooks::submit::init_post_opt)
}

#[no_mangle]
pub extern "C" fn slurm_spank_task_post_fork(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    hook(sp, ac, av, hooks::extern_step::task_post_fork)
}

#[no_mangle]
pub extern "C" fn slurm_spank_user_init(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    hook(sp, ac, av, hooks::slurmstepd::user_init)
}

#[no_mangle]
pub extern "C" fn slurm_spank_task_init(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    hook(sp, ac, av, hooks::slurmstepd::task_init)
}

#[no_mangle]
pub extern "C" fn slurm_spank_job_prolog(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    hook(sp, ac, av, hooks::job_script::prolog)
}

#[no_mangle]
pub extern "C" fn slurm_spank_job_epilog(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    hook(sp, ac, av, hooks::job_script::epilog)
}
