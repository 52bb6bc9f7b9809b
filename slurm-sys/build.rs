//! Generates bindings for the building machine's `<slurm/spank.h>` and records
//! its `SLURM_VERSION_NUMBER`, so one build of syndeo serves one Slurm release.
//! Set `SLURM_INCLUDE_DIR` to build against headers outside `/usr/include`.
use std::env;
use std::path::PathBuf;

fn main() {
    let include = env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    let header = PathBuf::from(&include).join("slurm/spank.h");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-changed={}", header.display());
    if !header.exists() {
        panic!(
            "{} not found: install Slurm's development headers \
             (Debian: libslurm-dev, RPM: slurm-devel) or set SLURM_INCLUDE_DIR",
            header.display()
        );
    }
    let bindings = bindgen::Builder::default()
        .header_contents("wrapper.h", "#include <slurm/spank.h>\n#include <slurm/slurm_version.h>\n")
        .clang_arg(format!("-I{include}"))
        .allowlist_function("spank_.*")
        .allowlist_function("slurm_(error|info|verbose|debug|debug2|spank_log)")
        .allowlist_type("spank_.*")
        .allowlist_type("S_.*")
        .allowlist_var("SLURM_VERSION_.*")
        .allowlist_var("ESPANK_.*")
        .allowlist_var("SPANK_.*")
        .allowlist_var("S_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .layout_tests(false)
        .generate()
        .expect("bindgen failed on <slurm/spank.h>");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("spank.rs");
    bindings.write_to_file(&out).expect("cannot write bindings");
}
