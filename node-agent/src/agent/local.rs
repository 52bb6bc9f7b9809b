//! The agent's local socket (`<job dir>/agent.sock`, in the user's 0700 job
//! directory): one JSON request line, one JSON reply line.
//!   {"op":"wait","timeout_secs":N} -> {"state":"ready","env":{...}} | {"state":"failed","error":..} | {"state":"starting","detail":..}
//!   {"op":"status"}                -> the node's and cluster's state
//!   {"op":"exec_spec","cwd":P}     -> {"argv":[...]}: the command prefix that runs a program in the image
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tracing::warn;

use super::ray;
use super::state::{Local, Shared};
use crate::runtime::ContainerSpec;

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request {
    Wait { timeout_secs: u64 },
    Status,
    ExecSpec { cwd: Option<PathBuf> },
}

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
    let mut rd = tokio::io::BufReader::new(rd.take(64 * 1024));
    if rd.read_line(&mut line).await.is_err() {
        return;
    }
    let reply = match serde_json::from_str::<Request>(&line) {
        Ok(Request::Wait { timeout_secs }) => wait(&shared, Duration::from_secs(timeout_secs)).await,
        Ok(Request::Status) => status(&shared),
        Ok(Request::ExecSpec { cwd }) => exec_spec(&shared, cwd),
        Err(e) => json!({ "state": "failed", "error": format!("bad request: {e}") }),
    };
    let _ = wr.write_all(format!("{reply}\n").as_bytes()).await;
}

async fn wait(shared: &Shared, timeout: Duration) -> Value {
    let mut rx = shared.local.subscribe();
    let done = |l: &Local| !matches!(l, Local::Starting(_));
    let _ = tokio::time::timeout(timeout, rx.wait_for(done)).await;
    let l = rx.borrow().clone();
    match l {
        Local::Ready => json!({ "state": "ready", "env": shared.step_env() }),
        Local::Failed(e) => json!({ "state": "failed", "error": e }),
        Local::Starting(d) => json!({ "state": "starting", "detail": d }),
    }
}

fn status(shared: &Shared) -> Value {
    let v = shared.view.borrow().clone();
    let (state, detail) = match &*shared.local.borrow() {
        Local::Ready => ("ready", String::new()),
        Local::Starting(d) => ("starting", d.clone()),
        Local::Failed(e) => ("failed", e.clone()),
    };
    json!({
        "job": shared.spec.job_id,
        "node": shared.spec.node,
        "role": format!("{:?}", *shared.role.borrow()),
        "state": state,
        "detail": detail,
        "head": v.head_node,
        "ray_address": v.gcs_address,
        "nodes": shared.spec.nodes,
        "ready_nodes": shared.ready_nodes(),
        "dashboard_url": v.dashboard_url,
        "runtime": shared.runtime.name(),
    })
}

fn exec_spec(shared: &Shared, cwd: Option<PathBuf>) -> Value {
    let spec = &shared.spec;
    let result = spec.image_path().and_then(|image| {
        let cwd = cwd.unwrap_or_else(|| spec.workdir.clone());
        let cs = ContainerSpec {
            image,
            binds: ray::job_binds(spec, &cwd),
            env: vec![],
            clean_env: false,
            workdir: cwd,
            gpus: spec.gpus.clone(),
            own_pid_namespace: false,
        };
        shared.runtime.command(&cs, &[])
    });
    match result {
        Ok(argv) => json!({ "argv": argv }),
        Err(e) => json!({ "error": e }),
    }
}

/// Synchronous client, for the exec wrapper and the `syndeo` command.
pub fn request(socket: &Path, req: &Value, timeout: Duration) -> anyhow::Result<Value> {
    let stream = std::os::unix::net::UnixStream::connect(socket)
        .map_err(|e| anyhow::anyhow!("cannot reach the node agent at {}: {e}", socket.display()))?;
    stream.set_read_timeout(Some(timeout))?;
    (&stream).write_all(format!("{req}\n").as_bytes())?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    Ok(serde_json::from_str(&line)?)
}
