//! The real launcher: this node's Ray in the job's container. It checks the
//! image as the user, writes syndeo's launcher script (`launcher.py`) into
//! the job's temp dir (bound into the container at the same path) and runs
//! it there with the container runtime. The script loads Ray, then takes the
//! `ray start` arguments and the token on stdin and reports on stdout.
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use super::launcher::{parse_event, parse_ready, parse_sees, Event, Launched, Launcher, RayNode, RayStart, SlurmJob};
use super::ports;
use super::ray::{self, NodePorts};
use super::ray_version::ImageRay;
use crate::fault::Fault;
use crate::job::JobSpec;
use crate::runtime::{self, ContainerRuntime};

/// syndeo's launcher script, run by path inside the container.
pub const LAUNCHER_SCRIPT: &str = include_str!("launcher.py");
const LAUNCHER_NAME: &str = "launcher.py";

pub struct ContainerLauncher;

impl Launcher for ContainerLauncher {
    fn launch(&self, spec: &JobSpec, runtime: &dyn ContainerRuntime, ip: IpAddr) -> Result<Launched, Fault> {
        let image = check_node(spec, runtime)?;
        let ports = NodePorts::pick(spec).map_err(|e| Fault::node(format!("no free port on {ip}: {e}")))?;
        let script = write_launcher(spec)?;
        let preload = copy_preload(spec)?;
        let cs = ray::ray_container(spec, &image, preload.as_deref());
        let argv = runtime.command(&cs, &["python3".into(), script.to_string_lossy().into_owned()])?;
        let (process, events) = RayProcess::spawn(&argv, &runtime.process_env(&cs), spec)?;
        Ok(Launched { ray: Box::new(process), events, ports })
    }

    fn slurm_job(&self, job_id: u32) -> BoxFuture<'static, SlurmJob> {
        slurm_job(job_id).boxed()
    }
}

/// What this node needs before it can run the job's container, checked as
/// the user: the image (returned), the work directory, the site's binds.
fn check_node(spec: &JobSpec, runtime: &dyn ContainerRuntime) -> Result<PathBuf, Fault> {
    let image = spec.image_path().map_err(Fault::User)?;
    runtime::check_image(runtime, &image, &spec.config.allowed_image_dirs)?;
    if !spec.workdir.is_dir() {
        return Err(Fault::user(format!(
            "the job's working directory {} is not accessible on {}",
            spec.workdir.display(),
            spec.node
        )));
    }
    if let Some(bad) = spec.config.extra_binds.iter().find(|b| !b.src.exists()) {
        return Err(Fault::node(format!("extra bind {} does not exist on {}", bad.src.display(), spec.node)));
    }
    Ok(image)
}

/// Writes the launcher script into the job's temp dir (the user's, bound
/// into the container at the same path); returns its path.
fn write_launcher(spec: &JobSpec) -> Result<PathBuf, Fault> {
    let path = spec.temp_dir.join(LAUNCHER_NAME);
    std::fs::write(&path, LAUNCHER_SCRIPT)
        .map_err(|e| Fault::node(format!("writing the launcher script {}: {e}", path.display())))?;
    Ok(path)
}

/// Copies syndeo's preload library into the job's temp dir, for Ray's
/// container (`ports.rs`); None when the agent's install has none (Ray's
/// ports are then let go before `ray start`, as for an image that cannot load it).
fn copy_preload(spec: &JobSpec) -> Result<Option<PathBuf>, Fault> {
    let Some(lib) = ports::preload_library() else {
        warn!("no {} beside the agent: Ray's ports are free between pick and bind", ports::PRELOAD_NAME);
        return Ok(None);
    };
    ports::copy_preload(&lib, &spec.temp_dir)
        .map(Some)
        .map_err(|e| Fault::node(format!("copying {} into {}: {e}", lib.display(), spec.temp_dir.display())))
}

/// The container running the launcher script: its stdin takes `ray start`'s
/// arguments; its stdout carries the script's protocol lines (other output
/// goes to the job dir's ray.log).
pub struct RayProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The launcher's report of the image's Ray: None until it comes,
    /// Some(None) if the container ended first.
    facts: watch::Receiver<Option<Option<ImageRay>>>,
    /// The head launcher's latest answer to "expect n" (`sees`).
    seen: watch::Receiver<Option<Result<usize, String>>>,
}

