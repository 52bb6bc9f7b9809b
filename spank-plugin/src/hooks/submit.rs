//! Submit side (srun, sbatch, salloc): the `--syndeo` callback. A bad value is
//! refused here, before the job is queued, so no node ever sees it. In
//! slurmstepd (`remote`) the value is not judged: Slurm would log a failed
//! callback as an error for a healthy step, and the root side checks the
//! value again anyway.
//!
//! Once the options are parsed, a syndeo job also records the submitter's
//! resource limits and umask in its SPANK environment: Slurm gives the job's
//! tasks those, and the root side gives them to syndeo's processes too.
use std::path::Path;
use std::sync::Mutex;

use syndeo_protocol::env::{OPTION_RECORD, REQUEST_RECORD, RLIMITS_RECORD, UMASK_RECORD};
use syndeo_protocol::image::check_image_value;
use syndeo_protocol::rlimits;

use crate::node::Node;
use crate::spank::{Context, Spank};
use crate::{HookError, HookResult};

/// `--syndeo`'s value if this submit command was given it (Some(None):
/// without a value). Slurm's own `spank_option_getopt` answers "not
/// available" in `init_post_opt` (all releases), so the option callback,
/// which runs just before, notes it here.
static GIVEN_HERE: Mutex<Option<Option<String>>> = Mutex::new(None);

fn given_here() -> Option<Option<String>> {
    GIVEN_HERE.lock().map(|g| g.clone()).unwrap_or(None)
}

/// The components of a heterogeneous job seen so far in this command:
/// Slurm calls `init_post_opt` once per component, in order (see Slurm's
/// heterogeneous_jobs.html, "System Administrator Information"), and the
/// option callback only for the components that name `--syndeo`.
#[derive(Debug, Default)]
struct Components {
    seen: u32,
    /// `--syndeo` as the first component had it.
    first: Option<Option<String>>,
}

static COMPONENTS: Mutex<Components> = Mutex::new(Components { seen: 0, first: None });

impl Components {
    /// Counts one more component; `given` is `--syndeo` as it stands after
    /// that component's options (the callback's note lasts the process).
    /// One cluster spans the whole job, asked for on its first component:
    /// later components join it, with the same image.
    fn next(&mut self, given: &Option<Option<String>>) -> Result<(), HookError> {
        let index = self.seen;
        self.seen += 1;
        if index == 0 {
            self.first = given.clone();
            return Ok(());
        }
        match (&self.first, given) {
            (None, Some(_)) => Err(HookError(format!(
                "syndeo: --syndeo is on component {index} of this heterogeneous job but not on its first; \
                 put it before the first ':' (one Ray cluster then spans every component)"
            ))),
            (Some(first), Some(now)) if first != now => Err(HookError(format!(
                "syndeo: component {index} of this heterogeneous job names another --syndeo image than the \
                 first; the job has one Ray cluster: give --syndeo once, before the first ':'"
            ))),
            _ => Ok(()),
        }
    }
}

/// `slurm_spank_init_post_opt`, at submit: the record of limits and umask;
/// for sbatch and salloc, syndeo's record of the request in place of
/// Slurm's ([`REQUEST_RECORD`]). Every component of a heterogeneous job
/// whose first component asked for a cluster carries the request.
pub fn init_post_opt(sp: &dyn Spank, node: &dyn Node) -> HookResult {
    let given = given_here();
    if matches!(sp.context(), Context::Local | Context::Allocator) {
        COMPONENTS.lock().map_err(|_| HookError("syndeo: internal lock poisoned".into()))?.next(&given)?;
    }
    record(sp, node, given)
}

/// What `init_post_opt` records, given `--syndeo`'s value as the callback saw it.
fn record(sp: &dyn Spank, node: &dyn Node, given: Option<Option<String>>) -> HookResult {
    if !matches!(sp.context(), Context::Local | Context::Allocator) {
        return Ok(());
    }
    let Some(value) = given else { return Ok(()) };
    if sp.context() == Context::Allocator {
        sp.job_control_setenv(REQUEST_RECORD, value.as_deref().unwrap_or("-"))?;
        sp.job_control_unsetenv(OPTION_RECORD)?;
        // Slurm also set it in this process's own environment just before
        // this hook (spank_init_post_opt): salloc's shell would inherit it,
        // and every plain srun there would take it as --syndeo. sbatch and
        // salloc are single-threaded here.
        node.remove_env(OPTION_RECORD);
    }
    let status = node.read(Path::new("/proc/self/status"));
    let limits = node.read(Path::new("/proc/self/limits"));
    sp.job_control_setenv(RLIMITS_RECORD, &rlimits_record(&limits))?;
    if let Some(umask) = status.lines().find_map(|l| l.strip_prefix("Umask:")) {
        sp.job_control_setenv(UMASK_RECORD, umask.trim())?;
    }
    Ok(())
}

/// `/proc/self/limits` as the record of `syndeo_protocol::rlimits`, with Slurm's names.
fn rlimits_record(limits: &str) -> String {
    let mut out = Vec::new();
    for line in limits.lines() {
        let Some(kind) = rlimits::KINDS.iter().find(|k| line.starts_with(k.proc_label)) else { continue };
        let mut values = line[kind.proc_label.len()..].split_whitespace().map(rlimits::parse_value);
        if let (Some(Some(soft)), Some(Some(hard))) = (values.next(), values.next()) {
            out.push(rlimits::Limit { name: kind.name.into(), soft, hard });
        }
    }
    rlimits::format_record(&out)
}

