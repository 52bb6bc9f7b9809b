//! Submit side (srun, sbatch, salloc): the `--syndeo` callback. A bad value is
//! refused here, before the job is queued, so no node ever sees it. In
//! slurmstepd (`remote`) the value is not judged: Slurm would log a failed
//! callback as an error for a healthy step, and the root side checks the
//! value again anyway.
use syndeo_protocol::image::check_image_value;

use crate::{HookError, HookResult};

/// Called by Slurm when `--syndeo` is parsed (also in slurmstepd, `remote`).
pub fn option_given(value: Option<&str>, remote: bool) -> HookResult {
    match value {
        Some(v) if !remote => check_image_value(v).map_err(HookError),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_value_is_refused_where_the_user_typed_it_and_never_in_slurmstepd() {
        assert!(option_given(Some("images/ray"), false).unwrap_err().0.contains("not an absolute path"));
        assert!(option_given(Some(""), true).is_ok(), "srun --syndeo inside a job passes an empty value");
        assert!(option_given(None, false).is_ok());
        assert!(option_given(Some("/img"), false).is_ok());
    }
}