impl RayProcess {
    /// Starts the container; its events arrive on the returned channel.
    pub fn spawn(
        argv: &[String],
        env: &[(String, String)],
        spec: &JobSpec,
    ) -> Result<(RayProcess, mpsc::Receiver<Event>), Fault> {
        let log_path = spec.dir().ray_log();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| Fault::node(format!("opening {}: {e}", log_path.display())))?;
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| Fault::node(format!("starting the container runtime {}: {e}", argv[0])))?;
        let stdout = child.stdout.take().expect("piped");
        let stdin = child.stdin.take();
        let (tx, rx) = mpsc::channel(16);
        let (facts_tx, facts) = watch::channel(None);
        let (seen_tx, seen) = watch::channel(None);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(answer) = parse_sees(&line) {
                    seen_tx.send_replace(Some(answer));
                } else if let Some(ev) = parse_event(&line) {
                    if ev == Event::LauncherReady {
                        let found = parse_ready(&line).unwrap_or_else(ImageRay::unreadable);
                        info!(ray = %found.ray, python = %found.python, "launcher: the image's Ray loaded");
                        facts_tx.send_replace(Some(Some(found)));
                    } else {
                        info!(?ev, "launcher");
                    }
                    let _ = tx.send(ev).await;
                }
            }
            // Ended before Ray loaded: say so to whoever waits (once).
            facts_tx.send_if_modified(|f| f.is_none() && f.insert(None).is_none());
            let _ = tx.send(Event::Exited).await;
        });
        Ok((RayProcess { child, stdin, facts, seen }, rx))
    }
}

impl RayNode for RayProcess {
    fn loaded(&mut self) -> BoxFuture<'_, Option<ImageRay>> {
        async move {
            let got = self.facts.wait_for(Option::is_some).await.ok()?;
            got.clone().flatten()
        }
        .boxed()
    }

    /// Hands the launcher the `ray start` arguments and Ray's environment.
    fn start<'a>(&'a mut self, how: &'a RayStart) -> BoxFuture<'a, Result<(), String>> {
        async move {
            let stdin = self.stdin.as_mut().ok_or("the launcher's stdin is closed")?;
            stdin.write_all(how.line().as_bytes()).await.map_err(|e| e.to_string())?;
            stdin.flush().await.map_err(|e| e.to_string())
        }
        .boxed()
    }

    /// Asks the head's launcher to wait until Ray's status lists `nodes`.
    fn sees<'a>(&'a mut self, nodes: usize, gcs: &'a str, limit: Duration) -> BoxFuture<'a, Result<usize, String>> {
        async move {
            self.seen.borrow_and_update();
            let line =
                serde_json::json!({ "expect": nodes, "gcs": gcs, "limit": limit.as_secs_f64() }).to_string() + "\n";
            let stdin = self.stdin.as_mut().ok_or("the launcher's stdin is closed")?;
            stdin.write_all(line.as_bytes()).await.map_err(|e| e.to_string())?;
            stdin.flush().await.map_err(|e| e.to_string())?;
            match tokio::time::timeout(limit + Duration::from_secs(5), self.seen.changed()).await {
                Ok(Ok(())) => self.seen.borrow().clone().unwrap_or_else(|| Err("no answer".into())),
                Ok(Err(_)) => Err("the launcher ended".into()),
                Err(_) => Err(format!("the launcher did not answer within {limit:?}")),
            }
        }
        .boxed()
    }

    /// Ends Ray gracefully (end of stdin), then kills the container after `grace`.
    fn stop(mut self: Box<Self>, grace: Duration) -> BoxFuture<'static, ()> {
        async move {
            drop(self.stdin.take());
            match tokio::time::timeout(grace, self.child.wait()).await {
                Ok(_) => info!("Ray container stopped"),
                Err(_) => {
                    warn!("Ray container still running after {grace:?}; killing it");
                    let _ = self.child.kill().await;
                }
            }
        }
        .boxed()
    }
}

