//! What the running Slurm says and does beyond SPANK (`slurm_sys::internal`
//! and the public hostlist API): its parsed configuration, node addresses,
//! and adding a process to a job's extern step.
use std::ffi::{c_char, CStr};

use slurm_sys as sys;

use super::log::to_cstring;
use crate::spank::RunningConf;

/// Reads the configuration Slurm parsed in this very process (slurmd,
/// slurmstepd: any process that runs the prolog or a step).
#[allow(clippy::unnecessary_cast)] // the constants' types differ between releases' headers
pub fn running_conf() -> RunningConf {
    // SAFETY: a global Slurm filled before any plugin ran; read only.
    let conf = unsafe { &*std::ptr::addr_of!(sys::internal::slurm_conf) };
    let flags = conf.prolog_flags as u32;
    let text = |p: *mut c_char| {
        // SAFETY: NULL or a NUL-terminated string Slurm owns.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    RunningConf {
        contain: flags & sys::PROLOG_FLAG_CONTAIN as u32 != 0,
        run_in_job: sys::prolog_runs_in_job(flags),
        propagate: text(conf.propagate_rlimits),
        propagate_except: text(conf.propagate_rlimits_except),
    }
}

/// The node names of a hostlist expression, in order, each with its NodeAddr
/// from the running configuration (None: Slurm does not know it).
pub fn node_addresses(hostlist: &str) -> Vec<(String, Option<String>)> {
    let list = to_cstring(hostlist);
    let mut out = Vec::new();
    // SAFETY: Slurm's public hostlist API: create, shift until NULL (each
    // name malloc'ed, freed here), destroy.
    unsafe {
        let hl = sys::slurm_hostlist_create(list.as_ptr());
        if hl.is_null() {
            return out;
        }
        loop {
            let name = sys::slurm_hostlist_shift(hl);
            if name.is_null() {
                break;
            }
            let node = CStr::from_ptr(name).to_string_lossy().into_owned();
            libc::free(name as *mut libc::c_void);
            let addr = sys::internal::slurm_conf_get_address(to_cstring(&node).as_ptr());
            let addr = (!addr.is_null()).then(|| CStr::from_ptr(addr).to_string_lossy().into_owned());
            out.push((node, addr));
        }
        sys::slurm_hostlist_destroy(hl);
    }
    out
}

/// Adds `pid` to job `job`'s extern step on this node, as pam_slurm_adopt
/// does: Slurm puts it in the step's proctrack container, task cgroups and
/// accounting, and everything it starts afterwards inherits them.
#[allow(clippy::unnecessary_cast)] // the constants' types differ between releases' headers
pub fn adopt_into_extern_step(job: u32, pid: i32) -> Result<(), String> {
    // SAFETY: a plain C struct of integers; all-zero is a valid value. Its
    // fields differ between releases (26.05 adds `sluid`, which stepd_connect
    // does not read), so only the three every release has are set.
    let mut step: sys::slurm_step_id_t = unsafe { std::mem::zeroed() };
    step.job_id = job;
    step.step_id = sys::SLURM_EXTERN_CONT as u32;
    step.step_het_comp = sys::NO_VAL as u32;
    let mut version: u16 = 0;
    // SAFETY: NULL directory and node name ask Slurm for this node's; the
    // descriptor returned is ours to close.
    let fd = unsafe { sys::internal::slurm_stepd_connect(std::ptr::null(), std::ptr::null(), &mut step, &mut version) };
    if fd < 0 {
        return Err(format!("cannot reach the extern step of job {job}: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a connected descriptor and a process id.
    let rc = unsafe { sys::internal::slurm_stepd_add_extern_pid(fd, version, pid) };
    // SAFETY: closing the descriptor Slurm opened for us.
    unsafe { libc::close(fd) };
    if rc != 0 {
        return Err(format!("the extern step of job {job} refused to take process {pid} (rc {rc}; see slurmd's log)"));
    }
    Ok(())
}
