//! Reads a SPANK plugin's `plugin_version` from its ELF file, as Slurm's
//! plugin loader does after `dlopen`, but without loading it: the dynamic
//! symbol's address, mapped to the bytes of the section that holds it. The
//! value is the `SLURM_VERSION_NUMBER` of the headers the plugin was built
//! against; Slurm refuses a plugin whose major.minor differs from its own.
use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};
use object::{Endianness, Object, ObjectSection, ObjectSymbol};

/// The largest plugin file read (syndeo.so is a few MiB).
const MAX_SIZE: u64 = 256 << 20;

/// The `plugin_version` of the plugin at `so`.
pub fn plugin_version(so: &Path) -> Result<u32> {
    let mut data = Vec::new();
    std::fs::File::open(so)
        .with_context(|| format!("opening {}", so.display()))?
        .take(MAX_SIZE)
        .read_to_end(&mut data)
        .with_context(|| format!("reading {}", so.display()))?;
    version_in(&data).with_context(|| format!("{} (plugin_version)", so.display()))
}

/// The `plugin_version` in an ELF image's bytes.
pub fn version_in(data: &[u8]) -> Result<u32> {
    let file = object::File::parse(data).context("not an ELF shared object")?;
    let symbol = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok("plugin_version"))
        .context("no exported plugin_version symbol: not a Slurm plugin")?;
    let index = symbol.section_index().context("plugin_version is not defined in the file")?;
    let section = file.section_by_index(index).context("plugin_version's section")?;
    let Some(bytes) = section.data_range(symbol.address(), 4).context("plugin_version's bytes")? else {
        bail!("plugin_version lies outside its section's data");
    };
    let bytes: [u8; 4] = bytes.try_into().context("plugin_version is not 4 bytes")?;
    Ok(match file.endianness() {
        Endianness::Little => u32::from_le_bytes(bytes),
        Endianness::Big => u32::from_be_bytes(bytes),
    })
}

/// "22.05" from a `SLURM_VERSION_NUMBER` (major << 16 | minor << 8 | micro).
pub fn major_minor(version: u32) -> (u32, u32) {
    (version >> 16, (version >> 8) & 0xff)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared object like a plugin, built by the C compiler that links
    /// this test (Rust links with `cc` on Linux).
    #[test]
    fn the_version_a_plugin_exports_is_read_without_loading_it() {
        let d = tempfile::tempdir().unwrap();
        let c = d.path().join("p.c");
        std::fs::write(&c, "const unsigned int plugin_version = 0x160508;\nconst char plugin_name[] = \"x\";\n")
            .unwrap();
        let so = d.path().join("p.so");
        let o = std::process::Command::new("cc").args(["-shared", "-fPIC", "-o"]).arg(&so).arg(&c).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v = plugin_version(&so).unwrap();
        assert_eq!(v, 0x160508);
        assert_eq!(major_minor(v), (22, 5));
    }

    /// This test binary's own ELF file: it exports no plugin_version.
    #[test]
    fn an_elf_without_plugin_version_is_an_error_that_says_so() {
        let exe = std::env::current_exe().unwrap();
        let e = plugin_version(&exe).unwrap_err();
        assert!(format!("{e:#}").contains("no exported plugin_version"), "{e:#}");
    }

    #[test]
    fn a_file_that_is_not_elf_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("syndeo.so");
        std::fs::write(&p, "not a plugin").unwrap();
        let e = plugin_version(&p).unwrap_err();
        assert!(format!("{e:#}").contains("not an ELF"), "{e:#}");
        assert!(plugin_version(&d.path().join("missing.so")).is_err());
    }

    #[test]
    fn the_version_number_splits_into_slurms_release() {
        assert_eq!(major_minor((22 << 16) | (5 << 8) | 8), (22, 5));
        assert_eq!(major_minor((26 << 16) | (5 << 8)), (26, 5));
    }
}
