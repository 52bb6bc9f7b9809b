//! Submit side (srun, sbatch, salloc): the `--syndeo` callback. A bad value is
//! refused here, before the job is queued, so no node ever sees it.
use crate::ffi::log_error;
use crate::option::check_image_value;

/// Called by Slurm when `--syndeo` is parsed (also in slurmstepd, `remote`).
pub fn option_given(value: Option<&str>, remote: bool) -> Result<(), ()> {
    match value {
        None => Ok(()),
        Some(v) => check_image_value(v).map_err(|msg| {
            if !remote {
                log_error(&msg);
            }
        }),
    }
}
