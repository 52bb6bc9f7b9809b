//! Raw FFI bindings to Slurm for the SPANK plugin: bindgen's over the
//! building machine's `<slurm/spank.h>` (and the types of `<slurm/slurm.h>`
//! the plugin reads), plus [`internal`]: the few functions of Slurm's own
//! library, outside spank.h, that the plugin calls from inside Slurm.
//! Everything here is `unsafe` to use; the plugin wraps it in one thin
//! module (`spank-plugin/src/ffi/`).
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case, dead_code)]
#![allow(clippy::all)]

include!(concat!(env!("OUT_DIR"), "/spank.rs"));

pub mod internal;

/// The `SLURM_VERSION_NUMBER` of the headers this crate was built against.
/// A SPANK plugin must export it as `plugin_version`: Slurm refuses a plugin
/// whose major.minor differs from its own.
pub const BUILT_SLURM_VERSION: u32 = SLURM_VERSION_NUMBER;

/// Slurm's `SLURM_VERSION_NUM(a, b, c)` macro.
pub const fn slurm_version_num(major: u32, minor: u32, micro: u32) -> u32 {
    (major << 16) | (minor << 8) | micro
}

/// Whether `prolog_flags` has `RunInJob` (a flag from 23.11 on; earlier
/// releases cannot have it).
#[allow(clippy::unnecessary_cast)] // its type differs between releases' headers
pub fn prolog_runs_in_job(prolog_flags: u32) -> bool {
    #[cfg(slurm_run_in_job)]
    return prolog_flags & PROLOG_FLAG_RUN_IN_JOB as u32 != 0;
    #[cfg(not(slurm_run_in_job))]
    return {
        let _ = prolog_flags;
        false
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_macro_matches_slurm_encoding() {
        assert_eq!(slurm_version_num(22, 5, 8), 0x160508);
    }

    #[test]
    fn built_against_slurm_22_05_or_newer() {
        assert!(BUILT_SLURM_VERSION >= slurm_version_num(22, 5, 0));
    }

    #[test]
    fn run_in_job_is_known_from_23_11_on() {
        assert_eq!(prolog_runs_in_job(u32::MAX), BUILT_SLURM_VERSION >= slurm_version_num(23, 11, 0));
        assert!(!prolog_runs_in_job(0));
    }
}
