//! The prolog's decisions, on a fake node (`fake_ops.rs`): what refuses the
//! job with a note (and leaves the node in service), what is a node fault
//! (an error, and the node drained with a reason naming it), and the state
//! a plain job and a heterogeneous job's component save.
use std::path::PathBuf;

use syndeo_protocol::root::{Common, Prolog as PrologArgs};

use super::fake_ops::FakeOps;
use super::prolog::run_with;
use crate::job::JobSpec;

fn args(job: u32) -> PrologArgs {
    PrologArgs {
        common: Common {
            job,
            uid: 1000,
            config: PathBuf::from("/etc/syndeo/syndeo.toml"),
            runtime_base: PathBuf::from("/run/syndeo"),
        },
        gid: 100,
        image: None,
        propagate: vec![],
    }
}

/// Node `node1` of plain job 42 on `node[1-2]`, 4 CPUs on each. Slurm's
/// files point nowhere, so nothing of this machine's Slurm is read.
fn plain_job() -> FakeOps {
    let mut ops = FakeOps::new();
    ops.set_env("SLURM_CONF", "/nonexistent/syndeo-prolog-test/slurm.conf");
    ops.set_env("SLURM_JOB_NODELIST", "node[1-2]");
    ops.set_env("SLURM_JOB_CPUS_PER_NODE", "4(x2)");
    ops.addresses.insert("node2".into(), "10.0.0.2".into());
    ops
}

/// Node `n4` of component job 6 (offset 1) of heterogeneous job 5:
/// component 0 is job 5 on n[1-2], component 1 is job 6 on n[3-4], with 2
/// CPUs on n3 and 8 on n4.
fn het_component() -> FakeOps {
    let mut ops = plain_job();
    ops.set_env("SLURMD_NODENAME", "n4");
    ops.set_env("SLURM_JOB_NODELIST", "n[3-4]");
    ops.set_env("SLURM_JOB_CPUS_PER_NODE", "2,8");
    ops.set_env("SLURM_HET_JOB_ID", "5");
    // Component 1 started a second after component 0 (backfill starts them in turn).
    ops.set_env("SLURM_JOB_START_TIME", "1764130001");
    ops.squeue = Ok("6 5+1 1764130001 n[3-4]\n5 5+0 1764130000 n[1-2]\n".into());
    ops
}

fn saved_spec(ops: &FakeOps) -> JobSpec {
    ops.saved.borrow().as_ref().expect("the prolog saved no state").spec.clone()
}

/// A refused job: the prolog succeeds, leaves exactly `note`'s message,
/// saves nothing and drains nothing.
fn assert_refused(ops: &FakeOps, result: anyhow::Result<()>) -> String {
    result.expect("a refused job is not a failed prolog");
    assert!(ops.drained.borrow().is_empty(), "a user's mistake drained the node: {:?}", ops.drained.borrow());
    assert!(ops.saved.borrow().is_none(), "a refused job has no state");
    let notes = ops.notes.borrow();
    assert_eq!(notes.len(), 1, "{notes:?}");
    notes[0].clone()
}

#[test]
fn an_invalid_site_config_refuses_the_job_with_a_note_and_never_drains() {
    let mut ops = plain_job();
    ops.config = Err("unknown field `tmep_base`".into());
    let note = assert_refused(&ops, run_with(&ops, &args(42)));
    assert_eq!(
        note,
        "syndeo's site configuration is invalid, ask the admins to fix it: /etc/syndeo/syndeo.toml: unknown \
         field `tmep_base`"
    );
    assert!(!ops.did("site-key"), "the site key is read only for a job that can run");
    // The note lies in the job's runtime dir, made with the default size for the user.
    assert!(ops.did("mount /run/syndeo/42 64MB 1000:100 noexec"), "{:?}", ops.calls());
}

#[test]
fn a_bad_syndeo_image_value_refuses_the_job_with_a_note_and_never_drains() {
    let ops = plain_job();
    let mut a = args(42);
    a.image = Some("images/ray.sif".into());
    let note = assert_refused(&ops, run_with(&ops, &a));
    assert!(note.starts_with("--syndeo IMAGE \"images/ray.sif\" is not an absolute path"), "{note}");
}

#[test]
fn a_temp_base_inside_slurms_private_tmp_refuses_the_job_with_its_message() {
    let mut ops = plain_job();
    ops.temp_base = Some(Err("temp_base /tmp/syndeo is inside job_container's /tmp".into()));
    let note = assert_refused(&ops, run_with(&ops, &args(42)));
    assert_eq!(note, "temp_base /tmp/syndeo is inside job_container's /tmp");
}

#[test]
fn a_heterogeneous_job_with_a_node_in_two_components_refuses_with_the_users_fix_and_never_drains() {
    let mut ops = het_component();
    ops.squeue = Ok("5 5+0 1 n[1-4]\n6 5+1 1 n[3-4]\n".into());
    let note = assert_refused(&ops, run_with(&ops, &args(6)));
    assert!(note.starts_with("node n3 is in two components of heterogeneous job 5;"), "{note}");
    assert!(ops.did("squeue 5"));
}

#[test]
fn a_heterogeneous_job_the_controller_cannot_describe_refuses_with_a_resubmit_message_and_never_drains() {
    let mut ops = het_component();
    ops.squeue = Err("squeue about heterogeneous job 5 timed out after 15 s".into());
    let note = assert_refused(&ops, run_with(&ops, &args(6)));
    assert_eq!(
        note,
        "syndeo could not learn heterogeneous job 5's nodes from Slurm's controller (squeue about heterogeneous \
         job 5 timed out after 15 s); submit the job again, and tell the admins if it happens again"
    );
}

