//! The agents' gRPC mesh (tonic over TCP on the nodes' addresses). Every call
//! carries the job's bearer token; an agent answers only its own job, so a
//! peer that reaches another job's agent on a shared port moves on to the
//! next candidate port.
// tonic's handlers and streams return `tonic::Status`, which is large.
#![allow(clippy::result_large_err)]
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::net::{TcpListener, TcpSocket};
use tokio_stream::wrappers::{TcpListenerStream, WatchStream};
use tokio_stream::StreamExt;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use super::state::{NodeState, Role, Shared};
use super::view;
use crate::secret::tokens_equal;

pub mod pb {
    tonic::include_proto!("syndeo.mesh");
}

use pb::join_reply::Role as PbRole;
use pb::mesh_client::MeshClient;
use pb::mesh_server::{Mesh, MeshServer};

pub const TOKEN_HEADER: &str = "x-syndeo-token";

/// Calls this process's mesh servers answered, and cluster views they sent
/// on Watch streams: the mesh-scale benchmark's message count.
pub static CALLS_SERVED: AtomicU64 = AtomicU64::new(0);
pub static VIEWS_SENT: AtomicU64 = AtomicU64::new(0);

/// Every worker connects to the head at about the same time: a backlog
/// beyond tokio's default 1,024 keeps a large job's connects from waiting
/// for SYN retries (the kernel caps it at net.core.somaxconn).
const BACKLOG: u32 = 8192;

/// Binds the first free port of the job's candidates on `ip` (never 0.0.0.0).
pub async fn bind(ip: IpAddr, ports: &[u16]) -> anyhow::Result<(TcpListener, u16)> {
    for &p in ports {
        let socket = if ip.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        if socket.bind(SocketAddr::new(ip, p)).is_ok() {
            if let Ok(l) = socket.listen(BACKLOG) {
                return Ok((l, p));
            }
        }
    }
    anyhow::bail!("none of this job's mesh ports {ports:?} is free on {ip}; widen mesh_ports in syndeo.toml")
}

pub async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    let svc = MeshService { shared };
    if let Err(e) = Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(2)))
        .http2_keepalive_timeout(Some(Duration::from_secs(4)))
        .add_service(MeshServer::new(svc))
        .serve_with_incoming(TcpListenerStream::new(listener))
        .await
    {
        warn!("mesh server ended: {e}");
    }
}

struct MeshService {
    shared: Arc<Shared>,
}

impl MeshService {
    fn check<T>(&self, req: &Request<T>, job_id: u32, node: &str) -> Result<(), Status> {
        CALLS_SERVED.fetch_add(1, Ordering::Relaxed);
        let token = req.metadata().get(TOKEN_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
        if job_id != self.shared.spec.job_id || !tokens_equal(token, &self.shared.mesh_token) {
            warn!(peer = ?req.remote_addr(), claimed_job = job_id, claimed_node = node, "refused a mesh call without this job's token");
            return Err(Status::unauthenticated("not this job's agent"));
        }
        Ok(())
    }
}

type ViewStream = Pin<Box<dyn Stream<Item = Result<pb::ClusterView, Status>> + Send>>;

#[tonic::async_trait]
impl Mesh for MeshService {
    async fn join(&self, req: Request<pb::JoinRequest>) -> Result<Response<pb::JoinReply>, Status> {
        let r = req.get_ref();
        self.check(&req, r.job_id, &r.node)?;
        let (role, head_node) = match &*self.shared.role.borrow() {
            Role::Undecided => (PbRole::Undecided, String::new()),
            Role::Head => (PbRole::Head, self.shared.spec.node.clone()),
            Role::Follower(h) => (PbRole::Follower, h.clone()),
            Role::SteppedDown => (PbRole::SteppedDown, String::new()),
        };
        let failed = match &*self.shared.node_state.borrow() {
            NodeState::Failed(m) => m.clone(),
            _ => String::new(),
        };
        let reply = pb::JoinReply { role: role as i32, head_node, failed };
        Ok(Response::new(reply))
    }

    type WatchStream = ViewStream;

