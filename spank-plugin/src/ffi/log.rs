//! Lines in Slurm's log through `slurm_error`/`slurm_info`/`slurm_verbose`:
//! srun/sbatch's terminal, slurmd's log, or the step's stderr in slurmstepd.
use std::ffi::CString;

use slurm_sys as sys;

/// `msg` as a C string; a NUL inside is written as `\0`, never cut.
pub(super) fn to_cstring(msg: &str) -> CString {
    CString::new(msg.replace('\0', "\\0")).unwrap_or_default()
}

/// An `error:` line.
pub fn log_error(msg: &str) {
    let m = to_cstring(msg);
    // SAFETY: "%s" with one valid C string argument.
    unsafe { sys::slurm_error(c"%s".as_ptr(), m.as_ptr()) };
}

pub fn log_info(msg: &str) {
    let m = to_cstring(msg);
    // SAFETY: as above.
    unsafe { sys::slurm_info(c"%s".as_ptr(), m.as_ptr()) };
}

pub fn log_verbose(msg: &str) {
    let m = to_cstring(msg);
    // SAFETY: as above.
    unsafe { sys::slurm_verbose(c"%s".as_ptr(), m.as_ptr()) };
}
