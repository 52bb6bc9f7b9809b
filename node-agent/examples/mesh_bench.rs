//! The mesh-scale benchmark (run by bench/run): N simulated nodes' agents in
//! one process, each on its own loopback address, running election, Join,
//! Watch and Report for real; Ray's launch is the no-op launcher. Prints, per
//! size, the time until every agent sees the cluster ready and the mesh
//! messages per node.
//!
//!   cargo run --release -p node-agent --features simulation --example mesh_bench -- [N,N,...]
//!   (default 64,256,1024,4096)
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use node_agent::agent::launcher::NoopLauncher;
use node_agent::agent::simulate::{self, Simulation};
use node_agent::config::PortRange;

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
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    println!("mesh scale: N node agents in one process, each on its own loopback address (127.10.x.y),");
    println!("running election, Join, Watch and Report for real; Ray's launch is a no-op here.");
    println!("{:>6} {:>9} {:>9} {:>14}", "nodes", "ready_s", "messages", "messages/node");
    for n in sizes {
        if n < 2 || 3 * n as u64 + 64 > hard {
            bail!("{n} nodes: need 2 or more, and 3 descriptors each (the limit here is {hard})");
        }
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let (secs, messages) = rt.block_on(one(n))?;
        rt.shutdown_timeout(Duration::from_secs(1));
        println!("{n:>6} {secs:>9.3} {messages:>9} {:>14.2}", messages as f64 / n as f64);
    }
    Ok(())
}

/// N agents from start to every one of them seeing the cluster ready.
async fn one(n: usize) -> Result<(f64, u64)> {
    simulate::reset_messages();
    let t0 = Instant::now();
    // On tmpfs, as the agents' job directories are (/run/syndeo).
    let sim = Simulation::start(
        900_000 + n as u32,
        n,
        std::path::Path::new("/dev/shm"),
        PortRange::new(46000, 46999).expect("a valid range"),
        Arc::new(NoopLauncher),
    )?;
    let took = sim.ready(t0, Duration::from_secs(120)).await.map_err(anyhow::Error::msg)?;
    Ok((took.as_secs_f64(), simulate::messages()))
}
