//! The SPANK hooks, one file per context (as in pyxis):
//! `submit` (srun/sbatch/salloc), `job_script` (prolog/epilog on each node, root),
//! `extern_step` (the job's extern step on each node, root),
//! `slurmstepd` (each job step on each node, as the user).
//! They decide; what they ask of Slurm goes through [`Spank`] and what they
//! do on the node through `crate::node::Node`, never through `ffi`.
pub mod extern_step;
#[cfg(test)]
mod fake;
pub mod job_script;
pub mod slurmstepd;
pub mod submit;

use crate::config::PluginConfig;
use crate::spank::{Context, Spank};
use crate::{HookError, HookResult};

/// `slurm_spank_init`, every context: register `--syndeo` (with
/// `spank_option_register`, which sbatch and salloc honour, unlike a static
/// `spank_options` table) and check the plugstack arguments.
pub fn init(sp: &dyn Spank) -> HookResult {
    config(sp)?;
    match sp.context() {
        Context::Local | Context::Allocator | Context::Remote | Context::JobScript => Ok(sp.register_option()?),
        _ => Ok(()),
    }
}

/// The plugstack arguments, or an error naming the bad one.
pub fn config(sp: &dyn Spank) -> Result<PluginConfig, HookError> {
    PluginConfig::parse(sp.args()).map_err(HookError)
}

#[cfg(test)]
mod tests {
    use super::fake::FakeSpank;
    use super::*;

    #[test]
    fn init_registers_the_option_wherever_slurm_parses_it_and_not_in_slurmd() {
        for context in [Context::Local, Context::Allocator, Context::Remote, Context::JobScript] {
            let sp = FakeSpank::new(context);
            init(&sp).unwrap();
            assert!(*sp.registered.borrow(), "{context:?}");
        }
        let sp = FakeSpank::new(Context::Slurmd);
        init(&sp).unwrap();
        assert!(!*sp.registered.borrow());
    }

    #[test]
    fn init_refuses_a_bad_plugstack_argument_before_registering_anything() {
        let mut sp = FakeSpank::new(Context::Local);
        sp.args.push("colour=blue".into());
        let e = init(&sp).unwrap_err();
        assert!(e.0.contains("unknown plugstack argument \"colour\""), "{}", e.0);
        assert!(!*sp.registered.borrow());
    }
}
