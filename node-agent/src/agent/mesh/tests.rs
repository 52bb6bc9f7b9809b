//! The mesh's defences against what another user can do on the network,
//! with real sockets, real TLS and a real tonic server on loopback.
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::agent::launcher::NoopLauncher;
use crate::job::simulated_spec;

/// The mesh end of node `node` of job `job` (of n1, n2), with the key of `secret`.
fn agent(job: u32, node: usize, secret: &str) -> Mesh {
    Mesh::new(&simulated_spec(job, &["n1", "n2"], node), secret, None).unwrap()
}

/// A head's mesh server on a free loopback port.
async fn head(secret: &str) -> (Arc<Shared>, SocketAddr) {
    let shared = Arc::new(Shared::new(simulated_spec(7, &["n1", "n2"], 0), Arc::new(NoopLauncher)));
    shared.become_head();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(Arc::new(agent(7, 0, secret)).serve(shared.clone(), listener));
    (shared, addr)
}

/// The reports a head recorded.
fn reports(head: &Shared) -> &tokio::sync::Mutex<std::collections::BTreeMap<String, Result<(), Fault>>> {
    &head.head().expect("it is head").reports
}

fn report(ok: bool) -> pb::NodeReport {
    pb::NodeReport { job_id: 7, node: "n2".into(), ok, message: String::new() }
}

#[tokio::test]
async fn the_jobs_own_agents_talk_and_an_agent_with_another_jobs_key_gets_nothing() {
    let (head, addr) = head("job-7-secret").await;
    let stranger = agent(7, 1, "another-jobs-secret");
    assert!(stranger.connect(addr).await.is_err(), "a peer without the job's key got a channel");
    assert!(reports(&head).lock().await.is_empty());

    let member = agent(7, 1, "job-7-secret");
    let mut client = member.connect(addr).await.expect("the job's own agent connects");
    let reply = client.join(pb::JoinRequest { job_id: 7, node: "n2".into() }).await.unwrap();
    assert_eq!(reply.into_inner().role(), pb::join_reply::Role::Head);
    client.report(report(true)).await.unwrap();
    assert_eq!(reports(&head).lock().await.get("n2"), Some(&Ok(())));
}

#[tokio::test]
async fn an_agent_never_follows_a_head_that_cannot_prove_it_holds_the_jobs_key() {
    // A "head" with its own key, where the job's agent looks for its head.
    let (_fake, addr) = head("an-impostors-secret").await;
    let member = agent(7, 1, "job-7-secret");
    assert!(member.connect(addr).await.is_err(), "the agent connected to an impostor");
}

/// Records what a real client sends through a relay, then replays those
/// bytes to the same head: the handshake cannot complete (the head's fresh
/// ephemeral key makes the recorded Finished message worthless), so the
/// recorded Report is never served again.
#[tokio::test]
async fn a_recorded_exchange_replayed_later_is_refused() {
    let (head, addr) = head("job-7-secret").await;
    let relay = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_addr = relay.local_addr().unwrap();
    let recording = tokio::spawn(async move {
        let (mut from_client, _) = relay.accept().await.unwrap();
        let mut to_head = TcpStream::connect(addr).await.unwrap();
        let (mut cr, mut cw) = from_client.split();
        let (mut hr, mut hw) = to_head.split();
        let mut recorded = Vec::new();
        let mut buf = [0u8; 4096];
        let mut back = [0u8; 4096];
        loop {
            tokio::select! {
                n = cr.read(&mut buf) => match n { Ok(0) | Err(_) => break, Ok(n) => { recorded.extend_from_slice(&buf[..n]); hw.write_all(&buf[..n]).await.unwrap(); } },
                n = hr.read(&mut back) => match n { Ok(0) | Err(_) => break, Ok(n) => { let _ = cw.write_all(&back[..n]).await; } },
            }
        }
        recorded
    });
    let member = agent(7, 1, "job-7-secret");
    let mut client = member.connect(relay_addr).await.expect("connects through the relay");
    client.report(report(true)).await.unwrap();
    drop(client);
    let recorded = tokio::time::timeout(Duration::from_secs(10), recording).await.unwrap().unwrap();
    assert!(recorded.len() > 200, "recorded only {} bytes", recorded.len());
    assert!(!recorded.windows(8).any(|w| w == b"job-7-se"), "the secret crossed the wire");
    reports(&head).lock().await.clear();

    let mut replay = TcpStream::connect(addr).await.unwrap();
    let _ = replay.write_all(&recorded).await;
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(6), replay.read_to_end(&mut sink)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(reports(&head).lock().await.is_empty(), "the replayed Report was served");
}

/// A peer that starts a plausible ClientHello and keeps sending (rustls
/// would buffer up to 64 KiB of one): the head closes the connection once it
/// has read the pre-authentication cap, long before the handshake timeout.
#[tokio::test]
async fn a_peer_that_sends_more_than_the_pre_authentication_cap_is_cut_off() {
    let (_head, addr) = head("job-7-secret").await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let t = Instant::now();
    // A handshake record of 16 KiB, holding the start of a 64 KiB ClientHello.
    let mut record = vec![0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0xff, 0xff];
    record.resize(5 + 0x4000, 0);
    let _ = s.write_all(&record).await;
    let _ = s.write_all(&record).await;
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "the connection stayed open: {closed:?}");
    assert!(t.elapsed() < admit::HANDSHAKE_TIMEOUT, "closed by the timeout, not the cap");
}

/// Many silent connections, more than the pending slots, held open: the
/// job's own agent still connects at once, because new connections evict the
/// oldest unauthenticated ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_silent_connections_does_not_keep_the_jobs_agent_out() {
    let (head, addr) = head("job-7-secret").await;
    let mut held = Vec::new();
    for _ in 0..(admit::Limits::for_nodes(2).max_pending + 100) {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    let member = agent(7, 1, "job-7-secret");
    let t = Instant::now();
    let mut client = member.connect(addr).await.expect("the job's agent connects despite the flood");
    client.report(report(true)).await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(3), "took {:?}", t.elapsed());
    assert_eq!(reports(&head).lock().await.get("n2"), Some(&Ok(())));
    drop(held);
}

#[tokio::test]
async fn a_call_for_another_job_id_is_refused_even_from_an_authenticated_peer() {
    let (head, addr) = head("job-7-secret").await;
    let member = agent(7, 1, "job-7-secret");
    let mut client = member.connect(addr).await.unwrap();
    let mut r = report(true);
    r.job_id = 8;
    assert_eq!(client.report(r).await.unwrap_err().code(), tonic::Code::PermissionDenied);
    assert!(reports(&head).lock().await.is_empty(), "a refused report changed the cluster");
}

/// A large job's start is a burst of every agent's handshake at once: none
/// of them is evicted as if it were a flood.
#[test]
fn every_node_of_a_large_job_may_handshake_at_once() {
    for nodes in [2, 256, 4096] {
        let l = admit::Limits::for_nodes(nodes);
        assert!(l.max_pending >= nodes && l.max_pending >= 256, "{nodes} nodes: {l:?}");
    }
}