#[test]
fn a_missing_site_key_is_a_node_fault_that_drains_the_node_with_a_reason_naming_it() {
    let mut ops = plain_job();
    ops.site_key = Err("reading the site key /etc/syndeo/site.key (run `syndeo-agent keygen` ...)".into());
    let err = run_with(&ops, &args(42)).expect_err("a missing site key is the node's fault");
    assert!(format!("{err:#}").contains("reading the site key /etc/syndeo/site.key"), "{err:#}");
    let drained = ops.drained.borrow();
    assert_eq!(drained.len(), 1, "{drained:?}");
    assert_eq!(drained[0].0, "node1");
    assert!(
        drained[0].1.starts_with("node fault in the prolog of job 42: reading the site key /etc/syndeo/site.key"),
        "{}",
        drained[0].1
    );
    assert!(ops.notes.borrow().is_empty(), "a node fault is not the user's to read");
    assert!(!ops.did("mount") && !ops.did("save"), "nothing of the job's is made: {:?}", ops.calls());
}

#[test]
fn a_node_fault_without_slurmd_nodename_returns_the_error_and_drains_nothing() {
    let mut ops = plain_job();
    ops.env.remove("SLURMD_NODENAME");
    ops.site_key = Err("the site key /etc/syndeo/site.key has 5 characters".into());
    assert!(run_with(&ops, &args(42)).is_err());
    assert!(ops.drained.borrow().is_empty());
}

#[test]
fn a_plain_job_is_its_own_cluster_and_component_zero() {
    let ops = plain_job();
    run_with(&ops, &args(42)).unwrap();
    let spec = saved_spec(&ops);
    assert_eq!((spec.job_id, spec.cluster_id, spec.labels.het_group), (42, 42, 0));
    assert_eq!((spec.node.as_str(), spec.index, spec.cpus), ("node1", 0, 4));
    assert_eq!(*spec.nodes, ["node1", "node2"]);
    assert_eq!(spec.addrs, [None, Some("10.0.0.2".parse().unwrap())]);
    assert_eq!((spec.uid, spec.gid, spec.user.as_str()), (1000, 100, "alice"));
    assert!(ops.notes.borrow().is_empty() && ops.drained.borrow().is_empty());
}

#[test]
fn a_plain_jobs_prolog_reads_the_key_then_makes_runtime_temp_and_shm_dirs_then_saves() {
    let ops = plain_job();
    run_with(&ops, &args(42)).unwrap();
    let expected = [
        "site-key /etc/syndeo/site.key",
        "base /run/syndeo",
        "clear-note 42",
        "unmount /run/syndeo/42",
        "mkdir /run/syndeo/42 0:0",
        "mount /run/syndeo/42 64MB 1000:100 noexec",
        "base /tmp/syndeo",
        "unmount /tmp/syndeo/42",
        "mkdir /tmp/syndeo/42 1000:100",
        "base /run/syndeo-shm",
        "unmount /run/syndeo-shm/42",
        "mkdir /run/syndeo-shm/42 0:0",
        "mount /run/syndeo-shm/42 768MB 1000:100 exec",
        "save 42",
    ];
    assert_eq!(ops.calls(), expected);
}

#[test]
fn a_heterogeneous_component_joins_the_leaders_cluster_with_all_nodes_and_its_own_cpus() {
    let ops = het_component();
    run_with(&ops, &args(6)).unwrap();
    let spec = saved_spec(&ops);
    assert_eq!((spec.job_id, spec.cluster_id, spec.labels.het_group), (6, 5, 1));
    assert_eq!(*spec.nodes, ["n1", "n2", "n3", "n4"], "component 0's nodes first");
    // n4 is the cluster's node 3, but its own component's node 1: the CPUs follow the component.
    assert_eq!((spec.index, spec.cpus), (3, 8));
    assert_eq!(spec.job_dir, PathBuf::from("/run/syndeo/6"), "the directories are the component's own");
    assert_eq!(spec.start_time, 1764130000, "the secret takes the leader's start time, not this component's");
    assert!(ops.did("save 6"));
}

#[test]
fn another_components_nodes_take_their_addresses_from_slurm_conf_and_the_plugins_win_for_its_own() {
    let dir = std::env::temp_dir().join(format!("syndeo-prolog-addrs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("slurm.conf");
    std::fs::write(&conf, "NodeName=n[1-2] NodeAddr=10.9.0.[1-2]\nNodeName=n[3-4] NodeAddr=10.9.0.3,10.9.0.4\n")
        .unwrap();
    let mut ops = het_component();
    ops.set_env("SLURM_CONF", conf.to_str().unwrap());
    // The plugin sends its own component's nodes (here n3 only, as Slurm placed it).
    ops.addresses.clear();
    ops.addresses.insert("n3".into(), "10.8.0.3".into());
    let result = run_with(&ops, &args(6));
    let _ = std::fs::remove_dir_all(&dir);
    result.unwrap();
    let want: Vec<Option<std::net::IpAddr>> =
        ["10.9.0.1", "10.9.0.2", "10.8.0.3", "10.9.0.4"].iter().map(|a| Some(a.parse().unwrap())).collect();
    assert_eq!(saved_spec(&ops).addrs, want);
}