/// What the head's agent asks Slurm once (as the job user: `scontrol show
/// job -d`): memory per node, and the job's stderr file. Empty if Slurm does
/// not say in time.
async fn slurm_job(job_id: u32) -> SlurmJob {
    let query = Command::new("scontrol").args(["show", "job", "-d", &job_id.to_string()]).stdin(Stdio::null()).output();
    match tokio::time::timeout(Duration::from_secs(10), query).await {
        Ok(Ok(o)) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            SlurmJob { memory_mb: crate::alloc::mem_per_node(&text), stderr: crate::alloc::job_stderr(&text) }
        }
        other => {
            warn!("cannot ask scontrol about the job ({other:?}); Ray gets the site's object store size only");
            SlurmJob::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A fresh directory holding the launcher script, for a real Python to
    /// import it from.
    fn launcher_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("syndeo-launcher-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("launcher.py"), LAUNCHER_SCRIPT).unwrap();
        dir
    }

    /// Stand-in packages of Ray's under `dir`: each of `packages` (for
    /// example "ray/_private") made, with an empty `__init__.py` in it and in
    /// each of its parents below `dir`.
    fn stand_in_packages(dir: &Path, packages: &[&str]) {
        for p in packages {
            let mut at = dir.to_path_buf();
            for part in p.split('/') {
                at.push(part);
                std::fs::create_dir_all(&at).unwrap();
                std::fs::write(at.join("__init__.py"), "").unwrap();
            }
        }
    }

    /// Stand-ins under `dir` of Ray's `services.start_ray_process` (it
    /// answers `(process_type, command)`) and of the raylet's process type,
    /// which the launcher's `raylet_told` wraps.
    fn stand_in_start_ray_process(dir: &Path) {
        stand_in_packages(dir, &["ray/_private"]);
        std::fs::write(dir.join("ray/_private/ray_constants.py"), "PROCESS_TYPE_RAYLET = 'raylet'\n").unwrap();
        std::fs::write(
            dir.join("ray/_private/services.py"),
            "def start_ray_process(command, process_type, fate_share, env_updates=None):\n    \
             return (process_type, command)\n",
        )
        .unwrap();
    }

    /// `python3 -B -c CODE` with `dir` on its module path: its stdout,
    /// trimmed, and its stderr.
    fn python_in(dir: &Path, code: &str) -> (String, String) {
        let o = std::process::Command::new("/usr/bin/python3")
            .args(["-B", "-c", code])
            .env("PYTHONPATH", dir)
            .output()
            .unwrap();
        (String::from_utf8_lossy(&o.stdout).trim().to_string(), String::from_utf8_lossy(&o.stderr).into_owned())
    }

    #[test]
    fn the_launcher_script_speaks_the_protocol_the_agent_parses_and_has_a_main() {
        for word in ["SYNDEO_LAUNCHER_READY", "SYNDEO_RAY_STARTED", "SYNDEO_RAY_FAILED", "SYNDEO_RAY_DIED"] {
            assert!(LAUNCHER_SCRIPT.contains(word), "{word}");
            assert!(parse_event(word).is_some(), "{word}");
        }
        for line in ["SYNDEO_RAY_SEES 2", "SYNDEO_RAY_SEES_LATE why"] {
            assert!(LAUNCHER_SCRIPT.contains(line.split(' ').next().unwrap()), "{line}");
            assert!(parse_sees(line).is_some(), "{line}");
        }
        assert!(LAUNCHER_SCRIPT.contains("def main(") && LAUNCHER_SCRIPT.contains("if __name__ == \"__main__\":"));
    }

    /// `has_dashboard` in the launcher, run by a real Python against a
    /// stand-in of Ray's own test (`get_dashboard_dependency_error`).
    #[test]
    fn the_launcher_says_the_image_has_a_dashboard_only_when_rays_own_test_passes() {
        let dir = launcher_dir("dash");
        stand_in_packages(&dir, &["ray/_private"]);
        let answer = |error: &str| {
            let utils = format!("def get_dashboard_dependency_error():\n    return {error}\n");
            std::fs::write(dir.join("ray/_private/utils.py"), utils).unwrap();
            let (out, err) = python_in(&dir, "import launcher; print(launcher.has_dashboard())");
            out + &err
        };
        let (with, without) = (answer("None"), answer("'No module named aiohttp'"));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!((with.as_str(), without.as_str()), ("True", "False"));
    }

    /// `active_nodes` in the launcher, run by a real Python on the two forms
    /// of Ray's status report: with the autoscaler's count (what `ray
    /// status` prints under Active), and with only per-node resources.
    #[test]
    fn the_launcher_counts_the_nodes_rays_status_lists_active() {
        let dir = launcher_dir("status");
        let code = r#"
import json, launcher
v2 = {"autoscaler_report": {"active_nodes": {"node_a": 1, "node_b": 1, "node_c": 1}}, "load_metrics_report": {}}
v1 = {"load_metrics_report": {"usage_by_node": {"a": {}, "b": {}}}}
print(launcher.active_nodes(json.dumps(v2)), launcher.active_nodes(json.dumps(v1)), launcher.active_nodes("{}"))
"#;
        let (out, err) = python_in(&dir, code);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(out, "3 2 0", "{err}");
    }

    /// `registration_polled` in the launcher, run by a real Python against
    /// stand-ins of Ray's modules: Ray's own wait for the node's record
    /// (`services.get_node`, which sleeps a second between asks) is called
    /// only once the GCS lists the node alive, and at once when the GCS
    /// cannot be asked.
    #[test]
    fn the_launcher_calls_rays_own_wait_for_the_nodes_record_once_the_gcs_lists_it_alive() {
        let dir = launcher_dir("reg");
        stand_in_packages(&dir, &["ray/_private", "ray/core/generated"]);
        std::fs::write(
            dir.join("ray/_private/services.py"),
            "log = []\ndef get_node(gcs_address, node_id):\n    log.append('ray')\n    return {'node_id': node_id}\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("ray/core/generated/gcs_pb2.py"),
            "class GcsNodeInfo:\n    class GcsNodeState:\n        ALIVE = 1\n    def __init__(self, state):\n        self.state = state\n",
        )
        .unwrap();
        let raylet = |gcs_client: &str| {
            std::fs::write(dir.join("ray/_raylet.py"), gcs_client).unwrap();
            let code = r#"
import time, launcher
import ray._private.services as services
launcher.stop_on_eof = time.sleep
launcher.registration_polled()
print(services.get_node("10.0.0.1:6379", "ab"), services.log)
"#;
            let (out, err) = python_in(&dir, code);
            out + &err
        };
        // The node is listed, dead, then alive at the third ask.
        let listed = raylet(
            r#"from ray.core.generated.gcs_pb2 import GcsNodeInfo
from ray._private import services
class GcsClient:
    def __init__(self, address):
        assert address == "10.0.0.1:6379"
        self.asks = 0
    def get_all_node_info(self, timeout):
        self.asks += 1
        services.log.append(f"gcs {self.asks}")
        return {} if self.asks == 1 else {bytes.fromhex("ab"): GcsNodeInfo(1 if self.asks == 3 else 2)}
"#,
        );
        let unreachable =
            raylet("class GcsClient:\n    def __init__(self, address):\n        raise OSError('no GCS')\n");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(listed, "{'node_id': 'ab'} ['gcs 1', 'gcs 2', 'gcs 3', 'ray']");
        assert_eq!(unreachable, "{'node_id': 'ab'} ['ray']");
    }

    /// `idle_dashboard_skipped` in the launcher, run by a real Python against
    /// a stand-in of Ray's `services.start_api_server`: with
    /// `--include-dashboard false` Ray's call for the idle dashboard is
    /// answered "none started", as Ray answers a dashboard that failed to
    /// start; a dashboard that is on, and any start without the flag, still
    /// reach Ray's own call.
    #[test]
    fn with_the_dashboard_off_the_head_starts_no_idle_dashboard_process_but_an_on_dashboard_still_starts() {
        let dir = launcher_dir("idle-dash");
        stand_in_packages(&dir, &["ray/_private"]);
        std::fs::write(
            dir.join("ray/_private/services.py"),
            "def start_api_server(include_dashboard, raise_on_failure, host, **kw):\n    \
             return ('url', f'started {include_dashboard}')\n",
        )
        .unwrap();
        let starts = |args: &str| {
            let code = format!(
                r#"
import launcher
import ray._private.services as services
launcher.idle_dashboard_skipped({args})
print(services.start_api_server(False, False, "h", port=1), services.start_api_server(True, True, "h"))
"#
            );
            let (out, err) = python_in(&dir, &code);
            out + &err
        };
        let off = starts(r#"["--head", "--include-dashboard", "false", "--port", "1"]"#);
        let on = starts(r#"["--head", "--include-dashboard", "true"]"#);
        let worker = starts(r#"["--address", "10.0.0.1:1"]"#);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(off, "(None, None) ('url', 'started True')");
        assert_eq!(on, "('url', 'started False') ('url', 'started True')");
        assert_eq!(worker, on);
    }

    /// `raylet_told` in the launcher, run by a real Python against stand-ins
    /// of Ray's `services.start_ray_process` and its process types: the
    /// raylet's command gets the agent's words once (not again if Ray
    /// already passes them); every other process's command, and every
    /// command when there are no words, is Ray's own.
    #[test]
    fn the_raylets_command_gets_the_agents_raylet_args_once_and_no_other_process_does() {
        let dir = launcher_dir("raylet-args");
        stand_in_start_ray_process(&dir);
        let commands = |extra: &str| {
            let code = format!(
                r#"
import launcher
import ray._private.services as s
launcher.raylet_told({extra})
print(s.start_ray_process(["raylet", "--x=1"], "raylet", True),
      s.start_ray_process(["raylet", "--p=7"], "raylet", True, env_updates={{}}),
      s.start_ray_process(["gcs_server"], "gcs_server", True))
"#
            );
            let (out, err) = python_in(&dir, &code);
            out + &err
        };
        let told = commands(r#"["--p=7"]"#);
        let untold = commands("[]");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            told,
            "('raylet', ['raylet', '--x=1', '--p=7']) ('raylet', ['raylet', '--p=7']) ('gcs_server', ['gcs_server'])"
        );
        assert_eq!(
            untold,
            "('raylet', ['raylet', '--x=1']) ('raylet', ['raylet', '--p=7']) ('gcs_server', ['gcs_server'])"
        );
    }

    /// `agents_up` in the launcher, run by a real Python against stand-ins
    /// of Ray's `start_ray_process` and `_raylet`'s port-file names: once
    /// the raylet was told its agent's port, the launcher waits until both
    /// agents' port files are in the raylet's session dir (the one on the
    /// raylet's command line), not past its limit, and not while the raylet
    /// is gone; with the raylet untold it does not wait at all.
    #[test]
    fn a_told_raylets_node_starts_only_once_its_agents_wrote_their_ports_within_the_limit() {
        let dir = launcher_dir("agents-up");
        stand_in_start_ray_process(&dir);
        std::fs::write(
            dir.join("ray/_raylet.py"),
            "DASHBOARD_AGENT_LISTEN_PORT_NAME = 'dash'\nRUNTIME_ENV_AGENT_PORT_NAME = 'renv'\n\
             def get_port_filename(node_id, name):\n    return f'{name}_{node_id}'\n",
        )
        .unwrap();
        // Each case: what the raylet is told, which files its agents write
        // (at the 6th poll), whether the raylet lives. On a stand-in clock
        // that each 50 ms poll moves on: prints the polls and the time
        // waited, in tenths of a second.
        let waited = |extra: &str, files: &str, alive: &str| {
            let session = dir.join(format!("session-{}", files.len() + extra.len() + alive.len()));
            std::fs::create_dir_all(&session).unwrap();
            let code = format!(
                r#"
import os, launcher
import ray._private.services as s
class Clock:
    now = 0.0
    def time(self):
        return self.now
clock = Clock()
launcher.time = clock
launcher.raylet_told({extra})
launcher.raylet_alive = lambda: {alive}
polls = 0
def poll(t):
    global polls
    polls += 1
    clock.now += t
    if polls == 6:
        for name in {files}:
            open(os.path.join("{session}", name + "_ab12"), "w").close()
launcher.stop_on_eof = poll
s.start_ray_process(["raylet", "--node_id=ab12", "--session_dir={session}"], "raylet", True)
launcher.agents_up(1.5)
print(polls, round(clock.now * 10))
"#,
                session = session.display()
            );
            let (out, err) = python_in(&dir, &code);
            let _ = std::fs::remove_dir_all(&session);
            assert!(err.is_empty(), "{err}");
            out
        };
        let both = waited(r#"["--p=7"]"#, r#"["dash", "renv"]"#, "True");
        let one = waited(r#"["--p=7"]"#, r#"["dash"]"#, "True");
        let raylet_gone = waited(r#"["--p=7"]"#, "[]", "False");
        let untold = waited("[]", r#"["dash", "renv"]"#, "True");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(both, "6 3", "both files written at the 6th poll: the wait ends there");
        assert!(one.ends_with(" 15"), "one agent's file missing: the wait ends at the 1.5 s limit ({one})");
        assert_eq!(raylet_gone, "0 0", "no raylet: no wait");
        assert_eq!(untold, "0 0", "raylet untold: no wait");
    }

    /// The one line the agent writes to the launcher carries the three
    /// fields `launcher.py`'s `main` reads, by those names.
    #[test]
    fn the_start_line_is_one_json_line_with_the_fields_the_launcher_reads() {
        let how = RayStart {
            args: vec!["--head".into()],
            raylet_args: vec!["--dashboard_agent_listen_port=5".into()],
            env: [("RAY_AUTH_TOKEN".to_string(), "t".to_string())].into(),
        };
        let line = how.line();
        assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["args"][0], "--head");
        assert_eq!(v["raylet_args"][0], "--dashboard_agent_listen_port=5");
        assert_eq!(v["env"]["RAY_AUTH_TOKEN"], "t");
        for field in [r#"msg["args"]"#, r#"msg.get("raylet_args""#, r#"msg.get("env""#] {
            assert!(LAUNCHER_SCRIPT.contains(field), "{field}");
        }
    }
}
