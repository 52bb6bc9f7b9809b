//! The real [`Spank`]: the SPANK calls over the `spank_t` Slurm passed to a
//! hook, with Slurm's log and its internals (`slurm.rs`) beside them.
use std::ffi::{c_char, c_int, CStr};

use slurm_sys as sys;

use super::log::{self, to_cstring};
use super::slurm;
use super::symbols::syndeo_option;
use crate::spank::{Context, RunningConf, Spank, SpankError};

/// The longest environment value `getenv` reads.
const MAX_ENV_VALUE: usize = 1 << 20;

pub struct Handle {
    sp: sys::spank_t,
    args: Vec<String>,
}

impl Handle {
    pub(super) fn new(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> Self {
        let mut args = Vec::new();
        for i in 0..ac.max(0) as isize {
            // SAFETY: Slurm passes `ac` valid C strings in `av`.
            let p = unsafe { *av.offset(i) };
            if !p.is_null() {
                args.push(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
            }
        }
        Handle { sp, args }
    }

    fn item_u32(&self, item: sys::spank_item_t, name: &'static str) -> Result<u32, SpankError> {
        let mut v: u32 = 0;
        // SAFETY: these items take one uint32_t* (uid_t/gid_t are 32-bit).
        let rc = unsafe { sys::spank_get_item(self.sp, item, &mut v as *mut u32) };
        check(name, rc).map(|_| v)
    }
}

impl Spank for Handle {
    fn args(&self) -> &[String] {
        &self.args
    }

    fn context(&self) -> Context {
        // SAFETY: no arguments; valid in every context.
        match unsafe { sys::spank_context() } {
            sys::S_CTX_LOCAL => Context::Local,
            sys::S_CTX_REMOTE => Context::Remote,
            sys::S_CTX_ALLOCATOR => Context::Allocator,
            sys::S_CTX_SLURMD => Context::Slurmd,
            sys::S_CTX_JOB_SCRIPT => Context::JobScript,
            _ => Context::Unknown,
        }
    }

    fn register_option(&self) -> Result<(), SpankError> {
        // SAFETY: the option is a static that Slurm may keep a pointer to.
        let rc = unsafe { sys::spank_option_register(self.sp, syndeo_option()) };
        check("spank_option_register", rc)
    }

    fn option_value(&self) -> Option<Option<String>> {
        let mut arg: *mut c_char = std::ptr::null_mut();
        // SAFETY: valid handle and option; `arg` receives a pointer owned by Slurm.
        let rc = unsafe { sys::spank_option_getopt(self.sp, syndeo_option(), &mut arg) };
        if rc != sys::ESPANK_SUCCESS {
            return None;
        }
        if arg.is_null() {
            return Some(None);
        }
        // SAFETY: NUL-terminated string owned by Slurm.
        let s = unsafe { CStr::from_ptr(arg) }.to_string_lossy().into_owned();
        Some(if s.is_empty() { None } else { Some(s) })
    }

    fn job_id(&self) -> Result<u32, SpankError> {
        self.item_u32(sys::S_JOB_ID, "S_JOB_ID")
    }
    fn step_id(&self) -> Result<u32, SpankError> {
        self.item_u32(sys::S_JOB_STEPID, "S_JOB_STEPID")
    }
    fn uid(&self) -> Result<u32, SpankError> {
        self.item_u32(sys::S_JOB_UID, "S_JOB_UID")
    }
    fn gid(&self) -> Result<u32, SpankError> {
        self.item_u32(sys::S_JOB_GID, "S_JOB_GID")
    }

    /// A value longer than the first buffer is read again with a larger one
    /// (up to 1 MiB).
    fn getenv(&self, name: &str) -> Result<Option<String>, SpankError> {
        let n = to_cstring(name);
        let mut len = 4096usize;
        loop {
            let mut buf = vec![0u8; len];
            // SAFETY: buffer and its length are passed together.
            let rc = unsafe { sys::spank_getenv(self.sp, n.as_ptr(), buf.as_mut_ptr() as *mut c_char, len as c_int) };
            match rc {
                sys::ESPANK_SUCCESS => {
                    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                    return Ok(Some(String::from_utf8_lossy(&buf[..end]).into_owned()));
                }
                sys::ESPANK_ENV_NOEXIST => return Ok(None),
                sys::ESPANK_NOSPACE if len < MAX_ENV_VALUE => len *= 4,
                _ => return Err(spank_error("spank_getenv", rc)),
            }
        }
    }

    fn setenv(&self, name: &str, value: &str) -> Result<(), SpankError> {
        let (n, v) = (to_cstring(name), to_cstring(value));
        // SAFETY: valid C strings.
        let rc = unsafe { sys::spank_setenv(self.sp, n.as_ptr(), v.as_ptr(), 1) };
        check("spank_setenv", rc)
    }

    fn unsetenv(&self, name: &str) -> Result<(), SpankError> {
        let n = to_cstring(name);
        // SAFETY: valid C string.
        let rc = unsafe { sys::spank_unsetenv(self.sp, n.as_ptr()) };
        check("spank_unsetenv", rc)
    }

    fn job_control_setenv(&self, name: &str, value: &str) -> Result<(), SpankError> {
        let (n, v) = (to_cstring(name), to_cstring(value));
        // SAFETY: valid C strings.
        let rc = unsafe { sys::spank_job_control_setenv(self.sp, n.as_ptr(), v.as_ptr(), 1) };
        check("spank_job_control_setenv", rc)
    }

    fn job_control_unsetenv(&self, name: &str) -> Result<(), SpankError> {
        let n = to_cstring(name);
        // SAFETY: a valid C string.
        let rc = unsafe { sys::spank_job_control_unsetenv(self.sp, n.as_ptr()) };
        check("spank_job_control_unsetenv", rc)
    }

    /// This is how `srun --syndeo CMD` runs CMD through the container wrapper
    /// on Slurm releases without `spank_prepend_task_argv` (before 23.11):
    /// slurmstepd execs `task->argv`, which is the array this item returns.
    fn replace_task_program(&self, program: &str) -> Result<String, SpankError> {
        let mut argc: c_int = 0;
        let mut argv: *mut *mut c_char = std::ptr::null_mut();
        // SAFETY: S_JOB_ARGV takes (int *, char ***).
        let rc = unsafe { sys::spank_get_item(self.sp, sys::S_JOB_ARGV, &mut argc as *mut c_int, &mut argv) };
        check("S_JOB_ARGV", rc)?;
        if argv.is_null() || argc < 1 {
            return Err(spank_error("S_JOB_ARGV (empty)", sys::ESPANK_ERROR));
        }
        // SAFETY: argv has argc valid entries; we only swap the first pointer.
        // The replacement is leaked on purpose: this task process execs next.
        unsafe {
            let old = CStr::from_ptr(*argv).to_string_lossy().into_owned();
            *argv = to_cstring(program).into_raw();
            Ok(old)
        }
    }

    fn log_error(&self, msg: &str) {
        log::log_error(msg)
    }
    fn log_info(&self, msg: &str) {
        log::log_info(msg)
    }
    fn log_verbose(&self, msg: &str) {
        log::log_verbose(msg)
    }

    fn running_conf(&self) -> RunningConf {
        slurm::running_conf()
    }
    fn node_addresses(&self, hostlist: &str) -> Vec<(String, Option<String>)> {
        slurm::node_addresses(hostlist)
    }
    fn adopt_into_extern_step(&self, job: u32, pid: i32) -> Result<(), String> {
        slurm::adopt_into_extern_step(job, pid)
    }
}

/// A failed call, with Slurm's words for its status.
fn spank_error(call: &'static str, rc: sys::spank_err_t) -> SpankError {
    // SAFETY: spank_strerror returns a static string.
    let reason = unsafe { CStr::from_ptr(sys::spank_strerror(rc)) }.to_string_lossy().into_owned();
    SpankError { call, reason }
}

fn check(call: &'static str, rc: sys::spank_err_t) -> Result<(), SpankError> {
    if rc == sys::ESPANK_SUCCESS {
        Ok(())
    } else {
        Err(spank_error(call, rc))
    }
}
