//! What the mesh lets a peer do before its TLS handshake has proven that it
//! is one of the job's agents: send at most [`PRE_AUTH_BYTES`], take at most
//! [`HANDSHAKE_TIMEOUT`], and hold one of at most `max_pending` handshake
//! slots. A new connection evicts the oldest pending one, so a flood of slow
//! or silent peers cannot starve the job's own agents, whose handshakes take
//! a millisecond. Authenticated connections are bounded too. The refusals are
//! counted and logged sparingly (the log lives on a size-capped tmpfs).
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::{info, warn};

/// Bytes a peer may send before it has authenticated (its TLS ClientHello
/// and certificate take well under 2 KiB).
pub const PRE_AUTH_BYTES: usize = 8 * 1024;
/// Time a peer has to complete its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections refused before authentication, in this process.
pub static REFUSED: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Handshakes in progress at once.
    pub max_pending: usize,
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
        Limits { max_pending: 256.max(nodes + 64), max_connections: 2 * nodes + 64 }
    }
}

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
    let connections = Arc::new(Semaphore::new(limits.max_connections));
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
        let (pending, connections, acceptor, tx) = (pending.clone(), connections.clone(), acceptor.clone(), tx.clone());
        tokio::spawn(async move {
            let local = tcp.local_addr().ok();
            let _ = tcp.set_nodelay(true);
            let outcome = tokio::select! {
                _ = cancelled.cancelled() => Err("evicted by newer connections while it had not authenticated".to_string()),
                r = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(Capped::new(tcp, PRE_AUTH_BYTES))) => match r {
                    Ok(Ok(tls)) => Ok(tls),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!("no handshake within {} s", HANDSHAKE_TIMEOUT.as_secs())),
                },
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

/// Logs the first refusals, then one in a thousand.
fn refused(peer: SocketAddr, why: &str) {
    let n = REFUSED.fetch_add(1, Ordering::Relaxed) + 1;
    if n <= 20 || n.is_multiple_of(1000) {
        warn!(%peer, refused = n, "mesh: refused a connection that did not prove it is this job's agent: {why}");
    } else if n == 21 {
        info!("mesh: more refusals follow; logging one in a thousand");
    }
}
