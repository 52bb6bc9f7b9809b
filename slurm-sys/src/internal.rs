//! Functions and data of Slurm's own library (libslurmfull, loaded by every
//! Slurm daemon, slurmstepd and command that loads the plugin) that are not
//! in spank.h. Each is present, with this signature, in Slurm 22.05, 24.11
//! and 26.05 (checked against their source); the plugin's only uses are in
//! `spank-plugin/src/ffi/slurm.rs`.
use std::os::raw::{c_char, c_int};

use crate::{slurm_conf_t, slurm_step_id_t};

extern "C" {
    /// The running Slurm's parsed slurm.conf (`src/common/read_config.c`).
    /// Its type is the public `slurm_conf_t` of this release's slurm.h (the
    /// plugin and Slurm always share a release: Slurm refuses another's).
    pub static slurm_conf: slurm_conf_t;

    /// A node's NodeAddr from slurm.conf, NULL if unknown
    /// (`src/common/read_config.h`). The string is Slurm's to free; the
    /// plugin calls it only in short-lived processes and leaves it.
    pub fn slurm_conf_get_address(node_name: *const c_char) -> *mut c_char;

    /// Connects to a job step's slurmstepd (`src/common/stepd_api.h`, exported
    /// under these names for pam_slurm_adopt). NULL directory and node name:
    /// this node's, from the configuration. Returns a descriptor or -1.
    pub fn slurm_stepd_connect(
        directory: *const c_char,
        nodename: *const c_char,
        step_id: *mut slurm_step_id_t,
        protocol_version: *mut u16,
    ) -> c_int;

    /// Adds `pid` to the job's extern step (its proctrack container, task
    /// cgroups and accounting), as pam_slurm_adopt does. Returns 0 on success.
    pub fn slurm_stepd_add_extern_pid(fd: c_int, protocol_version: u16, pid: libc_pid_t) -> c_int;
}

pub type libc_pid_t = c_int;
