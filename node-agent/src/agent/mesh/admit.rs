//! What the mesh lets a peer do before its TLS handshake has proven that it
//! is one of the job's agents: send at most [`PRE_AUTH_BYTES`], take at most
//! [`HANDSHAKE_TIMEOUT`] for its ClientHello and as long again for the rest,
//! and hold one of at most `max_pending` pending slots. A new connection
//! evicts the oldest pending one, so a flood of slow or silent peers cannot
//! starve the job's own agents, whose handshakes take a millisecond.
//!
//! The head's costly step of a handshake (its answer to the ClientHello: the
//! key exchange and its signature) is taken by at most `max_handshakes`
//! connections at once; the others wait their turn in order, without
//! running. When thousands of agents join at a large job's start, the head
//! then answers them one batch after another and still serves the calls of
//! those already in, instead of having thousands of handshakes to run at
//! once, each later than the last. A peer that left while it waited costs
//! no handshake. Authenticated connections are bounded too. The refusals
//! are counted and logged sparingly (the log lives on a size-capped tmpfs).
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use rustls::server::Acceptor;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::{LazyConfigAcceptor, TlsAcceptor};
use tokio_util::sync::CancellationToken;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::{info, warn};

/// Bytes a peer may send before it has authenticated (its TLS ClientHello
/// and certificate take well under 2 KiB).
pub const PRE_AUTH_BYTES: usize = 8 * 1024;
/// Time a peer has to send its ClientHello, and then, once its turn came,
/// to complete its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections refused before authentication, in this process.
pub static REFUSED: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections not yet authenticated at once (reading their ClientHello,
    /// waiting their turn, or in their handshake).
    pub max_pending: usize,
    /// Connections whose ClientHello the head answers at once (its costly
    /// step of the handshake).
    pub max_handshakes: usize,
    /// Authenticated connections at once.
    pub max_connections: usize,
}

impl Limits {
    /// For a job of `nodes` nodes: every other node's agent connects to the
    /// head, some twice (the election, then the worker's stream), and all of
    /// them at once at the job's start: each may have its handshake pending,
    /// or the burst evicts the job's own agents and they retry (at 4,096
    /// simulated nodes, 256 slots took the mesh 11 s instead of about 5).
    pub fn for_nodes(nodes: usize) -> Limits {
        Limits { max_pending: 256.max(nodes + 64), max_handshakes: MAX_HANDSHAKES, max_connections: 2 * nodes + 64 }
    }
}

/// Answers to ClientHellos at once, whatever the job's size: each is a
/// fraction of a millisecond of the head's CPU and waits for nothing, so
/// this only needs to keep the head's cores busy. At 4,096 simulated nodes,
/// all of them at once left the head's calls on authenticated connections
/// queued behind thousands of handshakes, past the workers' limits (they
/// gave up and joined again).
pub const MAX_HANDSHAKES: usize = 64;

/// An authenticated connection, for tonic.
pub struct MeshConn {
    tls: TlsStream<Capped<TcpStream>>,
    peer: SocketAddr,
    local: Option<SocketAddr>,
    _permit: OwnedSemaphorePermit,
}

impl Connected for MeshConn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo { local_addr: self.local, remote_addr: Some(self.peer) }
    }
}

impl AsyncRead for MeshConn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_read(cx, buf)
    }
}

impl AsyncWrite for MeshConn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tls).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_shutdown(cx)
    }
}

/// A stream that refuses to read past a cap until it is lifted.
pub struct Capped<T> {
    inner: T,
    left: Option<usize>,
}

impl<T> Capped<T> {
    pub fn new(inner: T, cap: usize) -> Capped<T> {
        Capped { inner, left: Some(cap) }
    }

    /// The peer proved itself: no cap from now on.
    pub fn lift(&mut self) {
        self.left = None;
    }
}

