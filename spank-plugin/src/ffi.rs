//! The plugin's only `unsafe` module: the symbols Slurm looks up, the
//! `slurm_spank_*` entry points (each catches panics and returns -1), and a
//! safe handle over the SPANK calls the rest of the plugin uses.
//!
//! Slurm dlopens this library into srun/sbatch/salloc, slurmd and slurmstepd;
//! nothing here spawns a thread or keeps state between hooks beyond what
//! Slurm hands back through `spank_t`.
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use slurm_sys as sys;

use crate::{hooks, HookResult};

// ---- Symbols required by Slurm's plugin loader (src/common/plugin.c) ----

#[no_mangle]
#[used]
pub static plugin_name: [u8; 7] = *b"syndeo\0";
#[no_mangle]
#[used]
pub static plugin_type: [u8; 6] = *b"spank\0";
#[no_mangle]
#[used]
pub static plugin_version: u32 = sys::BUILT_SLURM_VERSION;

// ---- The --syndeo option ----

/// `spank_option_register` keeps a pointer to the option, so it must live
/// for the whole process: a static, never written.
struct StaticOption(sys::spank_option);
// SAFETY: the option table is immutable after initialisation and only
// read by Slurm on the thread that loaded the plugin.
unsafe impl Sync for StaticOption {}

static SYNDEO_OPTION: StaticOption = StaticOption(sys::spank_option {
    name: c"syndeo".as_ptr() as *mut c_char,
    arginfo: c"IMAGE".as_ptr() as *mut c_char,
    usage: c"Run a Ray cluster on the job's nodes in container IMAGE (absolute path; omit =IMAGE for the site default). `srun --syndeo CMD` runs CMD inside the image."
        .as_ptr() as *mut c_char,
    has_arg: 2,
    val: 0,
    cb: Some(option_callback),
});

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

// ---- Entry points ----

/// Runs `f`, turning a panic or an `Err` into -1 for Slurm; an error's
/// message goes to the log here, once.
fn guard(f: impl FnOnce() -> HookResult) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            log_error(&e.0);
            -1
        }
        Err(_) => {
            log_error("syndeo: internal error (panic) in the SPANK plugin; see slurmd's log");
            -1
        }
    }
}

fn hook(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char, f: fn(&Spank) -> HookResult) -> c_int {
    guard(|| {
        let spank = Spank::new(sp, ac, av);
        f(&spank)
    })
}

#[no_mangle]
pub extern "C" fn slurm_spank_init(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    hook(sp, ac, av, hooks::init)
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

// ---- Logging through Slurm ----

fn to_cstring(msg: &str) -> CString {
    CString::new(msg.replace('\0', "\\0")).unwrap_or_default()
}

/// `error:` line in the log of whatever runs the plugin (srun/sbatch's
/// terminal, slurmd's log, or the step's stderr in slurmstepd).
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

// ---- Safe handle ----

/// Where the plugin is running; see `spank_context(3)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    Local,
    Remote,
    Allocator,
    Slurmd,
    JobScript,
    Unknown,
}

/// The step id Slurm gives the batch script.
pub const BATCH_STEP: u32 = 0xffff_fffb;
/// The step id of the extern step (PrologFlags=Contain).
pub const EXTERN_STEP: u32 = 0xffff_fffc;
/// The step id of salloc's interactive step.
pub const INTERACTIVE_STEP: u32 = 0xffff_fffa;

/// The longest environment value `getenv` reads.
const MAX_ENV_VALUE: usize = 1 << 20;

pub struct Spank {
    sp: sys::spank_t,
    args: Vec<String>,
}

#[derive(Debug)]
pub struct SpankError(pub &'static str, pub sys::spank_err_t);

impl std::fmt::Display for SpankError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // SAFETY: spank_strerror returns a static string.
        let s = unsafe { CStr::from_ptr(sys::spank_strerror(self.1)) };
        write!(f, "{}: {}", self.0, s.to_string_lossy())
    }
}

