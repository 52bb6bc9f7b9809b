//! Prolog and epilog (`S_CTX_JOB_SCRIPT`, root, every allocated node). The
//! plugin only decides whether the job is a syndeo job and runs
//! `syndeo-agent prolog|start|epilog`, a root-owned binary that does the
//! work. No shell is involved and the child gets a clean environment.
//!
//! The prolog prepares the node; the agent is started (`start`) where
//! `launch.rs` says: from the job's extern step when Slurm has one, else
//! right here. The plugin sends the prolog the job's nodes' addresses, which
//! only Slurm's own configuration knows.
//!
//! Exit status of the agent (`syndeo_protocol::exit`): 0 done (user errors
//! are reported to the job through the agent, never by failing the prolog: a
//! failed prolog drains the node); NOT_CLEAN from the epilog: it named what
//! it could not remove, and the node stays in service; anything else is a
//! node fault, and the hook fails.
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use syndeo_protocol::addresses::NodeAddresses;
use syndeo_protocol::env::{JOB_SCRIPT_ENV, REQUEST_RECORD};
use syndeo_protocol::exit;
use syndeo_protocol::layout::state_spec;
use syndeo_protocol::root::{Common, Prolog, RootRequest, Start};

use crate::config::PluginConfig;
use crate::hooks::config;
use crate::launch::{launch, propagated, Launch};
use crate::node::{Finished, Node, RunError};
use crate::spank::{Context, Spank};
use crate::{HookError, HookResult};

const PROLOG_LIMIT: Duration = Duration::from_secs(60);
const START_LIMIT: Duration = Duration::from_secs(30);
const EPILOG_LIMIT: Duration = Duration::from_secs(150);

pub fn prolog(sp: &dyn Spank, node: &dyn Node) -> HookResult {
    if sp.context() != Context::JobScript {
        return Ok(());
    }
    let Some(image) = requested(sp, node) else {
        return Ok(()); // not a syndeo job
    };
    let cfg = config(sp)?;
    let (job, uid, gid) = (sp.job_id()?, sp.uid()?, sp.gid()?);
    let conf = sp.running_conf();
    // The image is one argument, whatever the value: the agent checks it again.
    let propagate = propagated(&conf).into_iter().map(String::from).collect();
    let request = RootRequest::Prolog(Prolog { common: common(&cfg, job, uid), gid, image, propagate });
    let cmd = agent_command(node, &cfg, &request);
    let how = launch(&conf);
    sp.log_info(&format!("syndeo: prolog for job {job}: preparing the node (the agent starts {how:?})"));
    let ran = node.run(cmd, Some(&addresses(sp, node).encode()), PROLOG_LIMIT);
    finish(sp, ran, "prolog", &cfg)?;
    match how {
        Launch::ExternStep => Ok(()),
        Launch::PrologAdopted => start_agent(sp, node, &cfg, job, uid, true),
        Launch::Prolog => start_agent(sp, node, &cfg, job, uid, false),
    }
}

/// Whether the job asked for a cluster, and with which image (None inside:
/// the site's default): Slurm's record of the option (jobs made by `srun
/// --syndeo`), or syndeo's own (sbatch, salloc; see `REQUEST_RECORD`).
fn requested(sp: &dyn Spank, node: &dyn Node) -> Option<Option<String>> {
    if let Some(v) = sp.option_value() {
        return Some(v);
    }
    match node.env(&format!("SPANK_{REQUEST_RECORD}"))?.as_str() {
        "" => None,
        "-" => Some(None),
        image => Some(Some(image.to_string())),
    }
}

/// Whether the prolog prepared job `job` on this node: root's state
/// directory for it exists (nothing the user can make).
pub fn prepared(node: &dyn Node, cfg: &PluginConfig, job: u32) -> bool {
    node.exists(&state_spec(&cfg.runtime_base, job))
}

/// `syndeo-agent start` for a prepared job. With `adopt`, the helper waits
/// until the plugin has added it to the job's extern step, so that all it
/// starts lives in the job's cgroups.
pub fn start_agent(sp: &dyn Spank, node: &dyn Node, cfg: &PluginConfig, job: u32, uid: u32, adopt: bool) -> HookResult {
    let request = RootRequest::Start(Start { common: common(cfg, job, uid), hold: true });
    let cmd = agent_command(node, cfg, &request);
    finish(sp, node.start(cmd, job, adopt, START_LIMIT), "start", cfg).map(|_| ())
}