/// Called by Slurm when `--syndeo` is parsed (also in slurmstepd, `remote`).
pub fn option_given(value: Option<&str>, remote: bool) -> HookResult {
    if remote {
        return Ok(());
    }
    if let Some(v) = value {
        check_image_value(v).map_err(HookError)?;
    }
    if let Ok(mut g) = GIVEN_HERE.lock() {
        *g = Some(value.filter(|v| !v.is_empty()).map(str::to_string));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fake::{FakeNode, FakeSpank};
    use super::*;

    /// A submit host whose /proc says: umask 0027, two limits.
    fn submit_host() -> FakeNode {
        let mut node = FakeNode::default();
        node.files.insert("/proc/self/status".into(), "Name:\tsbatch\nUmask:\t0027\nState:\tR\n".into());
        node.files.insert(
            "/proc/self/limits".into(),
            "Limit                     Soft Limit           Hard Limit           Units\n\
             Max core file size        0                    unlimited            bytes\n\
             Max open files            1024                 524288               files\n"
                .into(),
        );
        node
    }

    fn control(sp: &FakeSpank, name: &str) -> Option<String> {
        sp.control_env.borrow().get(name).cloned()
    }

    #[test]
    fn sbatch_with_an_image_records_the_request_limits_and_umask_and_drops_slurms_own_record() {
        let (sp, node) = (FakeSpank::new(Context::Allocator), submit_host());
        sp.control_env.borrow_mut().insert(OPTION_RECORD.into(), "/img".into());
        record(&sp, &node, Some(Some("/img".into()))).unwrap();
        assert_eq!(control(&sp, REQUEST_RECORD).as_deref(), Some("/img"));
        assert_eq!(control(&sp, OPTION_RECORD), None, "Slurm's record would make every srun a --syndeo one");
        assert_eq!(*node.removed_env.borrow(), [OPTION_RECORD], "salloc's shell must not inherit it");
        assert_eq!(control(&sp, RLIMITS_RECORD).as_deref(), Some("CORE=0:unlimited,NOFILE=1024:524288"));
        assert_eq!(control(&sp, UMASK_RECORD).as_deref(), Some("0027"));
    }

    #[test]
    fn syndeo_without_a_value_is_recorded_as_the_site_default_dash() {
        let (sp, node) = (FakeSpank::new(Context::Allocator), submit_host());
        record(&sp, &node, Some(None)).unwrap();
        assert_eq!(control(&sp, REQUEST_RECORD).as_deref(), Some("-"));
    }

    #[test]
    fn srun_with_syndeo_records_limits_and_umask_but_keeps_slurms_option_record() {
        let (sp, node) = (FakeSpank::new(Context::Local), submit_host());
        record(&sp, &node, Some(Some("/img".into()))).unwrap();
        assert_eq!(control(&sp, REQUEST_RECORD), None, "srun's job carries Slurm's own record of the option");
        assert!(node.removed_env.borrow().is_empty());
        assert_eq!(control(&sp, UMASK_RECORD).as_deref(), Some("0027"));
        assert!(control(&sp, RLIMITS_RECORD).is_some());
    }

    #[test]
    fn nothing_is_recorded_without_syndeo_or_outside_the_submit_commands() {
        let (sp, node) = (FakeSpank::new(Context::Allocator), submit_host());
        record(&sp, &node, None).unwrap();
        assert!(sp.control_env.borrow().is_empty());
        for context in [Context::Remote, Context::JobScript, Context::Slurmd] {
            let sp = FakeSpank::new(context);
            record(&sp, &node, Some(Some("/img".into()))).unwrap();
            assert!(sp.control_env.borrow().is_empty(), "{context:?}");
        }
        assert!(node.removed_env.borrow().is_empty());
    }

    #[test]
    fn this_processes_limits_become_a_record_with_slurms_names() {
        let r = rlimits_record(&std::fs::read_to_string("/proc/self/limits").unwrap());
        assert_eq!(r.split(',').count(), 10, "{r}");
        assert!(r.contains("NOFILE=") && r.contains("CORE="), "{r}");
        let sample = "Max open files            1024                 524288               files     \n";
        assert_eq!(rlimits_record(sample), "NOFILE=1024:524288");
    }

    #[test]
    fn a_heterogeneous_jobs_later_components_join_the_first_ones_request_and_may_not_start_or_change_it() {
        let img = Some(Some("/img".to_string()));
        let mut first_only = Components::default();
        assert!(first_only.next(&img).is_ok() && first_only.next(&img).is_ok() && first_only.next(&img).is_ok());
        let mut none = Components::default();
        assert!(none.next(&None).is_ok() && none.next(&None).is_ok());
        let mut later_only = Components::default();
        later_only.next(&None).unwrap();
        let e = later_only.next(&img).unwrap_err().0;
        assert!(e.contains("on component 1") && e.contains("before the first ':'"), "{e}");
        let mut changed = Components::default();
        changed.next(&img).unwrap();
        let e = changed.next(&Some(Some("/other".into()))).unwrap_err().0;
        assert!(e.contains("another --syndeo image"), "{e}");
    }

    #[test]
    fn a_bad_value_is_refused_where_the_user_typed_it_and_never_in_slurmstepd() {
        assert!(option_given(Some("images/ray"), false).unwrap_err().0.contains("not an absolute path"));
        assert!(option_given(Some(""), true).is_ok(), "srun --syndeo inside a job passes an empty value");
        assert!(option_given(None, false).is_ok());
        assert!(option_given(Some("/img"), false).is_ok());
        assert_eq!(given_here(), Some(Some("/img".to_string())), "init_post_opt must know --syndeo was given");
    }
}
