//! `/dev/fuse` for Apptainer: unprivileged, it mounts a SIF image with
//! squashfuse, which opens /dev/fuse as the job's user. Without it, SIF
//! images fail or are unpacked into a temporary sandbox at every start
//! (slow, and it fills the temp space); sandbox directories still work, so
//! this is a warning. Bubblewrap runs directories and needs no FUSE.
use std::path::Path;

use super::{Check, FileKind, NodeFacts};
use crate::config::RuntimeKind;

const NAME: &str = "dev-fuse";
pub const DEV_FUSE: &str = "/dev/fuse";
/// FUSE's character device: major 10 (misc), minor 229.
const FUSE_RDEV: (u64, u64) = (10, 229);

pub fn check(node: &dyn NodeFacts, runtime: RuntimeKind) -> Check {
    if runtime == RuntimeKind::Bubblewrap {
        return Check::ok(NAME, "not needed: bubblewrap runs directory images");
    }
    let unusable = "Apptainer cannot mount SIF images as users: they fail, or are unpacked at every start";
    match node.stat(Path::new(DEV_FUSE)) {
        Err(e) => Check::warn(
            NAME,
            format!("{DEV_FUSE}: {e}: {unusable}"),
            "load the fuse module (modprobe fuse, and list it in /etc/modules-load.d/)",
        ),
        Ok(m) if m.kind != FileKind::CharDevice || m.rdev != FUSE_RDEV => Check::warn(
            NAME,
            format!("{DEV_FUSE} is not FUSE's device (10:229): {unusable}"),
            "restore it: mknod -m 0666 /dev/fuse c 10 229 (udev makes it at boot)",
        ),
        Ok(m) if m.mode & 0o006 != 0o006 => Check::warn(
            NAME,
            format!("{DEV_FUSE} is mode {:04o}, not usable by users: {unusable}", m.mode),
            "chmod 0666 /dev/fuse, and make it last with a udev rule (KERNEL==\"fuse\", MODE=\"0666\")",
        ),
        Ok(m) => Check::ok(NAME, format!("{DEV_FUSE} mode {:04o}: users can mount SIF images", m.mode)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeNode;
    use super::super::{FileInfo, Status};
    use super::*;

    #[test]
    fn a_fuse_device_users_can_open_is_ok_for_apptainer() {
        let c = check(&FakeNode::healthy(), RuntimeKind::Apptainer);
        assert_eq!(c.status, Status::Ok, "{c:?}");
    }

    #[test]
    fn a_root_only_fuse_device_warns_with_chmod() {
        let mut node = FakeNode::healthy();
        node.set_stat(DEV_FUSE, FileInfo::char_device(0o600, FUSE_RDEV));
        let c = check(&node, RuntimeKind::Apptainer);
        assert!(c.status == Status::Warn && c.fix.as_deref().unwrap().contains("chmod 0666"), "{c:?}");
    }

    #[test]
    fn a_missing_or_wrong_device_warns() {
        let mut node = FakeNode::healthy();
        node.set_stat(DEV_FUSE, FileInfo::file(0, 0o666));
        assert_eq!(check(&node, RuntimeKind::Apptainer).status, Status::Warn);
        node.stats.remove(Path::new(DEV_FUSE));
        assert_eq!(check(&node, RuntimeKind::Apptainer).status, Status::Warn);
    }

    #[test]
    fn bubblewrap_needs_no_fuse() {
        let mut node = FakeNode::healthy();
        node.stats.remove(Path::new(DEV_FUSE));
        assert_eq!(check(&node, RuntimeKind::Bubblewrap).status, Status::Ok);
    }
}
