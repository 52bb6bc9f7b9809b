//! Prometheus service discovery (`metrics_sd_dir`): Debian's `prometheus`,
//! run by the test on the host with `file_sd_configs` on that directory and
//! the README's relabeling, scrapes a running 3-node job's Ray on every node
//! with the job's labels; after the job, its files and targets are gone.
//!
//! The directory is in the minicluster's state directory, which every node
//! and the host see at the same path (as a site's shared directory would
//! be); the host reaches the nodes' addresses on the bridge.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use syndeo_tests::*;

/// The directory the test gives syndeo as metrics_sd_dir.
fn sd_dir() -> String {
    format!("{}/prometheus-sd", mc_state_dir())
}

/// Prometheus, a child of the test with its own storage, killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The scrape configuration of the README, with short intervals.
fn config(sd_dir: &str) -> String {
    format!(
        r#"global: {{scrape_interval: 2s, scrape_timeout: 1s}}
scrape_configs:
  - job_name: syndeo-ray
    file_sd_configs: [{{files: ["{sd_dir}/syndeo-*.json"]}}]
    relabel_configs:
      - {{action: labelkeep, regex: "__address__|__meta_filepath|user|role"}}
      - {{source_labels: [__meta_filepath], regex: '.*/syndeo-([0-9]+)-(.+)\.json', target_label: slurm_job_id, replacement: "$1"}}
      - {{source_labels: [__meta_filepath], regex: '.*/syndeo-([0-9]+)-(.+)\.json', target_label: node, replacement: "$2"}}
      - {{target_label: job, replacement: syndeo-ray}}
      - {{target_label: __scheme__, replacement: http}}
      - {{target_label: __metrics_path__, replacement: /metrics}}
      - {{target_label: __scrape_interval__, replacement: 2s}}
      - {{target_label: __scrape_timeout__, replacement: 1s}}
"#
    )
}

fn start_prometheus() -> Prometheus {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = std::env::temp_dir().join(format!("syndeo-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("prometheus.yml"), config(&sd_dir())).unwrap();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .spawn()
        .expect("Debian's prometheus (apt-get install prometheus; .ci/run does)");
    let p = Prometheus { child, port, dir };
    wait_for("Prometheus to answer", Duration::from_secs(60), || api(&p, "/-/ready").ok());
    p
}

/// GET `path` from Prometheus: the body, or why not.
fn api(p: &Prometheus, path: &str) -> Result<String, String> {
    let mut s = TcpStream::connect(("127.0.0.1", p.port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").map_err(|e| e.to_string())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    match answer.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200") => {
            Ok(body.to_string())
        }
        _ => Err(answer),
    }
}

fn query(p: &Prometheus, promql: &str) -> Vec<serde_json::Value> {
    let q: String = promql
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect();
    let body = api(p, &format!("/api/v1/query?query={q}")).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// Prometheus' active targets of job `job`.
fn targets_of(p: &Prometheus, job: u32) -> Vec<serde_json::Value> {
    let body = api(p, "/api/v1/targets?state=active").unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let all = v["data"]["activeTargets"].as_array().cloned().unwrap_or_default();
    let id = job.to_string();
    all.into_iter().filter(|t| t["labels"]["slurm_job_id"].as_str() == Some(id.as_str())).collect()
}

fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let t = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn files_of(job: u32) -> Vec<String> {
    let names = std::fs::read_dir(sd_dir()).map(|d| d.flatten().collect::<Vec<_>>()).unwrap_or_default();
    let names = names.into_iter().map(|e| e.file_name().to_string_lossy().into_owned());
    // Temporary names are hidden: `.syndeo-<job>-<node>.json.<random>.tmp`.
    names.filter(|n| n.trim_start_matches('.').starts_with(&format!("syndeo-{job}-"))).collect()
}

/// A Ray node metric of `job`, one series per node: (node, user, role).
fn node_series(p: &Prometheus, job: u32) -> Vec<(String, String, String)> {
    let r = query(p, &format!("ray_node_cpu_utilization{{slurm_job_id=\"{job}\"}}"));
    let label = |s: &serde_json::Value, k: &str| s["metric"][k].as_str().unwrap_or_default().to_string();
    let mut v: Vec<_> = r.iter().map(|s| (label(s, "node"), label(s, "user"), label(s, "role"))).collect();
    v.sort();
    v.dedup();
    v
}

#[test]
#[ignore = "needs the minicluster (tests/run) and Debian's prometheus"]
fn prometheus_scrapes_every_nodes_ray_of_a_running_job_with_its_labels_and_its_targets_go_with_the_job() {
    let _sd = ConfigOverride::set("metrics_sd_dir", &format!("\"{}\"", sd_dir()));
    // As the README has the admin do, before Prometheus starts (the prolog
    // makes it at the first job otherwise, but a Prometheus that found no
    // directory to watch reads the files only at its next refresh, minutes
    // later: so it failed on a fresh machine).
    std::fs::create_dir_all(sd_dir()).unwrap();
    let prom = start_prometheus();
    let dir = workdir(user_a(), "prometheus");
    let script = "#!/bin/bash\nfor i in $(seq 300); do [ -e done ] && exit 0; sleep 1; done\nexit 1\n";
    let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={}", image_with_ray_default())], script);
    let _cancel = CancelOnDrop(vec![job.id]);
    let t = Instant::now();
    let series = loop {
        let s = node_series(&prom, job.id);
        if s.len() == 3 {
            break s;
        }
        if t.elapsed() > Duration::from_secs(240) {
            let files: Vec<String> = files_of(job.id)
                .iter()
                .map(|f| std::fs::read_to_string(Path::new(&sd_dir()).join(f)).unwrap_or_default().trim().to_string())
                .collect();
            let log = std::fs::read_to_string(prom.dir.join("prometheus.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(10).collect();
            panic!(
                "no Ray node metric from every node in 240 s: series {s:?}\nfiles {files:?}\ntargets {:?}\nprometheus log (last lines, newest first) {tail:#?}\n{}",
                targets_of(&prom, job.id),
                job.output()
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    let nodes: Vec<&str> = series.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(nodes, ["node1", "node2", "node3"], "{series:?}");
    assert!(series.iter().all(|(_, u, _)| u == user_a()), "{series:?}");
    let heads = series.iter().filter(|(_, _, r)| r == "head").count();
    let workers = series.iter().filter(|(_, _, r)| r == "worker").count();
    assert_eq!((heads, workers), (1, 2), "{series:?}");
    assert_eq!(files_of(job.id).len(), 3, "{:?}", files_of(job.id));
    assert_eq!(targets_of(&prom, job.id).len(), 3);
    write_file(user_a(), &dir.join("done"), "");
    assert_eq!(job.wait(Duration::from_secs(120)), "COMPLETED", "{}", job.output());
    wait_for("the epilogs to remove the job's files", Duration::from_secs(60), || {
        files_of(job.id).is_empty().then_some(())
    });
    wait_for("Prometheus to drop the job's targets", Duration::from_secs(60), || {
        targets_of(&prom, job.id).is_empty().then_some(())
    });
    assert_clean(&job, user_a());
    assert!(Path::new(&sd_dir()).is_dir(), "the directory itself stays, root's");
}
