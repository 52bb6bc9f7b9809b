//! The mesh-scale benchmark (run by bench/run): N simulated nodes' agents in
//! one process, each on its own loopback address, running election, Join,
//! Watch and Report for real; Ray's launch is the no-op launcher. Prints, per
//! size, the time until every agent sees the cluster ready and the mesh
//! messages per node.
//!
//!   cargo run --release -p syndeo-mesh-sim --example mesh_bench -- [N,N,...]
//!   (default 64,256,1024,4096)
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use node_agent::agent::launcher::NoopLauncher;
use node_agent::config::PortRange;
use syndeo_mesh_sim::{messages, reset_messages, HeadPlacement, Simulation};

fn main() -> Result<()> {
    let sizes: Vec<usize> = match std::env::args().nth(1) {
        Some(a) if a == "--help" || a == "-h" => {
            println!("usage: mesh_bench [N,N,...]  (simulated node counts; default 64,256,1024,4096)");
            return Ok(());
        }
        Some(a) => a.split(',').map(|n| n.trim().parse()).collect::<Result<_, _>>()?,
        None => vec![64, 256, 1024, 4096],
    };
    // About three descriptors per node: its listener, its connection to the
    // head, and the head's end of it.
    // The agents' logs (warnings and worse unless SYNDEO_LOG says otherwise), on stderr.
    let filter = tracing_subscriber::EnvFilter::try_from_env("SYNDEO_LOG").unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).init();
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    println!("mesh scale: N node agents in one process, each on its own loopback address (127.10.x.y),");
    println!("running election, Join, Watch and Report for real; Ray's launch is a no-op here.");
    println!("The head (node 0) runs on a thread of its own: head_us/node is its CPU time per joining node,");
    println!(
        "proj_N_s the mesh's time at N real nodes, each agent on its own machine (head CPU x N + {} ms).",
        WORKER_PATH.as_millis()
    );
    println!(
        "{:>6} {:>9} {:>9} {:>14} {:>13} {:>11} {:>12}",
        "nodes", "ready_s", "messages", "messages/node", "head_us/node", "proj_4096_s", "proj_16384_s"
    );
    for n in sizes {
        if n < 2 || 3 * n as u64 + 64 > hard {
            bail!("{n} nodes: need 2 or more, and 3 descriptors each (the limit here is {hard})");
        }
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let (secs, messages, head_cpu) = rt.block_on(one(n))?;
        rt.shutdown_timeout(Duration::from_secs(1));
        let per_node = head_cpu / (n as u32 - 1);
        println!(
            "{n:>6} {secs:>9.3} {messages:>9} {:>14.2} {:>13.1} {:>11.3} {:>12.3}",
            messages as f64 / n as f64,
            per_node.as_secs_f64() * 1e6,
            projected(per_node, 4096).as_secs_f64(),
            projected(per_node, 16384).as_secs_f64()
        );
    }
    Ok(())
}

/// One worker's own path to ready, beside the head's queue: deriving its
/// key and its side of the handshake (well under a millisecond of CPU), and
/// the round trips of TCP, TLS 1.3, HTTP/2, Join, Watch and Report (about
/// six, a fraction of a millisecond each on a cluster's network).
const WORKER_PATH: Duration = Duration::from_millis(5);

/// The mesh's time at `nodes` real nodes, each agent on its own machine.
/// Every worker's own work (its key, its side of the handshake, its calls)
/// runs on its own machine, in parallel with all the others'; what they
/// share is the head: it serves every worker's handshake, Join, Watch and
/// Report and sends each its views, one after another if it had one core
/// (its runtime may spread them over more: this is the bound). So: the
/// head's CPU per joining node, measured here on its own thread, times the
/// workers, plus one worker's own path (`WORKER_PATH`). Not modelled: the
/// spread of the agents' start (Slurm starts the prologs over a while),
/// and Ray, which the no-op launcher replaces.
fn projected(head_per_node: Duration, nodes: u32) -> Duration {
    head_per_node * (nodes - 1) + WORKER_PATH
}

/// N agents from start to every one of them seeing the cluster ready; the
/// seconds, the mesh messages, and the head's CPU time until then.
async fn one(n: usize) -> Result<(f64, u64, Duration)> {
    reset_messages();
    let t0 = Instant::now();
    // On tmpfs, as the agents' job directories are (/run/syndeo).
    let sim = Simulation::start(
        900_000 + n as u32,
        n,
        std::path::Path::new("/dev/shm"),
        PortRange::new(46000, 46999).expect("a valid range"),
        Arc::new(NoopLauncher),
        HeadPlacement::Apart,
    )?;
    let took = sim.ready(t0, Duration::from_secs(120)).await.map_err(anyhow::Error::msg)?;
    let head_cpu =
        sim.head_cpu().ok_or_else(|| anyhow::anyhow!("node 0 is not the head, or its thread's CPU time is unknown"))?;
    Ok((took.as_secs_f64(), messages(), head_cpu))
}
