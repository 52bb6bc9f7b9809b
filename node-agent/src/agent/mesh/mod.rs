//! The agents' gRPC mesh (tonic), over mutual TLS with keys derived from the
//! job's secret (`tls.rs`), on a port root bound for the agent (see
//! `root/start.rs`: a privileged port, which no user can squat). A
//! connection is served only after its handshake proved the peer holds the
//! job's key; before that, `admit.rs` bounds what it may cost. Every worker's
//! agent joins the head's, watches the cluster view it publishes, and
//! reports when its own Ray node joined.
//!
//! The mesh depends on the agent's state (`Shared`, `cluster.rs`), never the
//! reverse: this agent's end of it (`Mesh`: the job's key, the socket) is
//! made beside `Shared` and handed to the parts that call peers.
// tonic's handlers and streams return `tonic::Status`, which is large.
#![allow(clippy::result_large_err)]
pub mod admit;
pub mod counters;
pub mod tls;
mod turn;
mod wire;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_stream::wrappers::{ReceiverStream, WatchStream};
use tokio_stream::StreamExt;
use tonic::transport::{Channel, Endpoint, Server, Uri};
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, info, warn};

use super::cluster::{ClusterView, JoinAnswer, NodeState, PeerRole};
use super::state::{Role, Shared};
use super::view;
use crate::fault::Fault;
use crate::job::JobSpec;
use tls::MeshTls;

/// The generated protobuf types: only `mesh/` uses them (`wire.rs` converts).
mod pb {
    tonic::include_proto!("syndeo.mesh");
}

use pb::mesh_client::MeshClient;
use pb::mesh_server::{Mesh as MeshRpc, MeshServer};

/// The largest request an authenticated peer may send (they are a few
/// dozen bytes).
const MAX_MESSAGE: usize = 64 * 1024;
/// Streams one authenticated connection may have open at once (a worker
/// uses three: Join, Watch, Report).
const MAX_STREAMS: u32 = 16;

/// Every worker connects to the head at about the same time: a backlog
/// beyond tokio's default 1,024 keeps a large job's connects from waiting
/// for SYN retries (the kernel caps it at net.core.somaxconn).
const BACKLOG: u32 = 8192;

/// How long a connection to a peer may take: its TCP connect (500 ms), the
/// wait for its turn at the peer (`turn::TURN_LIMIT`), the rest of the TLS
/// handshake as long as the peer's server allows it
/// (`admit::HANDSHAKE_TIMEOUT`), and HTTP/2's start. A head that thousands
/// of workers join at once is busy, not gone: at 4,096 simulated nodes, a
/// 2 s limit here made workers give up handshakes the head had begun and
/// start them again, which loaded it more (one run took 25 s, one never
/// finished within 120 s).
const CONNECT_LIMIT: Duration = Duration::from_millis(
    500 + turn::TURN_LIMIT.as_millis() as u64 + admit::HANDSHAKE_TIMEOUT.as_millis() as u64 + 500,
);
/// How long the Join call may take once the channel is up.
const JOIN_LIMIT: Duration = Duration::from_secs(2);

/// Binds the first free port of `ports` on `ip` (never 0.0.0.0). The real
/// agents get their socket from root instead (`root/start.rs`); simulated
/// nodes and tests bind here.
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

/// This agent's end of the job's mesh: the job's identity (its key, derived
/// from the job's secret), who this agent is in its calls, and the listening
/// socket root bound for it, if any.
pub struct Mesh {
    tls: MeshTls,
    job_id: u32,
    node: String,
    ports: Vec<u16>,
    /// The socket root bound for this agent, until `listener` takes it.
    socket: std::sync::Mutex<Option<std::net::TcpListener>>,
}

impl Mesh {
    /// The mesh of `spec`'s job for its node; `socket`: the listening socket
    /// root bound for it (None: simulated nodes and tests bind their own).
    pub fn new(spec: &JobSpec, job_secret: &str, socket: Option<std::net::TcpListener>) -> Result<Mesh, Fault> {
        Ok(Mesh {
            tls: MeshTls::from_job_secret(job_secret).map_err(Fault::Node)?,
            job_id: spec.cluster(),
            node: spec.node.clone(),
            ports: spec.mesh_ports(),
            socket: std::sync::Mutex::new(socket),
        })
    }

    /// The socket root bound for this agent's mesh, or (simulated nodes) the
    /// first of the job's ports free on `ip`. Its errors are said as they are.
    pub async fn listener(&self, ip: IpAddr) -> Result<TcpListener, Fault> {
        let inherited = self.socket.lock().expect("not poisoned").take();
        match inherited {
            Some(l) => {
                l.set_nonblocking(true).map_err(|e| Fault::user(e.to_string()))?;
                TcpListener::from_std(l).map_err(|e| Fault::user(e.to_string()))
            }
            None => Ok(bind(ip, &self.ports).await.map_err(|e| Fault::user(e.to_string()))?.0),
        }
    }