impl Capped<TcpStream> {
    /// The peer closed or reset its end (even with bytes of it unread), as
    /// far as the runtime's poller has seen: a check that does not wait.
    pub fn peer_gone(&self) -> bool {
        match self.inner.ready(Interest::READABLE).now_or_never() {
            Some(Ok(ready)) => ready.is_read_closed() || ready.is_error(),
            Some(Err(_)) => true,
            None => false,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Capped<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some(left)) = (&r, self.left) {
            let got = buf.filled().len() - before;
            if got > left {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "sent too much before authenticating",
                )));
            }
            self.left = Some(left - got);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Capped<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The handshakes in progress, oldest first; each can be cancelled.
struct Pending {
    slots: Mutex<BTreeMap<u64, CancellationToken>>,
    next: AtomicU64,
    max: usize,
}

impl Pending {
    /// A slot for a new handshake; the oldest is cancelled when all are taken.
    fn admit(&self) -> (u64, CancellationToken) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let token = CancellationToken::new();
        let mut slots = self.slots.lock().expect("not poisoned");
        while slots.len() >= self.max {
            if let Some((_, oldest)) = slots.pop_first() {
                oldest.cancel();
            }
        }
        slots.insert(id, token.clone());
        (id, token)
    }

    fn done(&self, id: u64) {
        self.slots.lock().expect("not poisoned").remove(&id);
    }
}

/// Accepts connections on `listener`, runs their TLS handshakes under the
/// limits, and hands authenticated connections to `tx` (tonic's incoming).
pub async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    tx: mpsc::Sender<io::Result<MeshConn>>,
    limits: Limits,
) {
    let pending = Arc::new(Pending { slots: Mutex::default(), next: AtomicU64::new(0), max: limits.max_pending });
    let turns = Arc::new(Semaphore::new(limits.max_handshakes));
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let config = acceptor.config().clone();
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                warn!("mesh: accept: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let (id, cancelled) = pending.admit();
        let (pending, turns, connections, config, tx) =
            (pending.clone(), turns.clone(), connections.clone(), config.clone(), tx.clone());
        tokio::spawn(async move {
            let local = tcp.local_addr().ok();
            let _ = tcp.set_nodelay(true);
            let outcome = tokio::select! {
                _ = cancelled.cancelled() => Err("evicted by newer connections while it had not authenticated".to_string()),
                r = handshake(tcp, config, &turns) => r,
            };
            pending.done(id);
            match outcome {
                Ok(mut tls) => {
                    tls.get_mut().0.lift();
                    match connections.try_acquire_owned() {
                        Ok(permit) => {
                            let _ = tx.send(Ok(MeshConn { tls, peer, local, _permit: permit })).await;
                        }
                        Err(_) => warn!(%peer, "mesh: too many connections; dropped an authenticated one"),
                    }
                }
                Err(why) => refused(peer, &why),
            }
        });
    }
}

/// One connection's handshake: its ClientHello (read without any crypto,
/// within `HANDSHAKE_TIMEOUT`), then its turn (one of `turns`, in order of
/// arrival) for the head's answer, then the rest (the peer's proof, checked
/// as it comes) within `HANDSHAKE_TIMEOUT` of the turn. The turn is held
/// only while the head computes its answer, never while it waits for the
/// peer: a peer that stalls cannot keep it. Err: why it did not authenticate.
async fn handshake(
    tcp: TcpStream,
    config: Arc<ServerConfig>,
    turns: &Semaphore,
) -> Result<TlsStream<Capped<TcpStream>>, String> {
    let secs = HANDSHAKE_TIMEOUT.as_secs();
    let hello = LazyConfigAcceptor::new(Acceptor::default(), Capped::new(tcp, PRE_AUTH_BYTES));
    let start = tokio::time::timeout(HANDSHAKE_TIMEOUT, hello)
        .await
        .map_err(|_| format!("no ClientHello within {secs} s"))?
        .map_err(|e| format!("its ClientHello: {e}"))?;
    let turn = turns.acquire().await.map_err(|e| format!("no handshake turn: {e}"))?;
    if start.io.peer_gone() {
        return Err("it left while its handshake waited for its turn".to_string());
    }
    // rustls answers the ClientHello (key exchange, signature) here, at once.
    let rest = start.into_stream(config);
    drop(turn);
    tokio::time::timeout(HANDSHAKE_TIMEOUT, rest)
        .await
        .map_err(|_| format!("no handshake within {secs} s of its turn"))?
        .map_err(|e| e.to_string())
}