impl Spank {
    fn new(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> Self {
        let mut args = Vec::new();
        for i in 0..ac.max(0) as isize {
            // SAFETY: Slurm passes `ac` valid C strings in `av`.
            let p = unsafe { *av.offset(i) };
            if !p.is_null() {
                args.push(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
            }
        }
        Spank { sp, args }
    }

    /// The plugin's arguments from plugstack.conf.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    pub fn context(&self) -> Context {
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

    pub fn register_option(&self) -> Result<(), SpankError> {
        let opt = &SYNDEO_OPTION.0 as *const sys::spank_option as *mut sys::spank_option;
        // SAFETY: the option is a static that Slurm may keep a pointer to.
        let rc = unsafe { sys::spank_option_register(self.sp, opt) };
        check("spank_option_register", rc)
    }

    /// `None`: --syndeo was not given. `Some(None)`: given without a value.
    pub fn option_value(&self) -> Option<Option<String>> {
        let opt = &SYNDEO_OPTION.0 as *const sys::spank_option as *mut sys::spank_option;
        let mut arg: *mut c_char = std::ptr::null_mut();
        // SAFETY: valid handle and option; `arg` receives a pointer owned by Slurm.
        let rc = unsafe { sys::spank_option_getopt(self.sp, opt, &mut arg) };
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

    fn item_u32(&self, item: sys::spank_item_t, name: &'static str) -> Result<u32, SpankError> {
        let mut v: u32 = 0;
        // SAFETY: these items take one uint32_t* (uid_t/gid_t are 32-bit).
        let rc = unsafe { sys::spank_get_item(self.sp, item, &mut v as *mut u32) };
        check(name, rc).map(|_| v)
    }

    pub fn job_id(&self) -> Result<u32, SpankError> {
        self.item_u32(sys::S_JOB_ID, "S_JOB_ID")
    }
    pub fn step_id(&self) -> Result<u32, SpankError> {
        self.item_u32(sys::S_JOB_STEPID, "S_JOB_STEPID")
    }
    pub fn uid(&self) -> Result<u32, SpankError> {
        self.item_u32(sys::S_JOB_UID, "S_JOB_UID")
    }
    pub fn gid(&self) -> Result<u32, SpankError> {
        self.item_u32(sys::S_JOB_GID, "S_JOB_GID")
    }

    /// A variable of the job's environment (remote context): `Ok(None)` when
    /// it is unset; a value longer than the first buffer is read again with
    /// a larger one (up to 1 MiB).
    pub fn getenv(&self, name: &str) -> Result<Option<String>, SpankError> {
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
                _ => return Err(SpankError("spank_getenv", rc)),
            }
        }
    }

    /// At submit (srun, sbatch, salloc): a variable of the job's SPANK
    /// environment, which the prolog sees as `SPANK_<name>`.
    pub fn job_control_setenv(&self, name: &str, value: &str) -> Result<(), SpankError> {
        let (n, v) = (to_cstring(name), to_cstring(value));
        // SAFETY: valid C strings.
        let rc = unsafe { sys::spank_job_control_setenv(self.sp, n.as_ptr(), v.as_ptr(), 1) };
        check("spank_job_control_setenv", rc)
    }

    /// At submit: removes a variable of the job's SPANK environment.
    pub fn job_control_unsetenv(&self, name: &str) -> Result<(), SpankError> {
        let n = to_cstring(name);
        // SAFETY: a valid C string.
        let rc = unsafe { sys::spank_job_control_unsetenv(self.sp, n.as_ptr()) };
        check("spank_job_control_unsetenv", rc)
    }

    /// Sets a variable in the job's (or task's) environment.
    pub fn setenv(&self, name: &str, value: &str) -> Result<(), SpankError> {
        let (n, v) = (to_cstring(name), to_cstring(value));
        // SAFETY: valid C strings.
        let rc = unsafe { sys::spank_setenv(self.sp, n.as_ptr(), v.as_ptr(), 1) };
        check("spank_setenv", rc)
    }

    pub fn unsetenv(&self, name: &str) -> Result<(), SpankError> {
        let n = to_cstring(name);
        // SAFETY: valid C string.
        let rc = unsafe { sys::spank_unsetenv(self.sp, n.as_ptr()) };
        check("spank_unsetenv", rc)
    }

    /// In `task_init`: replaces the task's program (argv[0]) with `program`
    /// and returns the program it replaced. The task's other arguments stay.
    /// This is how `srun --syndeo CMD` runs CMD through the container wrapper
    /// on Slurm releases without `spank_prepend_task_argv` (before 23.11):
    /// slurmstepd execs `task->argv`, which is the array this item returns.
    pub fn replace_task_program(&self, program: &str) -> Result<String, SpankError> {
        let mut argc: c_int = 0;
        let mut argv: *mut *mut c_char = std::ptr::null_mut();
        // SAFETY: S_JOB_ARGV takes (int *, char ***).
        let rc = unsafe { sys::spank_get_item(self.sp, sys::S_JOB_ARGV, &mut argc as *mut c_int, &mut argv) };
        check("S_JOB_ARGV", rc)?;
        if argv.is_null() || argc < 1 {
            return Err(SpankError("S_JOB_ARGV (empty)", sys::ESPANK_ERROR));
        }
        // SAFETY: argv has argc valid entries; we only swap the first pointer.
        // The replacement is leaked on purpose: this task process execs next.
        unsafe {
            let old = CStr::from_ptr(*argv).to_string_lossy().into_owned();
            *argv = to_cstring(program).into_raw();
            Ok(old)
        }
    }
}

// ---- What the running Slurm says, beyond SPANK (slurm_sys::internal) ----

/// The running Slurm's configuration, as far as syndeo needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningConf {
    /// `PrologFlags=Contain`: every job has an extern step on every node.
    pub contain: bool,
    /// `PrologFlags=RunInJob` (23.11 and later): the prolog runs in the extern step.
    pub run_in_job: bool,
    /// `PropagateResourceLimits` / `...Except`, as Slurm's raw strings.
    pub propagate: Option<String>,
    pub propagate_except: Option<String>,
}

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

// ---- OS calls the hooks need beside SPANK ----

/// Makes `fd` non-blocking (the agent's stderr pipe, drained while it runs).
pub fn set_nonblocking(fd: std::os::fd::RawFd) {
    // SAFETY: fcntl on a descriptor the caller owns; failure leaves it blocking.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

fn check(what: &'static str, rc: sys::spank_err_t) -> Result<(), SpankError> {
    if rc == sys::ESPANK_SUCCESS {
        Ok(())
    } else {
        Err(SpankError(what, rc))
    }
}