/// The job's nodes' addresses, from Slurm's configuration.
fn addresses(sp: &dyn Spank, node: &dyn Node) -> NodeAddresses {
    let list = node.env("SLURM_JOB_NODELIST").or_else(|| node.env("SLURM_NODELIST")).unwrap_or_default();
    sp.node_addresses(&list).into_iter().filter_map(|(n, a)| Some((n, a?))).collect()
}

pub fn epilog(sp: &dyn Spank, node: &dyn Node) -> HookResult {
    if sp.context() != Context::JobScript {
        return Ok(());
    }
    let cfg = config(sp)?;
    let (job, uid) = (sp.job_id()?, sp.uid()?);
    // The option is the usual sign; the job directory catches a job whose
    // option did not reach the epilog, so nothing of it is ever left behind.
    if requested(sp, node).is_none() && !node.exists(cfg.job_dir(job).path()) {
        return Ok(());
    }
    sp.log_info(&format!("syndeo: epilog for job {job}: stopping the cluster and cleaning up"));
    let start = Instant::now();
    let cmd = agent_command(node, &cfg, &RootRequest::Epilog(common(&cfg, job, uid)));
    match finish(sp, node.run(cmd, None, EPILOG_LIMIT), "epilog", &cfg)? {
        Outcome::Done => {
            sp.log_info(&format!("syndeo: epilog for job {job}: node clean in {} ms", start.elapsed().as_millis()))
        }
        Outcome::NotClean => sp.log_info(&format!(
            "syndeo: epilog for job {job}: the node is not clean: the paths above remain; it stays in service"
        )),
    }
    Ok(())
}

/// How a root-side command that did its job ended.
#[derive(Debug, PartialEq)]
enum Outcome {
    Done,
    /// The epilog could not remove everything (it named each path).
    NotClean,
}

/// What every request for job `job` carries.
fn common(cfg: &PluginConfig, job: u32, uid: u32) -> Common {
    Common { job, uid, config: cfg.config.clone(), runtime_base: cfg.runtime_base.clone() }
}

/// `syndeo-agent` with `request`'s argv: no shell, a clean environment but
/// for PATH and the job script's variables the agent reads, stderr piped.
fn agent_command(node: &dyn Node, cfg: &PluginConfig, request: &RootRequest) -> Command {
    let mut cmd = Command::new(&cfg.agent);
    cmd.args(request.encode())
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for name in JOB_SCRIPT_ENV {
        if let Some(v) = node.env(name) {
            cmd.env(name, v);
        }
    }
    cmd
}

/// What the agent's run means: its stderr goes to slurmd's log; exit 0 is
/// done, NOT_CLEAN from the epilog is a node that stays in service, and
/// anything else (or no end within the limit) fails the hook.
fn finish(
    sp: &dyn Spank,
    ran: Result<Finished, RunError>,
    what: &str,
    cfg: &PluginConfig,
) -> Result<Outcome, HookError> {
    let agent = cfg.agent.to_string_lossy();
    let done = ran.map_err(|e| match e {
        RunError::Spawn(e) => {
            HookError(format!("syndeo: {what}: cannot run {agent}: {e} (is syndeo installed on this node?)"))
        }
        RunError::TimedOut(l) => HookError(format!("syndeo: {what}: {agent} did not finish within {l:?}; killed it")),
        RunError::Wait(e) => HookError(format!("syndeo: {what}: waiting for {agent}: {e}")),
    })?;
    for line in done.stderr.lines().filter(|l| !l.trim().is_empty()) {
        sp.log_info(&format!("syndeo: {what}: {line}"));
    }
    match done.status.code() {
        Some(exit::OK) => Ok(Outcome::Done),
        Some(exit::NOT_CLEAN) if what == "epilog" => Ok(Outcome::NotClean),
        _ => Err(HookError(format!("syndeo: {what} failed on this node ({}); see the lines above", done.status))),
    }
}
#[cfg(test)]
mod tests {
    use super::super::fake::{FakeNode, FakeSpank, Run, Script};
    use super::*;
    use crate::spank::RunningConf;

