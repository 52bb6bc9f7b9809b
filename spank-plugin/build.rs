//! Links the plugin with a version script that exports only the symbols Slurm
//! looks up: plugin_name, plugin_type, plugin_version and the slurm_spank_* hooks.
fn main() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("syndeo.map");
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", script.display());
}
