//! Root-side commands, run by the SPANK plugin: `prolog` (prepare the node
//! for a job), `start` (start its agent, from the job's extern step when
//! Slurm has one) and `epilog` (stop and remove everything of the job).
//! They create and remove the job's directories without following links,
//! drop every privilege in a child before anything of the user's runs, and
//! find the job's processes by PID and start time, never by name, and
//! signal them through a pidfd taken with that start time (`crate::pidfd`).
pub mod beneath;
pub mod budget;
pub mod dirs;
pub mod drain;
pub mod epilog;
pub mod epilog_ops;
#[cfg(test)]
mod epilog_tests;
#[cfg(test)]
mod fake_epilog_ops;
#[cfg(test)]
mod fake_ops;
#[cfg(test)]
mod fake_start_ops;
pub mod hetjob;
pub mod logs;
pub mod metrics_sd;
pub mod mounts;
pub mod note;
pub mod ops;
pub mod privdrop;
pub mod procs;
pub mod prolog;
#[cfg(test)]
mod prolog_tests;
pub mod remove;
pub mod sitekey;
pub mod slurm_client;
pub mod start;
pub mod start_ops;
#[cfg(test)]
mod start_tests;
pub mod state;

#[cfg(test)]
mod tests {
    /// The plugin runs `syndeo-agent prolog|epilog` with a clean environment
    /// and passes only `JOB_SCRIPT_ENV`: a Slurm variable read here but
    /// missing there would silently read as unset.
    #[test]
    fn every_slurm_variable_the_root_side_reads_is_one_the_plugin_passes() {
        let sources = [include_str!("prolog.rs"), include_str!("epilog.rs"), include_str!("drain.rs")];
        let mut read = Vec::new();
        for src in sources {
            for (i, _) in src.match_indices("(\"SLURM") {
                let name: String = src[i + 2..].chars().take_while(|c| c.is_ascii_uppercase() || *c == '_').collect();
                read.push(name);
            }
        }
        assert!(read.iter().any(|n| n == "SLURM_HET_JOB_ID"), "{read:?}");
        for name in read {
            assert!(syndeo_protocol::env::JOB_SCRIPT_ENV.contains(&name.as_str()), "{name} is read but not passed");
        }
    }
}
