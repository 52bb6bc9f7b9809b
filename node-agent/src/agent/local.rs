//! The agent's local socket (`<job dir>/agent.sock`, in the user's 0700 job
//! directory), for the job's steps, the exec wrapper and the `syndeo`
//! command. The messages and their versions are `syndeo_protocol::local`'s.
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use syndeo_protocol::local::{check_version, ExecSpecReply, Op, Reply, Request, StatusReply, WaitReply, MAX_LINE};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tracing::warn;

use super::cluster::NodeState;
use super::ray;
use super::state::Shared;
use crate::runtime::ContainerSpec;

pub fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

pub async fn serve(shared: Arc<Shared>, listener: UnixListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(handle(shared.clone(), stream));
            }
            Err(e) => {
                warn!("local socket: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn handle(shared: Arc<Shared>, stream: UnixStream) {
    let (rd, mut wr) = stream.into_split();
    let mut line = String::new();
    let mut rd = tokio::io::BufReader::new(rd.take(MAX_LINE as u64));
    if rd.read_line(&mut line).await.is_err() {
        return;
    }
    let reply = match serde_json::from_str::<Request>(&line) {
        Ok(req) => match check_version(req.v, "request") {
            Ok(()) => answer(&shared, req.op).await,
            Err(e) => to_line(WaitReply::Failed { error: e }),
        },
        Err(e) => to_line(WaitReply::Failed { error: format!("bad request: {e}") }),
    };
    let _ = wr.write_all(reply.as_bytes()).await;
}

async fn answer(shared: &Shared, op: Op) -> String {
    match op {
        Op::Wait { timeout_secs } => to_line(wait(shared, Duration::from_secs(timeout_secs)).await),
        Op::Status => to_line(status(shared)),
        Op::ExecSpec { cwd } => to_line(exec_spec(shared, cwd)),
    }
}

fn to_line<T: Serialize>(body: T) -> String {
    serde_json::to_string(&Reply::new(body)).expect("replies serialize") + "\n"
}

async fn wait(shared: &Shared, timeout: Duration) -> WaitReply {
    let mut rx = shared.node_state.subscribe();
    let done = |s: &NodeState| !matches!(s, NodeState::Starting(_));
    let _ = tokio::time::timeout(timeout, rx.wait_for(done)).await;
    let state = rx.borrow().clone();
    match state {
        NodeState::Ready => WaitReply::Ready { env: shared.step_env() },
        NodeState::Failed(fault) => WaitReply::Failed { error: fault.to_string() },
        NodeState::Starting(detail) => WaitReply::Starting { detail },
    }
}

fn status(shared: &Shared) -> StatusReply {
    let v = shared.view.borrow().clone();
    let image_ray = shared.image_ray.lock().ok().and_then(|r| r.clone());
    let (state, detail) = match &*shared.node_state.borrow() {
        NodeState::Ready => ("ready", String::new()),
        NodeState::Starting(d) => ("starting", d.clone()),
        NodeState::Failed(fault) => ("failed", fault.to_string()),
    };
    StatusReply {
        job: shared.spec.job_id,
        node: shared.spec.node.clone(),
        role: shared.role.borrow().describe(),
        state: state.into(),
        detail,
        head: v.head_node,
        ray_address: v.gcs_address,
        nodes: shared.spec.nodes.to_vec(),
        ready_nodes: shared.ready_nodes(),
        dashboard_url: v.dashboard_url,
        dashboard_note: v.dashboard_note,
        runtime: shared.runtime.name().into(),
        ray_version: image_ray.as_ref().map(|r| r.ray.clone()).unwrap_or_default(),
        python_version: image_ray.map(|r| r.python).unwrap_or_default(),
    }
}

fn exec_spec(shared: &Shared, cwd: Option<PathBuf>) -> ExecSpecReply {
    let spec = &shared.spec;
    let result = spec.image_path().and_then(|image| {
        let cwd = cwd.unwrap_or_else(|| spec.workdir.clone());
        let cs = ContainerSpec {
            image,
            binds: ray::job_binds(spec, &cwd),
            env: vec![],
            clean_env: false,
            workdir: cwd,
            home: None,
            runtime_state: Some(spec.temp_dir.clone()),
            gpu_ids: spec.gpus.clone(),
            gpu_devices: spec.gpu_devices.clone(),
            own_pid_namespace: false,
        };
        let env = shared.runtime.process_env(&cs);
        shared.runtime.command(&cs, &[]).map(|argv| (argv, env)).map_err(|f| f.to_string())
    });
    match result {
        Ok((argv, env)) => ExecSpecReply::Argv { argv, env },
        Err(error) => ExecSpecReply::Error { error },
    }
}