    /// A channel to a peer's agent, over the job's mutual TLS: it is made only
    /// if the peer proves it holds the job's key. HTTP/2 keepalives make a peer
    /// that went silent (its node or link down) an error within seconds, not a
    /// stream that waits forever. No listener fails within the TCP connect's
    /// 500 ms; one that accepted gets `turn::TURN_LIMIT` to start its side of
    /// the handshake (a busy head answers in turn) and then as long as it
    /// gives the rest (`CONNECT_LIMIT`). Err: which step failed, and why.
    async fn connect(&self, addr: SocketAddr) -> Result<MeshClient<Channel>, String> {
        let client = self.tls.client.clone();
        let connector = tower::service_fn(move |_: Uri| {
            let client = client.clone();
            async move {
                let tcp = tokio::time::timeout(Duration::from_millis(500), TcpStream::connect(addr))
                    .await
                    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TCP connect: no answer within 500 ms"))?
                    .map_err(|e| io::Error::new(e.kind(), format!("TCP connect: {e}")))?;
                tcp.set_nodelay(true)?;
                let (tcp, first) = turn::Answered::new(tcp);
                let handshake = TlsConnector::from(client).connect(MeshTls::server_name(), tcp);
                let stream = tokio::select! {
                    r = handshake => r,
                    e = turn::expired(first) => Err(e),
                }
                .map_err(|e| io::Error::new(e.kind(), format!("TLS handshake: {e}")))?;
                Ok::<_, io::Error>(TokioIo::new(stream))
            }
        });
        let ep = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| format!("{addr}: {e}"))?
            .http2_keep_alive_interval(Duration::from_secs(2))
            .keep_alive_timeout(Duration::from_secs(4))
            .keep_alive_while_idle(true);
        let ch = tokio::time::timeout(CONNECT_LIMIT, ep.connect_with_connector(connector))
            .await
            .map_err(|_| format!("{addr}: no channel within {} s", CONNECT_LIMIT.as_secs()))?
            .map_err(|e| format!("{addr}: {}", error_chain(&e)))?;
        Ok(MeshClient::new(ch))
    }

    /// Asks the job's agent on `ip` who the head is, trying the job's ports in
    /// order. None: no agent of this job answers there (yet); a port held by
    /// anything else (another job's agent, another service) fails the handshake.
    /// Each port's failure is logged at debug level.
    pub async fn join(&self, ip: IpAddr) -> Option<(Peer, JoinAnswer)> {
        let (job_id, node) = (self.job_id, self.node.clone());
        for &port in &self.ports {
            let mut client = match self.connect(SocketAddr::new(ip, port)).await {
                Ok(c) => c,
                Err(e) => {
                    debug!("mesh: join: {e}");
                    continue;
                }
            };
            let req = pb::JoinRequest { job_id, node: node.clone() };
            match tokio::time::timeout(JOIN_LIMIT, client.join(req)).await {
                Ok(Ok(reply)) => return Some((Peer { client, job_id, node }, wire::decode_join(reply.into_inner()))),
                Ok(Err(e)) => debug!(%ip, port, "mesh: join: the call failed: {}", e.message()),
                Err(_) => debug!(%ip, port, "mesh: join: no answer within {} s", JOIN_LIMIT.as_secs()),
            }
        }
        None
    }

    /// Serves the mesh from `shared` on `listener` until the agent ends.
    pub async fn serve(self: Arc<Self>, shared: Arc<Shared>, listener: TcpListener) {
        serve(TlsAcceptor::from(self.tls.server.clone()), shared, listener).await
    }
}

async fn serve(acceptor: TlsAcceptor, shared: Arc<Shared>, listener: TcpListener) {
    let (tx, rx) = mpsc::channel::<io::Result<admit::MeshConn>>(64);
    let limits = admit::Limits::for_nodes(shared.spec.nodes.len());
    tokio::spawn(admit::accept_loop(listener, acceptor, tx, limits));
    let svc = MeshServer::new(MeshService { shared }).max_decoding_message_size(MAX_MESSAGE);
    if let Err(e) = Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(2)))
        .http2_keepalive_timeout(Some(Duration::from_secs(4)))
        .max_concurrent_streams(Some(MAX_STREAMS))
        .add_service(svc)
        .serve_with_incoming(ReceiverStream::new(rx))
        .await
    {
        warn!("mesh server ended: {e}");
    }
}

struct MeshService {
    shared: Arc<Shared>,
}

impl MeshService {
    /// The peer proved it is one of this job's agents (TLS); a call for
    /// another job id is a bug or a confusion, refused all the same.
    fn check(&self, job_id: u32, node: &str) -> Result<(), Status> {
        counters::call_served();
        if job_id != self.shared.spec.cluster() {
            warn!(claimed_job = job_id, claimed_node = node, "refused a mesh call for another job");
            return Err(Status::permission_denied("not this job's agent"));
        }
        Ok(())
    }
}

type ViewStream = Pin<Box<dyn Stream<Item = Result<pb::ClusterView, Status>> + Send>>;