    const SPEC: &str = "/run/syndeo/.jobs/42/spec.json";
    const JOB_DIR: &str = "/run/syndeo/42";

    fn job_script(option: Option<Option<&str>>, conf: RunningConf) -> FakeSpank {
        let mut sp = FakeSpank::new(Context::JobScript);
        sp.option = option.map(|o| o.map(str::to_string));
        sp.conf = conf;
        sp
    }

    fn contain() -> RunningConf {
        RunningConf { contain: true, ..RunningConf::default() }
    }

    fn node_with_env(vars: &[(&str, &str)]) -> FakeNode {
        FakeNode { env: vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), ..FakeNode::default() }
    }

    #[test]
    fn prolog_leaves_a_job_without_syndeo_alone() {
        let sp = job_script(None, contain());
        let node = FakeNode::default();
        prolog(&sp, &node).unwrap();
        let node = node_with_env(&[("SPANK_SYNDEO_REQUEST", "")]);
        prolog(&sp, &node).unwrap();
        assert!(node.runs().is_empty());
    }

    #[test]
    fn prolog_hands_ids_limits_image_and_node_addresses_to_agent_prolog() {
        let conf = RunningConf { propagate: Some("NOFILE,core".into()), ..contain() };
        let sp = job_script(Some(Some("/img/ray.sif")), conf);
        let node = node_with_env(&[("SLURM_JOB_NODELIST", "n1,n2")]);
        prolog(&sp, &node).unwrap();
        let runs = node.runs();
        assert_eq!(runs.len(), 1, "with an extern step the agent starts there, not here: {runs:?}");
        let expected = "prolog --job=42 --uid=1000 --config=/etc/syndeo/syndeo.toml --runtime-base=/run/syndeo \
                        --gid=100 --propagate=CORE,NOFILE --image=/img/ray.sif";
        assert_eq!(runs[0].args.join(" "), expected);
        let Ok(RootRequest::Prolog(p)) = RootRequest::decode(runs[0].args.iter().map(Into::into)) else { panic!() };
        assert_eq!(
            (p.gid, p.image.as_deref(), p.propagate.join(",")),
            (100, Some("/img/ray.sif"), "CORE,NOFILE".into())
        );
        assert_eq!(runs[0].input.as_deref(), Some(r#"{"n1":"10.0.0.1","n2":"10.0.0.2"}"#));
    }

    #[test]
    fn every_command_the_plugin_runs_reads_back_as_the_request_it_meant() {
        let sp = job_script(Some(Some("-x --uid=0")), RunningConf::default());
        let node = FakeNode::with_paths(&[JOB_DIR]);
        prolog(&sp, &node).unwrap();
        epilog(&sp, &node).unwrap();
        let read = |r: &Run| RootRequest::decode(r.args.iter().map(Into::into)).unwrap();
        let got: Vec<RootRequest> = node.runs().iter().map(read).collect();
        let c = common(&config(&sp).unwrap(), 42, 1000);
        let propagate = syndeo_protocol::rlimits::names().map(String::from).collect();
        let image = Some("-x --uid=0".to_string());
        let want = [
            RootRequest::Prolog(Prolog { common: c.clone(), gid: 100, image, propagate }),
            RootRequest::Start(Start { common: c.clone(), hold: true }),
            RootRequest::Epilog(c),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn prolog_of_an_sbatch_job_takes_syndeos_request_record_and_dash_means_the_site_image() {
        let sp = job_script(None, contain());
        let node = node_with_env(&[("SPANK_SYNDEO_REQUEST", "/img/a.sif")]);
        prolog(&sp, &node).unwrap();
        assert!(node.runs()[0].has("--image=/img/a.sif"));
        let node = node_with_env(&[("SPANK_SYNDEO_REQUEST", "-")]);
        prolog(&sp, &node).unwrap();
        let runs = node.runs();
        assert_eq!(runs[0].verb(), "prolog");
        assert!(!runs[0].args.iter().any(|a| a.starts_with("--image")), "{runs:?}");
    }

    #[test]
    fn prolog_starts_the_agent_itself_adopted_with_run_in_job_and_plain_without_an_extern_step() {
        for (conf, adopt) in [(RunningConf { run_in_job: true, ..contain() }, true), (RunningConf::default(), false)] {
            let sp = job_script(Some(None), conf);
            let node = FakeNode::default();
            prolog(&sp, &node).unwrap();
            let runs = node.runs();
            assert_eq!(runs.iter().map(Run::verb).collect::<Vec<_>>(), ["prolog", "start"]);
            assert_eq!(runs[1].adopt, Some(adopt));
            assert!(runs[1].has("--job=42") && runs[1].has("--uid=1000"));
        }
    }

    #[test]
    fn a_failed_agent_prolog_fails_the_hook_logs_its_stderr_and_starts_nothing() {
        let sp = job_script(Some(None), RunningConf::default());
        let node = FakeNode::default();
        node.scripts.borrow_mut().push_back(Script::Exit(1, "FAIL: the runtime base is not root's\n\n"));
        let e = prolog(&sp, &node).unwrap_err();
        assert!(e.0.starts_with("syndeo: prolog failed on this node (exit status: 1)"), "{}", e.0);
        assert_eq!(sp.logged("info").last().unwrap(), "syndeo: prolog: FAIL: the runtime base is not root's");
        assert_eq!(node.runs().len(), 1);
    }

    #[test]
    fn not_clean_is_a_failure_from_the_prolog_but_not_from_the_epilog() {
        let sp = job_script(Some(None), contain());
        let node = FakeNode::default();
        node.scripts.borrow_mut().extend([Script::Exit(exit::NOT_CLEAN, ""), Script::Exit(exit::NOT_CLEAN, "")]);
        assert!(prolog(&sp, &node).is_err());
        epilog(&sp, &node).unwrap();
        assert!(sp.logged("info").last().unwrap().contains("the node is not clean"), "{:?}", sp.logged("info"));
    }

    #[test]
    fn a_missing_agent_binary_is_reported_as_syndeo_not_installed() {
        let sp = job_script(Some(None), contain());
        let node = FakeNode::default();
        node.scripts.borrow_mut().push_back(Script::Missing);
        let e = prolog(&sp, &node).unwrap_err();
        assert!(e.0.starts_with("syndeo: prolog: cannot run /opt/syndeo-agent:"), "{}", e.0);
        assert!(e.0.ends_with("(is syndeo installed on this node?)"), "{}", e.0);
    }

    #[test]
    fn the_agent_gets_path_and_the_job_scripts_variables_and_nothing_else() {
        let sp = job_script(Some(None), contain());
        let vars = [("SLURM_JOB_USER", "ada"), ("SPANK_SYNDEO_UMASK", "0027"), ("LD_PRELOAD", "/tmp/evil.so")];
        let node = node_with_env(&vars);
        prolog(&sp, &node).unwrap();
        let env = &node.runs()[0].env;
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(names, ["PATH", "SLURM_JOB_USER", "SPANK_SYNDEO_UMASK"]);
        assert_eq!(env["PATH"], "/usr/sbin:/usr/bin:/sbin:/bin");
    }

    #[test]
    fn epilog_cleans_up_a_job_whose_directory_exists_even_when_its_option_is_gone() {
        let sp = job_script(None, contain());
        let node = FakeNode::with_paths(&[JOB_DIR]);
        epilog(&sp, &node).unwrap();
        let runs = node.runs();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].verb(), "epilog");
        assert_eq!(runs[0].input, None);
        assert!(sp.logged("info").last().unwrap().contains("node clean in"));
    }

    #[test]
    fn epilog_leaves_other_jobs_alone_and_fails_on_a_node_fault() {
        let sp = job_script(None, contain());
        let node = FakeNode::default();
        epilog(&sp, &node).unwrap();
        assert!(node.runs().is_empty());
        let sp = job_script(Some(None), contain());
        node.scripts.borrow_mut().push_back(Script::Exit(2, ""));
        assert!(epilog(&sp, &node).unwrap_err().0.contains("epilog failed on this node"));
    }

    #[test]
    fn prolog_and_epilog_run_only_in_the_job_script_context() {
        for context in [Context::Remote, Context::Local, Context::Slurmd] {
            let mut sp = job_script(Some(None), RunningConf::default());
            sp.context = context;
            let node = FakeNode::with_paths(&[JOB_DIR, SPEC]);
            prolog(&sp, &node).unwrap();
            epilog(&sp, &node).unwrap();
            assert!(node.runs().is_empty(), "{context:?}");
        }
    }
}
