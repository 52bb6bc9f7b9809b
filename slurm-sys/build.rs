//! Generates bindings for the building machine's `<slurm/spank.h>` (and the
//! few types of `<slurm/slurm.h>` the plugin reads), records its
//! `SLURM_VERSION_NUMBER`, and says which release-dependent features the
//! headers have, as cfg flags (one build of syndeo serves one Slurm release):
//! - `slurm_run_in_job`: `PrologFlags=RunInJob` exists (23.11 and later);
//! - `slurm_prepend_task_argv`: `spank_prepend_task_argv` exists (23.11 and later).
//!
//! Set `SLURM_INCLUDE_DIR` to build against headers outside `/usr/include`.
use std::env;
use std::path::PathBuf;

fn main() {
    let include = env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    let header = PathBuf::from(&include).join("slurm/spank.h");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo::rustc-check-cfg=cfg(slurm_run_in_job)");
    println!("cargo::rustc-check-cfg=cfg(slurm_prepend_task_argv)");
    if !header.exists() {
        panic!(
            "{} not found: install Slurm's development headers \
             (Debian: libslurm-dev, RPM: slurm-devel) or set SLURM_INCLUDE_DIR",
            header.display()
        );
    }
    let bindings = bindgen::Builder::default()
        .header_contents(
            "wrapper.h",
            "#include <slurm/spank.h>\n#include <slurm/slurm.h>\n#include <slurm/slurm_version.h>\n",
        )
        .clang_arg(format!("-I{include}"))
        .allowlist_function("spank_.*")
        .allowlist_function("slurm_(error|info|verbose|debug|debug2|spank_log)")
        .allowlist_function("slurm_hostlist_(create|shift|destroy)")
        .allowlist_type("spank_.*")
        .allowlist_type("S_.*")
        .allowlist_type("slurm_conf_t")
        .allowlist_type("slurm_step_id_t")
        .allowlist_var("SLURM_VERSION_.*")
        .allowlist_var("ESPANK_.*")
        .allowlist_var("SPANK_.*")
        .allowlist_var("S_.*")
        .allowlist_var("PROLOG_FLAG_.*")
        .allowlist_var("NO_VAL")
        .allowlist_var("SLURM_EXTERN_CONT")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .layout_tests(false)
        .generate()
        .expect("bindgen failed on <slurm/spank.h>");
    let text = bindings.to_string();
    if text.contains("PROLOG_FLAG_RUN_IN_JOB") {
        println!("cargo:rustc-cfg=slurm_run_in_job");
    }
    if text.contains("fn spank_prepend_task_argv") {
        println!("cargo:rustc-cfg=slurm_prepend_task_argv");
    }
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("spank.rs");
    bindings.write_to_file(&out).expect("cannot write bindings");
}
