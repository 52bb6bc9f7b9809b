//! The mesh-scale benchmark (`syndeo-agent mesh-bench`, built only with the
//! `mesh-bench` feature, run by bench/run): the agents of N simulated nodes,
//! each with its own loopback address and mesh server, run their real
//! lifecycle (election, Join, Watch, Report, cluster view) in one process.
//! Ray's launch is replaced by a no-op launcher that answers at once.
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::lifecycle;
use super::mesh::{CALLS_SERVED, VIEWS_SENT};
use super::state::{Local, Shared};
use crate::job::spec_for_tests;

pub fn run(sizes: &[usize]) -> Result<()> {
    // About three descriptors per node: its listener, its connection to the
    // head, and the head's end of it.
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    println!("mesh scale: N node agents in one process, each on its own loopback address (127.10.x.y),");
    println!("running election, Join, Watch and Report for real; Ray's launch is a no-op here.");
    println!("{:>6} {:>9} {:>9} {:>14}", "nodes", "ready_s", "messages", "messages/node");
    for &n in sizes {
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

/// N agents from start to every one of them seeing the cluster ready: the
/// time, and the mesh messages (calls served plus views streamed).
async fn one(n: usize) -> Result<(f64, u64)> {
    // On tmpfs, as the agents' job directories are (/run/syndeo).
    let dir = std::path::Path::new("/dev/shm").join(format!("syndeo-meshbench-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let names: Vec<String> = (0..n).map(|i| format!("127.10.{}.{}", i / 250, i % 250 + 1)).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let agents: Vec<Arc<Shared>> = (0..n)
        .map(|i| {
            let mut spec = spec_for_tests(900_000 + n as u32, &refs, i);
            spec.job_dir = dir.join(i.to_string());
            spec.config.mesh_ports = "46000-46999".into();
            spec.config.startup_timeout = 120;
            std::fs::create_dir_all(&spec.job_dir)?;
            let mut shared = Shared::new(spec, "b".repeat(64));
            shared.noop_ray = true;
            Ok(Arc::new(shared))
        })
        .collect::<std::io::Result<_>>()?;
    CALLS_SERVED.store(0, Ordering::Relaxed);
    VIEWS_SENT.store(0, Ordering::Relaxed);

    let t0 = Instant::now();
    for a in &agents {
        tokio::spawn(lifecycle::run(a.clone()));
    }
    if std::env::var_os("SYNDEO_MESHBENCH_TRACE").is_some() {
        let ag = agents.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let decided = ag.iter().filter(|a| *a.role.borrow() != super::state::Role::Undecided).count();
                let joined = ag.iter().filter(|a| a.has_joined()).count();
                let ready = ag.iter().filter(|a| *a.local.borrow() == Local::Ready).count();
                eprintln!(
                    "{:.2}s decided {decided} joined {joined} ready {ready} calls {} views {}",
                    t0.elapsed().as_secs_f64(),
                    CALLS_SERVED.load(Ordering::Relaxed),
                    VIEWS_SENT.load(Ordering::Relaxed)
                );
            }
        });
    }
    for a in &agents {
        let mut rx = a.local.subscribe();
        let state = tokio::time::timeout(Duration::from_secs(120), rx.wait_for(|l| !matches!(l, Local::Starting(_))))
            .await
            .with_context(|| format!("{n} nodes: {} not ready within 120 s", a.spec.node))??
            .clone();
        if let Local::Failed(e) = state {
            bail!("{n} nodes: {} failed: {e}", a.spec.node);
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let messages = CALLS_SERVED.load(Ordering::Relaxed) + VIEWS_SENT.load(Ordering::Relaxed);
    let _ = std::fs::remove_dir_all(&dir);
    Ok((secs, messages))
}
