//! syndeo's preload library beside the agent (`syndeo-preload.so`): with it,
//! Ray's ports stay held for the job from their pick to Ray's bind; without
//! it the agent lets them go before `ray start`, and another user's process
//! could take one in between.
use super::{Check, FileKind, NodeFacts};
use crate::agent::ports::PRELOAD_NAME;

const NAME: &str = "preload";

pub fn check(node: &dyn NodeFacts) -> Check {
    let fix = "reinstall syndeo's package (it puts syndeo-preload.so beside syndeo-agent)";
    let Some(exe) = node.agent_exe() else {
        return Check::warn(NAME, "cannot tell where syndeo-agent lies", fix);
    };
    let lib = exe.with_file_name(PRELOAD_NAME);
    let l = lib.display();
    match node.stat(&lib) {
        Ok(m) if m.kind == FileKind::File && m.roots_alone() => Check::ok(NAME, format!("{l} is there")),
        Ok(m) if m.kind == FileKind::File => Check::fail(
            NAME,
            format!("{l} is owner {} mode {:04o}: whoever can change it runs code in every job's Ray", m.uid, m.mode),
            format!("chown root:root {l}; chmod 0644 {l}"),
        ),
        _ => Check::warn(
            NAME,
            format!("{l} is missing: Ray's ports are let go before `ray start`, and another user could take one"),
            fix,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeNode;
    use super::super::{FileInfo, Status};
    use super::*;
    use std::path::Path;

    #[test]
    fn the_library_beside_the_agent_is_ok() {
        assert_eq!(check(&FakeNode::healthy()).status, Status::Ok);
    }

    #[test]
    fn a_missing_library_warns() {
        let mut node = FakeNode::healthy();
        node.stats.remove(Path::new("/usr/libexec/syndeo/syndeo-preload.so"));
        let c = check(&node);
        assert!(c.status == Status::Warn && c.detail.contains("missing"), "{c:?}");
    }

    #[test]
    fn a_library_users_can_change_fails() {
        let mut node = FakeNode::healthy();
        node.set_stat("/usr/libexec/syndeo/syndeo-preload.so", FileInfo::file(1000, 0o644));
        assert_eq!(check(&node).status, Status::Fail);
    }
}