/// Logs the first refusals, then one in a thousand.
fn refused(peer: SocketAddr, why: &str) {
    let n = REFUSED.fetch_add(1, Ordering::Relaxed) + 1;
    if n <= 20 || n.is_multiple_of(1000) {
        warn!(%peer, refused = n, "mesh: refused a connection that did not prove it is this job's agent: {why}");
    } else if n == 21 {
        info!("mesh: more refusals follow; logging one in a thousand");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::io::AsyncWriteExt;
    use tokio_rustls::TlsConnector;

    use super::super::tls::MeshTls;
    use super::*;

    /// An accept loop of the job's key with `limits` on a free loopback
    /// port; what it authenticates comes out of the receiver.
    async fn head(tls: &MeshTls, limits: Limits) -> (SocketAddr, mpsc::Receiver<io::Result<MeshConn>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(accept_loop(listener, TlsAcceptor::from(tls.server.clone()), tx, limits));
        (addr, rx)
    }

    /// The job's agent's side of a handshake with `addr`.
    async fn member(tls: &MeshTls, addr: SocketAddr) -> io::Result<()> {
        let tcp = TcpStream::connect(addr).await?;
        TlsConnector::from(tls.client.clone()).connect(MeshTls::server_name(), tcp).await.map(|_| ())
    }

    #[tokio::test]
    async fn a_peer_that_closed_its_end_is_seen_gone_and_one_still_there_is_not() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let server = Capped::new(server, PRE_AUTH_BYTES);
        assert!(!server.peer_gone(), "a silent peer is still there");
        client.write_all(b"hello").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!server.peer_gone(), "a peer whose bytes wait unread is still there");
        drop(client);
        let t = Instant::now();
        while !server.peer_gone() {
            assert!(t.elapsed() < Duration::from_secs(2), "the peer's close was not seen");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// One handshake turn and eight agents at once: they wait theirs, and
    /// every one authenticates; none is refused for waiting.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn agents_beyond_the_handshake_turns_wait_for_one_and_all_get_in() {
        let tls = MeshTls::from_job_secret("job-secret").unwrap();
        let (addr, mut authenticated) =
            head(&tls, Limits { max_pending: 256, max_handshakes: 1, max_connections: 64 }).await;
        let tls = Arc::new(tls);
        let members = (0..8).map(|_| {
            let tls = tls.clone();
            tokio::spawn(async move { member(&tls, addr).await })
        });
        for m in futures::future::join_all(members).await {
            m.unwrap().expect("the agent's handshake");
        }
        for i in 0..8 {
            let conn = tokio::time::timeout(Duration::from_secs(5), authenticated.recv()).await;
            assert!(matches!(conn, Ok(Some(Ok(_)))), "connection {i} was not authenticated");
        }
    }

    /// A peer sends a valid ClientHello and then nothing (it never proves it
    /// holds the key), with the only turn there is: the turn was its for the
    /// head's answer only, and the job's agent behind it gets in at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_that_stalls_after_its_client_hello_does_not_keep_the_turn() {
        let tls = MeshTls::from_job_secret("job-secret").unwrap();
        let (addr, mut authenticated) =
            head(&tls, Limits { max_pending: 256, max_handshakes: 1, max_connections: 64 }).await;
        let stranger = MeshTls::from_job_secret("a-strangers-secret").unwrap();
        let mut hello = Vec::new();
        let mut conn = rustls::ClientConnection::new(stranger.client.clone(), MeshTls::server_name()).unwrap();
        conn.write_tls(&mut hello).unwrap();
        let mut stalled = TcpStream::connect(addr).await.unwrap();
        stalled.write_all(&hello).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;

        let t = Instant::now();
        member(&tls, addr).await.expect("the agent's handshake");
        let conn = tokio::time::timeout(Duration::from_secs(4), authenticated.recv()).await;
        assert!(matches!(conn, Ok(Some(Ok(_)))), "the agent was not authenticated");
        assert!(t.elapsed() < Duration::from_millis(500), "waited {:?} behind the stalled peer", t.elapsed());
        drop(stalled);
    }
}