    async fn watch(&self, req: Request<pb::WatchRequest>) -> Result<Response<ViewStream>, Status> {
        let r = req.get_ref();
        self.check(&req, r.job_id, &r.node)?;
        if *self.shared.role.borrow() != Role::Head {
            return Err(Status::failed_precondition("not the head"));
        }
        // Each worker gets its own memory entry (from the head's full view).
        let (shared, node) = (self.shared.clone(), r.node.clone());
        let s = WatchStream::new(self.shared.broadcast.subscribe()).map(move |mut v| {
            VIEWS_SENT.fetch_add(1, Ordering::Relaxed);
            if let Some(&mb) = shared.view.borrow().memory_mb.get(&node) {
                v.memory_mb.insert(node.clone(), mb);
            }
            Ok(v)
        });
        Ok(Response::new(Box::pin(s)))
    }

    async fn report(&self, req: Request<pb::NodeReport>) -> Result<Response<pb::ReportAck>, Status> {
        let r = req.get_ref().clone();
        self.check(&req, r.job_id, &r.node)?;
        if !self.shared.is_node(&r.node) {
            return Err(Status::invalid_argument("node is not in this job"));
        }
        info!(node = %r.node, ok = r.ok, message = %r.message, "worker report");
        let result = if r.ok { Ok(()) } else { Err(r.message) };
        view::record_report(&self.shared, r.node, result).await;
        Ok(Response::new(pb::ReportAck {}))
    }
}

/// A request with this job's token attached.
pub fn authed<T>(shared: &Shared, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut().insert(TOKEN_HEADER, shared.mesh_token.parse().expect("hex token is valid metadata"));
    r
}

/// A channel to a peer's agent. HTTP/2 keepalives make a peer that went
/// silent (its node or link down) an error within seconds, not a stream that
/// waits forever.
pub async fn connect(addr: SocketAddr) -> Option<MeshClient<Channel>> {
    let ep = Endpoint::from_shared(format!("http://{addr}"))
        .ok()?
        .connect_timeout(Duration::from_millis(500))
        .http2_keep_alive_interval(Duration::from_secs(2))
        .keep_alive_timeout(Duration::from_secs(4))
        .keep_alive_while_idle(true);
    let ch = tokio::time::timeout(Duration::from_secs(1), ep.connect()).await.ok()?.ok()?;
    Some(MeshClient::new(ch))
}

/// Asks the job's agent on `ip` who the head is, trying the job's ports in
/// order. None: no agent of this job answers there (yet).
pub async fn join(shared: &Shared, ip: IpAddr) -> Option<(MeshClient<Channel>, pb::JoinReply)> {
    for port in shared.spec.mesh_ports() {
        let Some(mut client) = connect(SocketAddr::new(ip, port)).await else { continue };
        let req = authed(shared, pb::JoinRequest { job_id: shared.spec.job_id, node: shared.spec.node.clone() });
        match tokio::time::timeout(Duration::from_secs(2), client.join(req)).await {
            Ok(Ok(reply)) => return Some((client, reply.into_inner())),
            _ => continue, // another job's agent, or no answer
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::launcher::NoopLauncher;
    use crate::job::simulated_spec;

    fn with_token<T>(msg: T, token: Option<&str>) -> Request<T> {
        let mut r = Request::new(msg);
        if let Some(t) = token {
            r.metadata_mut().insert(TOKEN_HEADER, t.parse().unwrap());
        }
        r
    }

    /// A real tonic server on loopback: only calls with this job's token and id get an answer.
    #[tokio::test]
    async fn mesh_calls_without_the_jobs_token_or_for_another_job_are_refused() {
        let shared = Arc::new(Shared::new(simulated_spec(7, &["n1", "n2"], 0), "a".repeat(64), Arc::new(NoopLauncher)));
        shared.role.send_replace(Role::Head);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(shared.clone(), listener));
        let mut client = connect(addr).await.expect("server answers");
        let join = |job_id| pb::JoinRequest { job_id, node: "n2".into() };
        let good = "a".repeat(64);

        for (job, token) in [(7, None), (7, Some("b".repeat(64))), (8, Some(good.clone()))] {
            let e = client.join(with_token(join(job), token.as_deref())).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "job {job} token {token:?}");
        }
        let e = client.watch(with_token(pb::WatchRequest { job_id: 7, node: "n2".into() }, None)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "the cluster view (and its Ray token) needs the token");
        let report = pb::NodeReport { job_id: 7, node: "n2".into(), ok: true, message: String::new() };
        let e = client.report(with_token(report, Some("x"))).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(shared.reports.lock().await.is_empty(), "a refused report changed the cluster");

        let reply = client.join(with_token(join(7), Some(&good))).await.expect("the job's own agent is answered");
        assert_eq!(reply.into_inner().role(), PbRole::Head);
    }
}