#[tonic::async_trait]
impl MeshRpc for MeshService {
    async fn join(&self, req: Request<pb::JoinRequest>) -> Result<Response<pb::JoinReply>, Status> {
        let r = req.get_ref();
        self.check(r.job_id, &r.node)?;
        let role = match &*self.shared.role.borrow() {
            Role::Undecided => PeerRole::Undecided,
            Role::Head => PeerRole::Head,
            Role::Follower(h) => PeerRole::Follower(h.clone()),
            Role::SteppedDown => PeerRole::SteppedDown,
        };
        let failed = match &*self.shared.node_state.borrow() {
            NodeState::Failed(m) => Some(m.clone()),
            _ => None,
        };
        Ok(Response::new(wire::encode_join(&JoinAnswer { role, failed }, &self.shared.spec.node)))
    }

    type WatchStream = ViewStream;

    async fn watch(&self, req: Request<pb::WatchRequest>) -> Result<Response<ViewStream>, Status> {
        let r = req.get_ref();
        self.check(r.job_id, &r.node)?;
        let head = match (&*self.shared.role.borrow(), self.shared.head()) {
            (Role::Head, Some(head)) => head.clone(),
            _ => return Err(Status::failed_precondition("not the head")),
        };
        // Each worker gets its own memory entry (from the head's full view).
        let (shared, node) = (self.shared.clone(), r.node.clone());
        let s = WatchStream::new(head.broadcast.subscribe()).map(move |v| {
            counters::view_sent();
            let mut v = pb::ClusterView::from(&v);
            if let Some(&mb) = shared.view.borrow().memory_mb.get(&node) {
                v.memory_mb.insert(node.clone(), mb);
            }
            Ok(v)
        });
        Ok(Response::new(Box::pin(s)))
    }

    async fn report(&self, req: Request<pb::NodeReport>) -> Result<Response<pb::ReportAck>, Status> {
        let r = req.get_ref().clone();
        self.check(r.job_id, &r.node)?;
        if !self.shared.is_node(&r.node) {
            return Err(Status::invalid_argument("node is not in this job"));
        }
        info!(node = %r.node, ok = r.ok, message = %r.message, "worker report");
        let (node, result) = wire::decode_report(r);
        // Only a node that was head has workers that report.
        if let Some(head) = self.shared.head() {
            view::record_report(&self.shared, head, node, result).await;
        }
        Ok(Response::new(pb::ReportAck {}))
    }
}

/// This agent's connection to a peer's agent (a worker's, to its head),
/// made by `join`.
pub struct Peer {
    client: MeshClient<Channel>,
    /// This agent's job and node, which its calls carry.
    job_id: u32,
    node: String,
}

/// Why the head did not give its stream of cluster views.
pub enum WatchRefused {
    /// It was head when asked, and no longer is.
    NotHead,
    /// Anything else: what the call said.
    Failed(String),
}

impl Peer {
    /// The head's stream of cluster views.
    pub async fn watch(&mut self) -> Result<Views, WatchRefused> {
        let req = pb::WatchRequest { job_id: self.job_id, node: self.node.clone() };
        match self.client.watch(req).await {
            Ok(s) => Ok(Views(s.into_inner())),
            Err(e) if e.code() == tonic::Code::FailedPrecondition => Err(WatchRefused::NotHead),
            Err(e) => Err(WatchRefused::Failed(e.message().to_string())),
        }
    }

    /// Tells the head this node's Ray joined (Ok) or why it could not; Err:
    /// why the call failed.
    pub async fn report(&mut self, result: &Result<(), Fault>) -> Result<(), String> {
        let r = wire::encode_report(self.job_id, &self.node, result);
        self.client.report(r).await.map(|_| ()).map_err(|e| e.message().to_string())
    }
}

/// The head's cluster views, as it sends them.
pub struct Views(Streaming<pb::ClusterView>);

impl Views {
    /// The next view; None when the stream ended or broke.
    pub async fn next(&mut self) -> Option<ClusterView> {
        self.0.message().await.ok().flatten().map(ClusterView::from)
    }
}

/// An error and its sources, "outer: inner: ...", as tonic's transport
/// errors say only "transport error" themselves; a source that says what
/// the text already ends with is not said again.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let said = s.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = s.source();
    }
    text
}

/// Tests: an agent of `spec`'s node with the no-op launcher, its mesh
/// served on the node's (loopback) address.
#[cfg(test)]
pub async fn served_agent(spec: JobSpec, job_secret: &str) -> (Arc<Shared>, Arc<Mesh>) {
    let mesh = Arc::new(Mesh::new(&spec, job_secret, None).expect("a mesh identity"));
    let ip: IpAddr = spec.node.parse().expect("a loopback address");
    let shared = Arc::new(Shared::new(spec, Arc::new(super::launcher::NoopLauncher)));
    let listener = mesh.listener(ip).await.expect("a free mesh port");
    tokio::spawn(mesh.clone().serve(shared.clone(), listener));
    (shared, mesh)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
const _: () =
    assert!(CONNECT_LIMIT.as_millis() >= 500 + turn::TURN_LIMIT.as_millis() + admit::HANDSHAKE_TIMEOUT.as_millis());
