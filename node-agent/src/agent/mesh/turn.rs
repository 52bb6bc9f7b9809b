//! How long an agent waits for a peer's side of the TLS handshake. A head
//! that thousands of agents join at once answers their ClientHellos a few
//! dozen at a time and keeps the others waiting their turn (`admit.rs`):
//! waiting is not failing, so the wait for the head's first answer (its
//! ServerHello, sent when the turn came) has a limit of its own,
//! [`TURN_LIMIT`], and the rest of the handshake gets what the head allows
//! it ([`HANDSHAKE_TIMEOUT`]).
//! [`Answered`] wraps the connection to tell when the first bytes came.
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use super::admit::HANDSHAKE_TIMEOUT;

/// How long a peer that accepted the connection may take to start its side
/// of the handshake: the time a head with thousands of joins queued takes to
/// reach the last (4,096 simulated nodes on a loaded 2-core machine: several
/// seconds; 16,384 real nodes: about 9 s projected).
pub const TURN_LIMIT: Duration = Duration::from_secs(15);

/// A connection that tells, once, when its first bytes were read.
pub struct Answered<T> {
    inner: T,
    first: Option<oneshot::Sender<()>>,
}

impl<T> Answered<T> {
    /// `inner`, and what resolves when it first reads a byte (or is dropped).
    pub fn new(inner: T) -> (Answered<T>, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        (Answered { inner, first: Some(tx) }, rx)
    }
}

/// Resolves with why the handshake took too long: no first answer within
/// `TURN_LIMIT`, or no end within `HANDSHAKE_TIMEOUT` of it. Race it
/// against the handshake.
pub async fn expired(first: oneshot::Receiver<()>) -> io::Error {
    if tokio::time::timeout(TURN_LIMIT, first).await.is_err() {
        let s = TURN_LIMIT.as_secs();
        return io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {s} s (waiting for its turn)"));
    }
    tokio::time::sleep(HANDSHAKE_TIMEOUT).await;
    let s = HANDSHAKE_TIMEOUT.as_secs();
    io::Error::new(io::ErrorKind::TimedOut, format!("not done within {s} s of its first answer"))
}

impl<T: AsyncRead + Unpin> AsyncRead for Answered<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            if let Some(first) = self.first.take() {
                let _ = first.send(());
            }
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Answered<T> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Time is paused (it advances only when every task waits), so the
    /// limits are checked to the millisecond without waiting for them.
    #[tokio::test(start_paused = true)]
    async fn a_peer_that_never_answers_is_given_up_after_the_turn_limit() {
        let (_tx, first) = oneshot::channel::<()>();
        let t = tokio::time::Instant::now();
        let e = expired(first).await;
        assert_eq!(t.elapsed(), TURN_LIMIT);
        assert!(e.to_string().contains("waiting for its turn"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn once_the_peer_answered_the_rest_gets_the_handshake_timeout_from_then() {
        let (tx, first) = oneshot::channel::<()>();
        let t = tokio::time::Instant::now();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            let _ = tx.send(());
        });
        let e = expired(first).await;
        assert_eq!(t.elapsed(), Duration::from_secs(3) + HANDSHAKE_TIMEOUT);
        assert!(e.to_string().contains("of its first answer"), "{e}");
    }

    #[tokio::test]
    async fn the_first_bytes_read_are_told_once_and_pass_through_unchanged() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (a, mut b) = tokio::io::duplex(64);
        let (mut a, mut first) = Answered::new(a);
        assert!(first.try_recv().is_err(), "told before any byte came");
        b.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        a.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello");
        assert!(first.try_recv().is_ok(), "not told of the first bytes");
    }
}
